"""Systematic gaps between providers: is one provider's GPU really slower, or is it noise?

Seed 001's 8192³ figure shows each provider's runtimes in a range of their own. fleet
calls a gap *systematic* only on evidence a skeptic accepts, with the GPU as the unit
(per-GPU medians, so a thousand runs of one slow box remain one slow box):

- each provider's GPUs are on at least two hosts: the GPUs of one node share its
  cooling, power feed, driver and operating point, so one node against one node is a
  node-to-node difference as much as a provider's (measured: two providers drawn from one
  distribution, one 8-GPU node each with a 1% node-to-node spread, were called apart in
  14% of draws by a GPU-level test). Such a comparison is still shown, with its numbers,
  and says why it is not called;
- the ratio of the two providers' medians (slower / faster) has a bootstrap interval
  (percentile method, 95% by default) that excludes 1, "no gap": hosts are resampled
  within each provider with all their GPUs (a cluster bootstrap), so the interval widens
  with the differences between nodes and not only between GPUs;
- the Mann-Whitney rank test on the two sets of per-GPU medians rejects "same
  distribution" at 5%, after Holm's correction for every comparison in the report (a
  report comparing many pairs would otherwise find gaps by chance), and so does Welch's
  t-test on the hosts' log medians (the node as the unit), also after Holm: with two
  or three nodes a side its few degrees of freedom make it demand a gap well clear of
  the node-to-node spread, which is the point;
- the gap, 1 - ratio, is at least the threshold (2% by default): smaller gaps can be
  real and still not worth a dispute.

Whether the two ranges separate outright (the slowest GPU of the faster provider above
the fastest of the slower) is reported beside it as evidence, not required: with eight
GPUs a side and 1% spread per GPU, a true 3% gap separates the ranges only about half the
time. The percentile interval is used because BCa's acceleration estimate is unstable
for medians of a handful of GPUs.

Comparisons are made per benchmark configuration, within one variant (like for like), and
within one listing when a listing covers several variants (what the money bought).

One host a side is one run of each host: its GPUs share the host's wander from run to run
(the room, the operating point), so eight GPUs are not eight draws of it, and the GPU-level
tests above see none of it. Such a comparison (called only where `min_hosts` is lowered
to 1; the Welch test cannot run) must also clear what repeat runs of the two hosts could
make of the gap (issue #31): faster - slower > 1.96 x sqrt((faster x sd_f)^2 / n_f +
(slower x sd_s)^2 / n_s), with sd a side's relative run-to-run sd (per host the median
`repeat_sd` of its GPUs, else the variant's measured spread; agent/timing/repeat.py) and n its
runs (per host the median number of results of its GPUs, not its GPU count). The
evidence states that margin. Comparisons of two hosts a side or more keep the host test,
which sees the hosts' wander in their spread.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fleet.analysis.dataset import Config, Dataset, GpuMeasure
from fleet.analysis.matmul.stragglers import Z975, repeat_sd
from fleet.words import counted

RESAMPLED_VALUES = 4_000_000


@dataclass(frozen=True)
class GapOptions:
    """When the report calls a gap between providers, and how it tests for one."""

    threshold: float = 0.02
    confidence: float = 0.95
    significance: float = 0.05  # of the rank test, after Holm
    min_gpus: int = 3  # per provider: fewer cannot support an interval
    min_hosts: int = 2  # per provider, to call a gap systematic (see the docstring)
    resamples: int = 4000
    seed: int = 0  # the bootstrap's: the same store gives the same report


@dataclass(frozen=True)
class Difference:
    """Something that differs between the two providers' GPUs and may explain a gap."""

    what: str
    faster: str
    slower: str


