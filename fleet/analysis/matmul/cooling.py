"""Cooling as evidence: does one provider's GPUs run hotter, and lose more to the heat?

Under a power cap a card's level falls as its die heats (leakage rises, so the clock
drops at the same watts), over tens of seconds, by how much depends on the host's
cooling: on the lent cards 0.2% (an H200 at 69-71 °C) to 1.2% (H100s at 75 °C) between
the first 20 s of load and the soaked level (docs/harness.md, "soaked"). Soaked results
(harness 1.3 and later) carry both figures and the temperature under load, so a provider
whose hosts cool worse shows as GPUs that are hotter *and* drop more.

A cooling finding is called between two providers' GPUs of one variant, under one soaked
configuration, only on evidence like a gap's (fleet/analysis/matmul/gaps.py):

- both sides run at the same power cap (medians within 2%): at different caps the
  temperature and the drop follow the cap, which the gap and drift findings name;
- each side's GPUs are on at least two hosts: a node's GPUs share its cooling, so the
  host is the unit; the 95% intervals of the differences of medians (temperature, and
  drop) come from a cluster bootstrap that resamples hosts with all their GPUs, and both
  must exclude 0;
- the Mann-Whitney rank test on per-GPU values rejects "same distribution" at 5% for the
  temperature and for the drop, each after Holm's correction over every comparison in
  the report;
- the hotter side is hotter by at least 3 °C and loses at least 0.5 points more: smaller
  differences can be real and still not be worth a dispute.

Requiring both the temperature and the drop to differ is what makes this about cooling:
a hot card that loses nothing is within its design, and a drop without heat has another
cause (clocks, power delivery, the stack) that other findings look for.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from fleet.analysis.compare import cluster_resamples, holm, rank_test, resampled_medians
from fleet.analysis.dataset import Config, Dataset, GpuMeasure
from fleet.words import counted


@dataclass(frozen=True)
class CoolingOptions:
    """When the report calls a cooling difference, and how it tests for one."""

    min_temperature_c: float = 3.0  # hotter by at least this...
    min_drop: float = 0.005  # ...and losing at least this much more (0.5 points)
    power_tolerance: float = 0.02  # caps within this share of each other are "the same"
    confidence: float = 0.95
    significance: float = 0.05  # of each rank test, after Holm
    min_gpus: int = 3  # per provider, with a temperature and a drop
    min_hosts: int = 2  # per provider, to call it
    resamples: int = 2000
    seed: int = 0  # the bootstrap's: the same store gives the same report


@dataclass(frozen=True)
class ThermalRow:
    """One provider's soaked GPUs of one variant: the soaked level, the level of the first
    20 s of load, the drop between them and the temperature under load (medians of
    per-GPU medians, with the range of the per-GPU values)."""

    config: Config
    provider: str
    variant: str
    gpus: int
    hosts: int
    tflops: float
    first_20s_tflops: float | None
    drop: float | None
    drop_low: float | None
    drop_high: float | None
    temperature_c: float | None
    temperature_low_c: float | None
    temperature_high_c: float | None
    power_limit_w: float | None
    not_soaked: int  # GPUs whose soak reached its cap before it settled


@dataclass(frozen=True)
class Side:
    """One provider's GPUs in a cooling comparison: temperature, drop and power cap."""

    provider: str
    gpus: int
    hosts: int
    temperature_c: float  # median of per-GPU temperatures under load
    drop: float  # median of per-GPU drops
    power_limit_w: float | None  # median power cap

    def describe(self) -> str:
        """The side in words: GPUs, hosts, median temperature, drop and power cap."""
        cap = "" if self.power_limit_w is None else f", {self.power_limit_w:.0f} W cap"
        return (f"{self.provider}: {counted(self.gpus, 'GPU')} on "
                f"{counted(self.hosts, 'host')}, median {self.temperature_c:.1f} °C under "
                f"load, drop {self.drop:.2%} from the first 20 s to soaked{cap}")


