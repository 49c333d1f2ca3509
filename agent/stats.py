"""Statistics of per-run kernel times, standard library only.

The median is the headline (robust to one throttle blip or preemption); trimmed mean,
mean, min, max, CV and a distribution-free 95% interval of the median sit beside it so a
reader can see how much the number could move.
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


def relative_standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean over the mean: how finely these samples fix a level."""
    if len(values) < 2:
        return float("inf")
    mean = math.fsum(values) / len(values)
    return statistics.stdev(values) / math.sqrt(len(values)) / mean if mean > 0 else 0.0


def summarise(samples_ms: Sequence[float]) -> Dict[str, float]:
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
