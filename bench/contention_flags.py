"""How often fleet/analysis/contention.py calls a healthy lent node contended, and whether
it calls the figures measured beside another process for real.

Every node figure (at the largest size the report judges) and matmul result of the
healthy records (the catalog's, fleet/expected.py)
is judged by the two rules: what the agent saw (suite 1.1.0 and harness results: another
process, a busy GPU) and, for node figures, repeats spread beyond SPREAD_CV (memory copy,
pairs, all-reduce). The fault records (bench/records/2026-11-26-h100x2-node-faults: a
process of another user on GPU 1, one of the agent's own user on GPU 0) are judged the
same way: each figure that touched the busy GPU should be called, the others not.

    python bench/contention_flags.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.expected_catalog import DEFAULT_RECORDS, RECORDS, Run, runs_in  # noqa: E402
from fleet.analysis.contention import SPREAD_CV, SPREAD_JUDGED, spread_judged  # noqa: E402

FAULTS = RECORDS / "2026-11-26-h100x2-node-faults"
# Which GPU each fault run put other work on.
BUSY_GPU = {"foreign": 1, "own": 0}


def _called(result: dict[str, Any], kind: str) -> tuple[bool, bool]:
    """(seen by the agent, shown by its spread) for one node figure or matmul result."""
    seen = bool(result.get("contention"))
    spread = (kind in SPREAD_JUDGED and spread_judged(result.get("suite_version", ""))
              and float((result.get("stats") or {}).get("cv") or 0.0) > SPREAD_CV)
    return seen, spread


def _figures(run: Run) -> list[tuple[str, dict[str, Any]]]:
    """The figures the report judges: node figures at their largest size (as
    fleet/analysis/node/figures.py's prepare keeps them), and the matmul results."""
    document = run.document or {}
    node = document.get("node") or []
    largest: dict[tuple[Any, ...], int] = {}
    for r in node:
        key = (r["kind"], r.get("direction"), r.get("memory"), r.get("gpus_in_run"))
        largest[key] = max(largest.get(key, 0), int(r["size_bytes"]))
    return ([(r["kind"], r) for r in node if int(r["size_bytes"]) == largest[
                (r["kind"], r.get("direction"), r.get("memory"), r.get("gpus_in_run"))]]
            + [("matmul", r) for r in document.get("benchmarks") or []])


def judge(runs: list[Run]) -> dict[str, Counter[str]]:
    """Per kind: figures judged, called by what was seen, called by their spread."""
    counts: dict[str, Counter[str]] = {}
    for run in runs:
        for kind, result in _figures(run):
            c = counts.setdefault(kind, Counter())
            c["figures"] += 1
            seen, spread = _called(result, kind)
            c["seen"] += seen
            c["spread"] += spread
            c["either"] += seen or spread
    return counts


def _touches(result: dict[str, Any], kind: str, gpu: int) -> bool:
    return kind == "allreduce" or gpu in (result.get("gpu_index"), result.get("peer_index"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    healthy = [run for path in DEFAULT_RECORDS for run in runs_in(path)]
    counts = judge(healthy)
    print(f"healthy records: {len(healthy)} runs; spread rule CV > {SPREAD_CV:.0%} on "
          f"{', '.join(SPREAD_JUDGED)}")
    print(f"  {'kind':15} {'figures':>8} {'seen':>6} {'spread':>7} {'called':>7}")
    for kind, c in sorted(counts.items()):
        print(f"  {kind:15} {c['figures']:8} {c['seen']:6} {c['spread']:7} {c['either']:7}")
    faults: dict[str, dict[str, int]] = {}
    for run in runs_in(FAULTS):
        name = run.label.split(".")[0]
        if name not in BUSY_GPU:
            continue
        busy = BUSY_GPU[name]
        tally = Counter[str]()
        for kind, result in _figures(run):
            seen, spread = _called(result, kind)
            touched = _touches(result, kind, busy)
            tally["busy figures" if touched else "free figures"] += 1
            if touched:
                tally["busy called"] += seen or spread
                tally["busy seen"] += seen
                tally["busy by spread"] += spread
            else:
                tally["free called"] += seen or spread
        faults[name] = dict(tally)
        print(f"{name}: a process on GPU {busy}: {tally['busy called']} of "
              f"{tally['busy figures']} figures touching it called ({tally['busy seen']} "
              f"by what the agent saw, {tally['busy by spread']} by their spread); "
              f"{tally['free called']} of {tally['free figures']} others called")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "spread_cv": SPREAD_CV, "healthy_runs": len(healthy),
            "healthy": {k: dict(v) for k, v in counts.items()}, "faults": faults},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
