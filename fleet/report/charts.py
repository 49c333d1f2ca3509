"""Per-provider charts of per-GPU TFLOP/s: every GPU a point, over a box of its provider's
quartiles, as in seed 001's figure. Geometry only: the template draws it as inline SVG,
escaping every label, so the report needs no script library and no network.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from fleet.analysis.dataset import Config, Dataset, GpuMeasure
from fleet.analysis.stragglers import Straggler
from fleet.words import counted

WIDTH = 720
HEIGHT = 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 56
BOX_WIDTH = 0.36  # of a provider's slot


@dataclass(frozen=True)
class Tick:
    """A tick on a chart's y axis: its position and label."""

    y: float
    label: str


@dataclass(frozen=True)
class Box:
    """One provider's box in a box plot: quartiles, whiskers and GPU count, in pixels."""

    provider: str
    x: float  # the slot's centre
    half_width: float
    q1: float
    median: float
    q3: float
    low: float
    high: float
    gpus: int
    median_tflops: float


@dataclass(frozen=True)
class Point:
    """One GPU's point in a box plot, and whether it is a straggler."""

    provider: str
    cx: float
    cy: float
    label: str
    straggler: bool


@dataclass(frozen=True)
class Chart:
    """A box plot of per-GPU throughput by provider, for one variant and configuration."""

    variant: str
    config: Config
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    ticks: tuple[Tick, ...]
    boxes: tuple[Box, ...]
    points: tuple[Point, ...]

    @property
    def title(self) -> str:
        """The chart's title: variant and configuration."""
        return f"{self.variant}: {self.config.label}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _chart(variant: str, config: Config, gpus: list[GpuMeasure],
           slow: set[tuple[str, str, int]]) -> Chart:
    by_provider: dict[str, list[GpuMeasure]] = defaultdict(list)
    for m in gpus:
        by_provider[m.provider].append(m)
    providers = sorted(by_provider)
    values = [m.tflops for m in gpus]
    margin = max(0.01 * max(values), (max(values) - min(values)) * 0.08)
    ticks = nice_ticks(min(values) - margin, max(values) + margin)
    low, high = ticks[0], ticks[-1]
    plot_right, plot_bottom = WIDTH - RIGHT, HEIGHT - BOTTOM

    def y_of(value: float) -> float:
        return round(plot_bottom - (value - low) / (high - low) * (plot_bottom - TOP), 2)

    slot = (plot_right - LEFT) / len(providers)
    boxes, points = [], []
    for i, provider in enumerate(providers):
        members = sorted(by_provider[provider], key=lambda m: m.tflops)
        x = LEFT + slot * (i + 0.5)
        tflops = np.asarray([m.tflops for m in members])
        q1, median, q3 = (float(v) for v in np.percentile(tflops, [25, 50, 75]))
        boxes.append(Box(provider, round(x, 2), round(slot * BOX_WIDTH / 2, 2), y_of(q1),
                         y_of(median), y_of(q3), y_of(float(tflops.min())),
                         y_of(float(tflops.max())), len(members), median))
        # Spread the points evenly across the box in rank order: deterministic, and
        # points of equal value stay apart.
        span = slot * BOX_WIDTH * 0.9
        for j, m in enumerate(members):
            offset = 0.0 if len(members) == 1 else (j / (len(members) - 1) - 0.5) * span
            points.append(Point(provider, round(x + offset, 2), y_of(m.tflops),
                                f"{m.host} GPU {m.gpu_index}: {m.tflops:.1f} TFLOP/s "
                                f"({counted(m.results, 'result')}){_repeat_note(m)}"
                                f"{_soak_note(m)}",
                                (m.provider, m.host, m.gpu_index) in slow))
    return Chart(variant, config, WIDTH, HEIGHT, LEFT, plot_right, TOP, plot_bottom,
                 tuple(Tick(y_of(t), f"{t:g}") for t in ticks), tuple(boxes), tuple(points))


def _repeat_note(m: GpuMeasure) -> str:
    """The run-to-run sd one result of the GPU rests on (the median of its results'): the
    width each stored repeat interval was built from (agent/timing/repeat.py)."""
    if m.repeat_sd is None:
        return ""
    return f", run-to-run sd {m.repeat_sd:.2%}"


def _soak_note(m: GpuMeasure) -> str:
    """A soaked GPU's evidence in its tooltip: its first 20 s, its drop, its heat."""
    if m.first_20s_tflops is None or m.drop is None:
        return ""
    heat = "" if m.temperature_c is None else f", {m.temperature_c:.0f} °C under load"
    return f"; first 20 s {m.first_20s_tflops:.1f}, drop {m.drop:.2%}{heat}"


def provider_charts(data: Dataset, stragglers: list[Straggler]) -> list[Chart]:
    """One chart per variant and configuration that has measured GPUs."""
    groups: dict[tuple[Config, str], list[GpuMeasure]] = defaultdict(list)
    for m in data.measures:
        groups[(m.config, m.variant)].append(m)
    slow = {(s.provider, s.host, s.gpu_index) for s in stragglers}
    return [_chart(variant, config, gpus, slow)
            for (config, variant), gpus in sorted(groups.items())]
