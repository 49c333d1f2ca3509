"""Statistics and steady-state decisions on constructed series with a known answer."""

from __future__ import annotations

import random
import statistics

import pytest

from agent.matmul import steady
from agent.timing import stats


def test_summary_of_a_known_series() -> None:
    samples = [1.0, 2.0, 3.0, 4.0, 100.0]
    s = stats.summarise(samples)
    assert s["median_ms"] == 3.0
    assert s["min_ms"] == 1.0 and s["max_ms"] == 100.0
    assert s["mean_ms"] == pytest.approx(22.0)
    assert s["runs"] == 5
    # Too few samples for an order-statistic interval: the whole range.
    assert (s["ci95_low_ms"], s["ci95_high_ms"]) == (1.0, 100.0)


def test_trimmed_mean_drops_ten_percent_each_end() -> None:
    values = [0.0] + [10.0] * 8 + [1000.0]
    assert stats.trimmed_mean(values) == 10.0


@pytest.mark.parametrize("n", [20, 101, 999, 5000])
def test_median_interval_covers_the_true_median_95_percent_of_the_time(n: int) -> None:
    rng = random.Random(n)
    trials, hits = 400, 0
    for _ in range(trials):
        draw = [rng.gauss(10.0, 1.0) for _ in range(n)]
        low, high = stats.median_interval(draw)
        hits += low <= 10.0 <= high
    # Binomial(400, 0.95) has a standard deviation of 4.4: 0.91 is four of them below.
    assert hits / trials >= 0.91
    # ... and the interval is not trivially wide.
    assert hits / trials < 1.0 or n < 30


def test_median_interval_narrows_with_more_samples() -> None:
    rng = random.Random(1)
    small = [rng.gauss(0, 1) for _ in range(50)]
    large = [rng.gauss(0, 1) for _ in range(5000)]
    width = lambda v: stats.median_interval(v)[1] - stats.median_interval(v)[0]  # noqa: E731
    assert width(large) < width(small) / 4


def test_batch_interval_from_students_t() -> None:
    # Four batches, mean 10, standard deviation sqrt(2/3): 10 +- t(3) x sd / sqrt(4).
    half = 3.182 * (2 / 3) ** 0.5 / 2
    assert stats.batch_interval([9.0, 10.0, 10.0, 11.0]) == pytest.approx((10 - half,
                                                                          10 + half))
    # Two batches: t of one degree of freedom, 12.706; 100 (99 degrees): t(60), 2.000,
    # the wider side of the table's rows.
    assert stats.batch_interval([1.0, 3.0]) == pytest.approx((2 - 12.706, 2 + 12.706))
    many = [1.0, 3.0] * 50
    half = 2.000 * statistics.stdev(many) / 10
    assert stats.batch_interval(many) == pytest.approx((2 - half, 2 + half))
    assert [stats.t975(d) for d in (30, 31, 39, 40, 59, 60, 119, 120, 10_000)] == [
        2.042, 2.042, 2.042, 2.021, 2.021, 2.000, 2.000, 1.980, 1.980]
    with pytest.raises(ValueError, match="two batch means"):
        stats.batch_interval([1.0])


def test_batch_interval_covers_the_true_level_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    trials = 400
    hits = sum(low <= 5.0 <= high for low, high in
               (stats.batch_interval([rng.gauss(5.0, 0.2) for _ in range(7)])
                for _ in range(trials)))
    assert 0.91 <= hits / trials <= 0.99


def test_trimmed_mean_follows_a_split_between_two_levels_the_median_jumps() -> None:
    # Per-run times on two levels 3% apart, as a power-capped card's are: the median is
    # one level or the other, the trimmed mean sits between them by their shares.
    def runs(slow: int) -> list[float]:
        return [1.03] * slow + [1.0] * (1000 - slow)

    assert statistics.median(runs(490)) == 1.0 and statistics.median(runs(510)) == 1.03
    # 100 cut at each end: 390 fast and 410 slow kept, then 410 and 390.
    assert stats.trimmed_mean(runs(510)) / stats.trimmed_mean(runs(490)) == pytest.approx(
        (390 + 410 * 1.03) / (410 + 390 * 1.03), rel=1e-9)


