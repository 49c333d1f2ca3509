"""agent/timing/repeat.py: the interval a repeat run falls inside, from hand-computed figures."""

from __future__ import annotations

import math

import pytest

from agent.timing import repeat, stats

H100, H200 = "H100-SXM5-80GB", "H200-SXM-141GB"


def test_a_measured_variant_gives_t_times_root_two_times_its_spread() -> None:
    # H100 SXM5: sd 0.571% over 9 dof; t(0.975, 9) = 2.262; 2.262 x 1.41421 x 0.571% = 1.8266%.
    found = repeat.interval(680.0, H100, 0.001)
    assert found.basis == "variant" and found.dof == 9
    assert found.low == pytest.approx(680.0 * (1 - 0.018266), abs=0.01)
    assert found.high == pytest.approx(680.0 * (1 + 0.018266), abs=0.01)
    # H200 SXM: 0.188% over 12 dof, t 2.179: 0.5793%.
    found = repeat.interval(680.0, H200, 0.0)
    assert found.dof == 12
    assert found.high - 680.0 == pytest.approx(680.0 * 0.005793, abs=0.01)


def test_an_unmeasured_variant_takes_the_widest_spread_and_says_so() -> None:
    spread, measured = repeat.variant_spread("A100-SXM4-80GB")
    assert not measured and spread.source == repeat.UNMEASURED
    assert spread.sd == max(s.sd for s in repeat.SPREADS.values())


def test_the_gpus_history_pools_with_the_variant_as_its_own_dof() -> None:
    # History 100, 102, 98: sd 2 about 100, i.e. 2%. Pooled with 0.571% as its 9 dof:
    # sqrt((9 x 0.571%^2 + 2 x 2%^2) / 11) = 1.0195%, over 11 dof (t = 2.201).
    sd, dof = repeat.pooled_sd(repeat.SPREADS[H100], [100.0, 102.0, 98.0])
    assert dof == 11 and sd == pytest.approx(math.sqrt((9 * 0.00571**2 + 2 * 0.02**2) / 11))
    found = repeat.interval(100.0, H100, 0.0, [100.0, 102.0, 98.0])
    assert found.basis == "history" and found.dof == 11
    assert found.high - found.low == pytest.approx(2 * 100 * 2.201 * math.sqrt(2) * sd)
    # One earlier figure says nothing of a spread: the variant's alone.
    assert repeat.pooled_sd(repeat.SPREADS[H100], [100.0]) == (0.00571, 9)


@pytest.mark.parametrize("variant", [H100, H200, "a spread over 30 dof"])
@pytest.mark.parametrize("nights", [2, 3, 5, 30])
def test_history_never_leaves_fewer_dof_than_the_variant_alone(variant: str, nights: int
                                                                ) -> None:
    # Before issue 38 the variant counted for at most 4 dof once a GPU had two nights:
    # the H200's 8 (now 12) fell to 5, and a history as steady as its variant widened
    # the interval it was meant to sharpen.
    spread = repeat.SPREADS.get(variant, repeat.Spread(0.003, 30, variant))
    history = [100.0 + (1.0 if i % 2 else -1.0) for i in range(nights)]
    _, dof = repeat.pooled_sd(spread, history)
    assert dof == spread.dof + nights - 1 >= spread.dof


def test_a_history_as_steady_as_its_variant_narrows_the_interval() -> None:
    # Two nights 100 +- x with x chosen so their own sd is the variant's: the pooled sd is
    # the variant's, and the dof rise from 12 to 13 (t 2.179 -> 2.160); the old cap gave
    # 5 (t 2.571) and a wider interval than no history at all.
    spread = repeat.SPREADS[H200]
    x = spread.sd * 100.0 / math.sqrt(2)
    alone = repeat.interval(100.0, H200, 0.0)
    found = repeat.interval(100.0, H200, 0.0, [100.0 - x, 100.0 + x])
    assert (alone.dof, found.dof) == (12, 13)
    assert found.sd == pytest.approx(spread.sd)
    assert found.high - 100.0 == pytest.approx(100.0 * 2.160 * math.sqrt(2) * spread.sd)
    assert found.high < alone.high


def test_a_run_that_switched_operating_points_states_its_own_wider_interval() -> None:
    # Points at 690 and 674 that each held 4 of 10 sub-windows: half the distance over
    # the figure, 8 / 680 = 1.18%, wider than the variant's 0.495%.
    points = [{"tflops": 690.0, "share": 0.4}, {"tflops": 674.0, "share": 0.4},
              {"tflops": 600.0, "share": 0.1}]  # one sub-window: the switch, not a point
    shown = repeat.wander([], None, points, 10, 680.0)
    assert shown == pytest.approx(8.0 / 680.0)
    found = repeat.interval(680.0, H100, shown)
    assert found.basis == "run" and found.sd == shown and found.dof is None
    assert found.high - 680.0 == pytest.approx(680.0 * 1.959964 * math.sqrt(2) * shown)


@pytest.mark.parametrize("figure, wander", [(680.0, 0.01), (672.3, 0.0213), (1.0, 0.5)])
def test_the_runs_own_wander_takes_the_normal_quantile(figure: float, wander: float) -> None:
    # Not t's last row (1.980 at 120 dof, which stood in before issue 38): 1.959964.
    assert stats.Z975 == 1.959964
    found = repeat.interval(figure, H200, wander, [figure, figure * 1.001])
    assert found.basis == "run"
    half = figure * 1.959964 * math.sqrt(2) * wander
    assert found.high - figure == pytest.approx(half, abs=1e-9)
    assert figure - found.low == pytest.approx(half, abs=1e-9)


def test_the_soaked_windows_count_from_the_moment_the_card_soaked() -> None:
    # Windows before 10 s (the soak) fall from 700; from 10 s on: 680, 682, 678 (sd 2).
    curve = [[2.0, 700.0], [4.0, 695.0], [10.0, 680.0], [12.0, 682.0], [14.0, 678.0]]
    assert repeat.wander(curve, 10.0, [], 0, 680.0) == pytest.approx(2.0 / 680.0)
    assert repeat.wander(curve, None, [], 0, 680.0) == 0.0  # never soaked: no soaked part
