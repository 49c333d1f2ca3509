"""Stragglers: a GPU clearly slower than the other GPUs of its own node.

The node is the fairest reference a GPU has: same provider, driver, cooling and power
feed, measured in the same run. A straggler slows every data-parallel job on its node to
its pace, and it is the provider's to replace; it says nothing about the provider as a
whole (provider gaps use medians, which one slow card barely moves).

Rule: the GPU's median is below the median of the node's other GPUs by at least the
threshold (3% by default) and by more than four robust standard deviations of those
others (1.4826 x their median absolute deviation, floored at 0.25% so that identical
siblings do not make every small difference count). Nodes need three GPUs or more: with
two, nothing says which of them is the slow one.

And the shortfall must exceed what repeat runs of the same cards could make of it
(issue #31): centre - value > 1.96 x sqrt((value x sd_g)^2 / n_g + (pi/2) x (centre x
sd_c)^2 / n_c), with sd_g the GPU's relative run-to-run sd (its `repeat_sd`, else its
variant's measured spread, agent/timing/repeat.py) over its n_g results, and sd_c the others'
median sd over n_c = their count x their median number of results: the centre is a median
of independent figures, whose variance is about pi/2 times a mean's. Wander the node's
GPUs share (the room, the power feed) moves the GPU and its centre alike and cancels in
the difference, so counting it as independent errs towards not flagging. A steady node's
margin (1.0% for eight H100s at their 0.5%) sits under the 3% threshold; it binds for a
card that states a wider sd than its node: at 2%, a shortfall under 3.8% is no straggler
(bench/false_flags.py measures both).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from agent.timing.repeat import variant_spread
from fleet.analysis.compare import Z975, below_others
from fleet.analysis.dataset import Config, Dataset, GpuMeasure

# Variance of the median of many independent normal values over that of their mean.
MEDIAN_VARIANCE = math.pi / 2


@dataclass(frozen=True)
class StragglerOptions:
    """When a GPU is a straggler: how far and how many robust sigmas below its node."""

    threshold: float = 0.03
    sigmas: float = 4.0
    min_gpus: int = 3


@dataclass(frozen=True)
class RepeatMargin:
    """How far repeat runs could move a GPU's shortfall against its node's median: the
    relative run-to-run sds and result counts of both, and the 95% margin in TFLOP/s."""

    gpu_sd: float
    gpu_results: int
    node_sd: float
    node_results: float  # the others' count times their median number of results
    margin: float


@dataclass(frozen=True)
class Straggler:
    """A GPU measured well below the other GPUs of its node in one configuration."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    config: Config
    tflops: float
    node_median: float  # of the node's other GPUs
    node_gpus: int
    sigma: float  # robust standard deviation of the others, TFLOP/s
    repeat: RepeatMargin  # how far repeat runs could move the shortfall

    @property
    def deficit(self) -> float:
        """How far below its node's median the GPU is: 0.1 is 10% slower."""
        return 1.0 - self.tflops / self.node_median

    @property
    def evidence(self) -> str:
        """The GPU's throughput against its node's in words, with the deficit and sigmas."""
        return (f"{self.tflops:.1f} TFLOP/s against {self.node_median:.1f}, the median of the "
                f"node's {self.node_gpus - 1} other GPUs ({self.deficit:.1%} slower; "
                f"{(self.node_median - self.tflops) / self.sigma:.0f} robust standard "
                f"deviations of theirs; beyond its repeat interval of "
                f"±{self.repeat.margin / self.node_median:.1%}, from run-to-run sds of "
                f"{self.repeat.gpu_sd:.2%} for the GPU and {self.repeat.node_sd:.2%} for the "
                "others)")


def repeat_sd(gpu: GpuMeasure) -> float:
    """The GPU's relative run-to-run sd: its results' own, else its variant's spread."""
    return gpu.repeat_sd if gpu.repeat_sd is not None else variant_spread(gpu.variant)[0].sd


def repeat_margin(gpu: GpuMeasure, others: Sequence[GpuMeasure], centre: float) -> RepeatMargin:
    """The module docstring's 95% margin for `gpu` against the median `centre` of `others`."""
    gpu_sd, node_sd = repeat_sd(gpu), statistics.median(repeat_sd(g) for g in others)
    gpu_results = max(1, gpu.results)
    node_results = len(others) * max(1.0, float(statistics.median(g.results for g in others)))
    margin = Z975 * math.sqrt((gpu.tflops * gpu_sd) ** 2 / gpu_results
                              + MEDIAN_VARIANCE * (centre * node_sd) ** 2 / node_results)
    return RepeatMargin(gpu_sd, gpu_results, node_sd, node_results, margin)


def find_stragglers(data: Dataset, options: StragglerOptions | None = None) -> list[Straggler]:
    """Every GPU slower than the other GPUs of its node by the options' margins and by
    more than repeat runs could make of it."""
    options = options or StragglerOptions()
    nodes: dict[tuple[str, str, Config], list[GpuMeasure]] = defaultdict(list)
    for m in data.measures:
        nodes[(m.provider, m.host, m.config)].append(m)
    found = []
    for (_, _, config), gpus in sorted(nodes.items()):
        if len(gpus) < options.min_gpus:
            continue
        for gpu in gpus:
            others = [g for g in gpus if g is not gpu]
            below, centre, sigma = below_others(gpu.tflops, [g.tflops for g in others],
                                                options.threshold, options.sigmas)
            if not below:
                continue
            repeat = repeat_margin(gpu, others, centre)
            if centre - gpu.tflops > repeat.margin:
                found.append(Straggler(gpu.provider, gpu.host, gpu.gpu_index, gpu.variant,
                                       config, gpu.tflops, centre, len(gpus), sigma, repeat))
    return found
