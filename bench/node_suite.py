"""The node suite's repeat spread and wall, on the device tool (a real multi-GPU node).

Runs the agent's node suite alone (`python3 -m agent bench --suite node`, what `fleet
bench --suite node` runs) --runs times, each in a process of its own as a probe would,
and prints per figure: the median of the runs' figures, their spread ((max - min) /
median), the datasheet figure and the share of it, and per run the suite's wall (from
the agent's first progress line of the suite to the document) against its budget (20 s
for one GPU, 45 s for eight; issue #32). Reads only; changes no GPU setting.

    python3 bench/node_suite.py --runs 5 --out $OUT/node-suite.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

BUDGET_S = {1: 20.0, 8: 45.0}


def run_once(repo: Path, extra: list[str]) -> dict[str, Any]:
    """One agent run of the suite alone: its document and how long the suite took."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "agent", "bench", "--suite", "node", *extra],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"agent failed ({done.returncode}): {done.stderr[-2000:]}")
    events = [json.loads(line) for line in done.stdout.splitlines()]
    document = events[-1]["document"]
    started = next((e["elapsed_s"] for e in events if e.get("stage") == "node"), 0.0)
    ended = events[-2]["elapsed_s"] if len(events) > 1 else wall
    return {"document": document, "process_wall_s": wall,
            "suite_s": max(0.0, ended - started)}


def key(result: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a figure across runs."""
    return (result["kind"], result.get("gpu_index"), result.get("peer_index"),
            result.get("direction"), result.get("memory"), result["size_bytes"])


def label(k: tuple[Any, ...]) -> str:
    kind, gpu, peer, direction, memory, size = k
    size_text = f"{size >> 20} MiB" if size < 1 << 30 else f"{size >> 30} GiB"
    if kind == "peer_copy":
        return f"peer {gpu}->{peer} {direction} {size_text}"
    if kind == "allreduce":
        return f"allreduce {size_text}"
    return f"{kind} GPU {gpu} {memory or ''} {size_text}".replace("  ", " ")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="the CPU path (no GPU)")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    extra = ["--cpu"] if args.cpu else []
    runs = []
    for index in range(args.runs):
        run = run_once(repo, extra)
        runs.append(run)
        errors = run["document"]["errors"]
        print(f"run {index + 1}: suite {run['suite_s']:.1f} s, process "
              f"{run['process_wall_s']:.1f} s, {len(run['document']['node'])} figures, "
              f"errors {errors}", flush=True)
    figures: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        for result in run["document"]["node"]:
            figures[key(result)].append(result)
    gpus = len(runs[0]["document"]["gpus"]) or 1
    print(f"\n{gpus} GPU(s); budget {BUDGET_S.get(gpus, 20 + 25 * (gpus - 1) / 7):.0f} s; "
          f"suite walls {[round(r['suite_s'], 1) for r in runs]}")
    print(f"{'figure':34} {'median':>9} {'spread':>7} {'cv in run':>9} {'sheet':>7} "
          f"{'share':>6}")
    summary = []
    for k in sorted(figures, key=lambda k: tuple(str(x) for x in k)):
        values = [r["gbs"] for r in figures[k]]
        med = statistics.median(values)
        spread = (max(values) - min(values)) / med if med else 0.0
        sheet = figures[k][0].get("datasheet_gbs")
        cv = statistics.median(r["stats"]["cv"] for r in figures[k])
        extra_text = ""
        first = figures[k][0]
        if first.get("link"):
            link = first["link"]
            extra_text = f" Gen{link.get('gen')} x{link.get('width')}"
        if first["kind"] == "peer_copy":
            extra_text = f" access={first.get('peer_access')} {first.get('topology')}"
        print(f"{label(k):34} {med:9.1f} {spread:7.2%} {cv:9.2%} "
              f"{sheet if sheet else '-':>7} "
              f"{(med / sheet if sheet else 0):6.1%}{extra_text}")
        summary.append({"figure": label(k), "values": values, "median": med,
                        "spread": spread, "datasheet_gbs": sheet})
    args.out.write_text(json.dumps({"runs": [{"suite_s": r["suite_s"],
                                              "process_wall_s": r["process_wall_s"],
                                              "document": r["document"]} for r in runs],
                                    "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
