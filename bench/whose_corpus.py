"""The corpus of fault documents, each labelled with the party that made its fault (issue
44, item 5): bench/corpus/manifest.json lists every case, bench/false_disputes.py judges
them. This module reads a case's document and makes the constructed ones.

Real documents are read where they lie (bench/records/..., tests/fixtures/...): a
`.jsonl`/`.jsonl.gz` agent output's last `document` event, or a `.json`/`.json.gz`
document. Constructed ones are real documents with one fault put in, each as an earlier
bench script or the issue put it (never a new kind of fault invented here):

- bench/shortfall_flags.py's node faults, on the lent 2x H100's healthy-1 run: the
  all-reduce at 7% (23.9 GB/s where the node gives 354), pair 0-1 at 17/18 and 16/18 with
  17 and 16 NVLink links, GPU 0's memory copy at 92%: the provider's;
- bench/job_flags.py's hidden sightings, on the lent 4x H100's contended job run paired
  with all-1's matmul: GPU 2's other process invisible to the agent (another container's),
  so nothing the renter could see or stop: labelled the provider's;
- the lent H100's own settings runs (bench/records/2026-11-28-h100-*-whose): a soaked
  matmul and its pair at 94% under a setting that moves nothing (the provider's), a
  memory copy at 90% whose rerun without CUDA_LAUNCH_BLOCKING=1 clears (the renter's)
  and at 92% with its rerun too (the provider's); on the lent 2x H100's healthy-1 run
  under the same setting, pair 0-1 at 90% whose rerun clears (the renter's) and whose
  rerun reads 92% (the provider's), and GPU 1's pinned copy to the device at 85% whose
  rerun clears (the renter's), as agent/rerun/links.py measures them again;
- issue 44's own cases: `NCCL_ALGO=Tree` (all-reduce at 71%, the renter's), and a suite
  1.0.0 run whose GPU 3 matmul ran beside another user's pid while its pairs with GPU 3
  read 55% and its all-reduce 38% (the renter's), with its 1.1.0 twin whose pair with
  the shared GPU carries its own clean check and is short (the provider's).

    python bench/whose_corpus.py          # (re)writes the constructed documents
"""

from __future__ import annotations

import copy
import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "bench" / "corpus"
MANIFEST = CORPUS / "manifest.json"
CONSTRUCTED = CORPUS / "constructed"
SHARED_RUNS = REPO / "tests" / "fixtures" / "nodes" / "shared-gpu-runs"
FAULTS = REPO / "tests" / "fixtures" / "nodes" / "h100x2-lent-faults"
H200X4 = REPO / "tests" / "fixtures" / "nodes" / "h200-sxm-x4-lent" / "document.json"
JOBS = REPO / "bench" / "records" / "2026-11-26-h100x4-jobs"

# The other process of the shared-GPU constructions, in the agent's own words
# (agent/timing/contention.py), as the lent 2x H100's foreign run wrote them.
OTHER_PROCESS = ["other processes on the GPU: pid 4242 (user alice, not the agent's user)",
                 "GPU utilization 100% before the measurement started"]

Document = dict[str, Any]


def read(path: Path) -> Document:
    """The agent document at `path`: a JSON document, or agent output whose last
    `document` event holds it (either gzipped)."""
    opener: Callable[..., Any] = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        text = handle.read()
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        for line in reversed(text.splitlines()):
            event = json.loads(line) if line.strip().startswith("{") else {}
            if event.get("event") == "document":
                found: Document = event["document"]
                return found
        raise ValueError(f"{path}: no document event")
    data: Document = json.loads(text)
    return data


def _scale_figure(figure: dict[str, Any], factor: float) -> None:
    """A node figure `factor` times what it measured: every repeat, so that its median,
    range, interval and spread still agree."""
    figure["gbs"] = round(figure["gbs"] * factor, 3)
    if figure.get("algbw_gbs") is not None:
        figure["algbw_gbs"] = round(figure["algbw_gbs"] * factor, 3)
    stats = figure["stats"]
    for key in ("max_gbs", "median_gbs", "min_gbs"):
        stats[key] = round(stats[key] * factor, 3)
    stats["ci95_gbs"] = [round(v * factor, 3) for v in stats["ci95_gbs"]]
    stats["samples_gbs"] = [round(v * factor, 3) for v in stats["samples_gbs"]]


