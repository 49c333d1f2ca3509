"""Does the next run of a card land inside the interval the run before it stated?

Issue 31's check of agent/timing/repeat.py: over every repeated soaked run in bench/records/
(bench/repeat_records.py finds them), each run after a card's first is checked against
the interval its predecessor states, built as ingest builds it: the predecessor's figure
(the work over the time, harness 1.4's headline, recomputed from its samples), its own
wander (soaked curve, operating points), the variant's spread and, as history, the
card's runs before the predecessor.

The variant's spread must not be measured on the runs it is checked on. Two ways:

- "left out": a record that agent/timing/repeat.py's SPREADS pools is checked with its
  variant's spread pooled again from the catalog's *other* records (bench/
  repeat_records.py's `catalog_spreads`; where none is left, the widest other variant's),
  so no record predicts itself;
- "catalog": a record the catalog does not pool (the repeats of harness 1.2.0 after a
  bench's soak) is checked with SPREADS as committed.

Per variant and overall: how many repeats fell inside, the median half-width, and the
RMS of the relative movement between consecutive runs, the scale the half-width answers:
were the runs normal with sd s, the movement's RMS would be sqrt(2) s, and a 95%
half-width about 2 x that RMS (t(0.975) of the spread's dof x it).

Also printed: whether the 10%-trimmed mean (the headline of 1.2-1.3) read above the
work over the time on each run that keeps its samples.

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from repeat_records import (
    RECORDS,
    RecordedRun,
    by_card,
    catalog_spreads,
    load_runs,
    trimmed,
    work_over_time,
)

from agent.timing import repeat

LEFT_OUT = "left out"  # a record the catalog pools: its variant's spread pooled without it
CATALOG = "catalog"  # a record the catalog does not pool: SPREADS as committed


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
    way: str  # LEFT_OUT or CATALOG

    @property
    def inside(self) -> bool:
        return self.low <= self.figure <= self.high

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2 / self.previous

    @property
    def movement(self) -> float:
        """The repeat's figure relative to the run before it, minus one."""
        return self.figure / self.previous - 1.0


def _wander(run: RecordedRun, figure: float) -> float:
    result = run.result
    soak = result.get("soak") or {}
    measurement = result.get("measurement") or {}
    return repeat.wander(soak.get("curve") or [], soak.get("settled_s"),
                         measurement.get("operating_points") or [],
                         int(measurement.get("sub_windows") or 0), figure)


def spreads_for(groups: dict[tuple[str, str], list[RecordedRun]],
                catalog: dict[str, repeat.Spread], record: str
                ) -> tuple[dict[str, repeat.Spread], str]:
    """The spreads `record` is checked with, and the way: the catalog, with each variant
    whose spread pools `record` pooled again from its other records (dropped where it has
    none, so the widest other variant's stands in)."""
    pooling = {variant: spread for variant, spread in catalog.items()
               if record in spread.records}
    if not pooling:
        return dict(catalog), CATALOG
    kept = {variant: spread for variant, spread in catalog.items() if variant not in pooling}
    return {**kept, **catalog_spreads(groups, pooling, leave_out=record)}, LEFT_OUT


def check(groups: dict[tuple[str, str], list[RecordedRun]]) -> list[Check]:
    """Every run after a card's first, against its predecessor's interval."""
    checks: list[Check] = []
    saved = dict(repeat.SPREADS)
    try:
        for (record, card), runs in sorted(groups.items()):
            spreads, way = spreads_for(groups, saved, record)
            repeat.SPREADS.clear()
            repeat.SPREADS.update(spreads)
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


def summarise(checks: list[Check]) -> dict[str, Any]:
    """Coverage, half-widths and the RMS movement of a set of checks (at least one)."""
    widths = [c.half_width for c in checks]
    rms = math.sqrt(math.fsum(c.movement ** 2 for c in checks) / len(checks))
    median = statistics.median(widths)
    return {"repeats": len(checks), "inside": sum(c.inside for c in checks),
            "coverage": sum(c.inside for c in checks) / len(checks),
            "half_width_median": median, "half_width_range": [min(widths), max(widths)],
            "rms_movement": rms, "largest_movement": max(abs(c.movement) for c in checks),
            "half_width_over_rms": median / rms if rms > 0 else None}


def _line(label: str, found: dict[str, Any]) -> str:
    low, high = found["half_width_range"]
    ratio = found["half_width_over_rms"]
    return (f"{label:26} {found['inside']:>2}/{found['repeats']:<2} inside "
            f"({100 * found['coverage']:3.0f}%), half-width median "
            f"{100 * found['half_width_median']:.2f}% ({100 * low:.2f}-{100 * high:.2f}%), "
            f"RMS movement {100 * found['rms_movement']:.2f}% "
            f"(largest {100 * found['largest_movement']:.2f}%), median / RMS "
            + ("-" if ratio is None else f"{ratio:.1f}"))


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
    summary: dict[str, Any] = {}
    variants = sorted({c.variant for c in checks})
    for way in (LEFT_OUT, CATALOG, None):
        for variant in [*variants, None]:
            chosen = [c for c in checks if way in (None, c.way) and variant in (None, c.variant)]
            if not chosen:
                continue
            label = " ".join(part for part in (way or "all", variant) if part)
            summary[label] = summarise(chosen)
            print(_line(label, summary[label]))
    above = [(r.record, r.card, r.order, t / work_over_time(r) - 1.0)
             for r in runs if (t := trimmed(r)) is not None]
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