@dataclass(frozen=True)
class CoolingComparison:
    """Two providers' GPUs of one variant and configuration, compared on heat and drop."""

    config: Config
    variant: str
    hotter: Side
    cooler: Side
    temperature_difference_c: float  # hotter - cooler, medians
    temperature_interval_c: tuple[float, float]
    temperature_p: float  # Mann-Whitney on per-GPU temperatures, two-sided
    temperature_p_adjusted: float  # Holm, over every comparison in the report
    drop_difference: float  # hotter - cooler, medians (positive: the hotter loses more)
    drop_interval: tuple[float, float]
    drop_p: float
    drop_p_adjusted: float
    same_power_cap: bool
    called: bool
    options: CoolingOptions

    @property
    def single_node(self) -> bool:
        """Whether either side has fewer hosts than it takes to call a difference."""
        return min(self.hotter.hosts, self.cooler.hosts) < self.options.min_hosts

    @property
    def verdict(self) -> str:
        """"cooling" when called; otherwise why not."""
        if self.called:
            return "cooling"
        if not self.same_power_cap:
            return "different power caps"
        if self.single_node:
            return "too few hosts"
        return "not called"

    @property
    def evidence(self) -> str:
        """The comparison's figures in words: both sides, the differences and their tests."""
        o = self.options
        t_low, t_high = self.temperature_interval_c
        d_low, d_high = self.drop_interval
        return (f"{self.hotter.describe()}; {self.cooler.describe()}. Hotter by "
                f"{self.temperature_difference_c:.1f} °C ({o.confidence:.0%} interval "
                f"{t_low:.1f}-{t_high:.1f}, rank test p = {self.temperature_p:.2g}, Holm "
                f"{self.temperature_p_adjusted:.2g}), drop larger by "
                f"{self.drop_difference * 100:.2f} points ({o.confidence:.0%} interval "
                f"{d_low * 100:.2f}-{d_high * 100:.2f}, rank test p = {self.drop_p:.2g}, "
                f"Holm {self.drop_p_adjusted:.2g}); hosts resampled with their GPUs. "
                f"Called at {o.min_temperature_c:g} °C and {o.min_drop * 100:g} points or "
                f"more, both intervals above 0, both tests below {o.significance:g}, "
                f"{o.min_hosts}+ hosts a side, power caps within {o.power_tolerance:.0%}")


