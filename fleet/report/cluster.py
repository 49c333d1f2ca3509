"""The report's "Between the nodes" section: each cluster's newest run of steps between
its nodes (fleet/store/cluster.py), judged (fleet/analysis/cluster.py): its pairs against
what their fabric should give, each node's pass ratio, the whole cluster's figure, and
the findings with their action, source and whose.

    section = cluster_section(engine, scope, anonymize=False)

A fault is said where it belongs in the summary, as the node suite's are: the
provider's in "What to dispute" (kind "network": a fault between the nodes is the
network's, and `--fail-on network` counts it), the renter's under "Yours to fix", an
unsettled one under "Not settled". Information (a suspect to test again, no fabric to
judge by, the whole cluster's figure) stays in this section.

An anonymized report leaves the section out: a step's hosts, interfaces and errors name
hosts and addresses the report's aliases do not cover.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from fleet.analysis.cluster import ClusterFinding, NodeVerdict, PairVerdict, transport_words
from fleet.analysis.dataset import Scope
from fleet.analysis.fabric import gbs
from fleet.analysis.whose import Party
from fleet.cluster.results import StepResult
from fleet.store.cluster import ClusterRun, judge_run, read_cluster_runs

KIND = "network"
LEFT_OUT = ("Left out of an anonymized report: the steps between the nodes name hosts, "
            "interfaces and addresses that the report's aliases do not cover.")
_WHOSE = {"provider": "the provider's", "renter": "the renter's", "unsettled": "unsettled"}
FindingRow = tuple[str, str, str, str, str | None, tuple[str, ...]]


@dataclass(frozen=True)
class PairRow:
    """One pair step as the section's table shows it, every figure with its unit."""

    step_id: str
    round: str  # "1", "suspects 1"
    nodes: str  # "a and b"
    transport: str  # "NET/IB GDRDMA", "NET/Socket", "a: NET/IB GDRDMA; b: NET/Socket"
    all_reduce: str  # "370 GB/s", "-" where the step gave none
    all_gather: str
    expected: str  # "400 GB/s", "-" where there is nothing to judge by
    share: str  # "92%" of the collective the verdict rests on
    verdict: str  # "passed", "short", "failed", "not judged"
    cause: str  # why it is short or failed, "" for a pass
    whose: str  # "the provider's", "the renter's", "unsettled", ""


@dataclass(frozen=True)
class NodeRow:
    """A node's pair tests: judged, passed, the ratio ("50%", "-" where none was judged)
    and its standing ("slow", "suspect" or "")."""

    host: str
    pairs: int
    passed: int
    ratio: str
    standing: str


@dataclass(frozen=True)
class ClusterView:
    """One cluster's newest run, judged."""

    cluster: str
    provider: str
    run_id: str
    started_at: dt.datetime
    steps: int
    failed: int
    pairs: tuple[PairRow, ...]
    nodes: tuple[NodeRow, ...]
    # The whole cluster's figure against the slowest pair's ("all_reduce busbw 330 GB/s
    # at 1 GiB over 3 nodes x 8 ranks; ..."), or why there is none.
    whole: str
    findings: tuple[ClusterFinding, ...]


@dataclass(frozen=True)
class ClusterSection:
    """The clusters whose steps the store holds, each its newest run; `left_out` says
    why there is nothing to show although there is (an anonymized report)."""

    clusters: tuple[ClusterView, ...] = ()
    left_out: str | None = None

    @property
    def shown(self) -> bool:
        """Whether the report has a section to show: the store holds cluster steps."""
        return bool(self.clusters) or self.left_out is not None

    def _faults(self, whose: Party) -> list[FindingRow]:
        return [(KIND, c.provider, f.title, f.evidence, None, (
            f"action: {f.action}", f"rests on: {f.source}",
            f"cluster {c.cluster}, run {c.run_id}, steps {', '.join(f.steps) or '-'}"))
            for c in self.clusters for f in c.findings
            if f.severity == "fault" and f.whose == whose]

    def findings(self) -> list[FindingRow]:
        """The provider's faults, as the report's findings (build.Finding's fields)."""
        return self._faults("provider")

    def renter(self) -> list[FindingRow]:
        """The faults the run's own settings made: the renter's to fix."""
        return self._faults("renter")

    def unsettled(self) -> list[FindingRow]:
        """The faults nothing settled (a failed step, a setting that could have done it)."""
        return self._faults("unsettled")

    def count(self) -> int:
        """How many faults are the provider's, as `--fail-on network` adds them."""
        return len(self.findings())


def _gbs(value: float | None) -> str:
    return "-" if value is None else gbs(value)


def _transport(step: StepResult | None) -> str:
    return "not said" if step is None else transport_words(step, "NET/")


def _verdict(pair: PairVerdict) -> str:
    if pair.passed is None:
        return "not judged"
    if pair.passed:
        return "passed"
    return "failed" if pair.busbw_gbs is None else "short"


def _pair_row(pair: PairVerdict, step: StepResult | None) -> PairRow:
    round_ = "-" if pair.round is None else str(pair.round)
    if pair.kind == "suspect":
        round_ = f"suspects {round_}"
    return PairRow(pair.step_id, round_, " and ".join(pair.hosts), _transport(step),
                   _gbs(pair.all_reduce_gbs), _gbs(pair.all_gather_gbs),
                   _gbs(pair.expected_gbs), "-" if pair.share is None else f"{pair.share:.0%}",
                   _verdict(pair), pair.cause or "",
                   "" if pair.whose is None else _WHOSE[pair.whose])


def _node_row(node: NodeVerdict) -> NodeRow:
    standing = "slow" if node.slow else ("suspect" if node.suspect else "")
    return NodeRow(node.host, node.pairs, node.passed,
                   "-" if node.ratio is None else f"{node.ratio:.0%}", standing)


def _whole(run: ClusterRun, findings: Sequence[ClusterFinding]) -> str:
    said = next((f for f in findings if f.rule == "cluster-figure"), None)
    if said is not None:
        return said.evidence
    whole = [r for r in run.results if r.kind == "cluster"]
    if not whole:
        return "not run: the run has no whole-cluster step"
    failed = [r for r in whole if r.error is not None]
    if failed:
        return f"failed ({failed[0].step_id}): {failed[0].error}"
    return "no figure: the whole-cluster step gave none"


def _view(engine: Engine, run: ClusterRun) -> ClusterView:
    judgement = judge_run(engine, run)
    steps = {r.step_id: r for r in run.results}
    return ClusterView(
        run.cluster, run.provider or run.cluster, run.run_id, run.started_at,
        len(run.results), sum(r.error is not None for r in run.results),
        tuple(_pair_row(p, steps.get(p.step_id)) for p in judgement.pairs),
        tuple(_node_row(n) for n in judgement.nodes), _whole(run, judgement.findings),
        judgement.findings)


def cluster_section(engine: Engine, scope: Scope, anonymize: bool = False) -> ClusterSection:
    """Each cluster's newest run within `scope`'s providers and times (a cluster run
    belongs to no sweep or variant, so those filters do not apply to it)."""
    runs = read_cluster_runs(engine, providers=scope.providers, since=scope.since,
                             until=scope.until)
    if not runs:
        return ClusterSection()
    if anonymize:
        return ClusterSection(left_out=LEFT_OUT)
    return ClusterSection(tuple(_view(engine, run) for run in runs))
