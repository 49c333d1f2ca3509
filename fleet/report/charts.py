"""The report's charts as geometry; the templates draw them as inline SVG, escaping every
label, so the report needs no script library and no network (issue 56, "Charts where a
person would rather look").

- `offer_chart`: one offer's GPUs, pairs and nodes against what a healthy one of their
  variant gives, a row a figure (matmul, training, decode, memory copy, pairs, the
  all-reduce), every unit a mark on one axis: its share of the expected figure.
- `side_by_side`: per variant, the providers side by side, a panel a figure in its own
  unit, a row a provider: each unit a mark over the box of the row's quartiles, the band
  a healthy one lands in behind them.

Readable in print and without colour: the band is hatched as well as shaded, a figure
under its band is a cross where the others are dots, a figure beyond the axis is an arrow
at its edge with its value written beside it, and every row says its median in words.
The nights' line charts are fleet/report/timeline.py's, on `nice_ticks` and the line
charts' frame below.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleet.report.bands import METRICS, Unit

# The line charts' frame (fleet/report/timeline.py).
WIDTH = 720
HEIGHT = 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 56

# The row charts' frame: labels on the left, the row's median in words on the right.
ROW_WIDTH = 900
PLOT_LEFT, PLOT_RIGHT = 220, 700
ROW = 28  # a row's height
PANEL_TITLE = 22  # room for a panel's title above its rows
AXIS = 28  # room for the axis' tick labels under the rows
PANEL_GAP = 12
# Marks of one row are set apart up and down in turn, so equal figures stay visible.
JITTER = (0.0, -5.0, 5.0, -2.5, 2.5)
# What a row's label may hold in the chart's left margin, at its font.
LABEL_CHARS = 30
# How far past its reference a figure may be before it is drawn at the axis' edge: one
# figure of 9% (an all-reduce through host memory) would leave the rest a pixel apart.
CLIP = (0.7, 1.3)


@dataclass(frozen=True)
class Tick:
    """A tick on a chart's axis: its position and label."""

    y: float
    label: str


@dataclass(frozen=True)
class Mark:
    """One unit's mark: a dot, or a cross where it is under its band; at the axis' edge
    with its value beside it where it is beyond the axis."""

    x: float
    y: float
    short: bool
    label: str  # the tooltip: the unit, its figure and what it is judged by
    clipped: str = ""  # "left" or "right" where drawn at the axis' edge
    text: str = ""  # the figure, written beside a mark at the edge
    straggler: bool = False

    @property
    def arrow(self) -> str:
        """The edge arrow's points, an SVG polygon pointing out of the axis."""
        if self.clipped == "left":
            return f"{self.x},{self.y} {self.x + 8},{self.y - 5} {self.x + 8},{self.y + 5}"
        return f"{self.x},{self.y} {self.x - 8},{self.y - 5} {self.x - 8},{self.y + 5}"


@dataclass(frozen=True)
class Row:
    """One row of a panel: its label, its median in words, its marks, and the band a
    healthy one lands in, the expected figure and the row's quartiles where there are."""

    label: str
    note: str
    y: float  # the row's middle
    marks: tuple[Mark, ...]
    band: tuple[float, float] | None = None  # x from, x to
    expected: float | None = None  # x
    box: tuple[float, float, float] | None = None  # x of q1, median, q3
    provider: str = ""
    sublabel: str = ""  # under the label, smaller: what sets the row's configuration apart

    @property
    def shown(self) -> str:
        """The label as drawn: a name too long for the chart's margin is cut (the row's
        tooltip says it whole)."""
        return _cut(self.label, LABEL_CHARS)

    @property
    def shown_sublabel(self) -> str:
        """The sublabel as drawn, cut as the label is."""
        return _cut(self.sublabel, LABEL_CHARS + 6)


