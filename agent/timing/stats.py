"""Statistics of per-run kernel times, standard library only.

Since harness 1.2 the headline is the 10%-trimmed mean. On an H100 at its power cap the
per-run times are not one peak with outliers: the power controller moves the card between
clock bins every half second or so, and the times fall on two or three levels 1-3% apart,
in streaks (bench/records/2026-11-23-harness-1.2.0.md). The median then picks whichever level held
just over half the runs and jumps by the whole gap when the split crosses one half; the
trimmed mean moves smoothly with the split, close to the plain mean (the work done per
second) though leaning a little toward the majority's level, by a quarter of the gap
times the majority's excess share over one half, and still drops a throttle blip or a
preemption, which is what the median was there for. Median, mean, min, max, CV and a
distribution-free 95% interval of the median sit beside it, and `batch_interval` gives
the headline an interval that respects the streaks.
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, Sequence, Tuple


def trimmed_mean(values: Sequence[float], trim: float = 0.1) -> float:
    """Mean after dropping `trim` of the samples at each end (the seed's 10%)."""
    ordered = sorted(values)
    cut = int(len(ordered) * trim)
    kept = ordered[cut:len(ordered) - cut] or ordered
    return math.fsum(kept) / len(kept)


def median_interval(values: Sequence[float], confidence: float = 0.95) -> Tuple[float, float]:
    """A distribution-free interval of the median from order statistics.

    The count of samples below the true median is Binomial(n, 1/2), so the j-th and k-th
    order statistics bracket it with the binomial probability of j <= count < k. Exact
    for small n, normal approximation above 1000 samples where it is accurate.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n < 6:
        return ordered[0], ordered[-1]
    alpha = 1.0 - confidence
    if n > 1000:
        z = statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
        half = z * math.sqrt(n) / 2.0
        low = max(0, math.floor(n / 2.0 - half) - 1)
        high = min(n - 1, math.ceil(n / 2.0 + half))
        return ordered[low], ordered[high]
    # The j-th smallest sample (0-based) lies above the median when at most j samples
    # fall below it: P(count <= j). Take the largest j with that at most alpha/2.
    term, cdf, low_rank = 0.5 ** n, 0.0, 0
    for j in range(n // 2):
        cdf += term
        if cdf > alpha / 2.0:
            break
        low_rank = j
        term = term * (n - j) / (j + 1)
    high_rank = n - 1 - low_rank
    return ordered[low_rank], ordered[high_rank]


# Student's t, 97.5% quantile, for 1-30 degrees of freedom, then at 40, 60 and 120, where
# the normal's 1.96 is near; between rows, the lower row's (the wider interval).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_T975_BEYOND = ((40, 2.021), (60, 2.000), (120, 1.980))


# The normal's 97.5% quantile, the t's limit: for a width whose sigma is not a count of
# runs (agent/timing/repeat.py's run wander), not t's last row above (1.980 at 120 dof).
Z975 = 1.959964


def t975(dof: int) -> float:
    if dof <= len(_T975):
        return _T975[dof - 1]
    t = _T975[-1]
    for at, value in _T975_BEYOND:
        if dof >= at:
            t = value
    return t


def batch_interval(batch_means: Sequence[float]) -> Tuple[float, float]:
    """A 95% interval of the mean level from the means of consecutive batches of runs.

    Runs on a power-capped card come in streaks, so thousands of them are not thousands
    of independent draws and an interval from their count alone is far too narrow. The
    means of ~1 s batches are close to independent (the method of batch means): Student's
    t over them. Fewer than two batches give no interval: (mean, mean) would claim one.
    """
    n = len(batch_means)
    if n < 2:
        raise ValueError("an interval needs at least two batch means")
    mean = math.fsum(batch_means) / n
    half = t975(n - 1) * statistics.stdev(batch_means) / math.sqrt(n)
    return mean - half, mean + half


def relative_standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean over the mean: how finely these samples fix a level."""
    if len(values) < 2:
        return float("inf")
    mean = math.fsum(values) / len(values)
    return statistics.stdev(values) / math.sqrt(len(values)) / mean if mean > 0 else 0.0


def summarise(samples_ms: Sequence[float]) -> Dict[str, float]:
    """The runs' count, median, means, extremes, spread and the median's 95% interval, in ms."""
    if not samples_ms:
        raise ValueError("no samples to summarise")
    mean = math.fsum(samples_ms) / len(samples_ms)
    stdev = statistics.stdev(samples_ms) if len(samples_ms) > 1 else 0.0
    low, high = median_interval(samples_ms)
    return {
        "runs": len(samples_ms),
        "median_ms": statistics.median(samples_ms),
        "trimmed_mean_ms": trimmed_mean(samples_ms),
        "mean_ms": mean,
        "min_ms": min(samples_ms),
        "max_ms": max(samples_ms),
        "stdev_ms": stdev,
        "cv": stdev / mean if mean > 0 else 0.0,
        "ci95_low_ms": low,
        "ci95_high_ms": high,
    }


def tflops(m: int, n: int, k: int, time_ms: float) -> float:
    """2·M·N·K floating-point operations over the time (the accumulator write is ignored,
    1/K of the total)."""
    return 2.0 * m * n * k / (time_ms * 1e-3) / 1e12
