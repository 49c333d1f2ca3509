"""Stragglers, provider gaps and the synchronous figure on the job suite's figures
(training tokens/s and decode tokens/s), each within one job configuration and one
variant, never across either.

The rules are the one comparison every suite reads (fleet/analysis/compare.py, the
synchronous figure of fleet/analysis/sync.py), on tokens/s, not copies of them:
- a straggler: the GPU's tokens/s at least the straggler threshold (3%) and more than four
  robust standard deviations below the median of its node's other GPUs of the same
  configuration (`below_others`, fleet/analysis/compare.py), three GPUs or more. The
  matmul's second half, the repeat margin, is left out: the job's run-to-run sd rests on
  seven GPUs of one variant (agent/timing/repeat.py JOB_SPREADS, 0.07-0.35%, dof 21), too few
  cards to set a margin by; as the node suite's outliers (fleet/analysis/node/outliers.py) the
  sigma is floored at 0.5% of the median instead of 0.25%, and the 3% threshold binds
  first for a steady node (eight H100s' matmul margin was 1.0%);
- a provider gap: the gap rule (fleet/analysis/compare.py, `judge`) on per-GPU
  tokens/s with the host as the cluster: bootstrap interval on the ratio of medians, rank
  test on the GPUs and Welch's test on the hosts after Holm, at least the gap threshold
  and two hosts a side. The job's comparisons are one family for Holm, apart from the
  matmul's and the node suite's: adding the job suite must not change whether a matmul
  gap is called;
- the synchronous figure: fleet/analysis/sync.py's, each GPU counted at its node's
  slowest, which a data-parallel step waits for, read on tokens/s.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from fleet.analysis.compare import Difference, GapOptions, Sample, Sides, below_others, judge
from fleet.analysis.job.figures import JobConfig, JobGpu
from fleet.analysis.matmul.gaps import TEMPERATURE_DIFFERS_C
from fleet.analysis.matmul.stragglers import StragglerOptions
from fleet.analysis.sync import GpuFigure, node_figures, synchronous_median
from fleet.words import counted

# As the node suite's outliers floor theirs: without the repeat margin (the docstring).
JOB_SIGMA_FLOOR = 0.005


@dataclass(frozen=True)
class JobStraggler:
    """A GPU whose job figure is well below the other GPUs of its node."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    config: JobConfig
    tokens_per_s: float
    node_median: float  # of the node's other GPUs
    node_gpus: int
    sigma: float  # robust standard deviation of the others, tokens/s

    @property
    def deficit(self) -> float:
        """How far below its node's median the GPU is: 0.1 is 10% slower."""
        return 1.0 - self.tokens_per_s / self.node_median

    @property
    def evidence(self) -> str:
        """The GPU's figure against its node's in words."""
        return (f"{self.config.figure} {self.tokens_per_s:,.0f} against "
                f"{self.node_median:,.0f}, the median of the node's {self.node_gpus - 1} "
                f"other GPUs ({self.deficit:.1%} slower; "
                f"{(self.node_median - self.tokens_per_s) / self.sigma:.0f} robust standard "
                "deviations of theirs)")


def find_job_stragglers(gpus: Sequence[JobGpu], options: StragglerOptions | None = None
                        ) -> list[JobStraggler]:
    """Every GPU slower than the other GPUs of its node, per job configuration."""
    options = options or StragglerOptions()
    nodes: dict[tuple[str, str, JobConfig, str], list[JobGpu]] = defaultdict(list)
    for g in gpus:
        nodes[(g.provider, g.host, g.config, g.variant)].append(g)
    found = []
    for (_, _, config, _), members in sorted(nodes.items(), key=lambda item: (
            item[0][2].order(), item[0][0], item[0][1], item[0][3])):
        if len(members) < options.min_gpus:
            continue
        for g in members:
            others = [o.tokens_per_s for o in members if o is not g]
            below, centre, sigma = below_others(g.tokens_per_s, others, options.threshold,
                                                options.sigmas, JOB_SIGMA_FLOOR)
            if below:
                found.append(JobStraggler(g.provider, g.host, g.gpu_index, g.variant, config,
                                          g.tokens_per_s, centre, len(members), sigma))
    return found


@dataclass(frozen=True, kw_only=True)
class JobComparison(Sides):
    """Two providers' GPUs of one variant and job configuration, compared on tokens/s."""

    config: JobConfig
    variant: str
    faster_gpus: int
    slower_gpus: int

    @property
    def evidence(self) -> str:
        """Both medians, the ratio's interval and the tests, in words."""
        return (f"{self.config.figure}: {self.slower} {self.slower_median:,.0f} (median of "
                f"{counted(self.slower_gpus, 'GPU')} on {counted(self.slower_hosts, 'host')})"
                f" vs {self.faster} {self.faster_median:,.0f} "
                f"({counted(self.faster_gpus, 'GPU')} on "
                f"{counted(self.faster_hosts, 'host')}): {self.tests}")


