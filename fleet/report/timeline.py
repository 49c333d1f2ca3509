"""A sweep's history in the report: TFLOP/s per provider and per GPU over the nights, and
the night each change began (fleet.analysis.sweep.history finds them; this draws and lists them).

Lines, not boxes: one thick line per provider (the median of its GPUs each night) and a
thin one per GPU. Past PER_GPU_LINES GPUs in a chart, only the GPUs with a regression keep
their own line, so a chart of a thousand GPUs stays a chart (and a file of a few hundred
KiB) while the GPUs that matter stay visible.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine

from fleet.analysis.dataset import Aliases
from fleet.analysis.sweep.history import (
    Findings,
    HostNight,
    Night,
    RegressionRule,
    SeriesPoint,
    findings_by_night,
    tflops_series,
)
from fleet.analysis.sweep.nights import read_nights
from fleet.report.charts import HEIGHT, LEFT, RIGHT, TOP, WIDTH, Tick, nice_ticks
from fleet.words import counted

PER_GPU_LINES = 64
BOTTOM = 40


@dataclass(frozen=True)
class Event:
    """Something that began on one night."""

    run_id: int
    started_at: dt.datetime
    kind: str  # regression, change, health, mismatch, gone, new
    provider: str
    text: str


@dataclass(frozen=True)
class Line:
    """One line of a history chart: a GPU's or a provider's median, night by night."""

    label: str
    provider: str
    points: tuple[tuple[float, float, str], ...]  # (x, y, tooltip)
    provider_median: bool
    regressed: bool

    @property
    def path(self) -> str:
        """The line's points as an SVG polyline's `points`."""
        return " ".join(f"{x},{y}" for x, y, _ in self.points)


@dataclass(frozen=True)
class LineChart:
    """A chart of throughput night by night, for one variant and benchmark."""

    variant: str
    benchmark: str
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    ticks: tuple[Tick, ...]
    nights: tuple[tuple[float, str], ...]  # (x, label)
    lines: tuple[Line, ...]
    hidden_gpus: int  # GPUs without a line of their own (see PER_GPU_LINES)
    provider: str = ""  # one provider's GPUs alone (an offer's nights); "" for every one

    @property
    def title(self) -> str:
        """The chart's title: provider where it is one's, variant and benchmark."""
        who = f"{self.provider} · " if self.provider else ""
        return f"{who}{self.variant}: {self.benchmark}"


@dataclass(frozen=True)
class History:
    """A sweep's nights for the report: the events and the charts, and the rule applied."""

    sweep: str
    nights: tuple[tuple[int, dt.datetime], ...]
    events: tuple[Event, ...]  # oldest first
    charts: tuple[LineChart, ...]
    regressed_last_night: int  # GPU results below their own past on the newest night
    rule: RegressionRule  # what "regressed" meant, for the report to say
    # Each offer's (provider and variant's) nights apart, its GPUs and its median: what
    # the report's fold of the offer shows.
    offer_charts: tuple[LineChart, ...] = ()


def _hide(nights: list[Night], names: Aliases) -> list[Night]:
    """The nights with providers and hosts named as the anonymized report names them,
    and no GPU UUIDs."""
    hidden = []
    for night in nights:
        hosts: dict[str, HostNight] = {}
        for host in night.hosts.values():
            provider, name = names.provider(host.provider), names.host(host.provider, host.host)
            gpus = tuple(dataclasses.replace(
                g, uuid=None, config={**g.config, "uuid": None}) for g in host.gpus)
            hosts[f"{provider}/{name}"] = dataclasses.replace(host, provider=provider,
                                                              host=name, gpus=gpus)
        hidden.append(dataclasses.replace(night, hosts=hosts))
    return hidden


def _events(findings: list[Findings]) -> list[Event]:
    events = []
    for i, night in enumerate(findings):
        at = (night.run_id, night.started_at)
        events += [Event(*at, "regression", r.provider, r.describe())
                   for r in night.new_regressions]
        events += _changes(night, at)
        events += [Event(*at, "health", h.provider, h.describe()) for h in night.health]
        events += [Event(*at, "mismatch", m.provider, m.describe()) for m in night.mismatches]
        events += [Event(*at, "gone", key.split("/")[0], f"{key}: not in tonight's sweep")
                   for key in night.gone]
        if i > 0:  # on the first night every host is new
            events += [Event(*at, "new", key.split("/")[0], f"{key}: first seen")
                       for key in night.new]
    return events


def _changes(night: Findings, at: tuple[int, dt.datetime]) -> list[Event]:
    """One event per host and change, naming its GPUs: a driver upgrade is one line, not
    eight."""
    gpus: dict[tuple[str, str, str, str, str], list[int]] = defaultdict(list)
    for c in night.changes:
        key = (c.provider, c.host, c.field, str(c.before), str(c.after))
        if c.gpu_index is None:
            gpus.setdefault(key, [])
        else:
            gpus[key].append(c.gpu_index)
    events = []
    for (provider, host, name, before, after), indexes in gpus.items():
        where = "" if not indexes else (" GPU " if len(indexes) == 1 else " GPUs ") + \
            ", ".join(map(str, sorted(indexes)))
        events.append(Event(*at, "change", provider,
                            f"{provider}/{host}{where}: {name} {before} -> {after}"))
    return events


