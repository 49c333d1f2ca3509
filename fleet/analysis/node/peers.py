"""GPU to GPU: a node bought for NVLink whose GPUs cannot reach each other over it, and a
node whose pair copies or all-reduce stand apart from the same variant's other nodes.

**No peer access where NVLink is sold.** An SXM board of Ampere or later sits in an HGX
baseboard where every GPU reaches every other over NVLink (directly, or through
NVSwitch), so every pair of such a node must have CUDA peer access over an NVLink path;
a pass-through VM without the fabric, or peer access disabled, sends every collective
through the host. Older SXM2 boards (V100, P100: a hybrid cube-mesh, not every pair
linked) and PCIe cards with NVLink bridges (H100 NVL: pairs or fours) link only some
pairs, so there the node is called only when no pair has peer access. A node is "sold
for NVLink" when its fingerprint says SXM or shows NVLink links: a single SXM card passed
into a VM shows no links (reference/gpu-variants.md), so the links alone would miss
exactly the node this rule is for.

**Apart from the variant's other nodes.** A node's pair figure (the median of its pairs,
one way and both ways) or all-reduce bus bandwidth is compared with the other nodes of
its variant and configuration (size, GPU count, software stack): it stands apart when at
least 10% below their median and more than four robust standard deviations of theirs
(1.4826 x MAD, floored at 1% of the median: all-reduce repeats spread more than copies),
with three nodes or more. One NVLink 4 link lost of 18 costs a pair 5.6%, two 11%: the
rule catches a node that lost two links or more, and a node without NVLink (20-50 GB/s
over the host, against 395) by far. A node called for missing peer access is not called
again for the pair and all-reduce figures that follow from it.

Simulated (tests/report/test_node_findings.py), eight healthy 8-GPU nodes a variant
(pairs 0.5% apart between nodes, the all-reduce 2%): no node called apart in 1,000
draws; a node that lost two NVLink links is called on its pairs in 98.8% of draws and
on its all-reduce in 64.5% (its 11% against the all-reduce's spread).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import SupportsInt, cast

import numpy as np
import pandas as pd

from fleet.analysis.compare import below_others
from fleet.analysis.node.figures import NodeConfig, optional_int

# Architectures whose SXM boards link only some pairs (DGX-1's hybrid cube-mesh).
PARTLY_LINKED = ("Pascal", "Volta")


@dataclass(frozen=True)
class PeerOptions:
    """When a node's pair or all-reduce figure stands apart from its variant's others."""

    threshold: float = 0.10
    sigmas: float = 4.0
    sigma_floor: float = 0.01
    min_nodes: int = 3


@dataclass(frozen=True)
class MissingPeers:
    """A node sold for NVLink whose GPU pairs lack peer access or an NVLink path."""

    provider: str
    host: str
    variant: str
    every_pair: bool  # whether every pair should have it (SXM, Ampere and later)
    pairs: int  # GPU pairs measured
    without_access: tuple[tuple[int, int], ...]
    without_nvlink: tuple[tuple[int, int], ...]  # peer access, over another path
    paths: tuple[str, ...]  # NVML's paths between the pairs found wanting
    one_way_gbs: float | None  # median one-way copy of the pairs found wanting

    @property
    def title(self) -> str:
        """The finding in a line."""
        if self.without_access:
            return (f"{self.host}: no peer access between GPUs on "
                    f"{len(self.without_access)} of {self.pairs} pairs of an NVLink node")
        return (f"{self.host}: GPUs reach each other without NVLink on "
                f"{len(self.without_nvlink)} of {self.pairs} pairs")

    @property
    def evidence(self) -> str:
        """The pairs, the path NVML gave and what the copies moved."""
        wanting = self.without_access or self.without_nvlink
        shown = ", ".join(f"{a}-{b}" for a, b in wanting[:8])
        if len(wanting) > 8:
            shown += f" and {len(wanting) - 8} more"
        sold = ("an SXM board of this generation links every pair" if self.every_pair
                else "its NVLink links none of its pairs")
        text = (f"{self.variant}: {sold}; pairs {shown} "
                f"{'lack peer access' if self.without_access else 'have peer access'}, "
                f"NVML path {', '.join(self.paths) or 'not read'}")
        if self.one_way_gbs is not None:
            text += f"; {self.one_way_gbs:,.1f} GB/s one way between them"
        return text


@dataclass(frozen=True)
class NodeApart:
    """A node's pair or all-reduce figure well below the same variant's other nodes."""

    provider: str
    host: str
    variant: str
    config: NodeConfig
    gbs: float  # the node's figure: the median of its pairs, or its all-reduce
    others_median: float
    others: int
    sigma: float

    @property
    def deficit(self) -> float:
        """How far below the other nodes' median: 0.1 is 10% lower."""
        return 1.0 - self.gbs / self.others_median

    @property
    def evidence(self) -> str:
        """The node's figure against the other nodes'."""
        what = ("the median of its pairs" if self.config.kind == "peer_copy"
                else "its all-reduce")
        return (f"{self.config.figure}: {self.gbs:,.1f} GB/s ({what}) against "
                f"{self.others_median:,.1f}, the median of {self.others} other "
                f"{self.variant} nodes ({self.deficit:.1%} lower; "
                f"{(self.others_median - self.gbs) / self.sigma:.0f} robust standard "
                f"deviations of theirs) at {self.config.label}")


