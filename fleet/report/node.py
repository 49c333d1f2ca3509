"""The report's node suite section: each host's memory, host link, GPU pairs and
all-reduce as found, the findings drawn from them, and each node's synchronous figure.

    section = node_section(engine, data, gap_options, NodeOptions())

It reads the node figures of the hosts in the report's scope (their newest documents,
`Dataset.hosts`) and names them as the report does, aliases included. Its contention
finding (the renter's) also takes the matmul and job results left out as contended. One
finding in the summary per cause: a GPU called for its host link is not called again as
a straggler of its node for the same copies, nor a node without peer access for its
pairs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pandas as pd
from sqlalchemy import Engine

from fleet.analysis.compare import GapOptions
from fleet.analysis.contention import PAIRED, Contention, find_contention, mark
from fleet.analysis.dataset import CONTENDED_REASON, Dataset
from fleet.analysis.node.figures import HOST_LINK_KINDS, NodeFound, nodes_as_found, prepare
from fleet.analysis.node.gaps import NodeComparison, compare_node_figures
from fleet.analysis.node.hostlink import HostLinkIssue, HostLinkOptions, find_host_link_issues
from fleet.analysis.node.nccl import transport_cause
from fleet.analysis.node.outliers import NodeOutlier, NodeOutlierOptions, find_node_outliers
from fleet.analysis.node.peers import (
    MissingPeers,
    NodeApart,
    PeerOptions,
    find_missing_peers,
    find_nodes_apart,
)
from fleet.analysis.node.shortfall import (
    MatmulShortfall,
    MatmulShortfallOptions,
    Shortfall,
    ShortfallOptions,
    find_matmul_shortfalls,
    find_shortfalls,
)
from fleet.analysis.node.taint import learned, taint
from fleet.analysis.node.whose import (
    PAIR_COST,
    RunSetting,
    Unsettled,
    run_settings,
    settle_shortfalls,
    whose_apart,
    whose_matmul,
)
from fleet.analysis.node.whose import (
    anonymized as anonymized_settings,
)
from fleet.analysis.sync import SyncNode, synchronous_nodes
from fleet.report.bands import Unit, node_units
from fleet.store.matmul_rerun import StoredRerun, read_matmul_reruns
from fleet.store.node import read_node_results
from fleet.store.query import contention_words
from fleet.store.settings import read_settings


@dataclass(frozen=True)
class NodeOptions:
    """The node findings' rules (each module's docstring says why these margins)."""

    host_link: HostLinkOptions = field(default_factory=HostLinkOptions)
    peers: PeerOptions = field(default_factory=PeerOptions)
    outliers: NodeOutlierOptions = field(default_factory=NodeOutlierOptions)
    shortfall: ShortfallOptions = field(default_factory=ShortfallOptions)
    matmul: MatmulShortfallOptions = field(default_factory=MatmulShortfallOptions)


# What a node's outliers of one kind are, in a finding's title.
_OUTLYING = {"memory_copy": "memory copy", "host_to_device": "pinned host copies",
             "device_to_host": "pinned host copies", "peer_copy": "GPU pair copies"}


@dataclass(frozen=True)
class OutlierGroup:
    """A node's GPUs or pairs whose figures of one kind (a pair's one way and both ways,
    a GPU's copies to and from the device) stand below the rest of the node.

    One line in the summary: where (the GPU every outlying pair shares, else the pairs
    or GPUs), which figures and how far below; each GPU or pair a line of `details`.
    """

    provider: str
    host: str
    variant: str
    kind: str
    outliers: tuple[NodeOutlier, ...]
    cause: str | None = None  # the likely cause in a few words, where one was seen

    # Named in a title before "and N more": seven is every pair of one GPU of eight.
    NAMED: ClassVar[int] = 7
    # A figure's name in a detail line, where a GPU or pair has two that may stand out.
    FIGURE_WORDS: ClassVar[dict[tuple[str, str], str]] = {
        ("peer_copy", "one_way"): "one way ", ("peer_copy", "both_ways"): "both ways ",
        ("host_to_device", ""): "to the device ", ("device_to_host", ""): "from the device "}

    @property
    def units(self) -> tuple[str, ...]:
        """"GPU 6", "pair 0-3": each GPU or pair once, whichever of its figures stood out."""
        names = []
        for o in self._in_order():
            name = (f"GPU {o.gpu_index}" if o.peer_index is None
                    else f"pair {min(o.gpu_index, o.peer_index)}-"
                         f"{max(o.gpu_index, o.peer_index)}")
            if name not in names:
                names.append(name)
        return tuple(names)

    def _in_order(self) -> list[NodeOutlier]:
        """By GPU or pair, then one way before both ways, to the device before from it."""
        def key(o: NodeOutlier) -> tuple[int, int, bool, bool]:
            peer = -1 if o.peer_index is None else max(o.gpu_index, o.peer_index)
            first = o.gpu_index if o.peer_index is None else min(o.gpu_index, o.peer_index)
            return (first, peer, o.config.direction == "both_ways",
                    o.config.kind == "device_to_host")
        return sorted(self.outliers, key=key)

    @property
    def shared_gpu(self) -> int | None:
        """The GPU that every outlying pair has in it, where there are two pairs or more:
        the pairs then point at that GPU (its links, or its load) more than at each pair."""
        pairs = [{o.gpu_index, o.peer_index} for o in self.outliers
                 if o.peer_index is not None]
        if len(self.units) < 2 or len(pairs) != len(self.outliers):
            return None
        common = set.intersection(*pairs)
        return next(iter(common)) if len(common) == 1 else None

    @property
    def title(self) -> str:
        """The finding in a line: where, which figures, how far below the node's others."""
        numbers = [u.split(" ", 1)[1] for u in self.units]
        named = ", ".join(numbers[:self.NAMED]) + (
            f" and {len(numbers) - self.NAMED} more" if len(numbers) > self.NAMED else "")
        how_far = self._how_far()
        if self.kind == "peer_copy":
            ways = " and ".join(w for d, w in (("one_way", "one way"),
                                                ("both_ways", "both ways"))
                                if any(o.config.direction == d for o in self.outliers))
            gpu = self.shared_gpu
            if gpu is not None:
                return (f"{self.host} GPU {gpu}: pairs {named} ({ways}) {how_far} below the "
                        "rest of its node")
            pairs = "pair" if len(numbers) == 1 else "pairs"
            return (f"{self.host} {pairs} {named} ({ways}): {how_far} below the rest of its "
                    "node")
        gpus = "GPU" if len(numbers) == 1 else "GPUs"
        what = _OUTLYING[self.kind]
        if self.kind in HOST_LINK_KINDS:
            directions = [w for k, w in (("host_to_device", "to"), ("device_to_host", "from"))
                          if any(o.config.kind == k for o in self.outliers)]
            what += f" ({' and '.join(directions)} the device)"
        return f"{self.host} {gpus} {named}: {what} {how_far} below the rest of its node"

    def _how_far(self) -> str:
        """"15%", or the range of the figures' shortfalls: "8.2-12%"."""
        def below(share: float) -> str:
            return f"{share:.0%}" if share >= 0.095 else f"{share:.1%}"
        low = below(min(o.deficit for o in self.outliers))
        high = below(max(o.deficit for o in self.outliers))
        return high if low == high else f"{low.removesuffix('%')}-{high}"

    @property
    def evidence(self) -> str:
        """What each figure is compared with, and in which configurations: the figures
        themselves are the `details`."""
        labels = "; ".join(dict.fromkeys(o.config.label for o in self._in_order()))
        others = {o.others for o in self.outliers}
        unit = "pairs" if self.kind == "peer_copy" else "GPUs"
        count = f"{others.pop()} " if len(others) == 1 else ""
        return (f"each figure against the median of the same figure on the node's {count}"
                f"other {unit}, with how many robust standard deviations of theirs it lies "
                f"below, at {labels}")

    @property
    def details(self) -> tuple[str, ...]:
        """Each GPU or pair a line, with its figures that stood out: "pair 0-3: one way
        336.4 GB/s against 396.0 (15.1% lower; 30 robust sd), both ways 655.0 against
        771.2 (15.1% lower; 30 robust sd)"."""
        by_unit: dict[str, list[str]] = {}
        for o in self._in_order():
            unit = (f"GPU {o.gpu_index}" if o.peer_index is None
                    else f"pair {min(o.gpu_index, o.peer_index)}-"
                         f"{max(o.gpu_index, o.peer_index)}")
            figures = by_unit.setdefault(unit, [])
            which = self.FIGURE_WORDS.get((o.config.kind, o.config.direction), "")
            figures.append(f"{which}{o.gbs:,.1f}{'' if figures else ' GB/s'} against "
                           f"{o.node_median:,.1f} ({o.deficit:.1%} lower; "
                           f"{(o.node_median - o.gbs) / o.sigma:.0f} robust sd)")
        return tuple(f"{unit}: {', '.join(figures)}" for unit, figures in by_unit.items())


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
    # Nodes measured beside other work: the renter's to fix, kept out of the rest.
    contention: tuple[Contention, ...] = ()
    # Figures below what a healthy node of their variant gives (fleet/expected.py),
    # judged on every node, alone or in a crowd; those whose cause is a setting of the
    # renter's run are in `renters_shortfalls`.
    shortfalls: tuple[Shortfall, ...] = ()
    renters_shortfalls: tuple[Shortfall, ...] = ()
    matmul_shortfalls: tuple[MatmulShortfall, ...] = ()
    # Soaked matmuls the agent's pair without and with the run's settings put on them.
    renters_matmul: tuple[MatmulShortfall, ...] = ()
    # Findings measured under settings that can move them and never measured again
    # without them (fleet/analysis/node/whose.py): neither disputed nor the renter's.
    unsettled: tuple[Unsettled, ...] = ()
    # Each GPU's memory copy, each pair's copies and each node's all-reduce measured alone,
    # beside what a healthy node gives: what the report's charts draw (bands.py).
    units: tuple[Unit, ...] = ()

    @property
    def gaps(self) -> tuple[NodeComparison, ...]:
        """The comparisons that found a systematic gap."""
        return tuple(c for c in self.comparisons if c.systematic)

    def counts(self) -> dict[str, int]:
        """Findings per `--fail-on` kind: its own kinds, and the straggler and gap kinds
        it shares with the matmul."""
        return {"hostlink": len(self.host_links),
                "peer": len(self.missing_peers) + len(self.apart),
                "straggler": len(self.outliers), "gap": len(self.gaps),
                "contention": len(self.contention),
                "shortfall": (len(self.shortfalls) + len(self.renters_shortfalls)
                              + len(self.matmul_shortfalls) + len(self.renters_matmul))}

    def renter(self) -> list[tuple[str, str, str, str, str | None, tuple[str, ...]]]:
        """(kind, provider, title, evidence, cause, details) of each finding that is the
        renter's to fix, said apart from what to dispute (docs/findings.md, "One node,
        judged on its own")."""
        found: list[tuple[str, str, str, str, str | None, tuple[str, ...]]] = [
            ("contention", c.provider, c.title, c.evidence, c.cause, c.seen)
            for c in self.contention]
        found += [("shortfall", f.provider, f.title, f.evidence, f.cause, ())
                  for f in self.renters_shortfalls]
        found += [("shortfall", f.provider, f.title, f.evidence, f.cause, ())
                  for f in self.renters_matmul]
        return found

    def unsettled_findings(self) -> list[tuple[str, str, str, str, str | None,
                                               tuple[str, ...]]]:
        """(kind, provider, title, evidence, cause, details) of each finding no rerun
        settled: its suspects are the details."""
        return [u.finding() for u in self.unsettled]

    def findings(self) -> list[tuple[Any, ...]]:
        """(kind, provider, title, evidence, cause, details) of each finding the provider
        answers for, for the report's summary."""
        found: list[tuple[Any, ...]] = [
            ("shortfall", f.provider, f.title, f.evidence, f.cause, ())
            for f in self.matmul_shortfalls]
        found += [("shortfall", f.provider, f.title, f.evidence, f.cause, ())
                  for f in self.shortfalls]
        found += [("hostlink", i.provider, i.title, i.evidence, None, ())
                  for i in self.host_links]
        found += [("peer", m.provider, m.title, m.evidence, None, ())
                  for m in self.missing_peers]
        found += [("peer", a.provider,
                   f"{a.host}: {a.config.figure} {a.deficit:.0%} below the other "
                   f"{a.variant} nodes", a.evidence, None, ()) for a in self.apart]
        found += [("straggler", g.provider, g.title, g.evidence, g.cause, g.details)
                  for g in self.outliers]
        found += [("gap", c.slower,
                   f"{c.slower}'s {c.config.figure} is {c.gap:.1%} lower than {c.faster}'s "
                   f"on {c.variant}", c.evidence,
                   (f"{c.differences[0].what} {c.differences[0].slower} vs "
                    f"{c.differences[0].faster}" if c.differences else None),
                   tuple(f"{d.what}: {d.slower} on {c.slower}, {d.faster} on {c.faster}"
                         for d in c.differences))
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
                 options: NodeOptions | None = None, jobs: pd.DataFrame | None = None,
                 anonymized: bool = False) -> NodeSection:
    """The node section of the report on `data` (its hosts' newest documents); `jobs`,
    the job results in scope left out as contended (fleet.analysis.job.figures.contended_results,
    hosts named as `data` names them), join the contention finding of their node.
    `anonymized`: what the agent saw beside a matmul or node figure is not read."""
    options = options or NodeOptions()
    sync = tuple(synchronous_nodes(data.measures))
    names = {h.document_id: (h.provider, h.host) for h in data.hosts}
    if not names:
        return NodeSection(sync=sync, options=options,
                           contention=tuple(find_contention(pd.DataFrame(), [], jobs)))
    stored = read_node_results(engine, documents=sorted(names))
    figures = prepare(stored, names)
    # The agent's words name the processes beside a figure, their users and pids: an
    # anonymized report leaves them with the store, as it does a job result's
    # (JobInput.anonymized), and says only that the GPU was busy. A node figure's spread
    # names nobody: `mark` still says it.
    if anonymized and not figures.empty:
        figures = figures.assign(contention=None)
    figures = mark(figures)
    words = contention_words(engine, sorted(names))
    if anonymized:
        words = dict.fromkeys(words)
    # One run, one story per GPU: a GPU shared in one figure takes the run's figures on
    # it that had no check of their own with it (fleet/analysis/node/taint.py).
    runs = dict(zip(stored["document_id"].astype(int).tolist(),
                    stored["run"].astype(int).tolist(), strict=True))
    figures = taint(figures, learned(figures, words, jobs, runs))
    documents = {(p, h): d for d, (p, h) in names.items()}
    pairs = read_matmul_reruns(engine, sorted(names))
    contended = [(e, _paired(words.get((documents.get((e.provider, e.host), -1), e.gpu_index)),
                             documents.get((e.provider, e.host), -1), e.gpu_index, pairs))
                 for e in data.excluded if e.reason == CONTENDED_REASON]
    # A GPU shared with another process is the renter's, whichever figure showed it.
    seen = tuple(find_contention(figures, contended, jobs))
    # Whose each is, settled by the agent's rerun where it made one (fleet/analysis/node/whose.py).
    ran = run_settings(read_settings(engine, documents=sorted(names)), figures)
    if anonymized:
        ran = anonymized_settings(ran)
    # A soaked matmul is judged alone whether or not the node suite ran (`--suite gemm`).
    matmul, renters_matmul, unsettled = _judge_matmul(data, names, ran, pairs, options)
    alone = NodeSection(sync=sync, options=options, contention=seen,
                        matmul_shortfalls=tuple(matmul), renters_matmul=tuple(renters_matmul),
                        unsettled=tuple(unsettled))
    if figures.empty:
        return alone
    # A figure measured beside other work is the renter's contention: none of the rules
    # below, nor the node as found, may count it (fleet/analysis/contention.py).
    figures = figures[~figures["contended"]].reset_index(drop=True)
    if figures.empty:
        return alone
    host_links = find_host_link_issues(figures, options.host_link)
    missing = find_missing_peers(figures, data.gpus)
    no_peers = frozenset((m.provider, m.host) for m in missing)
    # Against the catalog, one node alone is judged too; a node called for missing peer
    # access is not called again for the pairs and all-reduce that follow from it.
    short = [f for f in find_shortfalls(figures, options.shortfall)
             if not ((f.provider, f.host) in no_peers and f.figure in ("pairs", "all-reduce"))]
    caused = [_with_cause(f, figures, ran) for f in short]
    short = [f for f, _ in caused]
    said = {(f.provider, f.host, f.config.kind) for f in short}
    settled = settle_shortfalls(caused, figures, ran)
    apart, unsettled = [], [*settled.unsettled, *unsettled]
    for a in find_nodes_apart(figures, options.peers, skip=no_peers):
        if (a.provider, a.host, a.config.kind) in said:
            continue
        title = f"{a.host}: {a.config.figure} {a.deficit:.0%} below the other {a.variant} nodes"
        whose = whose_apart(a.provider, a.host, a.config.kind, a.config.figure, figures, ran)
        if whose.party == "unsettled":
            unsettled.append(Unsettled("peer", a.provider, title, a.evidence, whose))
        else:
            apart.append(a)
    outliers = [g for g in _grouped(find_node_outliers(figures, options.outliers),
                                    host_links, missing)
                if (g.provider, g.host, g.kind) not in said]
    return NodeSection(
        found=tuple(nodes_as_found(figures)), host_links=tuple(host_links),
        missing_peers=tuple(missing), apart=tuple(apart), outliers=tuple(outliers),
        comparisons=tuple(compare_node_figures(figures, gaps)), sync=sync, options=options,
        contention=seen,
        shortfalls=settled.provider, renters_shortfalls=settled.renter,
        matmul_shortfalls=tuple(matmul), renters_matmul=tuple(renters_matmul),
        unsettled=tuple(unsettled), units=tuple(node_units(figures, options.shortfall)))


