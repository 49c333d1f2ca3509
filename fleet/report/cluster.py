"""The report's "Between the nodes" section: each cluster's newest run of steps between
its nodes (fleet/store/cluster.py), judged (fleet/analysis/cluster/judgement.py): its pairs against
what their fabric should give, each node's pass ratio, the whole cluster's figure, and
the findings with their action, source and whose.

    runs = cluster_runs(engine, scope)
    section = cluster_section(engine, runs)               # names: Aliases anonymizes

A fault is said where it belongs in the summary, as the node suite's are: the
provider's in "What to dispute" (kind "network": a fault between the nodes is the
network's, and `--fail-on network` counts it), the renter's under "Yours to fix", an
unsettled one under "Not settled". Information (a suspect to test again, no fabric to
judge by, the whole cluster's figure) stays in this section.

An anonymized report shows the section under the report's aliases (`Aliases`): each
run is judged again with its hosts renamed, its cluster called "Cluster N" (dealt at
random, as the aliases are), its steps numbered, NCCL's interfaces without their
addresses, every setting's value with a host's name or an address in it hidden, and a
failed step's error withheld (it names hosts and addresses).
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import Engine

from fleet.analysis.cluster.fabric import gbs
from fleet.analysis.cluster.judgement import (
    ClusterFinding,
    NodeVerdict,
    PairVerdict,
    transport_words,
)
from fleet.analysis.cluster.stored import judge_run, trends_of
from fleet.analysis.cluster.trend import Trends, trend_findings
from fleet.analysis.dataset import Aliases, Scope
from fleet.analysis.node.whose import Party
from fleet.model.step import NodeNics, NodeTransport, StepResult
from fleet.store.cluster import ClusterRun, read_cluster_runs

KIND = "network"
WITHHELD_ERROR = ("its error names hosts and addresses: withheld in an anonymized "
                  "report")
HIDDEN = "(hidden)"
# IPv4 and IPv6 addresses as NCCL and the agents print them ("10.0.0.5", "fe80::1%eth0").
_ADDRESS = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\b[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}\b")
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
    """A node's pair tests: judged, passed, the ratio ("50%", "-" where none was judged),
    its standing ("slow", "steps failed", "lost", "suspect" or "") and its pair steps
    that no judgement rests on ("1 failed, 2 ran", "-")."""

    host: str
    pairs: int
    passed: int
    ratio: str
    standing: str
    unjudged: str = "-"


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
    # Its steps against the cluster's earlier runs, in a line (fleet/analysis/
    # cluster_trend.py); the steps below their past are among `findings`.
    past: str = ""


@dataclass(frozen=True)
class ClusterSection:
    """The clusters whose steps the store holds, each its newest run."""

    clusters: tuple[ClusterView, ...] = ()

    @property
    def shown(self) -> bool:
        """Whether the report has a section to show: the store holds cluster steps."""
        return bool(self.clusters)

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


NOT_JUDGED = "not judged: "  # the verdict column says it already


def _verdict(pair: PairVerdict) -> str:
    if pair.passed is None:
        return "not judged"
    if pair.passed:
        return "passed"
    return "failed" if pair.busbw_gbs is None else "short"


def _again(step_id: str) -> bool:
    """Whether the step is a step measured again (fleet/cluster/between.py measure_again),
    as its id or its anonymized name says."""
    return step_id.split("-", 1)[-1].startswith("again-") or step_id.endswith("(again)")


def _pair_row(pair: PairVerdict, step: StepResult | None) -> PairRow:
    round_ = "-" if pair.round is None else str(pair.round)
    if pair.kind == "suspect":
        round_ = f"suspects {round_}"
    if _again(pair.step_id):
        round_ = f"{round_}, again"
    return PairRow(pair.step_id, round_, " and ".join(pair.hosts), _transport(step),
                   _gbs(pair.all_reduce_gbs), _gbs(pair.all_gather_gbs),
                   _gbs(pair.expected_gbs), "-" if pair.share is None else f"{pair.share:.0%}",
                   _verdict(pair), (pair.cause or "").removeprefix(NOT_JUDGED),
                   "" if pair.whose is None else _WHOSE[pair.whose])


def _node_row(node: NodeVerdict) -> NodeRow:
    standing = ("lost" if node.lost is not None else "slow" if node.slow else
                "steps failed" if node.failing else "suspect" if node.suspect else "")
    apart = [f"{count} {what}" for count, what in ((node.failed, "failed"),
                                                   (node.unjudged, "ran"))
             if count]
    return NodeRow(node.host, node.pairs, node.passed,
                   "-" if node.ratio is None else f"{node.ratio:.0%}", standing,
                   ", ".join(apart) or "-")


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


# What a NIC test says that names no host and no address (agent/network/perftest.py's
# fixed words, its ports named by device): kept in an anonymized report; anything else
# (perftest's own lines carry hostnames, addresses, GIDs) is withheld.
_NIC_SAID = re.compile(
    r"^(the other node: )?(ib_write_bw is not installed \(Debian/Ubuntu: apt-get install "
    r"perftest\)|no active RDMA port|no RDMA device detected \(perftest: Did not detect "
    r"devices; is the driver up\?\)|the other node has no [\w.-]+/\d+|the other node's "
    r"[\w.-]+/\d+ is not Active|the other node has fewer Active ports|the other node did "
    r"not answer on port \d+ within [\d.]+ s: its step may have failed \(the step's error "
    r"says\), or the port is blocked between the nodes)$")
WITHHELD_NIC = "withheld in an anonymized report: perftest's words name hosts and addresses"


def _nic_words(value: str) -> str:
    return value if _NIC_SAID.match(value) else WITHHELD_NIC


@dataclass(frozen=True)
class _Renaming:
    """How one run reads in an anonymized report."""

    cluster: str
    provider: str
    hosts: dict[str, str]
    steps: dict[str, str]

    def host(self, name: str) -> str:
        return self.hosts.get(name, HIDDEN)

    def text(self, value: str) -> str:
        """`value` with every host's name, as a whole word ("gpu-1" not inside
        "gpu-10"), replaced by its alias, and every address hidden."""
        for name in sorted(self.hosts, key=len, reverse=True):
            value = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", self.hosts[name],
                           value)
        return _ADDRESS.sub(HIDDEN, value)

    def transport(self, t: NodeTransport) -> NodeTransport:
        return replace(t, host=self.host(t.host),
                       interfaces=tuple(i.split(":", 1)[0] for i in t.interfaces),
                       set_by_environment=tuple(self.text(v) for v in t.set_by_environment))

    def nics(self, n: NodeNics) -> NodeNics:
        return replace(n, host=self.host(n.host),
                       skipped=None if n.skipped is None else _nic_words(n.skipped),
                       tests=tuple(replace(t, error=None if t.error is None
                                           else _nic_words(t.error)) for t in n.tests))

    def step(self, r: StepResult) -> StepResult:
        # Every part that carries a host's name: the findings drawn from it name hosts.
        return replace(r, cluster=self.cluster, step_id=self.steps[r.step_id],
                       hosts=tuple(self.host(h) for h in r.hosts),
                       transports=tuple(self.transport(t) for t in r.transports),
                       error=None if r.error is None else WITHHELD_ERROR,
                       counters=tuple(replace(c, host=self.host(c.host))
                                      for c in r.counters),
                       nics=tuple(self.nics(n) for n in r.nics))

    def run(self, run: ClusterRun) -> ClusterRun:
        return replace(
            run, cluster=self.cluster, run_id=HIDDEN, provider=self.provider,
            results=tuple(self.step(r) for r in run.results),
            documents={self.host(h): d for h, d in run.documents.items()},
            settings={self.host(h): {k: self.text(v) for k, v in values.items()}
                      for h, values in run.settings.items()})

    def trends(self, trends: Trends) -> Trends:
        return Trends(tuple(replace(
            t, cluster=self.cluster, run_id=HIDDEN, step_id=self.steps.get(t.step_id, HIDDEN),
            hosts=tuple(self.host(h) for h in t.hosts),
            first_step_id=None if t.first_step_id is None
            else self.steps.get(t.first_step_id, HIDDEN))
            for t in trends.compared))


def _renamings(runs: Sequence[ClusterRun], names: Aliases) -> list[_Renaming]:
    """Each run's renaming: "Cluster N" dealt at random, the report's host aliases."""
    numbers = list(range(1, len(runs) + 1))
    random.SystemRandom().shuffle(numbers)
    found = []
    for run, number in zip(runs, numbers, strict=True):
        provider = run.provider or run.cluster
        hosts = {h for r in run.results for h in r.hosts} | set(run.documents) | set(
            run.settings)
        found.append(_Renaming(
            f"Cluster {number}", names.provider(provider),
            {h: names.host(provider, h) for h in hosts},
            {r.step_id: f"step {i + 1}" + (" (again)" if _again(r.step_id) else "")
             for i, r in enumerate(run.results)}))
    return found


def cluster_runs(engine: Engine, scope: Scope) -> list[ClusterRun]:
    """Each cluster's newest run within `scope`'s providers and times (a cluster run
    belongs to no sweep or variant, so those filters do not apply to it)."""
    return read_cluster_runs(engine, providers=scope.providers, since=scope.since,
                             until=scope.until)


def cluster_hosts(runs: Sequence[ClusterRun]) -> set[tuple[str, str]]:
    """(provider, host) of every node of `runs`, for the report's aliases."""
    return {(run.provider or run.cluster, h) for run in runs
            for r in run.results for h in r.hosts}


