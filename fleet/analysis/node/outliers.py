"""Node outliers: a GPU's memory or host link, or a GPU pair's copy, clearly below the rest
of its own node: stragglers (fleet/analysis/matmul/stragglers.py) of the node suite.

The node is the fairest reference: the same board, driver, host and moment. A GPU whose
HBM copy runs 10% under its seven siblings has a slow stack or memory clock that a
bandwidth-bound job feels and a compute-bound GEMM hides; a pair 5% under the node's
other pairs has lost a link (one NVLink 4 link of 18 is 5.6% of a pair's bandwidth).

Rule, the straggler's: the figure is below the median of the node's other figures of the
same configuration by at least the figure's threshold and by more than four robust
standard deviations of those others (1.4826 x their MAD, floored at 0.5% of their
median). Thresholds: 5% for memory copies and pairs, whose siblings agree to 0.3%-0.5%
on the lent nodes (3,010 GB/s on every H100; pairs 394.5-396 one way, 768-771 both ways);
10% for pinned host copies, which also move with where the host buffer sits (the NUMA
node of the agent's memory against the GPU's root port) and not only with the GPU's
own link. Pageable copies are left out: they measure the host's memory copy as much as
the link (9 and 17 GB/s on the lent H200s, against 55 pinned). Three GPUs (or pair
figures) or more: with two, nothing says which is the slow one.

Simulated (tests/report/test_node_findings.py), 8-GPU nodes whose GPUs and pairs are 0.5%
apart: no outlier on 1,000 healthy nodes; a pair 10% slow found on every draw, one with
an NVLink link lost (5.6%) on 98.8% of 1,000, a GPU's memory 8% slow on every draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fleet.analysis.compare import below_others
from fleet.analysis.node.figures import NodeConfig


@dataclass(frozen=True)
class NodeOutlierOptions:
    """How far below its node's others a figure must be, per kind of figure."""

    memory: float = 0.05
    host_link: float = 0.10
    pair: float = 0.05
    sigmas: float = 4.0
    sigma_floor: float = 0.005
    min_units: int = 3


@dataclass(frozen=True)
class NodeOutlier:
    """A GPU's or a pair's figure well below the same figure of the rest of its node."""

    provider: str
    host: str
    variant: str
    config: NodeConfig
    gpu_index: int
    peer_index: int | None  # a pair's other GPU
    gbs: float
    node_median: float  # of the node's other figures of this configuration
    others: int
    sigma: float  # robust standard deviation of the others, GB/s

    @property
    def deficit(self) -> float:
        """How far below its node's median the figure is: 0.1 is 10% lower."""
        return 1.0 - self.gbs / self.node_median

    @property
    def name(self) -> str:
        """"GPU 3", or a pair: "GPU 0 to GPU 3"; "GPUs 0 and 3 (both ways)"."""
        if self.peer_index is None:
            return f"GPU {self.gpu_index}"
        if self.config.direction == "both_ways":
            return f"GPUs {self.gpu_index} and {self.peer_index} (both ways)"
        return f"GPU {self.gpu_index} to GPU {self.peer_index}"

    @property
    def evidence(self) -> str:
        """The figure against its node's, with the deficit and sigmas."""
        return (f"{self.config.figure} {self.gbs:,.1f} GB/s against {self.node_median:,.1f}, "
                f"the median of the node's {self.others} other "
                f"{'pair figures' if self.peer_index is not None else 'GPUs'} "
                f"({self.deficit:.1%} lower; "
                f"{(self.node_median - self.gbs) / self.sigma:.0f} robust standard "
                f"deviations of theirs) at {self.config.label}")


def _threshold(kind: str, options: NodeOutlierOptions) -> float:
    if kind == "memory_copy":
        return options.memory
    if kind == "peer_copy":
        return options.pair
    return options.host_link


def find_node_outliers(figures: pd.DataFrame, options: NodeOutlierOptions | None = None
                       ) -> list[NodeOutlier]:
    """Every GPU or pair figure of `figures` (as fleet.analysis.node.figures.prepare returns them)
    below the rest of its node by the options' margins."""
    options = options or NodeOutlierOptions()
    judged = figures[(figures["kind"].isin(("memory_copy", "peer_copy")))
                     | (figures["kind"].isin(("host_to_device", "device_to_host"))
                        & (figures["memory"] == "pinned"))]
    if judged.empty:
        return []
    keys = [judged["document_id"], judged["config_id"]]
    count = judged.groupby(keys, sort=False)["gbs"].transform("size")
    highest = judged.groupby(keys, sort=False)["gbs"].transform("max")
    thresholds = judged["kind"].map(lambda k: _threshold(str(k), options))
    # The median of the others is at most their highest: a figure within the threshold of
    # its node's highest cannot be flagged, and healthy nodes end here.
    candidates = judged[(count >= options.min_units)
                        & (judged["gbs"] <= (1.0 - thresholds) * highest)]
    nodes = judged.groupby(keys, sort=False)
    found = []
    for key, rows in candidates.groupby([candidates["document_id"],
                                         candidates["config_id"]], sort=False):
        node = nodes.get_group(key)
        for index, provider, host, variant, config, kind, gpu, peer, gbs in zip(
                rows.index.tolist(), *(rows[c].tolist() for c in (
                    "provider", "host", "variant", "config", "kind", "gpu_index",
                    "peer_index", "gbs")), strict=True):
            others = node.loc[node.index != index, "gbs"].tolist()
            below, centre, sigma = below_others(float(gbs), others,
                                                _threshold(str(kind), options),
                                                options.sigmas, options.sigma_floor)
            if below:
                found.append(NodeOutlier(
                    str(provider), str(host), str(variant), config, int(gpu),
                    None if peer is None else int(peer), float(gbs), centre, len(others),
                    sigma))
    found.sort(key=lambda o: (o.provider, o.host, o.config, o.gpu_index,
                          -1 if o.peer_index is None else o.peer_index))
    return found