def _judge_matmul(data: Dataset, names: dict[int, tuple[str, str]],
                  ran: Mapping[int, tuple[RunSetting, ...]], pairs: list[StoredRerun],
                  options: NodeOptions
                  ) -> tuple[list[MatmulShortfall], list[MatmulShortfall], list[Unsettled]]:
    """Each node's short soaked matmuls sorted by whose they are (fleet/analysis/node/whose.py
    `whose_matmul`): the provider's, the renter's, unsettled."""
    provider: list[MatmulShortfall] = []
    renter: list[MatmulShortfall] = []
    unsettled: list[Unsettled] = []
    for m in find_matmul_shortfalls(data.measures, options.matmul):
        node = [d for d, (p, h) in names.items() if (p, h) == (m.provider, m.host)]
        whose = whose_matmul(m, node, ran, pairs)
        if whose.party == "unsettled":
            unsettled.append(Unsettled("shortfall", m.provider, m.title, m.evidence, whose))
        elif whose.party == "renter":
            renter.append(replace(m, cause=whose.words))
        else:
            provider.append(replace(m, cause=whose.words))
    return provider, renter, unsettled


def _paired(words: str | None, document: int, gpu: int, pairs: list[StoredRerun]
            ) -> str | None:
    """A contended matmul's words with what its pair showed, where the run's own settings
    cost it a share the pair tells (CUDA_LAUNCH_BLOCKING=1 holds the host to every
    launch, and the harness leaves the runs it cut short out as interrupted)."""
    pair = next((r for r in pairs if (r.document_id, r.gpu_index) == (document, gpu)), None)
    if pair is None or pair.contended or pair.cost < PAIR_COST:
        return words
    it = "it" if len(pair.without) == 1 else "them"
    said = (f"{PAIRED}{', '.join(pair.without)}: {pair.rerun_tflops:.1f} TFLOP/s, "
            f"{pair.with_tflops:.1f} with {it}, {pair.cost:.1%} lost to {it}: unset {it}")
    return f"{words}; {said}" if words else said


def _with_cause(shortfall: Shortfall, figures: pd.DataFrame,
                ran: Mapping[int, tuple[RunSetting, ...]]) -> tuple[Shortfall, bool]:
    """An all-reduce shortfall with the cause NCCL's transport names, where it names one
    (fleet/analysis/node/nccl.py), and whether that cause is a setting of the renter's run
    (`ran`: each document's settings, from every source)."""
    if shortfall.figure != "all-reduce":
        return shortfall, False
    node = figures[(figures["provider"] == shortfall.provider)
                   & (figures["host"] == shortfall.host)]
    rows = node[node["kind"] == "allreduce"]
    if rows.empty:
        return shortfall, False
    pairs = node[(node["kind"] == "peer_copy") & node["peer_access"].notna()]
    access = None if pairs.empty else bool(pairs["peer_access"].astype(bool).all())
    row = rows.iloc[0]
    sourced = [(r.name, r.value, r.source) for r in ran.get(int(row["document_id"]), ())]
    cause = transport_cause(row["transport"], row["nccl_settings"], access, sourced)
    if cause is None:
        return shortfall, False
    return replace(shortfall, cause=cause.words), cause.renters
