"""Does the next run of a card land inside the interval the run before it stated?

Issue 31's check of agent/repeat.py: over every repeated soaked run in bench/records/
(bench/repeat_records.py finds them), each run after a card's first is checked against
the interval its predecessor states, built as ingest builds it: the predecessor's figure
(the work over the time, harness 1.4's headline, recomputed from its samples), its own
wander (soaked curve, operating points), the variant's spread and, as history, the
card's runs before the predecessor.

The variant's spread must not be measured on the runs it is checked on. Two ways:

- "records": each record is checked with a spread pooled from every *other* record of
  its variant (any protocol; where none is left, the widest other variant's), so no
  record predicts itself;
- "catalog": records made after agent/repeat.py's SPREADS were fixed (the
  2026-11-26-*-repeat-* ones, bench/device_repeat.sh) are checked with SPREADS as
  committed.

Also printed: whether the 10%-trimmed mean (the headline of 1.2-1.3) read above the
work over the time on each run.

    python bench/repeat_coverage.py [--out coverage.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from repeat_records import (
    RECORDS,
    RecordedRun,
    by_card,
    load_runs,
    trimmed,
    work_over_time,
)

from agent import repeat

# Records made after SPREADS were fixed: checked against the catalog as committed.
CATALOG_CHECKED = "-repeat-"


@dataclass(frozen=True)
class Check:
    """One repeat against the interval the run before it stated."""

    record: str
    card: str
    variant: str
    order: int
    previous: float
    figure: float
    low: float
    high: float
    basis: str
    way: str  # "records" (leave-one-record-out spread) or "catalog"

    @property
    def inside(self) -> bool:
        return self.low <= self.figure <= self.high

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2 / self.previous


def _wander(run: RecordedRun, figure: float) -> float:
    result = run.result
    soak = result.get("soak") or {}
    measurement = result.get("measurement") or {}
    return repeat.wander(soak.get("curve") or [], soak.get("settled_s"),
                         measurement.get("operating_points") or [],
                         int(measurement.get("sub_windows") or 0), figure)


def left_out_spreads(groups: dict[tuple[str, str], list[RecordedRun]], record: str
                     ) -> dict[str, repeat.Spread]:
    """Per variant, the within-card sd pooled over every record but `record`."""
    sums: dict[str, list[float]] = {}
    for (name, _), runs in groups.items():
        if name == record or name.find(CATALOG_CHECKED) >= 0:
            continue
        values = [work_over_time(run) for run in runs]
        mean = statistics.fmean(values)
        acc = sums.setdefault(runs[0].variant, [0.0, 0.0])
        acc[0] += math.fsum((v / mean - 1.0) ** 2 for v in values)
        acc[1] += len(values) - 1
    return {variant: repeat.Spread(math.sqrt(ss / dof), int(dof), f"records but {record}")
            for variant, (ss, dof) in sums.items() if dof > 0}


def check(groups: dict[tuple[str, str], list[RecordedRun]]) -> list[Check]:
    """Every run after a card's first, against its predecessor's interval."""
    checks: list[Check] = []
    saved = dict(repeat.SPREADS)
    try:
        for (record, card), runs in sorted(groups.items()):
            way = "catalog" if CATALOG_CHECKED in record else "records"
            repeat.SPREADS.clear()
            repeat.SPREADS.update(saved if way == "catalog" else
                                  left_out_spreads(groups, record))
            figures = [work_over_time(run) for run in runs]
            for i in range(1, len(runs)):
                before = runs[i - 1]
                stated = repeat.interval(figures[i - 1], before.variant,
                                         _wander(before, figures[i - 1]), figures[:i - 1])
                checks.append(Check(record, card, before.variant, i, figures[i - 1],
                                    figures[i], stated.low, stated.high, stated.basis, way))
    finally:
        repeat.SPREADS.clear()
        repeat.SPREADS.update(saved)
    return checks


def _summary(checks: list[Check]) -> dict[str, object]:
    widths = [c.half_width for c in checks]
    return {"repeats": len(checks), "inside": sum(c.inside for c in checks),
            "coverage": sum(c.inside for c in checks) / len(checks) if checks else None,
            "half_width_median": statistics.median(widths) if widths else None,
            "half_width_range": [min(widths), max(widths)] if widths else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=RECORDS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = load_runs(args.root)
    groups = by_card(runs)
    checks = check(groups)
    print(f"{'record / card':44} {'run':>3} {'previous':>8} {'repeat':>7} {'interval':>13} "
          f"in")
    for c in checks:
        name = f"{c.record[:30]} {c.card[-12:]}"
        print(f"{name:44} {c.order:>3} {c.previous:8.1f} {c.figure:7.1f} "
              f"{c.low:6.1f}-{c.high:6.1f} {'yes' if c.inside else 'NO'}")
    print()
    summary: dict[str, object] = {}
    for way in ("records", "catalog"):
        for variant in sorted({c.variant for c in checks}):
            chosen = [c for c in checks if c.way == way and c.variant == variant]
            if not chosen:
                continue
            found = _summary(chosen)
            summary[f"{way} {variant}"] = found
            widths: list[float] = found["half_width_range"]  # type: ignore[assignment]
            low, high = widths
            print(f"{way:8} {variant:15} {found['inside']}/{found['repeats']} inside "
                  f"({100 * found['coverage']:.0f}%), half-width median "  # type: ignore[operator]
                  f"{100 * found['half_width_median']:.2f}% "  # type: ignore[operator]
                  f"({100 * low:.2f}-{100 * high:.2f}%)")
        every = [c for c in checks if c.way == way]
        if every:
            summary[way] = _summary(every)
    above = [(r.record, r.card, r.order, trimmed(r) / work_over_time(r) - 1.0) for r in runs]
    print(f"\ntrimmed mean above the work over the time: "
          f"{sum(1 for *_, d in above if d > 0)} of {len(above)} runs, by "
          f"{100 * min(d for *_, d in above):+.2f}% to {100 * max(d for *_, d in above):+.2f}%")
    if args.out is not None:
        args.out.write_text(json.dumps({
            "summary": summary,
            "checks": [dict(c.__dict__, inside=c.inside) for c in checks],
            "trimmed_above_work": [list(a) for a in above]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