def _charts(nights: list[Night], regressed: set[tuple[str, str, int]],
            by_provider: bool = False) -> list[LineChart]:
    """A chart per variant and benchmark, every provider on it; `by_provider`: a chart per
    provider of each (an offer's nights)."""
    points = tflops_series(nights)
    x_of: dict[int, float] = {}
    inset = 28  # keeps the first and last nights' labels inside the chart
    span = WIDTH - RIGHT - LEFT - 2 * inset
    for i, night in enumerate(nights):
        x_of[night.run_id] = round(LEFT + inset + span * (0.5 if len(nights) == 1 else
                                                          i / (len(nights) - 1)), 2)
    groups: dict[tuple[str, str, str], list[SeriesPoint]] = defaultdict(list)
    for p in points:
        groups[(p.variant, p.benchmark, p.provider if by_provider else "")].append(p)
    charts = []
    for (variant, benchmark, provider), members in sorted(groups.items()):
        series: dict[tuple[str, str | None, int | None], list[SeriesPoint]] = defaultdict(
            list)
        for p in members:
            series[(p.provider, p.host, p.gpu_index)].append(p)
        values = [p.tflops for p in members]
        ticks = nice_ticks(min(values) * 0.99, max(values) * 1.01)
        low, high = ticks[0], ticks[-1]
        bottom = HEIGHT - BOTTOM

        def y_of(value: float, low: float = low, high: float = high, bottom: int = bottom
                 ) -> float:
            return round(bottom - (value - low) / (high - low) * (bottom - TOP), 2)

        gpu_lines = [key for key in series if key[1] is not None]
        crowded = len(gpu_lines) > PER_GPU_LINES
        lines = []
        hidden = 0
        for (provider, host, index), ps in sorted(series.items(), key=lambda kv: (
                kv[0][1] is None, kv[0][0], kv[0][1] or "", kv[0][2] or 0)):
            is_median = host is None
            slow = not is_median and (provider, host or "", index or 0) in regressed
            if not is_median and crowded and not slow:
                hidden += 1
                continue
            label = f"{provider} (median)" if is_median else f"{host} GPU {index}"
            ordered = sorted(ps, key=lambda p: x_of[p.run_id])
            lines.append(Line(label, provider, tuple(
                (x_of[p.run_id], y_of(p.tflops),
                 f"{label}, run #{p.run_id} ({p.started_at:%Y-%m-%d}): {p.tflops:.1f} TFLOP/s"
                 + (f" over {counted(p.gpus, 'GPU')}" if is_median else ""))
                for p in ordered), is_median, slow))
        charts.append(LineChart(
            variant, benchmark, WIDTH, HEIGHT, LEFT, WIDTH - RIGHT, TOP, bottom,
            tuple(Tick(y_of(t), f"{t:g}") for t in ticks),
            tuple((x_of[n.run_id], f"#{n.run_id} {n.started_at:%m-%d}") for n in nights),
            tuple(lines), hidden, provider))
    return charts


def sweep_history(engine: Engine, sweep: str, upto_run: int | None = None,
                  names: Aliases | None = None, providers: tuple[str, ...] = (),
                  variants: tuple[str, ...] = ()) -> History | None:
    """The sweep's nights up to `upto_run`, of the given providers' hosts and variants'
    GPUs (all when empty); None when it has no night. Dates do not filter the nights: a
    night's regressions are judged against the nights before it, whatever the report's
    window."""
    nights = scoped_nights(engine, sweep, upto_run, providers, variants)
    if not nights:
        return None
    if names is not None:
        nights = _hide(nights, names)
    rule = RegressionRule()
    findings = findings_by_night(nights, rule)
    regressed = {(r.provider, r.host, r.gpu_index) for f in findings for r in f.regressions}
    return History(sweep, tuple((n.run_id, n.started_at) for n in nights),
                   tuple(_events(findings)), tuple(_charts(nights, regressed)),
                   len(findings[-1].regressions), rule,
                   tuple(_charts(nights, regressed, by_provider=True)))


def scoped_nights(engine: Engine, sweep: str, upto_run: int | None,
                  providers: tuple[str, ...] = (), variants: tuple[str, ...] = ()
                  ) -> list[Night]:
    """The sweep's nights, of the given providers' hosts and variants' GPUs (all when
    empty). With variants, a host that failed one night stays in it if it carried one of
    them on another night: dropped, it would read as gone that night and new the next."""
    nights = read_nights(engine, sweep, upto_run)
    carriers = {key for night in nights for key, host in night.hosts.items()
                if any(g.variant in variants for g in host.gpus)}
    return [_only(night, providers, variants, carriers) for night in nights]


def _only(night: Night, providers: tuple[str, ...], variants: tuple[str, ...],
          carriers: set[str]) -> Night:
    if not providers and not variants:
        return night
    hosts = {}
    for key, host in night.hosts.items():
        if providers and host.provider not in providers:
            continue
        if variants:
            gpus = tuple(g for g in host.gpus if g.variant in variants)
            if not gpus and not (host.status != "stored" and key in carriers):
                continue  # none of its GPUs is of these variants
            host = dataclasses.replace(host, gpus=gpus)
        hosts[key] = host
    return dataclasses.replace(night, hosts=hosts)


def history_pairs(engine: Engine, sweep: str, upto_run: int | None = None,
                  providers: tuple[str, ...] = (), variants: tuple[str, ...] = ()
                  ) -> set[tuple[str, str]]:
    """(provider, host) of every host the report's history names: what aliases must
    cover, and no more (a provider outside the report would still take a letter)."""
    return {(h.provider, h.host)
            for night in scoped_nights(engine, sweep, upto_run, providers, variants)
            for h in night.hosts.values()}