class Sides:
    """What any two-provider comparison (the matmul's here, the node suite's in
    node_gaps.py) reads off its verdict's fields alike."""

    ratio: float  # slower median / faster median
    faster_hosts: int
    slower_hosts: int
    host_p_adjusted: float | None
    ranges_separate: bool
    p_value: float
    p_adjusted: float
    ci_low: float
    ci_high: float

    @property
    def gap(self) -> float:
        """How much lower the slower provider's figure is: 0.1 is 10% lower."""
        return 1.0 - self.ratio

    @property
    def single_node(self) -> bool:
        """One side's figures are all of one host: not evidence about a provider."""
        return min(self.faster_hosts, self.slower_hosts) < 2

    @property
    def tests(self) -> str:
        """The ratio's interval and the tests in words, as both evidences end."""
        host_p = ("p: not testable (fewer than two hosts a side)"
                  if self.host_p_adjusted is None else f"p = {self.host_p_adjusted:.2g} (Holm)")
        return (f"ratio {self.ratio:.3f}, 95% interval {self.ci_low:.3f}-{self.ci_high:.3f}; "
                f"rank test p = {self.p_value:.2g} (Holm-adjusted {self.p_adjusted:.2g}); "
                f"between hosts {host_p}; "
                f"ranges {'separate' if self.ranges_separate else 'overlap'}")


@dataclass(frozen=True)
class Comparison(Sides):
    """Two providers' GPUs of one group and configuration, compared on throughput."""

    config: Config
    within: str  # "variant" or "listing"
    group: str  # the variant, or the listing's label
    faster: str
    slower: str
    faster_gpus: int
    slower_gpus: int
    faster_hosts: int
    slower_hosts: int
    faster_median: float
    slower_median: float
    ratio: float  # slower median / faster median
    ci_low: float
    ci_high: float
    p_value: float  # Mann-Whitney on per-GPU medians, two-sided
    p_adjusted: float  # Holm, over every comparison in the report
    # Welch's t on per-host log medians, Holm-adjusted; None with fewer than two hosts a
    # side, where it cannot be run.
    host_p_adjusted: float | None
    ranges_separate: bool
    systematic: bool
    differences: tuple[Difference, ...]
    # One host a side: how large a gap (relative to the faster median) repeat runs of
    # the two hosts could make, 95%; None with two hosts a side or more.
    repeat_margin: float | None = None

    @property
    def evidence(self) -> str:
        """The comparison's figures in words: both medians, the ratio's interval and the tests."""
        return (f"{self.slower} {self.slower_median:.1f} TFLOP/s (median of "
                f"{counted(self.slower_gpus, 'GPU')} on {counted(self.slower_hosts, 'host')}) "
                f"vs {self.faster} {self.faster_median:.1f} ({counted(self.faster_gpus, 'GPU')} "
                f"on {counted(self.faster_hosts, 'host')}): {self.tests}"
                f"{repeat_words(self.gap, self.repeat_margin)}")


def repeat_words(gap: float, margin: float | None) -> str:
    """The repeat test of a one-host-a-side comparison in words, "" where none ran."""
    if margin is None:
        return ""
    return (f"; one host a side: repeat runs of the two hosts could make a gap of "
            f"±{margin:.1%}, and this one is {'beyond' if gap > margin else 'within'} it")


def _ratio_of_medians(slower: NDArray[np.float64], faster: NDArray[np.float64],
                      axis: int = -1) -> NDArray[np.float64]:
    result: NDArray[np.float64] = np.median(slower, axis=axis) / np.median(faster, axis=axis)
    return result


def _scipy_stats() -> Any:
    """scipy.stats, imported when a report needs it: it takes half a second, and every
    fleet command (`fleet ingest` of one file too) imports this module."""
    from scipy import stats

    return stats


