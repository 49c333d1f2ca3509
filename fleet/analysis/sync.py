"""The synchronous figure: what a node gives a data-parallel job, which waits at every step
for its slowest GPU.

A node's GPUs are not interchangeable in such a job: each step ends when the last GPU
finishes, so the node delivers its GPU count times its *slowest* GPU's throughput, not
times its median. On the lent 4x H100 (issue 32) two GPUs soaked at 79 °C while the
others held 66-67 °C: 4 x 660.4 TFLOP/s against 4 x 668.2 at the median, 1.2% that a
buyer pays for and a synchronous job never gets. Both figures stand side by side, per
node and in what a GPU-hour buys (fleet/analysis/matmul/cost.py): the median for independent
jobs, the synchronous figure for data-parallel training.

Built from per-GPU figures of any suite (`GpuFigure`: the matmul's per-GPU medians of
`Dataset.measures` in TFLOP/s, the job suite's tokens/s), per node, variant and
configuration: the soaked figure where the results are soaked, as every figure is.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from fleet.analysis.dataset import Config, GpuMeasure

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class GpuFigure(Generic[K]):
    """One GPU's figure of one configuration `key` (a matmul Config, a job configuration),
    in the suite's own unit."""

    provider: str
    host: str
    variant: str
    key: K
    gpu_index: int
    value: float


@dataclass(frozen=True)
class NodeFigure(Generic[K]):
    """One node's GPUs of one variant and configuration: their median and slowest GPU."""

    provider: str
    host: str
    variant: str
    key: K
    gpus: int
    median: float
    slowest: float
    slowest_gpu: int


def node_figures(figures: Iterable[GpuFigure[K]]) -> list[NodeFigure[K]]:
    """Each node of two GPUs or more, per variant and configuration, in the order first
    seen."""
    nodes: dict[tuple[str, str, str, K], list[GpuFigure[K]]] = defaultdict(list)
    for f in figures:
        nodes[(f.provider, f.host, f.variant, f.key)].append(f)
    found = []
    for (provider, host, variant, key), gpus in nodes.items():
        if len(gpus) < 2:
            continue
        slowest = min(gpus, key=lambda g: (g.value, g.gpu_index))
        found.append(NodeFigure(provider, host, variant, key, len(gpus),
                                statistics.median(g.value for g in gpus), slowest.value,
                                slowest.gpu_index))
    return found


def synchronous_median(figures: Iterable[GpuFigure[K]]) -> float | None:
    """The median over the GPUs of `figures` of their node's slowest GPU (per host): what
    each GPU-hour gives a data-parallel job, as the median per-GPU figure gives it an
    independent one. None without figures."""
    by_host: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f in figures:
        by_host[(f.provider, f.host)].append(f.value)
    values = [min(v) for v in by_host.values() for _ in v]
    return statistics.median(values) if values else None


def _figures(measures: Iterable[GpuMeasure]) -> list[GpuFigure[Config]]:
    return [GpuFigure(m.provider, m.host, m.variant, m.config, m.gpu_index, m.tflops)
            for m in measures]


@dataclass(frozen=True)
class SyncNode:
    """One node's GPUs of one variant and configuration: median and slowest GPU."""

    provider: str
    host: str
    variant: str
    config: Config
    gpus: int
    median_tflops: float  # the median of the node's per-GPU medians
    slowest_tflops: float
    slowest_gpu: int

    @property
    def node_median_tflops(self) -> float:
        """GPU count x the per-GPU median: what independent jobs get from the node."""
        return self.gpus * self.median_tflops

    @property
    def sync_tflops(self) -> float:
        """GPU count x the slowest GPU: what a data-parallel step gets from the node."""
        return self.gpus * self.slowest_tflops

    @property
    def loss(self) -> float:
        """What waiting for the slowest GPU costs: 0.012 is 1.2% of the median figure."""
        return 1.0 - self.slowest_tflops / self.median_tflops

    @property
    def evidence(self) -> str:
        """Both figures, in words."""
        return (f"{self.gpus} x {self.slowest_tflops:.1f} = {self.sync_tflops:,.1f} TFLOP/s "
                f"waiting for GPU {self.slowest_gpu}, against {self.gpus} x "
                f"{self.median_tflops:.1f} = {self.node_median_tflops:,.1f} at the per-GPU "
                f"median ({self.loss:.1%} less)")


def synchronous_nodes(measures: Iterable[GpuMeasure]) -> list[SyncNode]:
    """Each node of two GPUs or more, per variant and configuration, of the matmul."""
    found = [SyncNode(n.provider, n.host, n.variant, n.key, n.gpus, n.median, n.slowest,
                      n.slowest_gpu) for n in node_figures(_figures(measures))]
    found.sort(key=lambda n: (n.config, n.provider, n.host, n.variant))
    return found


def synchronous_tflops(measures: Iterable[GpuMeasure]) -> float | None:
    """The matmul's synchronous figure over `measures` (`synchronous_median`)."""
    return synchronous_median(_figures(measures))
