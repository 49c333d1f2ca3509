"""When has a GPU stopped drifting? Decided on window medians, not a fixed warm-up count.

A card that hits its power cap keeps moving for seconds: the clock falls as power rises,
then creeps with temperature (on the lent H100 the SM clock went from 1980 to 1425 MHz in
4 s and wandered between 1310 and 1425 MHz for the next 25). A series is steady when its
last windows agree within a tolerance AND show no trend: a slow monotonic drift can keep
each neighbour close while the level still walks away.
"""

from __future__ import annotations

import statistics
from typing import Optional, Sequence


def relative_spread(values: Sequence[float]) -> float:
    centre = statistics.median(values)
    if centre == 0:
        return 0.0 if max(values) == min(values) else float("inf")
    return (max(values) - min(values)) / abs(centre)


def relative_trend(values: Sequence[float]) -> float:
    """Least-squares change over the whole span, relative to the median level."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x = (n - 1) / 2.0
    mean_y = sum(values) / n
    sxx = sum((i - mean_x) ** 2 for i in range(n))
    sxy = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    centre = statistics.median(values)
    if centre == 0:
        return 0.0
    return abs(sxy / sxx * (n - 1) / centre)


def is_steady(
    windows: Sequence[Optional[float]],
    tolerance: float,
    count: int = 3,
    trend_span: int = 5,
) -> bool:
    """True when the last `count` windows lie within `tolerance` of each other and the
    last `trend_span` windows (where there are that many) drift less than `tolerance`.

    A window with no value (no telemetry) counts as steady for that series only when the
    whole series has none.
    """
    if len(windows) < count:
        return False
    tail = windows[-count:]
    if all(v is None for v in tail):
        return all(v is None for v in windows)
    if any(v is None for v in tail):
        return False
    values = [float(v) for v in tail if v is not None]
    if relative_spread(values) > tolerance:
        return False
    span = [float(v) for v in windows[-trend_span:] if v is not None]
    return relative_trend(span) <= tolerance