def _sold_for_nvlink(gpus: pd.DataFrame) -> dict[int, bool]:
    """document id -> whether every pair should be linked (True) or some (False); a
    document sold without NVLink is absent."""
    sold: dict[int, bool] = {}
    if gpus.empty:
        return sold
    for document, rows in gpus.groupby("document_id", sort=False):
        forms = {str(f) for f in rows["form_factor"].tolist()}
        links = [optional_int(n) or 0 for n in rows["nvlink_links_total"].tolist()]
        architectures = {str(a) for a in rows["architecture"].tolist() if a is not None}
        if "SXM" in forms:
            sold[int(cast("SupportsInt", document))] = not architectures & set(PARTLY_LINKED)
        elif any(links):
            sold[int(cast("SupportsInt", document))] = False
    return sold


def _pair(a: object, b: object) -> tuple[int, int]:
    x, y = int(cast("SupportsInt", a)), int(cast("SupportsInt", b))
    return (x, y) if x <= y else (y, x)


def _nvlink(path: object) -> bool | None:
    if path is None or path != path or not str(path):
        return None
    return str(path).upper().startswith("NV")


def find_missing_peers(figures: pd.DataFrame, gpus: pd.DataFrame) -> list[MissingPeers]:
    """Every node of `figures` (as fleet.analysis.node.figures.prepare returns them) sold for
    NVLink by its fingerprint (`gpus`: Dataset.gpus, or any frame with document_id,
    form_factor, architecture and nvlink_links_total) whose pairs lack it."""
    pairs = figures[figures["kind"] == "peer_copy"]
    if pairs.empty:
        return []
    sold = _sold_for_nvlink(gpus[gpus["document_id"].isin(set(pairs["document_id"]))])
    found = []
    for document, rows in pairs.groupby("document_id", sort=False):
        every = sold.get(int(cast("SupportsInt", document)))
        if every is None:
            continue
        access: dict[tuple[int, int], bool] = {}
        linked: dict[tuple[int, int], bool] = {}
        paths: dict[tuple[int, int], str] = {}
        for a, b, ok, path in zip(rows["gpu_index"].tolist(), rows["peer_index"].tolist(),
                                  rows["peer_access"].tolist(), rows["topology"].tolist(),
                                  strict=True):
            pair = _pair(a, b)
            if ok is not None and ok == ok:
                access[pair] = access.get(pair, True) and bool(ok)
            nvlink = _nvlink(path)
            if nvlink is not None:
                linked[pair] = linked.get(pair, True) and nvlink
                paths[pair] = str(path)
        measured = set(access) | set(linked)
        without = sorted(p for p, ok in access.items() if not ok)
        off_nvlink = sorted(p for p, ok in linked.items() if not ok and access.get(p, True))
        if every:
            called = bool(without or off_nvlink)
        else:  # some pairs only: called when none has peer access over NVLink
            called = bool(measured) and not any(
                access.get(p, True) and linked.get(p, True) for p in measured)
        if not called:
            continue
        wanting = set(without or off_nvlink)
        one_way = [gbs for a, b, direction, gbs in zip(
            rows["gpu_index"].tolist(), rows["peer_index"].tolist(),
            rows["direction"].tolist(), rows["gbs"].tolist(), strict=True)
            if direction == "one_way" and _pair(a, b) in wanting]
        found.append(MissingPeers(
            provider=str(rows["provider"].iloc[0]), host=str(rows["host"].iloc[0]),
            variant=str(rows["variant"].iloc[0]), every_pair=every, pairs=len(measured),
            without_access=tuple(without), without_nvlink=tuple(off_nvlink),
            paths=tuple(sorted({paths[p] for p in wanting if p in paths})),
            one_way_gbs=statistics.median(one_way) if one_way else None))
    found.sort(key=lambda m: (m.provider, m.host))
    return found


def node_figures(figures: pd.DataFrame) -> pd.DataFrame:
    """One row per node and pair or all-reduce configuration: the node's figure (the median
    of its pairs; its all-reduce), with provider, host, variant and config."""
    rows = figures[figures["kind"].isin(("peer_copy", "allreduce"))]
    if rows.empty:
        return pd.DataFrame(columns=["document_id", "config_id", "provider", "host",
                                     "variant", "config", "gbs"])
    return (rows.groupby(["document_id", "config_id"], sort=False)
            .agg(provider=("provider", "first"), host=("host", "first"),
                 variant=("variant", "first"), config=("config", "first"),
                 gbs=("gbs", "median"))
            .reset_index())


def find_nodes_apart(figures: pd.DataFrame, options: PeerOptions | None = None,
                     skip: frozenset[tuple[str, str]] = frozenset()) -> list[NodeApart]:
    """Every node whose pair or all-reduce figure stands apart from the same variant's
    other nodes of its configuration; `skip`: (provider, host) of nodes already called
    for missing peer access, whose pair and all-reduce figures follow from it (they still
    count among the others: the variant's spread includes them)."""
    options = options or PeerOptions()
    nodes = node_figures(figures)
    found = []
    for (variant, _), group in nodes.groupby(["variant", "config_id"], sort=False):
        if len(group) < options.min_nodes:
            continue
        config: NodeConfig = group["config"].iloc[0]
        values = group["gbs"].to_numpy(dtype=float)
        ordered = np.sort(values)
        # The median of the others is at most the value just above the middle: a node
        # within the threshold of it cannot be flagged, and healthy variants end here.
        bound = ordered[min(len(ordered) - 1, len(ordered) // 2 + 1)]
        for i in np.flatnonzero(values <= (1.0 - options.threshold) * bound).tolist():
            row = group.iloc[i]
            if (str(row["provider"]), str(row["host"])) in skip:
                continue
            others = np.delete(values, i).tolist()
            below, centre, sigma = below_others(float(values[i]), others, options.threshold,
                                                options.sigmas, options.sigma_floor)
            if below:
                found.append(NodeApart(str(row["provider"]), str(row["host"]), str(variant),
                                       config, float(values[i]), centre, len(others), sigma))
    found.sort(key=lambda a: (a.provider, a.host, a.config))
    return found
