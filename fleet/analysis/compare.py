"""One comparison for every suite: two providers' figures of one kind compared with the
unit of evidence a GPU (or a pair, or a node) and the host as the cluster, and one figure
against the others of its node. The matmul (fleet/analysis/matmul/gaps.py, stragglers.py),
the node suite (fleet/analysis/node/gaps.py, outliers.py) and the job suite
(fleet/analysis/job/compare.py) each hand it their own figures: TFLOP/s, GB/s, tokens/s.

The rule, what it rests on and why (the matmul's module docstring tells it in full,
docs/findings.md "Comparing providers"): a gap is systematic where each side is on at
least two hosts, the cluster-bootstrap interval of the ratio of medians excludes 1, the
rank test on the units and Welch's test on the hosts both reject after Holm's correction
over one family (each suite's comparisons are their own family), and the gap is at least
the threshold. One host a side must also clear what repeat runs could make of the gap,
where the sides carry a `Spread`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

MAD_TO_SIGMA = 1.4826  # for normally distributed values
SIGMA_FLOOR = 0.0025
Z975 = 1.959964  # the normal's 97.5% quantile: the repeat sds carry no dof here


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


@dataclass(frozen=True, kw_only=True)
class Sides:
    """Two providers' figures of one kind, compared: the verdict's fields that every suite's
    comparison (the matmul's, the node suite's, the job suite's) carries alike, each suite's
    own adding what it was compared within (configuration, variant) and how many units."""

    faster: str
    slower: str
    faster_hosts: int
    slower_hosts: int
    faster_median: float
    slower_median: float
    ratio: float  # slower median / faster median
    ci_low: float
    ci_high: float
    p_value: float  # the rank test on the units, two-sided
    p_adjusted: float  # Holm, over the suite's family of comparisons
    # Welch's t on per-host log medians, Holm-adjusted; None with fewer than two hosts a
    # side, where it cannot be run.
    host_p_adjusted: float | None
    ranges_separate: bool
    systematic: bool
    differences: tuple[Difference, ...]
    # One host a side: how large a gap (relative to the faster median) repeat runs of the
    # two hosts could make, 95%; None with two hosts a side or more, or without repeats.
    repeat_margin: float | None = None

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


class Spread(Protocol):
    """How far one side's median moves between runs (the matmul's `Repeat`)."""

    def spread(self, median: float) -> float:
        """The sd of the side's median between runs, in its units."""
        ...


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: each unit's figure (a GPU's median, a pair's copy, a
    node's all-reduce) and the same figures by host, in any order; and how far its
    median moves between runs, where that is known (the matmul's, not the node suite's)."""

    values: Sequence[float]
    hosts: Sequence[Sequence[float]]
    repeat: Spread | None = None


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

    def fields(self) -> dict[str, Any]:
        """The verdict as the keyword arguments of a `Sides`."""
        return dataclasses.asdict(self)


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


def below_others(value: float, others: Sequence[float], threshold: float, sigmas: float,
                 floor: float = SIGMA_FLOOR) -> tuple[bool, float, float]:
    """Whether `value` is at least `threshold` (relative) and more than `sigmas` robust
    standard deviations below the median of `others`; with that median and that sigma
    (1.4826 x their median absolute deviation, at least `floor` x the median). The first
    half of the module docstring's rule, which the node suite's outliers share."""
    centre = statistics.median(others)
    mad = statistics.median(abs(v - centre) for v in others)
    sigma = max(MAD_TO_SIGMA * mad, floor * centre)
    return (value <= (1.0 - threshold) * centre and centre - value > sigmas * sigma,
            centre, sigma)