def _scaled(data: Document, hit: Callable[[dict[str, Any]], bool], factor: float,
            **fields: Any) -> Document:
    out = copy.deepcopy(data)
    for figure in out["node"]:
        if hit(figure):
            _scale_figure(figure, factor)
            figure.update(fields)
    return out


def _pair(a: int, b: int) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["kind"] == "peer_copy" and {f["gpu_index"], f["peer_index"]} == {a, b}


def _with(gpu: int) -> Callable[[dict[str, Any]], bool]:
    return lambda f: f["kind"] == "peer_copy" and gpu in (f["gpu_index"], f["peer_index"])


def _allreduce(f: dict[str, Any]) -> bool:
    return bool(f["kind"] == "allreduce")


def _shared_matmul(data: Document, gpu: int) -> Document:
    """`data` with GPU `gpu`'s matmul results flagged as run beside OTHER_PROCESS."""
    out = copy.deepcopy(data)
    for result in out["benchmarks"]:
        if result["gpu_index"] == gpu:
            result["flags"]["contended"] = True
            result["contention"] = list(OTHER_PROCESS)
    return out


def gpu3_shared_suite_1_0() -> Document:
    """Issue 44's case: the lent 4x H200's suite 1.0.0 run, GPU 3's matmul beside another
    user's pid, its pairs with GPU 3 at 55% and its all-reduce at 38%."""
    data = _shared_matmul(read(H200X4), 3)
    data["host"]["hostname"] = "h200x4-gpu3-shared"
    data = _scaled(data, _with(3), 0.55)
    return _scaled(data, _allreduce, 0.38)


def gpu1_shared_clean_pair_suite_1_1() -> Document:
    """Its suite 1.1.0 twin on the lent 2x H100: the foreign run's matmul (GPU 1 beside
    another user's pid 1852) with healthy-1's node figures, whose own checks saw nobody,
    pair 0-1 at 55%: the pair keeps its own story and is the provider's."""
    data = read(FAULTS / "foreign.json")
    data["node"] = copy.deepcopy(read(FAULTS / "healthy-1.json")["node"])
    data["host"]["hostname"] = "h100x2-gpu1-shared-clean-pair"
    return _scaled(data, _pair(0, 1), 0.55)


def _healthy_h100x2() -> Document:
    return read(FAULTS / "healthy-1.json")


def nccl_algo_tree() -> Document:
    """Issue 44's NCCL_ALGO=Tree: the all-reduce at 71% of the node's (251 of 354 on the
    lent 4x H200), under a setting the agent recorded: the renter's."""
    def tree(f: dict[str, Any]) -> bool:
        return _allreduce(f)
    out = _scaled(_healthy_h100x2(), tree, 0.71)
    for figure in out["node"]:
        if figure["kind"] == "allreduce":
            figure["settings"] = {**(figure.get("settings") or {}), "NCCL_ALGO": "Tree"}
            if figure.get("transport"):
                figure["transport"]["set_by_environment"] = [
                    "NCCL_ALGO=Tree", *figure["transport"]["set_by_environment"]]
    return out


def allreduce_7pct() -> Document:
    """bench/shortfall_flags.py: the all-reduce at 7%, no setting to explain it."""
    return _scaled(_healthy_h100x2(), _allreduce, 0.07)


def pair_17_of_18() -> Document:
    """bench/shortfall_flags.py: pair 0-1 with one NVLink link of 18 lost."""
    return _scaled(_healthy_h100x2(), _pair(0, 1), 17 / 18, nvlink_links=17)


def pair_16_of_18() -> Document:
    """bench/shortfall_flags.py: pair 0-1 with two NVLink links of 18 lost."""
    return _scaled(_healthy_h100x2(), _pair(0, 1), 16 / 18, nvlink_links=16)


def memory_92pct() -> Document:
    """bench/shortfall_flags.py: GPU 0's memory copy at 92%."""
    return _scaled(_healthy_h100x2(),
                   lambda f: f["kind"] == "memory_copy" and f["gpu_index"] == 0, 0.92)


MATMUL_WHOSE = REPO / "bench" / "records" / "2026-11-28-h100-matmul-whose"
MEMORY_WHOSE = REPO / "bench" / "records" / "2026-11-28-h100-memory-whose"


def _slow_matmul(result: dict[str, Any], factor: float) -> None:
    """A soaked matmul result `factor` times what it measured: every run time it rests
    on stretched, so that its headline, statistics and soak still agree."""
    result["tflops"] *= factor
    result["stats"] = {k: (v / factor if k.endswith("_ms") else v)
                       for k, v in result["stats"].items()}
    result["samples_ms"] = [v / factor for v in result["samples_ms"]]
    soak = result["soak"]
    if soak.get("first_20s_tflops"):
        soak["drop"] = 1.0 - result["tflops"] / soak["first_20s_tflops"]