def test_tflops_from_two_m_n_k_over_the_time() -> None:
    # 2 * 8192^3 flops in 1.5 ms.
    assert stats.tflops(8192, 8192, 8192, 1.5) == pytest.approx(733.0, abs=0.1)


def noisy(level: float, n: int, noise: float, seed: int, drift: float = 0.0) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + drift * i) * (1 + rng.gauss(0, noise)) for i in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_a_flat_noisy_series_is_steady(seed: int) -> None:
    # Window medians of a power-capped card: 0.05% noise around a constant level.
    assert steady.is_steady(noisy(1.52, 6, 0.0005, seed), tolerance=0.005)


@pytest.mark.parametrize("seed", range(20))
def test_a_drifting_series_is_not_steady(seed: int) -> None:
    # 0.3% per window: neighbours stay within 0.6%, yet the level walks away.
    series = noisy(1.52, 6, 0.0005, seed, drift=0.003)
    assert not steady.is_steady(series, tolerance=0.005)


def test_a_ramp_that_has_settled_is_steady() -> None:
    # A clock ramping down into the power cap, then flat.
    series = [1980.0, 1700.0, 1450.0, 1410.0, 1410.0, 1410.0, 1410.0, 1410.0]
    assert not steady.is_steady(series[:4], tolerance=0.02)
    assert steady.is_steady(series, tolerance=0.02)


def test_steady_needs_enough_windows_and_values() -> None:
    assert not steady.is_steady([1.0, 1.0], tolerance=0.005)
    assert not steady.is_steady([1.0, None, 1.0], tolerance=0.005)
    # No telemetry at all (CPU, or a vGPU that hides it): that series does not block.
    assert steady.is_steady([None, None, None], tolerance=0.005)


def test_relative_spread_and_trend() -> None:
    assert steady.relative_spread([99.0, 100.0, 101.0]) == pytest.approx(0.02)
    assert steady.relative_trend([1.0, 1.01, 1.02, 1.03]) == pytest.approx(0.03 / statistics.median(
        [1.0, 1.01, 1.02, 1.03]))
    assert steady.relative_trend([1.0, 1.0, 1.0]) == 0.0


# Two operating points, as the lent H100 SXM showed at its 700 W cap (bench/RESULTS.md):
# 1 s windows at about 1.5615 ms (686 TFLOP/s, 1370 MHz) or 1.5975 ms (671, 1470 MHz).
HIGH, LOW = 1.5615, 1.5975