def _differences(faster: Sequence[JobGpu], slower: Sequence[JobGpu]) -> tuple[Difference, ...]:
    """What differs between the two sides' GPUs under the job, with the matmul gap's
    tolerances: SM clock 2%, power drawn 3%, temperature 3 °C."""
    found = []
    for what, name, shown, relative, absolute in (
            ("SM clock under the job", "sm_clock_mhz", "{:,.0f} MHz", 0.02, None),
            ("power drawn under the job", "power_w", "{:.0f} W", 0.03, None),
            ("temperature under the job", "temperature_c", "{:.0f} °C", None,
             TEMPERATURE_DIFFERS_C)):
        fast_values = [v for v in (getattr(g, name) for g in faster) if v is not None]
        slow_values = [v for v in (getattr(g, name) for g in slower) if v is not None]
        if not fast_values or not slow_values:
            continue
        fast, slow = statistics.median(fast_values), statistics.median(slow_values)
        differs = (abs(fast - slow) > relative * max(abs(fast), abs(slow))
                   if relative is not None else abs(fast - slow) >= (absolute or 0.0))
        if differs:
            found.append(Difference(what, shown.format(fast), shown.format(slow)))
    return tuple(found)


def compare_job_providers(gpus: Sequence[JobGpu], options: GapOptions | None = None
                          ) -> list[JobComparison]:
    """Every pair of providers with enough GPUs of one variant and job configuration,
    systematic or not."""
    options = options or GapOptions()
    groups: dict[tuple[JobConfig, str], dict[str, list[JobGpu]]] = defaultdict(
        lambda: defaultdict(list))
    for g in gpus:
        groups[(g.config, g.variant)][g.provider].append(g)
    pending: list[tuple[JobConfig, str, list[JobGpu], list[JobGpu]]] = []
    samples: list[tuple[Sample, Sample]] = []
    for (config, variant), providers in sorted(groups.items(), key=lambda item: (
            item[0][0].order(), item[0][1])):
        sides: dict[str, tuple[list[JobGpu], Sample]] = {}
        for provider, members in sorted(providers.items()):
            if len(members) < options.min_gpus:
                continue
            hosts: dict[str, list[float]] = defaultdict(list)
            for g in members:
                hosts[g.host].append(g.tokens_per_s)
            sides[provider] = (members, Sample([g.tokens_per_s for g in members],
                                               [v for _, v in sorted(hosts.items())]))
        for a, b in combinations(sorted(sides), 2):
            if statistics.median(sides[a][1].values) < statistics.median(sides[b][1].values):
                a, b = b, a
            pending.append((config, variant, sides[a][0], sides[b][0]))
            samples.append((sides[a][1], sides[b][1]))
    return [JobComparison(
        config=config, variant=variant, faster=fast[0].provider, slower=slow[0].provider,
        faster_gpus=len(fast), slower_gpus=len(slow),
        faster_hosts=len(fast_sample.hosts), slower_hosts=len(slow_sample.hosts),
        differences=_differences(fast, slow), **v.fields())
        for (config, variant, fast, slow), (fast_sample, slow_sample), v in zip(
            pending, samples, judge(samples, options), strict=True)]


def _figures(gpus: Sequence[JobGpu]) -> list[GpuFigure[JobConfig]]:
    """The job's GPUs as the synchronous figure reads them: tokens/s per job
    configuration."""
    return [GpuFigure(g.provider, g.host, g.variant, g.config, g.gpu_index, g.tokens_per_s)
            for g in gpus]


@dataclass(frozen=True)
class JobSync:
    """One node's GPUs of one variant and job configuration: what a data-parallel step
    gets (GPU count x the slowest GPU) beside GPU count x the median."""

    provider: str
    host: str
    variant: str
    config: JobConfig
    gpus: int
    median_tokens_per_s: float
    slowest_tokens_per_s: float
    slowest_gpu: int

    @property
    def sync_tokens_per_s(self) -> float:
        """GPU count x the slowest GPU."""
        return self.gpus * self.slowest_tokens_per_s

    @property
    def node_median_tokens_per_s(self) -> float:
        """GPU count x the per-GPU median."""
        return self.gpus * self.median_tokens_per_s

    @property
    def loss(self) -> float:
        """What waiting for the slowest GPU costs: 0.012 is 1.2% of the median figure."""
        return 1.0 - self.slowest_tokens_per_s / self.median_tokens_per_s


def job_sync_nodes(gpus: Sequence[JobGpu]) -> list[JobSync]:
    """Each node of two GPUs or more, per variant and job configuration."""
    found = [JobSync(n.provider, n.host, n.variant, n.key, n.gpus, n.median, n.slowest,
                     n.slowest_gpu) for n in node_figures(_figures(gpus))]
    found.sort(key=lambda s: (s.config.order(), s.provider, s.host, s.variant))
    return found


def sync_tokens_per_s(gpus: Sequence[JobGpu]) -> float | None:
    """The median over `gpus` of their node's slowest GPU's tokens/s (sync.py's
    `synchronous_median`); None without GPUs."""
    return synchronous_median(_figures(gpus))
