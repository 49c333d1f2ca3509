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
- "soaked (1.4.0)": `bench/device_repeat.sh`'s five soaked runs of one card, each a process
  of its own after 20 s idle (2026-11-26-h100-repeat-*, 2026-11-26-h200-repeat-*).
- "probe" then "bench": the README's first command, `fleet probe`, then `fleet bench
  --gemm-only` minutes later on the same card (2026-11-26-h100-probe-bench-*): the probe's
  whole result is in the store it made (fleet.db.gz, the document's body), the bench's
  only as its printed table (bench-80.txt): its work over the time to 0.1 TFLOP/s (at
  most 0.007% off, under the 2% the card moved) and its temperature, no samples.

Everything else in bench/records/ is one run a card, unsoaked, or not the agent's harness
(dwell, placement and transient diagnostics, node suites, graph references). A run of the
harness beside a graph reference (2026-11-26-h100x2-probe-reference, the references of
the soak checks) is no repeat: the reference is another method, with its own offset from
the harness (bench/RESULTS.md, "Soaked").

Last, the catalog: each of agent/timing/repeat.py's SPREADS pooled again from the records it
names, beside the figure it states.

    python bench/repeat_records.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sqlite3
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.timing import repeat

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
# `fleet bench`'s table (fleet/cli/display.py): a GPU's row opens with its index and
# TFLOP/s and carries the soak's seconds, then the temperature, clock and power under load.
BENCH_ROW = re.compile(r"^(?P<gpu>\d+)\s+(?P<tflops>\d+\.\d)\s.*?\s\d+ s\s+(?P<c>\d+)\s+\d+\s+\d+")
BENCH_TITLE = re.compile(r"Standard harness: \d+ x (?P<variant>[\w.-]+), \w+ (?P<size>\d+)³")


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


def _store_results(path: Path) -> list[dict[str, Any]]:
    """Every result of every agent document a store (a gzipped fleet.db) holds."""
    image = bytearray(gzip.decompress(path.read_bytes()))
    # The store was written in WAL mode (header bytes 18-19 = 2), which an in-memory copy
    # cannot open; the rollback journal's 1 reads the same pages.
    image[18:20] = b"\x01\x01"
    db = sqlite3.connect(":memory:")
    try:
        db.deserialize(bytes(image))
        bodies = [row[0] for row in db.execute("SELECT body FROM document ORDER BY id")]
    finally:
        db.close()
    return [result for body in bodies for result in json.loads(body)["benchmarks"]]


def _probe_bench_runs(directory: Path) -> list[RecordedRun]:
    """`fleet probe`'s soaked result (in the store it made), then `fleet bench`'s printed
    row for the same GPU: two runs of one card, minutes apart."""
    store, printed = directory / "fleet.db.gz", directory / "bench-80.txt"
    if not store.is_file() or not printed.is_file():
        return []
    text = printed.read_text()
    title = BENCH_TITLE.search(" ".join(text.split()))
    version = HARNESS_VERSION.search(" ".join(text.split()))
    if title is None or version is None or "soaked" not in text:
        return []
    rows = {int(m["gpu"]): m for m in map(BENCH_ROW.match, text.splitlines()) if m}
    card = _serial(directory)
    runs = []
    for first in _store_results(store):
        row = rows.get(int(first["gpu_index"]))
        if first.get("thermal") != "soaked" or row is None:
            continue
        key = card or first["gpu_uuid"]
        size = int(title["size"])
        # harness 1.4's headline is the work over the time, which is all the row keeps.
        second = {"tflops": float(row["tflops"]), "thermal": "soaked", "m": size, "n": size,
                  "k": size, "harness_version": version.group(1),
                  "soak": {"temperature_c": float(row["c"])}}
        for order, (protocol, result) in enumerate(
                ((f"probe ({first['harness_version']})", first),
                 (f"bench ({version.group(1)})", second))):
            runs.append(RecordedRun(
                record=directory.name, card=key, variant=title["variant"], order=order,
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
        runs += _probe_bench_runs(directory)
    grouped = by_card(runs)
    return [run for group in grouped.values() if len(group) >= 2 for run in group]


def by_card(runs: Iterable[RecordedRun]) -> dict[tuple[str, str], list[RecordedRun]]:
    """(record, card) -> that card's runs in the order they ran."""
    grouped: dict[tuple[str, str], list[RecordedRun]] = {}
    for run in runs:
        grouped.setdefault((run.record, run.card), []).append(run)
    return {key: sorted(group, key=lambda r: r.order) for key, group in grouped.items()}


def work_over_time(run: RecordedRun) -> float:
    """TFLOP/s as total work over total time of the measured samples (the plain mean); a
    printed 1.4 result, with neither samples nor stats, is its headline, the same figure."""
    samples = run.result.get("samples_ms")
    if samples:
        mean_ms = math.fsum(samples) / len(samples)
    elif "stats" in run.result:
        mean_ms = run.result["stats"]["mean_ms"]
    else:
        return float(run.result["tflops"])
    return run.flop / mean_ms / 1e9


def trimmed(run: RecordedRun) -> float | None:
    """TFLOP/s from the 10%-trimmed mean, the harness's own statistic from 1.2 to 1.3
    (None for a printed result, which keeps no stats)."""
    if "stats" not in run.result:
        return None
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


def catalog_spreads(groups: dict[tuple[str, str], list[RecordedRun]],
                    catalog: Mapping[str, repeat.Spread], leave_out: str | None = None
                    ) -> dict[str, repeat.Spread]:
    """Each catalog spread pooled again, as `pooled` pools, from the records it names,
    `leave_out` left out (a variant with nothing left drops out: the widest other stands
    in, as for an unmeasured variant)."""
    found = {}
    for variant, spread in catalog.items():
        named = set(spread.records) - {leave_out}
        chosen = {key: runs for key, runs in groups.items()
                  if key[0] in named and runs[0].variant == variant}
        sums = [0.0, 0.0]
        for runs in chosen.values():
            values = [work_over_time(run) for run in runs]
            mean = statistics.fmean(values)
            sums[0] += math.fsum((v / mean - 1.0) ** 2 for v in values)
            sums[1] += len(values) - 1
        if sums[1] > 0:
            source = spread.source if leave_out is None else f"{spread.source}, but {leave_out}"
            found[variant] = repeat.Spread(math.sqrt(sums[0] / sums[1]), int(sums[1]), source,
                                           tuple(sorted(named & {k[0] for k in chosen})))
    return found


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
                  f"{value:9.2f} {_fmt(trimmed(run), '9.2f'):>9} "
                  f"{_fmt(run.temperature_c, '6.1f')}")
    print("\npooled within-card sd of work/time, relative to each card's mean:")
    for (variant, protocol), (sd, dof, cards) in sorted(pooled(groups).items()):
        print(f"  {variant:<16} {protocol:<28} {100 * sd:.3f}%  dof {dof}  ({cards} cards)")
    print("\nagent/timing/repeat.py's SPREADS, pooled again from the records each names:")
    again = catalog_spreads(groups, repeat.SPREADS)
    for variant, stated in sorted(repeat.SPREADS.items()):
        found = again.get(variant)
        print(f"  {variant:<16} stated {100 * stated.sd:.3f}% dof {stated.dof}; records "
              + ("none found" if found is None else
                 f"{100 * found.sd:.4f}% dof {found.dof}: {', '.join(found.records)}"))


if __name__ == "__main__":
    main()
