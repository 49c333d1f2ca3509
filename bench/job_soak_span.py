"""How short may the job's soak be once the matmul has heated the card? Replayed on the
records' soak curves, not assumed.

The job suite soaks its training step by the matmul's rule (agent/timing/soak.py: a 30-s
span of 2-s windows whose fitted throughput and temperature changes are within
tolerance). A span cannot be judged before it has run, so a soak takes at least 30 s
however hot the card already is, and with every attention backend gated and timed and
two decode points the stage takes 74-80 s after the matmul (issue 45's goal: 60 s).

Straight after the matmul the card is kept at load while the job sets up
(agent/job/warm.py), so the training load starts near the matmul's heat. For each
training result of a run whose soaked matmul came first (`--suite all`), this replays the
rule on its
stored curve with shorter spans, finds when the node's last GPU would have soaked, and
takes the level of the `measure_s` of windows after that as the figure a shorter soak
would have measured. That is set against the figure the run measured after its full soak
(and after the whole node had soaked): the error a shorter span buys.

A soak from idle (`--suite job` alone: no matmul in the document) is counted apart: it
heats for a minute or more, and the span there stays. Runs soaked by the 15-s span
already (the later records of 2026-11-27) are counted apart too: their figure was measured
right after it, so setting it against its own span says nothing.

    python bench/job_soak_span.py [records folder ...]
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
sys.path.insert(0, str(ROOT.parent))

from agent.timing import soak  # noqa: E402

DEFAULT = tuple(sorted(str(p) for p in (ROOT / "records").glob("*job*")))
SPANS = (10.0, 12.0, 15.0, 20.0, 30.0)
MEASURE_S = 6.0


def documents(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file, document) for every agent document in the folder's .jsonl(.gz) files."""
    out = []
    for path in sorted(folder.glob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                if '"document"' not in line:
                    continue
                event = json.loads(line)
                if event.get("event") == "document":
                    out.append((path.name, event["document"]))
    return out


def windows(curve: list[list[float]]) -> list[soak.Window]:
    return [soak.Window(row[0], row[1], None if row[2] < 0 else row[2],
                        None if row[3] < 0 else row[3], None if row[4] < 0 else row[4])
            for row in curve]


def settle_at(series: list[soak.Window], span: float) -> float | None:
    """When the rule with `span` first calls the series soaked (its window's end)."""
    for i in range(len(series)):
        if soak.judge(series[: i + 1], span, span).soaked:
            return series[i].end_s
    return None


def level(series: list[soak.Window], start: float, seconds: float) -> float | None:
    """The level over the windows ending in (start, start + seconds]: the work over the
    time, each window ~2 s."""
    inside = [w.tflops for w in series if start < w.end_s <= start + seconds + 1e-9]
    return statistics.fmean(inside) if inside else None


def main(folders: list[str]) -> None:
    rows: dict[float, list[tuple[str, float, float]]] = defaultdict(list)
    idle = shorter = 0
    print("record / run                         GPUs  full soak   span: settle s, error")
    for folder in folders:
        for name, doc in documents(Path(folder)):
            trains = [r for r in doc.get("jobs") or []
                      if r.get("workload") == "train" and (r.get("soak") or {}).get("curve")
                      and not (r.get("flags") or {}).get("contended")]
            if not trains:
                continue
            if not doc.get("benchmarks"):
                idle += 1
                continue
            if any(r["soak"].get("span_s") != soak.SPAN_S for r in trains):
                shorter += 1
                continue
            series = {r["gpu_index"]: windows(r["soak"]["curve"]) for r in trains}
            full = max(float(r["soak"]["seconds"]) for r in trains)
            parts = []
            for span in SPANS:
                at = [settle_at(s, span) for s in series.values()]
                if any(a is None for a in at):
                    parts.append(f"{span:g}: -")
                    continue
                node = max(a for a in at if a is not None)
                errors = []
                for r in trains:
                    got = level(series[r["gpu_index"]], node, MEASURE_S)
                    if got is None:
                        continue
                    errors.append(got / float(r["tokens_per_s"]) - 1.0)
                if not errors:
                    continue
                worst = max(errors, key=abs)
                rows[span].append((f"{Path(folder).name}/{name}", node, worst))
                parts.append(f"{span:g}: {node:.0f} s {worst:+.2%}")
            print(f"{Path(folder).name[-26:]:26} {name[:10]:10} {len(trains):4} "
                  f"{full:6.1f} s   " + "; ".join(parts))
    print(f"\n(left out: {idle} runs soaked from idle, {shorter} soaked by a shorter span "
          "already)")
    print("\nspan  runs  node settled at (median, max)  level after it vs the run's figure "
          "(median |error|, worst)")
    for span in SPANS:
        got = rows.get(span, [])
        if not got:
            continue
        settled = [r[1] for r in got]
        errors = [r[2] for r in got]
        print(f"{span:4g} s {len(got):4}  {statistics.median(settled):6.1f} s, "
              f"{max(settled):6.1f} s            {statistics.median(abs(e) for e in errors):.2%}"
              f", {max(errors, key=abs):+.2%}")


if __name__ == "__main__":
    main(sys.argv[1:] or list(DEFAULT))
