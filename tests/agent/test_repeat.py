"""agent/repeat.py: the interval a repeat run falls inside, from hand-computed figures."""

from __future__ import annotations

import math

import pytest

from agent import repeat


def test_a_measured_variant_gives_t_times_root_two_times_its_spread() -> None:
    # H100 SXM5: sd 0.495% over 4 dof; t(0.975, 4) = 2.776; 2.776 x 1.41421 x 0.495% = 1.943%.
    found = repeat.interval(680.0, "H100-SXM5-80GB", 0.001)
    assert found.basis == "variant" and found.dof == 4
    assert found.low == pytest.approx(680.0 * (1 - 0.019433), abs=0.01)
    assert found.high == pytest.approx(680.0 * (1 + 0.019433), abs=0.01)


def test_an_unmeasured_variant_takes_the_widest_spread_and_says_so() -> None:
    spread, measured = repeat.variant_spread("A100-SXM4-80GB")
    assert not measured and spread.source == repeat.UNMEASURED
    assert spread.sd == max(s.sd for s in repeat.SPREADS.values())


def test_the_gpus_history_pools_with_the_variant_as_four_dof() -> None:
    # History 100, 102, 98: sd 2 about 100, i.e. 2%. Pooled with 0.495% as 4 dof:
    # sqrt((4 x 0.495%^2 + 2 x 2%^2) / 6) = 1.2045%, over 6 dof (t = 2.447).
    sd, dof = repeat.pooled_sd(repeat.SPREADS["H100-SXM5-80GB"], [100.0, 102.0, 98.0])
    assert dof == 6 and sd == pytest.approx(math.sqrt((4 * 0.00495**2 + 2 * 0.02**2) / 6))
    found = repeat.interval(100.0, "H100-SXM5-80GB", 0.0, [100.0, 102.0, 98.0])
    assert found.basis == "history"
    assert found.high - found.low == pytest.approx(2 * 100 * 2.447 * math.sqrt(2) * sd)
    # One earlier figure says nothing of a spread: the variant's alone.
    assert repeat.pooled_sd(repeat.SPREADS["H100-SXM5-80GB"], [100.0]) == (0.00495, 4)


def test_a_run_that_switched_operating_points_states_its_own_wider_interval() -> None:
    # Points at 690 and 674 that each held 4 of 10 sub-windows: half the distance over
    # the figure, 8 / 680 = 1.18%, wider than the variant's 0.495%.
    points = [{"tflops": 690.0, "share": 0.4}, {"tflops": 674.0, "share": 0.4},
              {"tflops": 600.0, "share": 0.1}]  # one sub-window: the switch, not a point
    shown = repeat.wander([], None, points, 10, 680.0)
    assert shown == pytest.approx(8.0 / 680.0)
    found = repeat.interval(680.0, "H100-SXM5-80GB", shown)
    assert found.basis == "run" and found.sd == shown
    assert found.high - 680.0 == pytest.approx(680.0 * 1.98 * math.sqrt(2) * shown)


def test_the_soaked_windows_count_from_the_moment_the_card_soaked() -> None:
    # Windows before 10 s (the soak) fall from 700; from 10 s on: 680, 682, 678 (sd 2).
    curve = [[2.0, 700.0], [4.0, 695.0], [10.0, 680.0], [12.0, 682.0], [14.0, 678.0]]
    assert repeat.wander(curve, 10.0, [], 0, 680.0) == pytest.approx(2.0 / 680.0)
    assert repeat.wander(curve, None, [], 0, 680.0) == 0.0  # never soaked: no soaked part
