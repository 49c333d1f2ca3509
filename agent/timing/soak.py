"""When has a card soaked? Throughput and temperature judged by their slopes over a span of
tens of seconds, not by the agreement of 1-s windows.

Under a power cap the level falls as the die heats: leakage rises, so the same watts buy
a lower clock (docs/design.md, "Thermal soak"). A lent H100 SXM under continuous load from
idle did 675.4 TFLOP/s in its first 20 s, 669.0 in the next 20, then held 664.9-666.9
for 200 s at 75 °C; an H200 held its level throughout. That fall is a drift of ~0.03% a
second for 40-60 s: each 1-s window stays within 0.5% of its neighbour while the level
walks away, so only a slope fitted over a span comparable to the thermal time constant
sees it. A card is soaked when, over the trailing span, the fitted change of throughput
and of temperature are both within their tolerances.

Throughput takes the Theil-Sen slope (the median of pairwise slopes), which one window
caught in an operating-point switch or a blip cannot tilt, and must be within tolerance by
half its own standard error (from the windows' robust scatter about the line): on 2-s
windows that scatter by 0.2%, as the lent cards' did, a card still falling 0.7% a span
then passes by chance in about 3 of 100 series instead of 11, and a flat one still soaks
within a few windows of the first span (tests/agent/test_soak.py). Temperature, read in
whole degrees, takes the least-squares slope, which averages the rounding out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import List, Optional, Sequence

# The span the slope is fitted over: the thermal time constants seen on the lent cards
# are tens of seconds (the H100 above settled 40-60 s after its first launch).
SPAN_S = 30.0
WINDOW_S = 2.0
# |fitted change over the span| / level: 0.3% in 30 s is 0.01%/s, a third of the
# drift seen while the H100 above was heating; a 2-s window's level scatters by
# ~0.1-0.7% on a power-capped H100 (bench/records, dwell runs), so a flat card passes
# most spans and a card still falling at 0.03%/s (0.9% a span) almost never does.
THROUGHPUT_TOLERANCE = 0.003
# 1.5 °C over 30 s (0.05 °C/s): with the temperature still rising that fast and a
# time constant near a minute, at most ~3 °C are left to rise, worth ~0.15-0.2% at the
# ~0.05-0.07%/°C the H100 above lost while it heated.
TEMPERATURE_TOLERANCE_C = 1.5
CAP_S = 180.0
# How long the soaked figure is measured, once every GPU of the node has soaked.
MEASURE_S = 20.0
# The cool-start level beside the soaked one: what a run in the first seconds after the
# card comes back from idle reports (every figure before harness 1.3).
FIRST_S = 20.0
MIN_WINDOWS = 4
# How many of its own standard errors the throughput change must clear the tolerance by.
UNCERTAINTY_WEIGHT = 0.5
# The most a verdict reports of the throughput change, either way: the document's bound
# (fleet/model/document.py, SoakVerdict). Beyond ten times the level a span, a load is only
# far from soaked; the CPU path's 0.2-s windows on a loaded CI machine got there, and
# the document, refused whole, lost every figure with it.
CHANGE_LIMIT = 10.0


@dataclass(frozen=True)
class Window:
    """One window of the load: its end in seconds since the first launch, its level and
    what the card did during it (None where NVML did not answer)."""

    end_s: float
    tflops: float
    temperature_c: Optional[float]
    sm_clock_mhz: Optional[float]
    power_w: Optional[float]


@dataclass(frozen=True)
class Verdict:
    """Whether the GPU soaked, and how throughput and temperature still drifted over the span."""

    soaked: bool
    # Relative change of throughput, and change of temperature in degrees, fitted over
    # the span; None when there was not enough to fit.
    throughput_change: Optional[float]
    temperature_change_c: Optional[float]


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The median of the slopes between every pair of points with distinct x."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The ordinary least-squares slope of ys over xs; 0 with fewer than two points."""
    n = len(xs)
    if n < 2:
        return 0.0
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    # Indexed, not zip(strict=...): the agent runs on Python 3.8.
    return sum((xs[i] - mean_x) * (ys[i] - mean_y) for i in range(n)) / sxx


