"""The report's node suite section: each host's memory, host link, GPU pairs and
all-reduce as found, the findings drawn from them, and each node's synchronous figure.

    section = node_section(engine, data, gap_options, NodeOptions())

It reads the node figures of the hosts in the report's scope (their newest documents,
`Dataset.hosts`) and names them as the report does, aliases included. One finding in
the summary per cause: a GPU called for its host link is not called again as a
straggler of its node for the same copies, nor a node without peer access for its
pairs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import Engine

from fleet.analysis.dataset import Dataset
from fleet.analysis.gaps import GapOptions
from fleet.analysis.hostlink import HostLinkIssue, HostLinkOptions, find_host_link_issues
from fleet.analysis.node import HOST_LINK_KINDS, NodeFound, nodes_as_found, prepare
from fleet.analysis.node_gaps import NodeComparison, compare_node_figures
from fleet.analysis.node_outliers import NodeOutlier, NodeOutlierOptions, find_node_outliers
from fleet.analysis.peers import (
    MissingPeers,
    NodeApart,
    PeerOptions,
    find_missing_peers,
    find_nodes_apart,
)
from fleet.analysis.sync import SyncNode, synchronous_nodes
from fleet.store.node import read_node_results


@dataclass(frozen=True)
class NodeOptions:
    """The node findings' rules (each module's docstring says why these margins)."""

    host_link: HostLinkOptions = field(default_factory=HostLinkOptions)
    peers: PeerOptions = field(default_factory=PeerOptions)
    outliers: NodeOutlierOptions = field(default_factory=NodeOutlierOptions)


# What a node's outliers of one kind are, in a finding's title.
_OUTLYING = {"memory_copy": "memory copy", "host_to_device": "pinned host copies",
             "device_to_host": "pinned host copies", "peer_copy": "GPU pair copies"}


@dataclass(frozen=True)
class OutlierGroup:
    """A node's GPUs or pairs whose figures of one kind (a pair's one way and both ways,
    a GPU's copies to and from the device) stand below the rest of the node."""

    provider: str
    host: str
    variant: str
    kind: str
    outliers: tuple[NodeOutlier, ...]

    @property
    def units(self) -> tuple[str, ...]:
        """"GPU 6", "pair 0-3": each GPU or pair once, whichever of its figures stood out."""
        names = []
        for o in self.outliers:
            name = (f"GPU {o.gpu_index}" if o.peer_index is None
                    else f"pair {min(o.gpu_index, o.peer_index)}-"
                         f"{max(o.gpu_index, o.peer_index)}")
            if name not in names:
                names.append(name)
        return tuple(names)

    @property
    def title(self) -> str:
        """The finding in a line."""
        names = ", ".join(self.units[:4])
        if len(self.units) > 4:
            names += f" and {len(self.units) - 4} more"
        return f"{self.host} {names}: {_OUTLYING[self.kind]} below the rest of the node"

    @property
    def evidence(self) -> str:
        """Each outlying figure against its node's."""
        return "; ".join(f"{o.name}: {o.evidence}" for o in self.outliers)


@dataclass(frozen=True)
class NodeSection:
    """Everything the report shows of the node suite."""

    found: tuple[NodeFound, ...] = ()
    host_links: tuple[HostLinkIssue, ...] = ()
    missing_peers: tuple[MissingPeers, ...] = ()
    apart: tuple[NodeApart, ...] = ()
    outliers: tuple[OutlierGroup, ...] = ()
    comparisons: tuple[NodeComparison, ...] = ()
    sync: tuple[SyncNode, ...] = ()
    options: NodeOptions = field(default_factory=NodeOptions)

    @property
    def gaps(self) -> tuple[NodeComparison, ...]:
        """The comparisons that found a systematic gap."""
        return tuple(c for c in self.comparisons if c.systematic)

    def counts(self) -> dict[str, int]:
        """Findings per `--fail-on` kind: its own kinds, and the straggler and gap kinds
        it shares with the matmul."""
        return {"hostlink": len(self.host_links),
                "peer": len(self.missing_peers) + len(self.apart),
                "straggler": len(self.outliers), "gap": len(self.gaps)}

    def findings(self) -> list[tuple[str, str, str, str]]:
        """(kind, provider, title, evidence) of each finding, for the report's summary."""
        found = [("hostlink", i.provider, i.title, i.evidence) for i in self.host_links]
        found += [("peer", m.provider, m.title, m.evidence) for m in self.missing_peers]
        found += [("peer", a.provider,
                   f"{a.host}: {a.config.figure} {a.deficit:.0%} below the other "
                   f"{a.variant} nodes", a.evidence) for a in self.apart]
        found += [("straggler", g.provider, g.title, g.evidence) for g in self.outliers]
        found += [("gap", c.slower,
                   f"{c.slower}'s {c.config.figure} is {c.gap:.1%} lower than {c.faster}'s "
                   f"on {c.variant}",
                   c.evidence + (". Differs: " + ", ".join(
                       f"{d.what} {d.slower} vs {d.faster}" for d in c.differences)
                       if c.differences else ""))
                  for c in self.gaps]
        return found


def _grouped(outliers: list[NodeOutlier], host_links: list[HostLinkIssue],
             missing: list[MissingPeers]) -> list[OutlierGroup]:
    link_gpus = {(i.provider, i.host, g) for i in host_links for g in i.gpus}
    no_peers = {(m.provider, m.host) for m in missing}
    groups: dict[tuple[str, str, str, str], list[NodeOutlier]] = defaultdict(list)
    for o in outliers:
        if o.config.kind in HOST_LINK_KINDS and (o.provider, o.host, o.gpu_index) in link_gpus:
            continue  # the host link finding names the cause
        if o.config.kind == "peer_copy" and (o.provider, o.host) in no_peers:
            continue
        kind = "host_to_device" if o.config.kind in HOST_LINK_KINDS else o.config.kind
        groups[(o.provider, o.host, o.variant, kind)].append(o)
    return [OutlierGroup(p, h, v, k, tuple(members))
            for (p, h, v, k), members in groups.items()]


def node_section(engine: Engine, data: Dataset, gaps: GapOptions,
                 options: NodeOptions | None = None) -> NodeSection:
    """The node section of the report on `data` (its hosts' newest documents)."""
    options = options or NodeOptions()
    sync = tuple(synchronous_nodes(data.measures))
    names = {h.document_id: (h.provider, h.host) for h in data.hosts}
    if not names:
        return NodeSection(sync=sync, options=options)
    figures = prepare(read_node_results(engine, documents=sorted(names)), names)
    if figures.empty:
        return NodeSection(sync=sync, options=options)
    host_links = find_host_link_issues(figures, options.host_link)
    missing = find_missing_peers(figures, data.gpus)
    apart = find_nodes_apart(figures, options.peers,
                             skip=frozenset((m.provider, m.host) for m in missing))
    outliers = _grouped(find_node_outliers(figures, options.outliers), host_links, missing)
    return NodeSection(
        found=tuple(nodes_as_found(figures)), host_links=tuple(host_links),
        missing_peers=tuple(missing), apart=tuple(apart), outliers=tuple(outliers),
        comparisons=tuple(compare_node_figures(figures, gaps)), sync=sync, options=options)