def _view(engine: Engine, run: ClusterRun, renaming: _Renaming | None = None
          ) -> ClusterView:
    trends = trends_of(engine, run)
    if renaming is not None:
        run, trends = renaming.run(run), renaming.trends(trends)
    judgement = judge_run(engine, run)
    steps = {r.step_id: r for r in run.results}
    findings = list(judgement.findings)
    # Faults first, as the judgement orders them: a step below its past is one.
    at = next((i for i, f in enumerate(findings) if f.severity != "fault"), len(findings))
    findings[at:at] = trend_findings(trends)
    return ClusterView(
        run.cluster, run.provider or run.cluster, run.run_id, run.started_at,
        len(run.results), sum(r.error is not None for r in run.results),
        tuple(_pair_row(p, steps.get(p.step_id)) for p in judgement.pairs),
        tuple(_node_row(n) for n in judgement.nodes), _whole(run, judgement.findings),
        tuple(findings), trends.summary())


def cluster_section(engine: Engine, runs: Sequence[ClusterRun], names: Aliases | None = None
                    ) -> ClusterSection:
    """`runs` (`cluster_runs`) judged, each beside its cluster's earlier runs; under
    `names` (an anonymized report) as the module says."""
    if names is None:
        return ClusterSection(tuple(_view(engine, run) for run in runs))
    views = [_view(engine, run, renaming)
             for run, renaming in zip(runs, _renamings(runs, names), strict=True)]
    return ClusterSection(tuple(sorted(views, key=lambda v: v.cluster)))
