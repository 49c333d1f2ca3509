"""The job suite's figures from the records of lent nodes (bench/device_jobs.sh): each run's
training and decode tokens/s per GPU, their spread over runs, the wall the suite added,
and the agent against the independent plain script (bench/job_reference.py) on the same
node, at once and alone.

    python bench/job_suite.py [records folder ...]
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
DEFAULT = ("records/2026-11-26-h100x2-jobs", "records/2026-11-26-h100-jobs")


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def runs(folder: Path) -> list[dict[str, Any]]:
    """Each agent run: its document's job results and the seconds its job stage took."""
    out = []
    for path in sorted(folder.glob("all-*.jsonl*")):
        events = _events(path)
        stage = [e["elapsed_s"] for e in events if e.get("stage") == "job"]
        document = events[-1]["document"]
        out.append({"name": path.name.split(".")[0], "jobs": document["jobs"],
                    "errors": document["errors"], "stage_s": stage[-1] - stage[0]})
    return out


def reference(folder: Path, name: str) -> dict[tuple[int, str], float]:
    path = folder / f"reference-{name}.jsonl"
    if not path.exists():
        return {}
    return {(r["gpu"], r["workload"]): r["tokens_per_s"] for r in _events(path)}


def report(folder: Path) -> None:
    print(f"== {folder.name}")
    done = runs(folder)
    figures: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    for run in done:
        soak = {r["gpu_index"]: r["soak"] for r in run["jobs"] if r["soak"]}
        print(f"{run['name']}: job stage {run['stage_s']:.1f} s, soaked at "
              + ", ".join(f"GPU {g} {s['settled_s']} s ({s['temperature_c']:.0f} C)"
                          for g, s in sorted(soak.items()))
              + (f"; {len(run['errors'])} errors" if run["errors"] else ""))
        for r in run["jobs"]:
            figures[(r["gpu_index"], r["workload"], r["attention"])].append(r["tokens_per_s"])
    at_once = reference(folder, "all")
    alone = reference(folder, "alone")
    print(f"{'GPU':>3} {'workload':8} {'attention':9} {'runs':>4} {'median':>9} {'spread':>7} "
          f"{'script':>9} {'agent/script':>12}")
    for (gpu, workload, attention), values in sorted(figures.items()):
        median = statistics.median(values)
        spread = statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0
        script = at_once.get((gpu, workload)) if attention == "flash" else None
        ratio = f"{median / script - 1:+.2%}" if script else ""
        print(f"{gpu:>3} {workload:8} {attention:9} {len(values):>4} {median:>9,.0f} "
              f"{spread:>7.2%} {script or 0:>9,.0f} {ratio:>12}")
    for (gpu, workload), value in sorted(alone.items()):
        together = at_once.get((gpu, workload))
        if together:
            print(f"script, GPU {gpu} {workload}: alone {value:,.0f}, at once {together:,.0f} "
                  f"({together / value - 1:+.2%} at once)")


def main(argv: list[str]) -> int:
    for name in argv or DEFAULT:
        report(ROOT / name if not Path(name).is_absolute() else Path(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
