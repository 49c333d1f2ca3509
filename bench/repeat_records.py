"""Every repeated soaked run of one card in bench/records/, for the repeat-coverage study:
does the next run of the same card fall inside the interval the previous run stated?

Three kinds of record hold repeats of the agent's own harness on one card, the card soaked
before each measurement:

- "soaked (1.3.0)": `harness_fidelity.py --soak-check` (2026-11-25-h100-soak-*,
  2026-11-25-h200-soak-*): five `python3 -m agent bench` processes minutes apart, each
  soaking the card itself; soak.json's `runs[i]["result"]` is the agent's whole result.
  The closing --quick run is a cool-start figure and is left out.
- "quick after a soak": harness 1.2.0 repeats inside `harness_fidelity.py` (its
  "fleet harness" method), which ran 60 s of graph replays (`--soak-s`, default 60 since
  it was added in bd5cb6c) before the first repeat. The record's `soak` entry is what
  says so: present with 60 s on cards 21-23 ("a 60 s soak" in their command.txt), on
  card 25 and on both 2026-11-24 H200s (`--nvbench` with the default --soak-s); absent on
  card 20 ("no soak: the working tree before --soak-s was added") and on every 2026-11-23
  card; 5 s on cards 24 and 26, short code checks their command.txt says are not fidelity
  results. The repeats are interleaved with the other methods (do_bench,
  torch.utils.benchmark, nvbench, the 18-s graph reference), which keep the card under
  load between them. What was recorded is the bench's extract of the agent's result (no
  harness_version, m/n/k or provenance): the version comes from command.txt, the size and
  the device from the record's top level.
- "together" then "alone": the 4x H200 node (2026-11-26-h200x4-node-probe): `fleet probe`
  soaked all four GPUs at once (its document is the test fixture command.txt names), then
  `agent bench --sequential` soaked each alone (sequential.jsonl). A pair a GPU, keyed by
  its gpu_uuid.

Everything else in bench/records/ is one run a card, unsoaked, or not the agent's harness
(dwell, placement and transient diagnostics, node suites, graph references).

    python bench/repeat_records.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDS = Path(__file__).parent / "records"

SOAKED = "soaked (1.3.0)"
QUICK_AFTER_SOAK = "quick after a soak"
TOGETHER = "together"
ALONE = "alone"

VARIANTS = {"NVIDIA H100 80GB HBM3": "H100-SXM5-80GB", "NVIDIA H200": "H200-SXM-141GB"}

# harness_fidelity.py's default --soak-s: a shorter soak (5 s on cards 24 and 26) was a
# code check that leaves the card far from its working temperature.
MIN_SOAK_S = 60.0
FIDELITY_METHOD = "fleet harness"  # the agent's harness, not a reference beside it
PROBE_DOCUMENT = re.compile(r"tests/fixtures/nodes/[\w.-]+/document\.json")
HARNESS_VERSION = re.compile(r"harness (\d+\.\d+\.\d+)")
SERIAL_SUFFIX = re.compile(r"-(\d{13})$")


@dataclass(frozen=True)
class RecordedRun:
    record: str
    card: str
    variant: str
    order: int
    harness_version: str
    protocol: str
    result: dict[str, Any]
    temperature_c: float | None
    # 2*m*n*k of the product; the 1.2.0 extracts do not carry m, n and k themselves.
    flop: float


def _read_json(path: Path) -> Any:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as handle:
            return json.load(handle)
    return json.loads(path.read_text())


def _read_lines(path: Path) -> list[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as handle:
            return handle.read().splitlines()
    return path.read_text().splitlines()


def _first(directory: Path, *names: str) -> Path | None:
    for name in names:
        if (directory / name).is_file():
            return directory / name
    return None


def _variant(device_name: str) -> str:
    return VARIANTS.get(device_name, device_name)


def _temperature(result: dict[str, Any]) -> float | None:
    # The soak's own reading is the card's temperature at the measurement; the telemetry
    # maximum is all a 1.2.0 result has.
    soak = result.get("soak") or {}
    if soak.get("temperature_c") is not None:
        return float(soak["temperature_c"])
    value = (result.get("telemetry") or {}).get("temperature_c_max")
    return None if value is None else float(value)


def _serial(directory: Path) -> str | None:
    """The card's serial: nvidia-smi's before the run, else the directory name's."""
    for name in ("smi-before.csv", "smi_before.csv"):
        path = directory / name
        if path.is_file():
            header, *rows = [line.split(",") for line in path.read_text().splitlines() if line]
            columns = [c.strip() for c in header]
            if "serial" in columns and len(rows) == 1:
                return rows[0][columns.index("serial")].strip()
    found = SERIAL_SUFFIX.search(directory.name)
    return found.group(1) if found else None


