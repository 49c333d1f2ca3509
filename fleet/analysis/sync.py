"""The synchronous figure: what a node gives a data-parallel job, which waits at every step
for its slowest GPU.

A node's GPUs are not interchangeable in such a job: each step ends when the last GPU
finishes, so the node delivers its GPU count times its *slowest* GPU's throughput, not
times its median. On the lent 4x H100 (issue 32) two GPUs soaked at 79 °C while the
others held 66-67 °C: 4 x 660.4 TFLOP/s against 4 x 668.2 at the median, 1.2% that a
buyer pays for and a synchronous job never gets. Both figures stand side by side, per
node and in what a GPU-hour buys (fleet/analysis/matmul/cost.py): the median for independent
jobs, the synchronous figure for data-parallel training.

Built from the matmul's per-GPU medians (`Dataset.measures`), per node, variant and
configuration: the soaked figure where the results are soaked, as every figure is.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from fleet.analysis.dataset import Config, GpuMeasure


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
    """Each node of two GPUs or more, per variant and configuration."""
    nodes: dict[tuple[str, str, str, Config], list[GpuMeasure]] = defaultdict(list)
    for m in measures:
        nodes[(m.provider, m.host, m.variant, m.config)].append(m)
    found = []
    for (provider, host, variant, config), gpus in nodes.items():
        if len(gpus) < 2:
            continue
        slowest = min(gpus, key=lambda g: (g.tflops, g.gpu_index))
        found.append(SyncNode(provider, host, variant, config, len(gpus),
                              statistics.median(g.tflops for g in gpus), slowest.tflops,
                              slowest.gpu_index))
    found.sort(key=lambda n: (n.config, n.provider, n.host, n.variant))
    return found


def synchronous_tflops(measures: Iterable[GpuMeasure]) -> float | None:
    """The median over the GPUs of `measures` of their node's slowest GPU (per host): what
    each GPU-hour gives a data-parallel job, as the median per-GPU figure gives it an
    independent one. None without measures."""
    by_host: dict[tuple[str, str], list[float]] = defaultdict(list)
    for m in measures:
        by_host[(m.provider, m.host)].append(m.tflops)
    values = [min(v) for v in by_host.values() for _ in v]
    return statistics.median(values) if values else None