def slope_error(xs: Sequence[float], ys: Sequence[float], slope: float) -> float:
    """The slope's standard error, from the scatter about the line (1.4826 x the median
    absolute residual: a blip does not inflate it) over the spread of x."""
    n = len(xs)
    if n < 3:
        return float("inf")
    intercept = statistics.median(ys[i] - slope * xs[i] for i in range(n))
    scatter = 1.4826 * statistics.median(abs(ys[i] - intercept - slope * xs[i])
                                         for i in range(n))
    mean_x = sum(xs) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    return scatter / sxx ** 0.5 if sxx > 0 else float("inf")


def judge(
    windows: Sequence[Window],
    span_s: float = SPAN_S,
    min_s: float = SPAN_S,
    throughput_tolerance: float = THROUGHPUT_TOLERANCE,
    temperature_tolerance_c: float = TEMPERATURE_TOLERANCE_C,
) -> Verdict:
    """Whether the load has soaked by the end of its last window.

    Never before `min_s` of load (a span must fit), and never on fewer than MIN_WINDOWS
    windows. Where no window has a temperature (no NVML: the CPU path, or a driver that
    does not say) throughput is judged alone and temperature_change_c is None.
    """
    if not windows or windows[-1].end_s < min_s:
        return Verdict(False, None, None)
    start = windows[-1].end_s - span_s
    # A window ending exactly a span before the last belongs to the span before it.
    tail = [w for w in windows if w.end_s > start + 1e-9]
    if len(tail) < MIN_WINDOWS:
        return Verdict(False, None, None)
    level = statistics.median(w.tflops for w in tail)
    if level <= 0:
        return Verdict(False, None, None)
    xs = [w.end_s for w in tail]
    ys = [w.tflops for w in tail]
    slope = theil_sen_slope(xs, ys)
    throughput = slope * span_s / level
    uncertainty = slope_error(xs, ys, slope) * span_s / level
    heat = [(w.end_s, w.temperature_c) for w in tail if w.temperature_c is not None]
    temperature = None
    if len(heat) >= MIN_WINDOWS:
        temperature = least_squares_slope([x for x, _ in heat], [y for _, y in heat]) * span_s
    elif any(w.temperature_c is not None for w in windows):
        # The card answered before and stopped: its temperature cannot be judged now.
        return Verdict(False, _within_limit(throughput), None)
    soaked = abs(throughput) + UNCERTAINTY_WEIGHT * uncertainty <= throughput_tolerance and (
        temperature is None or abs(temperature) <= temperature_tolerance_c)
    return Verdict(soaked, _within_limit(throughput), temperature)


def _within_limit(change: float) -> float:
    return max(-CHANGE_LIMIT, min(CHANGE_LIMIT, change))


def curve_rows(windows: Sequence[Window], limit: int = 1000) -> List[List[float]]:
    """The soak curve as the document stores it: [end s, TFLOP/s, deg C, SM MHz, W] per
    window, -1 where NVML did not answer, every k-th window where there are more than
    `limit` (the last one always kept)."""
    step = max(1, -(-len(windows) // limit))
    kept = list(windows[::step])
    if windows and kept[-1] is not windows[-1]:
        kept[-1] = windows[-1]

    def value(v: Optional[float], digits: int) -> float:
        return -1.0 if v is None else round(v, digits)

    # TFLOP/s to six significant digits: a GPU's 665.123, a small CPU smoke test's 0.00123.
    return [[round(w.end_s, 3), float(f"{w.tflops:.6g}"), value(w.temperature_c, 1),
             value(w.sm_clock_mhz, 1), value(w.power_w, 2)] for w in kept]
