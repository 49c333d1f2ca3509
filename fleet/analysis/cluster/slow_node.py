"""The slow node of a cluster, found by its pairs (fleet/analysis/cluster/standings.py's
rule, imported): each node's pass ratio over its judged pair steps (a step that failed counts
as a failed pair); a node under `DEFAULT_THRESHOLD` beside a partner known good is the
slow node (fault); any other suspect of `sort_out` (a failure no bad partner explains) a
suspect (information: test it again against a known-good node). No node known good while
pairs failed, among three nodes or more: a shared fault (the fabric, a switch, the
rendezvous or NCCL's settings); two nodes' one pair cannot say whose node failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from fleet.analysis.cluster.fabric import gbs
from fleet.analysis.cluster.standings import (
    DEFAULT_THRESHOLD,
    PairResult,
    Standing,
    sort_out,
    standings,
)
from fleet.analysis.cluster.verdicts import ClusterFinding, NodeVerdict, PairVerdict
from fleet.analysis.node.whose import Party

SOURCE_PAIRS = ("fleet/analysis/cluster/standings.py: Imbue's pass ratio per host, Google's "
                "Cluster Health Scanner's suspects against known-good nodes")


def one_party(parties: Iterable[Party]) -> Party:
    """The one party of several findings, or unsettled where they differ."""
    found = set(parties)
    return found.pop() if len(found) == 1 else "unsettled"


def judge_nodes(order: Sequence[str], verdicts: Sequence[PairVerdict], cluster: str
                ) -> tuple[list[NodeVerdict], list[ClusterFinding]]:
    """Each node's standing from the judged pairs, and the slow-node, suspect and
    shared-fault findings."""
    results = [PairResult(v.hosts[0], v.hosts[1], bool(v.passed)) for v in verdicts
               if v.passed is not None and len(v.hosts) == 2]
    if len(order) < 2 or not results:
        return [NodeVerdict(h, 0, 0, None, False, False) for h in order], []
    table = standings(order, results)
    sorted_out = sort_out(order, results, threshold=DEFAULT_THRESHOLD)
    good = set(sorted_out.known_good)
    failed = [v for v in verdicts if v.passed is False and len(v.hosts) == 2]
    partners = {h: [v for v in failed if h in v.hosts] for h in order}
    slow = {h for h in sorted_out.suspects if table[h].tested
            and table[h].ratio < DEFAULT_THRESHOLD
            and any(p in good for v in partners[h] for p in v.hosts if p != h)}
    nodes = [NodeVerdict(h, table[h].tested, table[h].passed,
                         table[h].ratio if table[h].tested else None, h in slow,
                         h in sorted_out.suspects and table[h].tested > 0) for h in order]
    findings: list[ClusterFinding] = []
    tested = [h for h in order if table[h].tested]
    if failed and not good:
        # Two nodes' one pair cannot say whose node failed: its own finding says all.
        if len(tested) > 2:
            findings.append(_shared(cluster, results, failed, tested))
        return nodes, findings
    for host in order:
        mine = partners[host]
        if host in slow:
            findings.append(_slow(cluster, host, table[host].passed, table[host].tested,
                                  mine, table))
        elif host in sorted_out.suspects and table[host].tested:
            findings.append(_suspect(cluster, host, mine, table))
    return nodes, findings


def _ratio(standing: Standing) -> str:
    return f"{standing.passed} of {standing.tested}"


def _slow(cluster: str, host: str, passed: int, tested: int, failed: Sequence[PairVerdict],
          table: Mapping[str, Standing]) -> ClusterFinding:
    lines = []
    for v in failed:
        partner = next(p for p in v.hosts if p != host)
        figure = "failed" if v.busbw_gbs is None else f"{gbs(v.busbw_gbs)}"
        lines.append(f"with {partner} ({partner} passed {_ratio(table[partner])}): "
                     f"{figure}, {v.cause}")
    causes = {c for v in failed for c in (v.cause or "").split("; ") if host in c
              and "cause not shown" not in c}
    return ClusterFinding(
        cluster, "slow-node", "fault", one_party(v.whose or "unsettled" for v in failed), (host,),
        f"{host}: the slow node, passed {passed} of {tested} pair tests while its "
        "partners pass with others", "; ".join(lines)
        + (f"; named on {host}: {', '.join(sorted(causes))}" if causes else ""),
        f"Take {host} out of the cluster's jobs and ask the provider to check its fabric "
        "ports, cables and switch ports; test it again against a known-good node.",
        SOURCE_PAIRS, tuple(v.step_id for v in failed))


def _suspect(cluster: str, host: str, failed: Sequence[PairVerdict],
             table: Mapping[str, Standing]) -> ClusterFinding:
    lines = []
    for v in failed:
        partner = next(p for p in v.hosts if p != host)
        lines.append(f"failed with {partner}, which passed {_ratio(table[partner])} "
                     "pair tests")
    return ClusterFinding(
        cluster, "suspect", "info", None, (host,),
        f"{host}: a failure no bad partner explains, passed {_ratio(table[host])} pair tests",
        "; ".join(lines) or "never judged in a pair test",
        f"Test {host} again against a known-good node (the suspects' round): a flaky link "
        "fails one pair and not the next.", SOURCE_PAIRS, tuple(v.step_id for v in failed))


def _shared(cluster: str, results: Sequence[PairResult], failed: Sequence[PairVerdict],
            order: Sequence[str]) -> ClusterFinding:
    every = len(failed) == len(results)
    said = (f"every pair test failed ({len(failed)} of {len(results)})" if every else
            f"{len(failed)} of {len(results)} pair tests failed and no node passed "
            f"{DEFAULT_THRESHOLD:.0%} of its own")
    named = sorted({v.cause for v in failed if v.cause})
    return ClusterFinding(
        cluster, "shared-fault", "fault", one_party(v.whose or "unsettled" for v in failed),
        tuple(order), f"{cluster}: the fault is likely shared, no node is known good",
        f"{said}; the failed pairs' causes: {', '.join(named) or 'none shown'}",
        "Look at what every node shares before testing nodes one by one: the fabric and "
        "its switches (the provider's), the rendezvous, and NCCL's settings of the run.",
        SOURCE_PAIRS, tuple(v.step_id for v in failed))


def beside(finding: ClusterFinding, nodes: Mapping[str, NodeVerdict]) -> ClusterFinding:
    """A short pair's finding, saying which of its nodes is the slow one where one is."""
    named = [h for h in finding.hosts if h in nodes and nodes[h].slow]
    if finding.rule != "pair-short" or len(named) != 1:
        return finding
    others = "; ".join(f"{h} passed {nodes[h].passed} of {nodes[h].pairs}"
                       for h in finding.hosts if h != named[0] and h in nodes)
    return replace(finding, evidence=f"{finding.evidence}; {named[0]} is the slow node by "
                   f"its pairs ({others})")
