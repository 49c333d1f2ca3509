"""Issue 45's figures from a record of bench/device_job_figures.sh: per workload, decode
point and attention backend, each GPU's tokens/s over the runs (median and spread), the
headline's backend, decode's share of the same run's memory copy, the job stage's wall,
and the agent against the independent plain script (bench/job_reference.py) on the same
cards.

    python bench/job_backends.py [records folder]
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
DEFAULT = ROOT / "records/2026-11-27-h100x4-job-backends"
# The plain script's decode shapes, by the agent's point names.
POINTS = {(128, 4096): "bandwidth", (128, 8192): "bandwidth", (1, 4096): "latency"}


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def runs(folder: Path) -> list[tuple[dict[str, Any], float | None]]:
    """Each run's document and the seconds its job stage took."""
    out = []
    # run-N: bench/device_job_figures.sh's runs; all-N: `--suite all` runs kept apart from
    # bench/repeat_records.py, which reads run-N as repeats of one card.
    for path in sorted([*folder.glob("run-*.jsonl*"), *folder.glob("all-*.jsonl*")]):
        events = _events(path)
        stamps = [e["elapsed_s"] for e in events if e.get("stage") == "job"]
        document = next(e["document"] for e in events if e["event"] == "document")
        out.append((document, stamps[-1] - stamps[0] if stamps else None))
    return out


def summarise(folder: Path) -> dict[str, Any]:
    """The figures, as printed."""
    done = runs(folder)
    figures: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    shares: dict[tuple[str, str], list[float]] = defaultdict(list)
    headlines: dict[tuple[str, str], set[str]] = defaultdict(set)
    for document, _ in done:
        for r in document["jobs"]:
            if r["flags"]["contended"]:
                continue
            key = (r["workload"], r.get("point") or "", r["attention"])
            figures[key][r["gpu_index"]].append(r["tokens_per_s"])
            if r.get("headline"):
                headlines[key[:2]].add(r["attention"])
            if r.get("copy_share") is not None:
                shares[(key[1], r["attention"])].append(r["copy_share"])
    reference: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    path = folder / "reference.jsonl"
    if path.exists():
        for r in _events(path):
            point = "" if r["workload"] == "train" else POINTS.get(
                (r.get("batch"), r.get("context")), "?")
            reference[(r["workload"], point, r["attention"])][r["gpu"]] = r["tokens_per_s"]
    rows = []
    for key in sorted(figures):
        per_gpu = {gpu: statistics.median(v) for gpu, v in figures[key].items()}
        spreads = [statistics.stdev(v) / statistics.mean(v) for v in figures[key].values()
                   if len(v) >= 2]
        ref = reference.get(key, {})
        against = [per_gpu[g] / ref[g] - 1 for g in per_gpu if g in ref]
        rows.append({"key": key, "median": statistics.median(per_gpu.values()),
                     "low": min(per_gpu.values()), "high": max(per_gpu.values()),
                     "runs": max(len(v) for v in figures[key].values()),
                     "spread": statistics.mean(spreads) if spreads else None,
                     "against": (min(against), max(against)) if against else None,
                     "copy_share": statistics.median(shares[key[1:]])
                     if shares.get(key[1:]) else None})
    return {"rows": rows, "headlines": {k: sorted(v) for k, v in headlines.items()},
            "stages": [s for _, s in done]}


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else DEFAULT
    got = summarise(folder)
    print(f"{folder.name}: job stage {', '.join(f'{s:.1f}' for s in got['stages'] if s)} s")
    print(f"{'workload':8} {'point':9} {'backend':9} {'runs':>4} {'median':>9} "
          f"{'GPUs':>17} {'spread':>7} {'vs script':>15} {'copy':>5}")
    for row in got["rows"]:
        workload, point, backend = row["key"]
        against, spread, share = row["against"], row["spread"], row["copy_share"]
        versus = "" if against is None else f"{against[0]:+.1%} to {against[1]:+.1%}"
        print(f"{workload:8} {point:9} {backend:9} {row['runs']:4} {row['median']:9,.0f} "
              f"{row['low']:8,.0f}-{row['high']:<8,.0f} "
              f"{'' if spread is None else f'{spread:.2%}':>7} {versus:>15} "
              f"{'' if share is None else f'{share:.1%}':>5}")
    for key, names in sorted(got["headlines"].items()):
        print(f"headline {key[0]} {key[1] or ''}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
