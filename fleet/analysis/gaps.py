"""Systematic gaps between providers: is one provider's GPU really slower, or is it noise?

Seed 001's 8192³ figure shows each provider's runtimes in a range of their own. fleet
calls a gap *systematic* only on evidence a skeptic accepts, with the GPU as the unit
(per-GPU medians, so a thousand runs of one slow box remain one slow box):

- the ratio of the two providers' medians (slower / faster) has a bootstrap interval
  (percentile method, GPUs resampled within each provider, 95% by default) that excludes
  1, "no gap";
- the Mann-Whitney rank test on the two sets of per-GPU medians rejects "same
  distribution" at 5%, after Holm's correction for every comparison in the report (a
  report comparing many pairs would otherwise find gaps by chance);
- the gap, 1 - ratio, is at least the threshold (2% by default): smaller gaps can be
  real and still not worth a dispute.

Whether the two ranges separate outright (the slowest GPU of the faster provider above
the fastest of the slower) is reported beside it as evidence, not required: with eight
GPUs a side and 1% spread per GPU, a true 3% gap separates the ranges only about half the
time. The percentile interval is used because BCa's acceleration estimate is unstable
for medians of a handful of GPUs.

Comparisons are made per benchmark configuration, within one variant (like for like), and
within one listing when a listing covers several variants (what the money bought).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from fleet.analysis.dataset import Config, Dataset, GpuMeasure

RESAMPLED_VALUES = 4_000_000


@dataclass(frozen=True)
class GapOptions:
    threshold: float = 0.02
    confidence: float = 0.95
    significance: float = 0.05  # of the rank test, after Holm
    min_gpus: int = 3  # per provider: fewer cannot support an interval
    resamples: int = 4000
    seed: int = 0  # the bootstrap's: the same store gives the same report


@dataclass(frozen=True)
class Difference:
    """Something that differs between the two providers' GPUs and may explain a gap."""

    what: str
    faster: str
    slower: str


@dataclass(frozen=True)
class Comparison:
    config: Config
    within: str  # "variant" or "listing"
    group: str  # the variant, or the listing's label
    faster: str
    slower: str
    faster_gpus: int
    slower_gpus: int
    faster_median: float
    slower_median: float
    ratio: float  # slower median / faster median
    ci_low: float
    ci_high: float
    p_value: float  # Mann-Whitney, two-sided
    p_adjusted: float  # Holm, over every comparison in the report
    ranges_separate: bool
    systematic: bool
    differences: tuple[Difference, ...]

    @property
    def gap(self) -> float:
        return 1.0 - self.ratio

    @property
    def evidence(self) -> str:
        return (f"{self.slower} {self.slower_median:.1f} TFLOP/s (median of {self.slower_gpus} "
                f"GPUs) vs {self.faster} {self.faster_median:.1f} ({self.faster_gpus} GPUs): "
                f"ratio {self.ratio:.3f}, 95% interval {self.ci_low:.3f}-{self.ci_high:.3f}; "
                f"rank test p = {self.p_value:.2g} (Holm-adjusted {self.p_adjusted:.2g}); "
                f"ranges {'separate' if self.ranges_separate else 'overlap'}")


def _ratio_of_medians(slower: NDArray[np.float64], faster: NDArray[np.float64],
                      axis: int = -1) -> NDArray[np.float64]:
    result: NDArray[np.float64] = np.median(slower, axis=axis) / np.median(faster, axis=axis)
    return result


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
    result = stats.bootstrap((a, b), _ratio_of_medians, vectorized=True, paired=False,
                             n_resamples=resamples,
                             confidence_level=options.confidence, method="percentile",
                             rng=np.random.default_rng(options.seed))
    low, high = result.confidence_interval
    return float(low), float(high)