def levels_series(pattern: str, noise: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [(HIGH if c == "H" else LOW) * (1 + rng.gauss(0, noise)) for c in pattern]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("pattern", ["HHLLLHHH", "LLHHHLLL", "HHHLLHHL", "LHHHHHLL"])
def test_a_card_jumping_between_two_levels_is_alternating(pattern: str, seed: int) -> None:
    series = levels_series(pattern, 0.0005, seed)
    assert steady.is_alternating(series, tolerance=0.005)
    assert not steady.is_steady(series, tolerance=0.005, count=4, trend_span=6)
    assert steady.classify(series, tolerance=0.005) == steady.ALTERNATING


@pytest.mark.parametrize("seed", range(20))
def test_a_warming_card_is_drifting_not_alternating(seed: int) -> None:
    # 0.4% a window, through the levels in between: still warming, not two states.
    ramp = noisy(LOW, 8, 0.0005, seed, drift=-0.004)
    assert not steady.is_alternating(ramp, tolerance=0.005)
    assert steady.classify(ramp, tolerance=0.005) == steady.DRIFTING
    # Slower, 0.15% a window: neighbours agree, but the levels chain wider than the band.
    creep = noisy(LOW, 8, 0.0003, seed, drift=-0.0015)
    assert not steady.is_alternating(creep, tolerance=0.005)
    assert steady.classify(creep, tolerance=0.005) == steady.DRIFTING


def test_one_step_is_not_alternating_until_it_settles() -> None:
    # The clock settling after a start: one step down to the other level, no way back.
    step = levels_series("LLLLHHHH", 0.0, 0)
    assert not steady.is_alternating(step, tolerance=0.005)
    assert steady.classify(step, tolerance=0.005) == steady.DRIFTING
    # Six windows on the new level and the trend is gone: settled.
    assert steady.classify(levels_series("LLLLHHHHHH", 0.0, 0), tolerance=0.005) == \
        steady.SETTLED


def test_alternating_tolerates_one_window_holding_the_switch() -> None:
    mid = (HIGH + LOW) / 2
    assert steady.is_alternating([HIGH, HIGH, mid, LOW, LOW, LOW, HIGH, HIGH], 0.005)
    # Two windows between the levels are more than a switch: not two clean levels.
    assert not steady.is_alternating([HIGH, HIGH, mid, mid * 1.006, LOW, LOW, HIGH, HIGH],
                                     0.005)
    # Three levels are not two.
    third = LOW * 1.02
    assert not steady.is_alternating([HIGH, HIGH, LOW, LOW, third, third, HIGH, LOW], 0.005)
    # A level that keeps walking (0.4% a window, 1.2% in all) is not a level.
    walk = [HIGH * (1 - 0.004 * i) for i in range(4)]
    assert not steady.is_alternating([LOW, LOW, *walk, LOW, LOW], 0.005)
    # Too few windows, or a missing one, decide nothing.
    assert not steady.is_alternating([HIGH, LOW, HIGH, LOW], 0.005)
    assert not steady.is_alternating([HIGH, HIGH, LOW, None, LOW, HIGH, HIGH, LOW], 0.005)


def test_levels_split_on_gaps_wider_than_the_tolerance() -> None:
    assert steady.levels([1.0, 1.002, 1.03, 1.001, 1.031], 0.005) == [
        [1.0, 1.001, 1.002], [1.03, 1.031]]
    assert steady.levels([], 0.005) == []
    # Small steps chain into one level, however wide it ends up.
    assert len(steady.levels([1.0 + 0.004 * i for i in range(6)], 0.005)) == 1


def test_a_measurement_stops_when_its_sub_windows_agree_or_the_run_is_capped() -> None:
    agree = [HIGH, HIGH * 1.002, HIGH * 0.999]
    disagree = [HIGH, LOW, HIGH]
    kwargs = dict(min_s=6.0, cap_s=18.5, tolerance=0.01)
    assert not steady.measurement_done(agree, elapsed_s=5.9, total_s=12.0, **kwargs)
    assert steady.measurement_done(agree, elapsed_s=6.0, total_s=12.0, **kwargs)
    # Two levels 2.3% apart: go on, as long as the cap allows.
    assert not steady.measurement_done(disagree, elapsed_s=6.0, total_s=12.0, **kwargs)
    assert not steady.measurement_done(disagree, elapsed_s=9.0, total_s=18.4, **kwargs)
    assert steady.measurement_done(disagree, elapsed_s=9.0, total_s=18.5, **kwargs)
    # The minimum holds even past the cap (a long warm-up must not leave no measurement).
    assert not steady.measurement_done(disagree, elapsed_s=1.0, total_s=25.0, **kwargs)


def test_operating_points_of_a_measurement() -> None:
    subs = [HIGH, HIGH * 1.001, LOW, LOW * 0.999, HIGH * 0.999, LOW]
    clocks = [1365.0, 1380.0, 1470.0, 1485.0, 1380.0, None]
    power = [697.0, 697.5, 692.0, 691.0, 698.0, 692.5]
    points = steady.operating_points(subs, 0.01, clocks, power)
    assert [p["share"] for p in points] == [0.5, 0.5]
    fast, slow = points  # an equal share: the faster level first
    assert fast["median_ms"] == pytest.approx(HIGH)
    assert slow["median_ms"] == pytest.approx(LOW)
    assert (fast["sm_clock_mhz"], slow["sm_clock_mhz"]) == (1380.0, 1477.5)
    assert (fast["power_w"], slow["power_w"]) == (697.5, 692.0)
    one = steady.operating_points([HIGH, HIGH * 1.004, HIGH * 0.997], 0.01)
    assert len(one) == 1 and one[0]["share"] == 1.0 and one[0]["sm_clock_mhz"] is None
    majority = steady.operating_points([LOW, HIGH, LOW, LOW], 0.01)
    assert majority[0]["median_ms"] == LOW and majority[0]["share"] == 0.75
    assert steady.operating_points([], 0.01) == []
