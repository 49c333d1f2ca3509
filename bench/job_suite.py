"""The job suite's figures from the records of lent nodes (bench/device_jobs.sh): each run's
training and decode tokens/s per GPU, their spread over runs, the wall the suite added,
the agent against the independent plain script (bench/job_reference.py) on the same
node, at once and alone, and the run-to-run spread pooled over every GPU of the records
(agent/timing/repeat.py JOB_SPREADS).

A result flagged contended or not soaked is listed and left out of every figure, as the
report leaves it out.

    python bench/job_suite.py [records folder ...]
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
DEFAULT = ("records/2026-11-26-h100x4-jobs", "records/2026-11-27-h100x4-jobs-warm",
           "records/2026-11-26-h100-jobs-full", "records/2026-11-27-h100-jobs-reorder",
           "records/2026-11-27-h100-jobs-warm", "records/2026-11-26-h100x2-jobs",
           "records/2026-11-26-h100-jobs")
Key = tuple[str, str]  # (workload, attention)


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def runs(folder: Path, pattern: str = "all-*.jsonl*") -> list[dict[str, Any]]:
    """Each agent run: its document's job results and the seconds its job stage took."""
    out = []
    for path in sorted(folder.glob(pattern)):
        events = _events(path)
        stage = [e["elapsed_s"] for e in events if e.get("stage") == "job"]
        document = events[-1]["document"]
        suites = "all" if document.get("benchmarks") else "job"
        out.append({"name": path.name.split(".")[0], "jobs": document["jobs"],
                    "errors": document["errors"], "stage_s": stage[-1] - stage[0],
                    "suite": suites})
    return out


def reference(folder: Path, name: str) -> dict[tuple[int, str], float]:
    path = folder / f"reference-{name}.jsonl"
    if not path.exists():
        return {}
    return {(r["gpu"], r["workload"]): r["tokens_per_s"] for r in _events(path)}


def _kept(result: dict[str, Any]) -> bool:
    return not (result["flags"]["contended"] or result["flags"]["not_soaked"])


def _table(figures: dict[tuple[int, str, str], list[float]],
           script: dict[tuple[int, str], float]) -> None:
    print(f"{'GPU':>3} {'workload':8} {'attention':9} {'runs':>4} {'median':>9} {'spread':>7} "
          f"{'script':>9} {'agent/script':>12}")
    for (gpu, workload, attention), values in sorted(figures.items()):
        median = statistics.median(values)
        spread = statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0
        theirs = script.get((gpu, workload)) if attention == "flash" else None
        ratio = f"{median / theirs - 1:+.2%}" if theirs else ""
        print(f"{gpu:>3} {workload:8} {attention:9} {len(values):>4} {median:>9,.0f} "
              f"{spread:>7.2%} {theirs or 0:>9,.0f} {ratio:>12}")


def report(folder: Path, pooled: dict[Key, list[list[float]]]) -> None:
    """Print one record's runs and figures; add each GPU's at-once figures to `pooled`."""
    print(f"== {folder.name}")
    at_once: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    alone: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    for pattern, into in (("all-*.jsonl*", at_once), ("contended.jsonl*", at_once),
                          ("alone-*.jsonl*", alone)):
        for run in runs(folder, pattern):
            soak = {r["gpu_index"]: r["soak"] for r in run["jobs"] if r["soak"]}
            print(f"{run['name']} (--suite {run['suite']}): job stage {run['stage_s']:.1f} s, "
                  "soaked at " + ", ".join(
                      f"GPU {g} {s['settled_s']} s ({s['temperature_c']:.0f} C)"
                      for g, s in sorted(soak.items()))
                  + (f"; {len(run['errors'])} errors" if run["errors"] else ""))
            for r in run["jobs"]:
                if not _kept(r):
                    flags = ",".join(k for k, v in r["flags"].items() if v)
                    print(f"  left out: GPU {r['gpu_index']} {r['workload']} {r['attention']} "
                          f"{r['tokens_per_s']:,.0f} tokens/s ({flags})")
                    continue
                into[(r["gpu_index"], r["workload"], r["attention"])].append(r["tokens_per_s"])
    print("every GPU at once:")
    _table(at_once, reference(folder, "all"))
    if alone:
        print("one GPU alone:")
        _table(alone, reference(folder, "alone"))
    for (gpu, workload), value in sorted(reference(folder, "alone").items()):
        together = reference(folder, "all").get((gpu, workload))
        if together:
            print(f"script, GPU {gpu} {workload}: alone {value:,.0f}, at once {together:,.0f} "
                  f"({together / value - 1:+.2%} at once)")
    for (_, workload, attention), values in at_once.items():
        if len(values) > 1:
            pooled[(workload, attention)].append(values)


def pooled_sd(groups: list[list[float]]) -> tuple[float, int]:
    """Each GPU's relative deviations about its own mean, pooled: (sd, degrees of freedom)."""
    squares = 0.0
    dof = 0
    for values in groups:
        mean = statistics.fmean(values)
        squares += sum((v / mean - 1) ** 2 for v in values)
        dof += len(values) - 1
    return (math.sqrt(squares / dof) if dof else 0.0), dof


def main(argv: list[str]) -> int:
    pooled: dict[Key, list[list[float]]] = defaultdict(list)
    for name in argv or DEFAULT:
        report(ROOT / name if not Path(name).is_absolute() else Path(name), pooled)
    print("== run-to-run spread pooled over GPUs (at once)")
    for (workload, attention), groups in sorted(pooled.items()):
        sd, dof = pooled_sd(groups)
        print(f"{workload:6} {attention:5} sd {sd:.4%} dof {dof} over {len(groups)} GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
