"""The slow node of a cluster, found by its pairs (fleet/analysis/cluster/standings.py's
rule, imported): each node's pass ratio over its judged pair steps (a step that failed, or a
pair nothing could judge, says nothing of the fabric: fleet/analysis/cluster/pair_evidence.py
asks every pair step whether it ran); a node under `DEFAULT_THRESHOLD` beside a partner
known good is the slow node (fault); any other suspect of `sort_out` (a failure no bad
partner explains) a suspect (information: test it again against a known-good node). No
node known good while pairs were short, among three nodes or more, and no one node in
every short pair: a shared fault (the fabric, a switch, the rendezvous or NCCL's
settings); one node in every short pair is the suspect instead; two nodes' one pair
cannot say whose node failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from fleet.analysis.cluster.fabric import gbs
from fleet.analysis.cluster.pair_evidence import (
    SOURCE_PAIRS,
    accuse,
    judged_results,
    outcome,
    ran_results,
    step_findings,
)
from fleet.analysis.cluster.standings import DEFAULT_THRESHOLD, PairResult, Standing
from fleet.analysis.cluster.verdicts import ClusterFinding, NodeVerdict, PairVerdict
from fleet.analysis.node.whose import Party

__all__ = ["SOURCE_PAIRS", "beside", "judge_nodes", "one_party"]


def one_party(parties: Iterable[Party]) -> Party:
    """The one party of several findings, or unsettled where they differ."""
    found = set(parties)
    return found.pop() if len(found) == 1 else "unsettled"


def judge_nodes(order: Sequence[str], verdicts: Sequence[PairVerdict], cluster: str,
                lost: Mapping[str, str] | None = None
                ) -> tuple[list[NodeVerdict], list[ClusterFinding]]:
    """Each node's standing from its pairs, and the findings: slow node, suspect and
    shared fault from the judged pairs only; a node whose pair steps failed where its
    partners ran with others, or steps failing whoever met, from every pair step
    (fleet/analysis/cluster/pair_evidence.py). `lost`: nodes that took part in no step, with why."""
    lost = lost or {}
    pairs = [v for v in verdicts if len(v.hosts) == 2]
    if len(order) < 2:
        return [NodeVerdict(h, 0, 0, None, False, False, lost=lost.get(h)) for h in order], []
    speed = accuse(order, judged_results(pairs))
    runs = accuse(order, ran_results(pairs))
    table = speed.table
    outcomes = {h: [outcome(v) for v in pairs if h in v.hosts] for h in order}
    slow = speed.named
    nodes = [NodeVerdict(h, table[h].tested, table[h].passed,
                         table[h].ratio if table[h].tested else None, h in slow,
                         (h in speed.suspects and speed.answered(h))
                         or (h in runs.suspects and h not in runs.named
                             and outcomes[h].count("failed") > 0),
                         failing=h in runs.named, failed=outcomes[h].count("failed"),
                         unjudged=outcomes[h].count("unjudged"), lost=lost.get(h))
             for h in order]
    findings: list[ClusterFinding] = step_findings(cluster, order, pairs, runs)
    short = [v for v in pairs if outcome(v) == "short"]
    partners = {h: [v for v in short if h in v.hosts] for h in order}
    if short and not speed.cleared:
        if speed.shared:
            findings.append(_shared(cluster, judged_results(pairs), short,
                                    [h for h in order if speed.answered(h)]))
        elif len([h for h in order if speed.answered(h)]) > 2:
            # One node in every short pair and none cleared: it is the one to test again,
            # not a fault of what every node shares.
            findings += [_suspect(cluster, h, partners[h], table) for h in order
                         if h in speed.common]
        return nodes, findings
    for host in order:
        if host in slow:
            findings.append(_slow(cluster, host, table[host].passed, table[host].tested,
                                  partners[host], table))
        elif host in speed.suspects and speed.answered(host):
            findings.append(_suspect(cluster, host, partners[host], table))
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