def _flop(result: dict[str, Any]) -> float:
    return 2.0 * int(result["m"]) * int(result["n"]) * int(result["k"])


def _soak_check_runs(directory: Path, path: Path) -> list[RecordedRun]:
    data = _read_json(path)
    runs = []
    for order, run in enumerate(r["result"] for r in data["runs"]):
        if run.get("thermal") != "soaked":
            continue
        runs.append(RecordedRun(
            record=directory.name, card=_serial(directory) or run["gpu_uuid"],
            variant=_variant(run["provenance"]["device_name"]), order=order,
            harness_version=run["harness_version"], protocol=SOAKED, result=run,
            temperature_c=_temperature(run), flop=_flop(run)))
    return runs


def _fidelity_runs(directory: Path, path: Path) -> list[RecordedRun]:
    data = _read_json(path)
    soak = data.get("soak")
    repeats = data["runs"].get(FIDELITY_METHOD, [])
    if not soak or soak["seconds"] < MIN_SOAK_S or len(repeats) < 2:
        return []
    command = directory / "command.txt"
    version = HARNESS_VERSION.search(command.read_text()) if command.is_file() else None
    if version is None:
        return []
    card = str(data.get("serial") or _serial(directory))
    flop = 2.0 * data["size"] ** 3
    return [RecordedRun(record=directory.name, card=card, variant=_variant(data["device"]),
                        order=order, harness_version=version.group(1),
                        protocol=QUICK_AFTER_SOAK, result=result,
                        temperature_c=_temperature(result), flop=flop)
            for order, result in enumerate(repeats)]


def _node_pairs(directory: Path, repo: Path) -> list[RecordedRun]:
    """A node's GPUs soaked together by `fleet probe`, then each alone: one pair a GPU."""
    command = directory / "command.txt"
    sequential = _first(directory, "sequential.jsonl", "sequential.jsonl.gz")
    if sequential is None or not command.is_file():
        return []
    named = PROBE_DOCUMENT.search(command.read_text())
    if named is None or not (repo / named.group(0)).is_file():
        return []
    together = json.loads((repo / named.group(0)).read_text())["benchmarks"]
    alone = json.loads(_read_lines(sequential)[-1])["document"]["benchmarks"]
    alone_by_uuid = {r["gpu_uuid"]: r for r in alone if r.get("thermal") == "soaked"}
    runs = []
    for first in together:
        second = alone_by_uuid.get(first["gpu_uuid"])
        if first.get("thermal") != "soaked" or second is None:
            continue
        for order, (protocol, result) in enumerate(((TOGETHER, first), (ALONE, second))):
            runs.append(RecordedRun(
                record=directory.name, card=result["gpu_uuid"],
                variant=_variant(result["provenance"]["device_name"]), order=order,
                harness_version=result["harness_version"], protocol=protocol, result=result,
                temperature_c=_temperature(result), flop=_flop(result)))
    return runs


def _repeat_runs(directory: Path) -> list[RecordedRun]:
    """`bench/device_repeat.sh`'s soaked repeats (harness 1.4 on): one agent document a
    run, run-N.jsonl(.gz), N in the order they ran."""
    runs = []
    paths = sorted(directory.glob("run-*.jsonl*"),
                   key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    for order, path in enumerate(paths):
        lines = _read_lines(path)
        if not lines:
            continue
        document = json.loads(lines[-1]).get("document") or {}
        for result in document.get("benchmarks", []):
            if result.get("thermal") != "soaked":
                continue
            runs.append(RecordedRun(
                record=directory.name, card=_serial(directory) or result["gpu_uuid"],
                variant=_variant(result["provenance"]["device_name"]), order=order,
                harness_version=result["harness_version"],
                protocol=f"soaked ({result['harness_version']})", result=result,
                temperature_c=_temperature(result), flop=_flop(result)))
    return runs


def load_runs(root: Path = RECORDS) -> list[RecordedRun]:
    """Every repeated soaked run under `root`, by record, card and order. A probe document
    that a record's command.txt names is looked up in the repository that holds `root`."""
    repo = root.resolve().parents[1]
    runs: list[RecordedRun] = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir()):
        soak = _first(directory, "soak.json.gz", "soak.json")
        if soak is not None:
            runs += _soak_check_runs(directory, soak)
        for fidelity in sorted(directory.glob("fidelity*.json*")):
            runs += _fidelity_runs(directory, fidelity)
        runs += _node_pairs(directory, repo)
        runs += _repeat_runs(directory)
    grouped = by_card(runs)
    return [run for group in grouped.values() if len(group) >= 2 for run in group]


