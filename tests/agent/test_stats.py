"""Statistics and steady-state decisions on constructed series with a known answer."""

from __future__ import annotations

import random
import statistics

import pytest

from agent import stats, steady


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