@dataclass(frozen=True)
class Panel:
    """One axis of a chart and its rows."""

    title: str
    title_y: float
    top: float  # the first row's top
    axis_y: float  # the axis line, under the last row
    ticks: tuple[Tick, ...]  # `y` is the tick's x here: the axis runs across
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class RowChart:
    """A chart of rows of marks: one offer against its healthy band, or a variant's
    providers side by side."""

    title: str
    caption: str
    variant: str
    provider: str  # "" for a chart of every provider of the variant
    width: int
    height: int
    plot_left: int
    plot_right: int
    panels: tuple[Panel, ...]

    @property
    def marks(self) -> int:
        """How many units it draws: a chart without one is not drawn."""
        return sum(len(row.marks) for panel in self.panels for row in panel.rows)


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [low, high]."""
    if high <= low:
        high = low + (abs(low) * 0.01 or 1.0)
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = [round(first, 10)]
    # Until the last tick reaches `high`: the axis must hold every value it was made for.
    while ticks[-1] < high - step * 1e-9:
        ticks.append(round(first + step * len(ticks), 10))
    return ticks


@dataclass(frozen=True)
class _Axis:
    low: float
    high: float
    ticks: tuple[float, ...]

    def x(self, value: float) -> float:
        span = self.high - self.low
        return round(PLOT_LEFT + (value - self.low) / span * (PLOT_RIGHT - PLOT_LEFT), 2)

    def clipped(self, value: float) -> str:
        return "left" if value < self.low else "right" if value > self.high else ""


def _axis(values: Sequence[float], bands: Sequence[tuple[float, float]],
          reference: float) -> _Axis:
    """An axis over the values and bands, not past CLIP of the reference."""
    low = min([*values, *(b[0] for b in bands), reference])
    high = max([*values, *(b[1] for b in bands), reference])
    low, high = max(low, reference * CLIP[0]), min(high, reference * CLIP[1])
    pad = (high - low) * 0.06 or abs(reference) * 0.02 or 1.0
    ticks = nice_ticks(low - pad, high + pad, 5)
    return _Axis(ticks[0], ticks[-1], tuple(ticks))


def _tick_label(value: float, step: float, percent: bool) -> str:
    if percent:
        digits = max(0, -math.floor(math.log10(step * 100)) if step * 100 < 1 else 0)
        return f"{value * 100:.{digits}f}%"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:.{digits}f}"


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:,.1f}"


def _marks(units: Sequence[Unit], xs: Sequence[float], axis: _Axis, y: float,
           texts: Sequence[str], slow: frozenset[tuple[str, str, str]]) -> tuple[Mark, ...]:
    order = sorted(range(len(units)), key=lambda i: xs[i])
    marks = []
    for rank, i in enumerate(order):
        unit, value = units[i], xs[i]
        edge = axis.clipped(value)
        x = axis.x(min(max(value, axis.low), axis.high))
        marks.append(Mark(x, round(y + JITTER[rank % len(JITTER)], 2), unit.short,
                          unit.label, edge, texts[i] if edge else "",
                          (unit.provider, unit.host, unit.name) in slow))
    return tuple(marks)


def _ticks(axis: _Axis, percent: bool) -> tuple[Tick, ...]:
    step = axis.ticks[1] - axis.ticks[0] if len(axis.ticks) > 1 else 1.0
    return tuple(Tick(axis.x(t), _tick_label(t, step, percent)) for t in axis.ticks)


def offer_chart(provider: str, variant: str, units: Sequence[Unit],
                crowd: Mapping[tuple[str, str, str], float],
                slow: frozenset[tuple[str, str, str]] = frozenset()) -> RowChart | None:
    """One offer's units against what a healthy one of the variant gives, a row a figure
    on one axis of shares; a figure without records against the median of the variant's
    units of its configuration in the report (`crowd`: (variant, metric, configuration) ->
    that median). None without units."""
    mine = [u for u in units if u.provider == provider and u.variant == variant]
    by_metric: dict[str, list[Unit]] = defaultdict(list)
    for unit in mine:
        by_metric[unit.metric].append(unit)
    metrics = [m for m in METRICS if by_metric.get(m)]
    if not metrics:
        return None
    shares: dict[str, list[float]] = {}
    bands: dict[str, tuple[float, float] | None] = {}
    notes: dict[str, str] = {}
    for metric in metrics:
        members = by_metric[metric]
        shares[metric] = [u.value / (u.expected or crowd.get((variant, metric, u.config))
                                     or u.value) for u in members]
        floors = [u.floor / u.expected for u in members if u.floor and u.expected]
        bands[metric] = ((statistics.median(floors), 2 - statistics.median(floors))
                         if floors else None)
        median = statistics.median(u.value for u in members)
        expected = [u.expected for u in members if u.expected]
        said = METRICS[metric][1]
        notes[metric] = (f"{_figure(median)} of {_figure(statistics.median(expected))} "
                         f"{said}" if expected else f"{_figure(median)} {said}, no records")
    axis = _axis([s for values in shares.values() for s in values],
                 [b for b in bands.values() if b is not None], 1.0)
    top = PANEL_TITLE + 8
    rows = []
    for i, metric in enumerate(metrics):
        y = top + ROW * i + ROW / 2
        members = by_metric[metric]
        name, _, what = METRICS[metric]
        band = bands[metric]
        texts = [f"{s:.0%}" for s in shares[metric]]
        rows.append(Row(
            f"{name} ({len(members)} {what}{'s' if len(members) != 1 else ''})",
            notes[metric], y, _marks(members, shares[metric], axis, y, texts, slow),
            None if band is None else (axis.x(max(band[0], axis.low)),
                                       axis.x(min(band[1], axis.high))),
            axis.x(1.0) if band is not None else None, provider=provider))
    axis_y = top + ROW * len(metrics) + 4
    bare = any(band is None for band in bands.values())
    panel = Panel("Share of what a healthy one gives"
                  + (" (no records: of its configuration's median here)" if bare else ""),
                  PANEL_TITLE - 6, top, axis_y, _ticks(axis, True), tuple(rows))
    return RowChart(f"{provider} · {variant}: each GPU, pair and node against a healthy one",
                    _CAPTION, variant, provider, ROW_WIDTH, int(axis_y + AXIS), PLOT_LEFT,
                    PLOT_RIGHT, (panel,))


_CAPTION = ("A mark a GPU, pair or node; the hatched band is where a healthy one lands "
            "(from the floor under which fleet calls a figure short to as far above what a "
            "healthy one gives), the line in it what a healthy one gives; a cross is a "
            "figure under its floor, an arrow one beyond the axis, its value beside it.")


def crowd_medians(units: Iterable[Unit]) -> dict[tuple[str, str, str], float]:
    """The median of each variant's units of each figure and configuration in the report:
    what a figure without records is set beside (never another backend's or GPU count's)."""
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for unit in units:
        values[(unit.variant, unit.metric, unit.config)].append(unit.value)
    return {key: statistics.median(v) for key, v in values.items()}


def side_by_side(variant: str, units: Sequence[Unit],
                 slow: frozenset[tuple[str, str, str]] = frozenset()) -> RowChart | None:
    """The variant's providers side by side: a panel a figure, a row a provider (and
    what sets its configuration apart, where something does), each unit a mark over the
    box of the row's quartiles and the band a healthy one lands in. None without units."""
    mine = [u for u in units if u.variant == variant]
    by_metric: dict[str, list[Unit]] = defaultdict(list)
    for unit in mine:
        by_metric[unit.metric].append(unit)
    panels = []
    top = 0.0
    for metric in (m for m in METRICS if by_metric.get(m)):
        members = by_metric[metric]
        name, unit_name, what = METRICS[metric]
        groups: dict[tuple[str, str], list[Unit]] = defaultdict(list)
        for unit in members:
            groups[(unit.provider, unit.config)].append(unit)
        # Each row's own band: what a healthy one gives depends on its configuration (the
        # backend, the all-reduce's GPU count), and a row without records has none.
        bands = {key: _band(group) for key, group in groups.items()}
        expected = [u.expected for u in members if u.expected is not None]
        reference = statistics.median(expected) if expected else statistics.median(
            u.value for u in members)
        axis = _axis([u.value for u in members],
                     [b[:2] for b in bands.values() if b is not None], reference)
        title_y = top + PANEL_TITLE - 6
        first = top + PANEL_TITLE + 4
        rows = []
        for i, ((provider, config), group) in enumerate(sorted(groups.items())):
            y = first + ROW * i + ROW / 2
            values = [u.value for u in group]
            quartiles = ([statistics.quantiles(values, n=4, method="inclusive")[k]
                          for k in (0, 1, 2)] if len(values) >= 2 else None)
            band = bands[(provider, config)]
            rows.append(Row(
                provider,
                f"median {_figure(statistics.median(values))}; "
                f"{len(group)} {what}{'s' if len(group) != 1 else ''}", y,
                _marks(group, values, axis, y, [_figure(v) for v in values], slow),
                None if band is None else (axis.x(max(band[0], axis.low)),
                                           axis.x(min(band[1], axis.high))),
                None if band is None else axis.x(min(max(band[2], axis.low), axis.high)),
                None if quartiles is None else _three(
                    [axis.x(min(max(q, axis.low), axis.high)) for q in quartiles]),
                provider, config))
        axis_y = first + ROW * len(rows) + 4
        panels.append(Panel(f"{name}, {unit_name} per {what}", title_y, first, axis_y,
                            _ticks(axis, False), tuple(rows)))
        top = axis_y + AXIS + PANEL_GAP
    if not panels:
        return None
    return RowChart(f"{variant}: providers side by side", _SIDE_CAPTION, variant, "",
                    ROW_WIDTH, int(top - PANEL_GAP), PLOT_LEFT, PLOT_RIGHT, tuple(panels))


def _band(units: Sequence[Unit]) -> tuple[float, float, float] | None:
    """(from, to, expected) of the band a healthy one of `units` lands in: the median floor
    and expected figure of those with records; None where none has."""
    judged = [u for u in units if u.floor is not None and u.expected is not None]
    if not judged:
        return None
    floor = statistics.median(u.floor or 0.0 for u in judged)
    expected = statistics.median(u.expected or 0.0 for u in judged)
    return floor, 2 * expected - floor, expected


def _three(values: Sequence[float]) -> tuple[float, float, float]:
    return values[0], values[1], values[2]


_SIDE_CAPTION = ("A mark a GPU, pair or node, over the box of its row's middle half and "
                 "median; the hatched band is where a healthy one of the variant lands, the "
                 "line in it what a healthy one gives; a cross is a figure under its floor, "
                 "an arrow one beyond the axis, its value beside it. Rows whose "
                 "configurations differ are named so and drawn on one axis to be seen "
                 "together; the tables compare only like with like.")
