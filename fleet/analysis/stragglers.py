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
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from fleet.analysis.dataset import Config, Dataset, GpuMeasure

MAD_TO_SIGMA = 1.4826  # for normally distributed values
SIGMA_FLOOR = 0.0025


@dataclass(frozen=True)
class StragglerOptions:
    """When a GPU is a straggler: how far and how many robust sigmas below its node."""

    threshold: float = 0.03
    sigmas: float = 4.0
    min_gpus: int = 3


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
                "deviations of theirs)")


def below_others(value: float, others: Sequence[float], threshold: float, sigmas: float,
                 floor: float = SIGMA_FLOOR) -> tuple[bool, float, float]:
    """Whether `value` is at least `threshold` (relative) and more than `sigmas` robust
    standard deviations below the median of `others`; with that median and that sigma
    (1.4826 x their median absolute deviation, at least `floor` x the median). The rule
    of the module's docstring, which the node suite's outliers share."""
    centre = statistics.median(others)
    mad = statistics.median(abs(v - centre) for v in others)
    sigma = max(MAD_TO_SIGMA * mad, floor * centre)
    return (value <= (1.0 - threshold) * centre and centre - value > sigmas * sigma,
            centre, sigma)


def find_stragglers(data: Dataset, options: StragglerOptions | None = None) -> list[Straggler]:
    """Every GPU slower than the other GPUs of its node by the options' margins."""
    options = options or StragglerOptions()
    nodes: dict[tuple[str, str, Config], list[GpuMeasure]] = defaultdict(list)
    for m in data.measures:
        nodes[(m.provider, m.host, m.config)].append(m)
    found = []
    for (_, _, config), gpus in sorted(nodes.items()):
        if len(gpus) < options.min_gpus:
            continue
        for gpu in gpus:
            below, centre, sigma = below_others(gpu.tflops, [g.tflops for g in gpus
                                                             if g is not gpu],
                                                options.threshold, options.sigmas)
            if below:
                found.append(Straggler(gpu.provider, gpu.host, gpu.gpu_index, gpu.variant,
                                       config, gpu.tflops, centre, len(gpus), sigma))
    return found
