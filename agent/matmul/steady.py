"""When has a GPU stopped drifting? Decided on window medians, not a fixed warm-up count.

A card that hits its power cap keeps moving for seconds: the clock falls as power rises,
then creeps with temperature (on the lent H100 the SM clock went from 1980 to 1425 MHz in
4 s and wandered between 1310 and 1425 MHz for the next 25). A series is steady when its
last windows agree within a tolerance AND show no trend: a slow monotonic drift can keep
each neighbour close while the level still walks away.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Sequence


def relative_spread(values: Sequence[float]) -> float:
    """The range of `values` over their median: 0 when all agree."""
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


# A power-capped card need not settle on one level. The lent H100 SXM at its 700 W cap has
# two sustained operating points (bench/RESULTS.md, "Harness"): about 1365-1380 MHz and
# 697 W doing 682-688 TFLOP/s, and about 1455-1485 MHz and 692 W doing 662-672, and it
# dwells in each for seconds to a minute. A still-warming card drifts through intermediate
# levels; an alternating one jumps between two tight levels. The harness tells them apart
# (`classify`) and, once measuring, keeps going while its sub-windows disagree
# (`measurement_done`), so that a switch is seen and described rather than averaged away.

SETTLED = "settled"
ALTERNATING = "alternating"
DRIFTING = "drifting"


def levels(values: Sequence[float], tolerance: float) -> List[List[float]]:
    """Group values into levels: sorted, split wherever neighbours differ by more than
    `tolerance` of the median. Each level is returned sorted, lowest level first."""
    if not values:
        return []
    ordered = sorted(values)
    centre = abs(statistics.median(ordered)) or 1.0
    groups: List[List[float]] = [[ordered[0]]]
    for value in ordered[1:]:
        if (value - groups[-1][-1]) / centre > tolerance:
            groups.append([value])
        else:
            groups[-1].append(value)
    return groups


def is_alternating(
    windows: Sequence[Optional[float]],
    tolerance: float,
    span: int = 8,
    min_each: int = 2,
    max_stray: int = 1,
) -> bool:
    """True when the last `span` windows sit on exactly two levels, each holding at least
    `min_each` windows and spanning no more than `tolerance`, with at most `max_stray`
    windows elsewhere (a window that holds a switch averages the two levels).

    A drift through intermediate levels is not alternating: its windows either chain into
    one level wider than `tolerance` or scatter into many levels of one window each.
    """
    if len(windows) < span:
        return False
    tail = windows[-span:]
    if any(v is None for v in tail):
        return False
    values = [float(v) for v in tail if v is not None]
    groups = levels(values, tolerance)
    big = [g for g in groups if len(g) >= min_each]
    if len(big) != 2 or len(values) - sum(len(g) for g in big) > max_stray:
        return False
    if any(relative_spread(g) > tolerance for g in big):
        return False
    # Two levels in time order, not one step: the series must hold each level in more
    # than one place or go back and forth at least once (L..H..L or H..L..H).
    low_top, high_bottom = big[0][-1], big[1][0]
    labels = [0 if v <= low_top else 1 for v in values if v <= low_top or v >= high_bottom]
    changes = sum(1 for i in range(1, len(labels)) if labels[i] != labels[i - 1])
    return changes >= 2


def classify(
    windows: Sequence[Optional[float]],
    tolerance: float,
    count: int = 4,
    trend_span: int = 6,
    alternating_span: int = 8,
) -> str:
    """SETTLED (one level: `is_steady`), ALTERNATING (two tight levels, back and forth) or
    DRIFTING (anything else: still warming, or noisier than `tolerance`)."""
    if is_steady(windows, tolerance, count, trend_span):
        return SETTLED
    if is_alternating(windows, tolerance, alternating_span):
        return ALTERNATING
    return DRIFTING


def measurement_done(
    sub_windows: Sequence[float],
    elapsed_s: float,
    min_s: float,
    total_s: float,
    cap_s: float,
    tolerance: float,
) -> bool:
    """Whether a measurement may stop: never before `min_s` of measuring; then as soon as
    its sub-window means agree within `tolerance` (one operating point throughout), or
    when the whole run (`total_s`, warm-up included) has reached `cap_s`."""
    if elapsed_s < min_s:
        return False
    if total_s >= cap_s:
        return True
    return len(sub_windows) >= 2 and relative_spread(sub_windows) <= tolerance


def operating_points(
    sub_windows: Sequence[float],
    tolerance: float,
    clocks: Optional[Sequence[Optional[float]]] = None,
    power: Optional[Sequence[Optional[float]]] = None,
) -> List[Dict[str, Optional[float]]]:
    """The levels the measurement's sub-windows (mean run times, ms) fell on: each level's
    median run time, its share of the sub-windows and, where given, the median SM clock
    and power of its sub-windows. The level holding the most sub-windows first."""
    if not sub_windows:
        return []
    groups = levels(sub_windows, tolerance)
    points: List[Dict[str, Optional[float]]] = []
    for group in groups:
        members = [i for i, v in enumerate(sub_windows) if group[0] <= v <= group[-1]]
        point: Dict[str, Optional[float]] = {
            "median_ms": statistics.median(group),
            "share": len(members) / len(sub_windows),
        }
        for name, series in (("sm_clock_mhz", clocks), ("power_w", power)):
            seen = [float(v) for i, v in enumerate(series or []) if i in members
                    and v is not None]
            point[name] = statistics.median(seen) if seen else None
        points.append(point)
    points.sort(key=lambda p: -(p["share"] or 0.0))  # stable: faster first on a tie
    return points
