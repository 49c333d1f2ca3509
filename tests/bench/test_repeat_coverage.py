"""bench/repeat_coverage.py on the real records: each repeat is checked against the
interval of the run before it, with a variant spread that never comes from its own
record."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from agent.timing import repeat
from tests.bench import scripts

ROOT = Path(__file__).resolve().parents[2]
H100, H200 = "H100-SXM5-80GB", "H200-SXM-141GB"
H100_SOAK = "2026-11-25-h100-soak-1752624020993"
H100_OTHERS = ("2026-11-26-h100-repeat-1752824029521",
               "2026-11-26-h100-probe-bench-1753124019022")
PROBE_BENCH = H100_OTHERS[1]
H100_QUICK = "2026-11-24-h100-card21-1753024032041"


coverage = scripts.load("repeat_coverage")


def test_a_record_is_never_checked_with_its_own_spread() -> None:
    groups = coverage.by_card(coverage.load_runs(coverage.RECORDS))
    spreads, way = coverage.spreads_for(groups, repeat.SPREADS, H100_SOAK)
    # Left out, the H100's soaked record leaves the catalog's two other H100 records:
    # their work-over-time figures' sd about each card's mean, pooled by hand.
    squares, dof = 0.0, 0
    for (record, _), runs in groups.items():
        if record in H100_OTHERS:
            values = [coverage.work_over_time(r) for r in runs]
            mean = statistics.fmean(values)
            squares += sum((v / mean - 1) ** 2 for v in values)
            dof += len(values) - 1
    assert (way, dof) == (coverage.LEFT_OUT, 5)
    found = spreads[H100]
    assert (found.sd, found.dof) == (pytest.approx(math.sqrt(squares / dof)), 5)
    assert found.records == tuple(sorted(H100_OTHERS))
    assert found.source.endswith(f"but {H100_SOAK}")
    assert spreads[H200] == repeat.SPREADS[H200]  # pools nothing of it: as committed
    # A record the catalog does not pool is checked with the catalog as committed.
    assert coverage.spreads_for(groups, repeat.SPREADS, H100_QUICK) == (
        repeat.SPREADS, coverage.CATALOG)


def test_every_repeat_is_checked_against_its_predecessor_and_the_catalog_is_restored(
        ) -> None:
    before = dict(repeat.SPREADS)
    groups = coverage.by_card(coverage.load_runs(coverage.RECORDS))
    checks = coverage.check(groups)
    assert before == repeat.SPREADS
    # One check a run after each card's first.
    assert len(checks) == sum(len(runs) - 1 for runs in groups.values())
    for c in checks:
        assert c.low < c.previous < c.high
    # The probe on the third H100 (662.1 TFLOP/s at 77 degC) was followed by `fleet
    # bench` at 675.3 (66 degC): 2.0% higher, outside the interval the other two H100
    # records' spread gives it. The check must see that miss, not hide it.
    [miss] = [c for c in checks if c.record == PROBE_BENCH]
    assert not miss.inside and miss.way == coverage.LEFT_OUT
    assert miss.figure == 675.3 and miss.movement == pytest.approx(675.3 / 662.1308 - 1, abs=1e-6)


def test_the_summary_counts_widths_and_the_rms_movement() -> None:
    checks = [coverage.Check("r", "c", H100, 1, 100.0, 101.0, 98.0, 102.0, "variant",
                             coverage.CATALOG),
              coverage.Check("r", "c", H100, 2, 101.0, 98.98, 99.99, 102.01, "variant",
                             coverage.CATALOG)]
    found = coverage.summarise(checks)
    # Movements +1% and -2%: RMS sqrt((1 + 4) / 2) = 1.5811%; half-widths 2% and 1%.
    assert (found["repeats"], found["inside"], found["coverage"]) == (2, 1, 0.5)
    assert found["rms_movement"] == pytest.approx(math.sqrt(2.5) / 100)
    assert found["half_width_median"] == pytest.approx(0.015)
    assert found["half_width_range"] == pytest.approx([0.01, 0.02])
    assert found["largest_movement"] == pytest.approx(0.02)
    assert found["half_width_over_rms"] == pytest.approx(0.015 / (math.sqrt(2.5) / 100))