def ratio_interval(slower: Sequence[float], faster: Sequence[float], options: GapOptions
                   ) -> tuple[float, float]:
    """Bootstrap interval of median(slower) / median(faster), GPUs resampled per side."""
    a, b = np.asarray(slower, dtype=float), np.asarray(faster, dtype=float)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        value = float(np.median(a) / np.median(b))
        return value, value
    # A provider of thousands of GPUs would make the resampled arrays huge; past ~4 M
    # values per side fewer resamples suffice (their Monte Carlo error on a 95% interval
    # stays near 0.5% of its width at 1,000) and the report stays fast.
    resamples = min(options.resamples, max(1000, RESAMPLED_VALUES // max(len(a), len(b))))
    stats = _scipy_stats()
    result = stats.bootstrap((a, b), _ratio_of_medians, vectorized=True, paired=False,
                             n_resamples=resamples,
                             confidence_level=options.confidence, method="percentile",
                             rng=np.random.default_rng(options.seed))
    low, high = result.confidence_interval
    return float(low), float(high)


def resampled_medians(hosts: Sequence[Sequence[float]], rng: np.random.Generator,
                      resamples: int) -> NDArray[np.float64]:
    """The median of each of `resamples` draws of hosts with replacement, each host with
    all its values: a cluster bootstrap, the host as the unit.

    A draw is how many times it took each host, and its median the value where the
    running count of drawn values, over all values in order, passes the middle. Drawing
    the values themselves and taking medians gave the same figures but cost 3.4 s a
    comparison at 2,500 hosts of 8 GPUs a side (bench/report_scale.py): the running
    count is kept only over a band of the ordered values around the pooled median,
    widened for the draws whose middle falls outside it.
    """
    sizes = np.array([len(h) for h in hosts], dtype=np.int64)
    values = np.concatenate([np.asarray(h, dtype=float) for h in hosts])
    owner = np.repeat(np.arange(len(hosts)), sizes)
    picks = rng.integers(0, len(hosts), size=(resamples, len(hosts)))
    taken = np.bincount((picks + (np.arange(resamples) * len(hosts))[:, None]).ravel(),
                        minlength=resamples * len(hosts)).reshape(resamples, len(hosts))
    order = np.argsort(values, kind="stable")
    ordered, owners = values[order], owner[order]
    total = taken @ sizes
    # 0-based ranks of the two middle values (one and the same when the count is odd),
    # whose mean is the median, as numpy takes it.
    low_rank, high_rank = (total - 1) // 2, total // 2
    result = np.empty(resamples)
    pending = np.arange(resamples)
    width = max(256, len(values) // 10)
    while len(pending):
        start = max(0, len(values) // 2 - width // 2)
        end = min(len(values), start + width)
        if end - start < len(values) and end == len(values):
            start = max(0, end - width)
        counts = taken[pending]
        before = counts @ np.bincount(owners[:start], minlength=len(hosts))
        running = before[:, None] + np.cumsum(counts[:, owners[start:end]], axis=1)
        lows, highs = low_rank[pending], high_rank[pending]
        inside = (before <= lows) & (running[:, -1] > highs)
        if end - start == len(values):
            inside[:] = True
        rows = np.flatnonzero(inside)
        below_low = (running[rows] <= lows[rows, None]).sum(axis=1)
        below_high = (running[rows] <= highs[rows, None]).sum(axis=1)
        result[pending[rows]] = (ordered[start + below_low] + ordered[start + below_high]) / 2
        pending = pending[~inside]
        width *= 4
    return result


def cluster_resamples(slower: Sequence[Sequence[float]], faster: Sequence[Sequence[float]],
                      wanted: int) -> int:
    """As in `ratio_interval`: past ~4 M resampled values a side, fewer resamples suffice."""
    cells = max(sum(len(h) for h in slower), sum(len(h) for h in faster))
    return min(wanted, max(1000, RESAMPLED_VALUES // max(1, cells)))


def cluster_ratio_interval(slower: Sequence[Sequence[float]], faster: Sequence[Sequence[float]],
                           options: GapOptions) -> tuple[float, float]:
    """Bootstrap interval of median(slower) / median(faster) where each side is a list of
    hosts' per-GPU medians: hosts are resampled with replacement, each with all its GPUs."""
    rng = np.random.default_rng(options.seed)
    resamples = cluster_resamples(slower, faster, options.resamples)
    ratios = (resampled_medians(slower, rng, resamples)
              / resampled_medians(faster, rng, resamples))
    tail = (1.0 - options.confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def host_test(slower: Sequence[Sequence[float]], faster: Sequence[Sequence[float]]) -> float:
    """Two-sided Welch t-test on the log of each host's median: the node as the unit, so a
    gap must stand out from the differences between one provider's own nodes."""
    if min(len(slower), len(faster)) < 2:
        return 1.0
    a = np.log([statistics.median(h) for h in slower])
    b = np.log([statistics.median(h) for h in faster])
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    return float(_scipy_stats().ttest_ind(a, b, equal_var=False).pvalue)


def rank_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney p-value (exact for small samples without ties)."""
    if len(set(a) | set(b)) == 1:
        return 1.0
    return float(_scipy_stats().mannwhitneyu(a, b, alternative="two-sided").pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: controls the chance of any false call at alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


# The measures' figures whose medians the two sides compare, and their texts.
NUMERIC = ("power_limit_w", "sm_clock_mhz", "power_w", "temperature_c", "drop",
           "power_capped_share")
CATEGORICAL = ("driver_version", "variant", "virtualization_mode", "stack")
FLAGS_COMPARED = ("thermal_throttled", "hw_slowdown", "contended", "not_steady", "not_soaked")


@dataclass(frozen=True)
class Repeat:
    """How far one side's median moves between runs: `sd` the relative run-to-run sd of
    one host's figure, `runs` the independent runs the median rests on (the module's
    docstring)."""

    sd: float
    runs: float

    @classmethod
    def of(cls, gpus: Sequence[GpuMeasure]) -> Repeat:
        """Per host the median sd and the median result count of its GPUs (its GPUs share
        the host's run); a side of several hosts sums their runs."""
        hosts: dict[str, list[GpuMeasure]] = defaultdict(list)
        for g in gpus:
            hosts[g.host].append(g)
        sds = [statistics.median(repeat_sd(g) for g in members) for members in hosts.values()]
        runs = [max(1.0, float(statistics.median(g.results for g in members)))
                for members in hosts.values()]
        return cls(float(statistics.median(sds)), float(sum(runs)))

    def spread(self, median: float) -> float:
        """The sd of the side's median between runs, in its units."""
        return median * self.sd / math.sqrt(self.runs)


@dataclass(frozen=True)
class Side:
    """One provider's GPUs of a group, summarised once for every comparison it enters (a
    provider of 20,000 GPUs meets three others: reading its measures once per pair cost
    the report a second)."""

    gpus: list[GpuMeasure]
    tflops: list[float]
    hosts: list[list[float]]  # each host's GPUs' figures, hosts by name
    medians: dict[str, float | None]  # of NUMERIC, None where no GPU has one
    common: dict[str, str]  # of CATEGORICAL, each value with its count where they differ
    flags: Counter[str]  # GPUs carrying each flag
    repeat: Repeat

    @classmethod
    def of(cls, gpus: list[GpuMeasure]) -> Side:
        """The summary of `gpus`."""
        hosts: dict[str, list[float]] = defaultdict(list)
        for g in gpus:
            hosts[g.host].append(g.tflops)
        medians = {}
        for name in NUMERIC:
            values = [v for v in map(attrgetter(name), gpus) if v is not None]
            medians[name] = statistics.median(values) if values else None
        common = {}
        for name in CATEGORICAL:
            counts = Counter(value or "unknown" for value in map(attrgetter(name), gpus))
            common[name] = ", ".join(value if n == len(gpus) else f"{value} ({n})"
                                     for value, n in counts.most_common())
        return cls(gpus, [g.tflops for g in gpus],
                   [values for _, values in sorted(hosts.items())], medians, common,
                   Counter(flag for g in gpus for flag in g.flags), Repeat.of(gpus))


# Absolute differences worth naming: a die 3 degrees hotter under the same power cap
# leaks more and clocks lower; a drop 0.5 points larger is half the 0.2-1.2% that
# separated cool-start from soaked figures on the lent cards (docs/harness.md, "soaked").
TEMPERATURE_DIFFERS_C = 3.0
DROP_DIFFERS = 0.005


def explain(faster: list[GpuMeasure], slower: list[GpuMeasure]) -> tuple[Difference, ...]:
    """What differs between the two sides' GPUs, among what can slow a matmul."""
    return _explain(Side.of(faster), Side.of(slower))


def _explain(faster: Side, slower: Side) -> tuple[Difference, ...]:
    found: list[Difference] = []
    numeric = (("power limit", "power_limit_w", "{:.0f} W", 0.02),
               ("SM clock under load", "sm_clock_mhz", "{:.0f} MHz", 0.02),
               ("power drawn under load", "power_w", "{:.0f} W", 0.03))
    for what, name, shown, tolerance in numeric:
        fast, slow = faster.medians[name], slower.medians[name]
        if fast is not None and slow is not None and abs(fast - slow) > tolerance * max(
                abs(fast), abs(slow), 1e-9):
            found.append(Difference(what, shown.format(fast), shown.format(slow)))
    absolute = (("temperature under load", "temperature_c", "{:.0f} °C",
                 TEMPERATURE_DIFFERS_C),
                ("drop from the first 20 s to soaked", "drop", "{:.1%}", DROP_DIFFERS))
    for what, name, shown, least in absolute:
        fast, slow = faster.medians[name], slower.medians[name]
        if fast is not None and slow is not None and abs(fast - slow) >= least:
            found.append(Difference(what, shown.format(fast), shown.format(slow)))
    fast_cap = faster.medians["power_capped_share"]
    slow_cap = slower.medians["power_capped_share"]
    if fast_cap is not None and slow_cap is not None and abs(fast_cap - slow_cap) >= 0.10:
        found.append(Difference("time power-capped", f"{fast_cap:.0%}", f"{slow_cap:.0%}"))
    categorical = (("driver", "driver_version"), ("variant", "variant"),
                   ("virtualization", "virtualization_mode"),
                   # Only ever differs when the report compares across stacks.
                   ("software stack", "stack"))
    for what, name in categorical:
        fast_text, slow_text = faster.common[name], slower.common[name]
        if fast_text != slow_text:
            found.append(Difference(what, fast_text, slow_text))
    for flag in FLAGS_COMPARED:
        fast_n, slow_n = faster.flags[flag], slower.flags[flag]
        if slow_n > fast_n:
            found.append(Difference(flag.replace("_", " "),
                                    f"{fast_n} of {counted(len(faster.gpus), 'GPU')}",
                                    f"{slow_n} of {counted(len(slower.gpus), 'GPU')}"))
    return tuple(found)


def _groups(data: Dataset) -> dict[tuple[Config, str, str], dict[str, list[GpuMeasure]]]:
    listing = {(h.provider, h.host): h.listing.label for h in data.hosts
               if h.listing.names_hardware}
    groups: dict[tuple[Config, str, str], dict[str, list[GpuMeasure]]] = defaultdict(
        lambda: defaultdict(list))
    for m in data.measures:
        groups[(m.config, "variant", m.variant)][m.provider].append(m)
        label = listing.get((m.provider, m.host))
        if label is not None:
            groups[(m.config, "listing", label)][m.provider].append(m)
    # A listing group that holds one variant only repeats the variant's comparison.
    return {key: providers for key, providers in groups.items()
            if key[1] == "variant" or len({m.variant for gpus in providers.values()
                                           for m in gpus}) > 1}


def compare_providers(data: Dataset, options: GapOptions | None = None) -> list[Comparison]:
    """Every pair of providers with enough GPUs in a group, systematic or not."""
    options = options or GapOptions()
    pending: list[tuple[tuple[Config, str, str], Side, Side]] = []
    for key, providers in sorted(_groups(data).items()):
        enough = {p: Side.of(gpus) for p, gpus in sorted(providers.items())
                  if len(gpus) >= options.min_gpus}
        for a, b in combinations(sorted(enough), 2):
            first, second = enough[a], enough[b]
            if key[1] == "listing" and len({m.variant for m in first.gpus + second.gpus}) == 1:
                continue  # the same as comparing within the variant
            if statistics.median(first.tflops) < statistics.median(second.tflops):
                first, second = second, first
            pending.append((key, first, second))
    verdicts = judge([(Sample(fast.tflops, fast.hosts, fast.repeat),
                       Sample(slow.tflops, slow.hosts, slow.repeat))
                      for _, fast, slow in pending], options)
    return [Comparison(
        config=key[0], within=key[1], group=key[2], faster=fast.gpus[0].provider,
        slower=slow.gpus[0].provider, faster_gpus=len(fast.gpus), slower_gpus=len(slow.gpus),
        faster_hosts=len(fast.hosts), slower_hosts=len(slow.hosts),
        faster_median=v.faster_median, slower_median=v.slower_median, ratio=v.ratio,
        ci_low=v.ci_low, ci_high=v.ci_high, p_value=v.p_value, p_adjusted=v.p_adjusted,
        host_p_adjusted=v.host_p_adjusted, ranges_separate=v.ranges_separate,
        systematic=v.systematic, differences=_explain(fast, slow), repeat_margin=v.repeat_margin)
        for (key, fast, slow), v in zip(pending, verdicts, strict=True)]


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: each unit's figure (a GPU's median, a pair's copy, a
    node's all-reduce) and the same figures by host, in any order; and how far its
    median moves between runs, where that is known (the matmul's, not the node suite's)."""

    values: Sequence[float]
    hosts: Sequence[Sequence[float]]
    repeat: Repeat | None = None


@dataclass(frozen=True)
class Verdict:
    """What the module's rule says of one (faster, slower) pair of samples."""

    faster_median: float
    slower_median: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    p_adjusted: float
    host_p_adjusted: float | None
    ranges_separate: bool
    systematic: bool
    repeat_margin: float | None  # one host a side, where both samples carry a Repeat


def judge(pairs: Sequence[tuple[Sample, Sample]], options: GapOptions) -> list[Verdict]:
    """The rule of the module's docstring on each (faster, slower) pair, the pairs being
    one family for Holm's correction: the matmul's comparisons are one, the node suite's
    (fleet/analysis/node/gaps.py) another."""
    raw = [rank_test(fast.values, slow.values) for fast, slow in pairs]
    adjusted = holm(raw)
    # The family for Holm is the comparisons the node-level test can judge (two hosts
    # a side or more): the others are never called, so they take no share of the 5%.
    testable = [i for i, (fast, slow) in enumerate(pairs)
                if min(len(fast.hosts), len(slow.hosts)) >= 2]
    host_adjusted: list[float | None] = [None] * len(pairs)
    for i, value in zip(testable, holm([host_test(pairs[i][1].hosts, pairs[i][0].hosts)
                                        for i in testable]), strict=True):
        host_adjusted[i] = value
    found = []
    for (fast, slow), p, p_adj, host_p in zip(pairs, raw, adjusted, host_adjusted,
                                              strict=True):
        fast_median = statistics.median(fast.values)
        slow_median = statistics.median(slow.values)
        ratio = slow_median / fast_median
        nodes = min(len(fast.hosts), len(slow.hosts))
        if nodes >= 2:
            low, high = cluster_ratio_interval(slow.hosts, fast.hosts, options)
        else:  # called only with min_hosts 1, and beyond the repeat margin below
            low, high = ratio_interval(slow.values, fast.values, options)
        margin = None
        if nodes < 2 and fast.repeat is not None and slow.repeat is not None:
            margin = Z975 * math.hypot(fast.repeat.spread(fast_median),
                                       slow.repeat.spread(slow_median)) / fast_median
        # Two hosts a side: the host test sees the hosts' wander. One: only the repeat
        # margin can stand for it (the module's docstring).
        between_hosts = (host_p < options.significance if host_p is not None
                         else margin is not None and 1.0 - ratio > margin)
        systematic = (nodes >= options.min_hosts and high < 1.0
                      and 1.0 - ratio >= options.threshold and p_adj < options.significance
                      and between_hosts)
        found.append(Verdict(fast_median, slow_median, ratio, low, high, p, p_adj, host_p,
                             max(slow.values) < min(fast.values), systematic, margin))
    return found