def matmul_short_under_harmless_setting() -> Document:
    """A provider's fault under a setting of the renter's that moves nothing: the lent
    H100 under CUBLAS_WORKSPACE_CONFIG=:0:0 (whose-2: soaked 672.4 TFLOP/s, its pair -0.6%
    between halves) with its soaked figure and both halves of its pair at 94%, as
    bench/shortfall_flags.py puts a matmul 5-6% slow: still short without the setting."""
    data = read(MATMUL_WHOSE / "whose-2.jsonl.gz")
    result = data["benchmarks"][0]
    _slow_matmul(result, 0.94)
    pair = result["rerun"]
    pair["tflops"] = round(pair["tflops"] * 0.94, 3)
    pair["with_tflops"] = round(pair["with_tflops"] * 0.94, 3)
    return data


def _memory(data: Document, factor: float, rerun_factor: float) -> Document:
    out = _scaled(data, lambda f: f["kind"] == "memory_copy", factor)
    for figure in out["node"]:
        again = figure.get("rerun")
        if figure["kind"] == "memory_copy" and again:
            for key in ("gbs", "min_gbs", "max_gbs"):
                again[key] = round(again[key] * rerun_factor, 3)
            again["samples_gbs"] = [round(v * rerun_factor, 3) for v in again["samples_gbs"]]
    return out


def memory_short_under_launch_blocking() -> Document:
    """The renter's: the lent H100's memory copy under CUDA_LAUNCH_BLOCKING=1 (2,885.5
    GB/s, 3,007.6 without it in the same run) with the first figure at 90% (2,597): the
    setting costing what the floor calls, clear without it."""
    return _memory(read(MEMORY_WHOSE / "run-1-raised.jsonl.gz"), 0.90, 1.0)


def memory_short_without_it_too() -> Document:
    """The provider's, under the renter's setting: the same run with both figures at 92%
    (bench/shortfall_flags.py's slow memory), still short without the setting."""
    return _memory(read(MEMORY_WHOSE / "run-1-raised.jsonl.gz"), 0.92, 0.92)


# The setting the memory copy's record ran under, as the agent records it.
LAUNCH_BLOCKING = {"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "withheld": None,
                   "source": "environment", "family": "cuda", "applies": True}


def _rerun_of(figure: dict[str, Any], share: float, floor_gbs: float) -> dict[str, Any]:
    """`figure` measured again without CUDA_LAUNCH_BLOCKING at `share` of its healthy
    repeats, with the floor the agent called it short under (agent/node/floors.json)."""
    stats = figure["stats"]
    samples = [round(v * share, 3) for v in stats["samples_gbs"]]
    return {"without": ["CUDA_LAUNCH_BLOCKING"], "kept": [], "floor_gbs": floor_gbs,
            "floor_basis": "records (agent/node/floors.json)",
            "gbs": round(stats["median_gbs"] * share, 3),
            "min_gbs": round(stats["min_gbs"] * share, 3),
            "max_gbs": round(stats["max_gbs"] * share, 3), "samples_gbs": samples,
            "algbw_gbs": None, "transports": None, "ran_with": [], "wall_s": 3.0}


def _pair_under_launch_blocking(host: str, rerun_share: float) -> Document:
    """Healthy-1 of the lent 2x H100 under CUDA_LAUNCH_BLOCKING=1, pair 0-1 at 90% both
    ways (356.8 and 701.8 GB/s, under the 380.5 and 746.5 agent/rerun/links.py and
    the report call short) and measured again without it at `rerun_share`."""
    data = copy.deepcopy(_healthy_h100x2())
    data["host"]["hostname"] = host
    data["settings"] = [dict(LAUNCH_BLOCKING)]
    floors = {"one_way": 380.544, "both_ways": 746.496}
    for figure in data["node"]:
        if _pair(0, 1)(figure):
            figure["rerun"] = _rerun_of(figure, rerun_share, floors[figure["direction"]])
            _scale_figure(figure, 0.90)
    return data


def pair_short_under_launch_blocking() -> Document:
    """The renter's: pair 0-1 at 90% under CUDA_LAUNCH_BLOCKING=1, its healthy figures
    without it in the same run."""
    return _pair_under_launch_blocking("h100x2-pair-launch-blocking", 1.0)