def rank_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney p-value (exact for small samples without ties)."""
    if len(set(a) | set(b)) == 1:
        return 1.0
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: controls the chance of any false call at alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _median_of(gpus: list[GpuMeasure], read: Callable[[GpuMeasure], float | None]
               ) -> float | None:
    values = [v for v in map(read, gpus) if v is not None]
    return statistics.median(values) if values else None


def _common(gpus: list[GpuMeasure], read: Callable[[GpuMeasure], str | None]) -> str:
    counts = Counter(read(g) or "unknown" for g in gpus)
    return ", ".join(value if n == len(gpus) else f"{value} ({n})"
                     for value, n in counts.most_common())


def explain(faster: list[GpuMeasure], slower: list[GpuMeasure]) -> tuple[Difference, ...]:
    """What differs between the two sides' GPUs, among what can slow a matmul."""
    found: list[Difference] = []
    numeric: tuple[tuple[str, Callable[[GpuMeasure], float | None], str, float], ...] = (
        ("power limit", lambda g: g.power_limit_w, "{:.0f} W", 0.02),
        ("SM clock under load", lambda g: g.sm_clock_mhz, "{:.0f} MHz", 0.02),
        ("power drawn under load", lambda g: g.power_w, "{:.0f} W", 0.03),
    )
    for what, read, shown, tolerance in numeric:
        fast, slow = _median_of(faster, read), _median_of(slower, read)
        if fast is not None and slow is not None and abs(fast - slow) > tolerance * max(
                abs(fast), abs(slow), 1e-9):
            found.append(Difference(what, shown.format(fast), shown.format(slow)))
    fast_cap = _median_of(faster, lambda g: g.power_capped_share)
    slow_cap = _median_of(slower, lambda g: g.power_capped_share)
    if fast_cap is not None and slow_cap is not None and abs(fast_cap - slow_cap) >= 0.10:
        found.append(Difference("time power-capped", f"{fast_cap:.0%}", f"{slow_cap:.0%}"))
    categorical: tuple[tuple[str, Callable[[GpuMeasure], str | None]], ...] = (
        ("driver", lambda g: g.driver_version),
        ("variant", lambda g: g.variant),
        ("virtualization", lambda g: g.virtualization_mode),
    )
    for what, text in categorical:
        fast_text, slow_text = _common(faster, text), _common(slower, text)
        if fast_text != slow_text:
            found.append(Difference(what, fast_text, slow_text))
    for flag in ("thermal_throttled", "hw_slowdown", "contended", "not_steady"):
        fast_n = sum(flag in g.flags for g in faster)
        slow_n = sum(flag in g.flags for g in slower)
        if slow_n > fast_n:
            found.append(Difference(flag.replace("_", " "), f"{fast_n} of {len(faster)} GPUs",
                                    f"{slow_n} of {len(slower)} GPUs"))
    return tuple(found)


def _groups(data: Dataset) -> dict[tuple[Config, str, str], dict[str, list[GpuMeasure]]]:
    listing = {(h.provider, h.host): h.listing.label for h in data.hosts
               if h.listing.expect}
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
    pending: list[tuple[tuple[Config, str, str], list[GpuMeasure], list[GpuMeasure]]] = []
    for key, providers in sorted(_groups(data).items()):
        enough = {p: gpus for p, gpus in sorted(providers.items())
                  if len(gpus) >= options.min_gpus}
        for a, b in combinations(sorted(enough), 2):
            first, second = enough[a], enough[b]
            if key[1] == "listing" and len({m.variant for m in first + second}) == 1:
                continue  # the same as comparing within the variant
            if statistics.median(g.tflops for g in first) < statistics.median(
                    g.tflops for g in second):
                first, second = second, first
            pending.append((key, first, second))
    raw = [rank_test([g.tflops for g in fast], [g.tflops for g in slow])
           for _, fast, slow in pending]
    adjusted = holm(raw)
    found = []
    for (key, fast, slow), p, p_adj in zip(pending, raw, adjusted, strict=True):
        fast_values = [g.tflops for g in fast]
        slow_values = [g.tflops for g in slow]
        fast_median, slow_median = statistics.median(fast_values), statistics.median(
            slow_values)
        ratio = slow_median / fast_median
        low, high = ratio_interval(slow_values, fast_values, options)
        systematic = (high < 1.0 and 1.0 - ratio >= options.threshold
                      and p_adj < options.significance)
        found.append(Comparison(
            config=key[0], within=key[1], group=key[2], faster=fast[0].provider,
            slower=slow[0].provider, faster_gpus=len(fast), slower_gpus=len(slow),
            faster_median=fast_median, slower_median=slow_median, ratio=ratio, ci_low=low,
            ci_high=high, p_value=p, p_adjusted=p_adj,
            ranges_separate=max(slow_values) < min(fast_values), systematic=systematic,
            differences=explain(fast, slow)))
    return found
