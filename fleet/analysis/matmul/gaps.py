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

from fleet.analysis.compare import (
    Difference,
    GapOptions,
    Sample,
    Sides,
    judge,
    repeat_words,
)
from fleet.analysis.dataset import Config, Dataset, GpuMeasure
from fleet.analysis.matmul.stragglers import repeat_sd
from fleet.words import counted


@dataclass(frozen=True, kw_only=True)
class Comparison(Sides):
    """Two providers' GPUs of one group and configuration, compared on throughput (the
    rank test on per-GPU medians)."""

    config: Config
    within: str  # "variant" or "listing"
    group: str  # the variant, or the listing's label
    faster_gpus: int
    slower_gpus: int

    @property
    def evidence(self) -> str:
        """The comparison's figures in words: both medians, the ratio's interval and the tests."""
        return (f"{self.slower} {self.slower_median:.1f} TFLOP/s (median of "
                f"{counted(self.slower_gpus, 'GPU')} on {counted(self.slower_hosts, 'host')}) "
                f"vs {self.faster} {self.faster_median:.1f} ({counted(self.faster_gpus, 'GPU')} "
                f"on {counted(self.faster_hosts, 'host')}): {self.tests}"
                f"{repeat_words(self.gap, self.repeat_margin)}")


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
        differences=_explain(fast, slow), **v.fields())
        for (key, fast, slow), v in zip(pending, verdicts, strict=True)]