def _soaked(m: GpuMeasure) -> bool:
    return m.config.thermal == "soaked" and m.temperature_c is not None and m.drop is not None


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _range(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    present = [v for v in values if v is not None]
    return (min(present), max(present)) if present else (None, None)


def thermal_table(data: Dataset) -> list[ThermalRow]:
    """Per soaked configuration, variant and provider: what the soak showed."""
    groups: dict[tuple[Config, str, str], list[GpuMeasure]] = defaultdict(list)
    for m in data.measures:
        if m.config.thermal == "soaked":
            groups[(m.config, m.variant, m.provider)].append(m)
    rows = []
    for (config, variant, provider), gpus in sorted(groups.items()):
        drops = [g.drop for g in gpus]
        temperatures = [g.temperature_c for g in gpus]
        rows.append(ThermalRow(
            config, provider, variant, len(gpus), len({g.host for g in gpus}),
            statistics.median(g.tflops for g in gpus),
            _median([g.first_20s_tflops for g in gpus]), _median(drops), *_range(drops),
            _median(temperatures), *_range(temperatures),
            _median([g.power_limit_w for g in gpus]),
            sum("not_soaked" in g.flags for g in gpus)))
    return rows


def _by_host(gpus: list[GpuMeasure], read: Callable[[GpuMeasure], float | None]
             ) -> list[list[float]]:
    hosts: dict[str, list[float]] = defaultdict(list)
    for g in gpus:
        value = read(g)
        if value is not None:
            hosts[g.host].append(value)
    return [values for _, values in sorted(hosts.items())]


def difference_interval(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                        options: CoolingOptions) -> tuple[float, float]:
    """Cluster-bootstrap interval of median(a) - median(b), hosts resampled with all
    their values."""
    rng = np.random.default_rng(options.seed)
    resamples = cluster_resamples(a, b, options.resamples)
    differences = resampled_medians(a, rng, resamples) - resampled_medians(b, rng, resamples)
    tail = (1.0 - options.confidence) / 2.0
    low, high = np.quantile(differences, [tail, 1.0 - tail])
    return float(low), float(high)


def _temperature(g: GpuMeasure) -> float | None:
    return g.temperature_c


def _drop(g: GpuMeasure) -> float | None:
    return g.drop


def _values(gpus: list[GpuMeasure], read: Callable[[GpuMeasure], float | None]
            ) -> list[float]:
    return [value for value in map(read, gpus) if value is not None]


def _side(gpus: list[GpuMeasure]) -> Side:
    """One provider's soaked GPUs (each with a temperature and a drop: see `_soaked`)."""
    return Side(gpus[0].provider, len(gpus), len({g.host for g in gpus}),
                statistics.median(_values(gpus, _temperature)),
                statistics.median(_values(gpus, _drop)),
                _median([g.power_limit_w for g in gpus]))


def _same_cap(a: Side, b: Side, tolerance: float) -> bool:
    if a.power_limit_w is None or b.power_limit_w is None:
        return False  # an unknown cap cannot be said to be the same
    return abs(a.power_limit_w - b.power_limit_w) <= tolerance * max(a.power_limit_w,
                                                                     b.power_limit_w)


def _pairs(data: Dataset, options: CoolingOptions
           ) -> list[tuple[Config, str, list[GpuMeasure], list[GpuMeasure]]]:
    """(config, variant, hotter GPUs, cooler GPUs) for every pair of providers with enough
    soaked GPUs in a group; the hotter is the one with the higher median temperature."""
    groups: dict[tuple[Config, str], dict[str, list[GpuMeasure]]] = defaultdict(
        lambda: defaultdict(list))
    for m in data.measures:
        if _soaked(m):
            groups[(m.config, m.variant)][m.provider].append(m)
    pairs = []
    for (config, variant), providers in sorted(groups.items()):
        enough = sorted(p for p, gpus in providers.items() if len(gpus) >= options.min_gpus)
        for a, b in combinations(enough, 2):
            first, second = providers[a], providers[b]
            if _side(first).temperature_c < _side(second).temperature_c:
                first, second = second, first
            pairs.append((config, variant, first, second))
    return pairs


def compare_cooling(data: Dataset, options: CoolingOptions | None = None
                    ) -> list[CoolingComparison]:
    """Every pair of providers with enough soaked GPUs in a group, called or not."""
    options = options or CoolingOptions()
    pairs = _pairs(data, options)
    raw_t = [rank_test(_values(hot, _temperature), _values(cool, _temperature))
             for _, _, hot, cool in pairs]
    raw_d = [rank_test(_values(hot, _drop), _values(cool, _drop)) for _, _, hot, cool in pairs]
    found = []
    for (config, variant, hot, cool), p_t, adj_t, p_d, adj_d in zip(
            pairs, raw_t, holm(raw_t), raw_d, holm(raw_d), strict=True):
        hotter, cooler = _side(hot), _side(cool)
        t_interval = difference_interval(_by_host(hot, _temperature),
                                         _by_host(cool, _temperature), options)
        d_interval = difference_interval(_by_host(hot, _drop), _by_host(cool, _drop), options)
        t_diff = hotter.temperature_c - cooler.temperature_c
        d_diff = hotter.drop - cooler.drop
        same_cap = _same_cap(hotter, cooler, options.power_tolerance)
        called = (same_cap and min(hotter.hosts, cooler.hosts) >= options.min_hosts
                  and t_diff >= options.min_temperature_c and t_interval[0] > 0
                  and adj_t < options.significance
                  and d_diff >= options.min_drop and d_interval[0] > 0
                  and adj_d < options.significance)
        found.append(CoolingComparison(
            config, variant, hotter, cooler, t_diff, t_interval, p_t, adj_t, d_diff,
            d_interval, p_d, adj_d, same_cap, called, options))
    return found