def by_card(runs: Iterable[RecordedRun]) -> dict[tuple[str, str], list[RecordedRun]]:
    """(record, card) -> that card's runs in the order they ran."""
    grouped: dict[tuple[str, str], list[RecordedRun]] = {}
    for run in runs:
        grouped.setdefault((run.record, run.card), []).append(run)
    return {key: sorted(group, key=lambda r: r.order) for key, group in grouped.items()}


def work_over_time(run: RecordedRun) -> float:
    """TFLOP/s as total work over total time of the measured samples (the plain mean)."""
    samples = run.result.get("samples_ms")
    mean_ms = math.fsum(samples) / len(samples) if samples else run.result["stats"]["mean_ms"]
    return run.flop / mean_ms / 1e9


def trimmed(run: RecordedRun) -> float:
    """TFLOP/s from the 10%-trimmed mean, the harness's own statistic since 1.2."""
    return run.flop / float(run.result["stats"]["trimmed_mean_ms"]) / 1e9


def relative_spread(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def relative_sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def group_protocol(runs: Sequence[RecordedRun]) -> str:
    # A node pair mixes two protocols on one card; its pooled spread is that of the pair.
    return "/".join(dict.fromkeys(run.protocol for run in runs))


def pooled(groups: dict[tuple[str, str], list[RecordedRun]]
           ) -> dict[tuple[str, str], tuple[float, int, int]]:
    """(variant, protocol) -> (pooled within-card relative sd of the work-over-time
    figure, its degrees of freedom, cards). Each deviation is taken relative to its own
    card's mean, so cards at different levels pool without their level in the sd."""
    sums: dict[tuple[str, str], list[float]] = {}
    for runs in groups.values():
        values = [work_over_time(run) for run in runs]
        mean = statistics.fmean(values)
        acc = sums.setdefault((runs[0].variant, group_protocol(runs)), [0.0, 0.0, 0.0])
        acc[0] += math.fsum((v / mean - 1.0) ** 2 for v in values)
        acc[1] += len(values) - 1
        acc[2] += 1
    return {key: (math.sqrt(ss / dof), int(dof), int(cards))
            for key, (ss, dof, cards) in sums.items() if dof > 0}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=RECORDS,
                        help="the records directory (default: bench/records)")
    args = parser.parse_args()
    groups = by_card(load_runs(args.root))
    print("TFLOP/s: recorded (the harness's headline), work/time (total work over total "
          "time of the samples), trimmed (10%-trimmed mean); spread (max-min)/median and "
          "sd/mean of work/time")
    for (record, card), runs in groups.items():
        values = [work_over_time(run) for run in runs]
        print(f"\n{record}  card {card}  {runs[0].variant}  {group_protocol(runs)}  "
              f"harness {runs[0].harness_version}  n={len(runs)}  spread "
              f"{100 * relative_spread(values):.3f}%  sd/mean {100 * relative_sd(values):.3f}%")
        print(f"  {'run':>3}  {'protocol':<20} {'recorded':>9} {'work/time':>9} "
              f"{'trimmed':>9} {'temp C':>6}")
        for run, value in zip(runs, values, strict=True):
            print(f"  {run.order:>3}  {run.protocol:<20} {run.result['tflops']:9.2f} "
                  f"{value:9.2f} {trimmed(run):9.2f} {_fmt(run.temperature_c, '6.1f')}")
    print("\npooled within-card sd of work/time, relative to each card's mean:")
    for (variant, protocol), (sd, dof, cards) in sorted(pooled(groups).items()):
        print(f"  {variant:<16} {protocol:<20} {100 * sd:.3f}%  dof {dof}  ({cards} cards)")


if __name__ == "__main__":
    main()