def pair_short_without_it_too() -> Document:
    """The provider's, under the renter's setting: pair 0-1 at 90%, and at 92% without
    the setting too (a lost link's 17/18 is 94%)."""
    return _pair_under_launch_blocking("h100x2-pair-without-it-too", 0.92)


def host_copy_short_under_launch_blocking() -> Document:
    """The renter's: GPU 1's pinned copy to the device at 85% (46.9 GB/s, under the 49.6
    floor and over the 44.1 fleet/analysis/node/hostlink.py calls slow for Gen5 x16) under
    CUDA_LAUNCH_BLOCKING=1, its healthy figure without it."""
    data = copy.deepcopy(_healthy_h100x2())
    data["host"]["hostname"] = "h100x2-host-copy-launch-blocking"
    data["settings"] = [dict(LAUNCH_BLOCKING)]
    for figure in data["node"]:
        if (figure["kind"], figure.get("gpu_index"), figure.get("memory")) == (
                "host_to_device", 1, "pinned"):
            figure["rerun"] = _rerun_of(figure, 1.0, 49.59)
            _scale_figure(figure, 0.85)
    return data


def _job_flags() -> Any:
    sys.path.insert(0, str(REPO / "bench"))
    import job_flags  # a bench script, loaded by name
    return job_flags


def _hidden(which: str) -> Document:
    jf = _job_flags()
    data = jf.paired(jf.document(jf.CONTENDED), jf.document(jf.MATMUL_RUN))
    return dict(jf.hidden(data, jf.BUSY_GPU, jf.HIDDEN[which]))


def hidden_all() -> Document:
    """bench/job_flags.py: GPU 2's other process hidden from all its job results."""
    return _hidden("all")


def hidden_train() -> Document:
    """bench/job_flags.py: hidden from GPU 2's training results only."""
    return _hidden("training")


# Constructed documents: file name -> how it is made.
CONSTRUCTIONS: dict[str, Callable[[], Document]] = {
    "nccl-algo-tree.json.gz": nccl_algo_tree,
    "allreduce-7pct.json.gz": allreduce_7pct,
    "pair-17-of-18.json.gz": pair_17_of_18,
    "pair-16-of-18.json.gz": pair_16_of_18,
    "memory-92pct.json.gz": memory_92pct,
    "jobs-hidden-all.json.gz": hidden_all,
    "jobs-hidden-train.json.gz": hidden_train,
    "matmul-short-harmless-setting.json.gz": matmul_short_under_harmless_setting,
    "memory-short-launch-blocking.json.gz": memory_short_under_launch_blocking,
    "memory-short-without-it-too.json.gz": memory_short_without_it_too,
    "pair-short-launch-blocking.json.gz": pair_short_under_launch_blocking,
    "pair-short-without-it-too.json.gz": pair_short_without_it_too,
    "host-copy-short-launch-blocking.json.gz": host_copy_short_under_launch_blocking,
}
# The shared-GPU runs are test fixtures too (tests/report/test_taint.py).
FIXTURES: dict[str, Callable[[], Document]] = {
    "gpu3-shared-suite-1.0.json": gpu3_shared_suite_1_0,
    "gpu1-shared-clean-pair-suite-1.1.json": gpu1_shared_clean_pair_suite_1_1,
}


def write() -> list[Path]:
    """Every constructed document, written where the manifest reads it."""
    from fleet.model.document import parse_document  # the controller's own parse
    CONSTRUCTED.mkdir(parents=True, exist_ok=True)
    SHARED_RUNS.mkdir(parents=True, exist_ok=True)
    written = []
    for folder, made in ((CONSTRUCTED, CONSTRUCTIONS), (SHARED_RUNS, FIXTURES)):
        for name, make in made.items():
            data = make()
            parse_document(data, name)  # what fleet ingest would refuse is no case
            text = json.dumps(data, sort_keys=True)
            path = folder / name
            if name.endswith(".gz"):
                # mtime 0: the same document writes the same bytes.
                with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                            mtime=0) as out:
                    out.write(text.encode())
            else:
                path.write_text(text + "\n")
            written.append(path)
    return written


def cases() -> list[dict[str, Any]]:
    """The manifest's cases."""
    found: list[dict[str, Any]] = json.loads(MANIFEST.read_text())["cases"]
    return found


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    for written in write():
        print(written.relative_to(REPO))
