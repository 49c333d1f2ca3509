"""A cluster measured between its nodes, for real: every node reaches the rendezvous
(fleet/cluster/reach.py), then the schedule's steps run one after another (fleet/cluster/
schedule.py): the whole cluster at once, then the pair rounds (a round's pairs at once,
each meeting at its first node on the cluster's port), then each suspect against a
known-good node. Each step is fleet/cluster/step.py's, all or nothing; the judgement
(fleet/analysis/cluster/judgement.py) decides which pairs passed, and so who the suspects are.

The whole cluster's step lets NCCL choose its algorithm, as a renter's job would; a pair
forces the ring (`--algo Ring`): between two nodes NCCL may pick tree algorithms whose bus
bandwidth exceeds the network's (nccl-tests #196, #160), and a pair is there to measure
the network.

Nothing is stored until every step has run, and then in one transaction (fleet/store/
cluster.py): an interrupted run leaves nothing half-measured in the store. A failed step
is stored as failed, with its reason and no figures.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from fleet.analysis.cluster.judgement import ClusterJudgement, judge_cluster
from fleet.analysis.cluster.standings import (
    PairResult,
)
from fleet.analysis.cluster.trend import Trends
from fleet.cluster.meeting import MeetingPoint, meeting_points, node_address
from fleet.cluster.reach import DEFAULT_TIMEOUT_S, Node, ReachCheck, check_reach
from fleet.cluster.schedule import (
    DEFAULT_ROUNDS,
    Schedule,
    Step,
    plan,
    suspect_steps,
)
from fleet.cluster.slurm import run_step_slurm
from fleet.cluster.step import StepNode, StepRun, StepSpec, run_step
from fleet.errors import ClusterError
from fleet.inventory.clusters import Cluster
from fleet.model.network import NetworkFingerprint
from fleet.model.step import StepKind, StepResult
from fleet.payload import Payload
from fleet.words import counted

STEP_TIMEOUT_S = 180.0  # the agent's own: the rendezvous, the ranks, every collective
RING = "Ring"

Observe = Callable[[str, str], None]  # (what, message): "cluster", "step", a host


@dataclass(frozen=True)
class BetweenOptions:
    """How the steps run: the agent's timeout, the ranks a node, the sizes, the schedule."""

    step_timeout_s: float = STEP_TIMEOUT_S
    reach_timeout_s: float = DEFAULT_TIMEOUT_S
    ranks_per_node: int | None = None  # None: the fewest GPUs of the nodes, else 1
    sizes: str | None = None  # None: the agent's defaults
    backend: str = "auto"
    seed: int | None = None  # the halves' shuffle; None: drawn, and recorded
    rounds: int = DEFAULT_ROUNDS
    suspects: bool = True
    # A step below the cluster's own past runs measured again (fleet/cluster/measure.py).
    again: bool = True
    # Each pair's RDMA ports tested one against the other with ib_write_bw after its
    # collectives (agent/network/perftest.py): minutes more a round, so asked for.
    nic_test: bool = False


@dataclass
class BetweenRun:
    """One cluster's run between its nodes: the reach check, the schedule and each step."""

    cluster: Cluster
    run_id: str
    reach: ReachCheck | None = None
    schedule: Schedule | None = None
    steps: list[StepRun] = field(default_factory=list)
    judgement: ClusterJudgement | None = None
    error: str | None = None  # why nothing (more) ran: no-go, interrupted
    # Its steps against the cluster's earlier runs, once it is stored (fleet/cluster/
    # measure.py): how nightly sweeps track the fabric.
    trends: Trends | None = None

    @property
    def results(self) -> tuple[StepResult, ...]:
        """Every step that ran, for the store and the judgement."""
        return tuple(s.result() for s in self.steps)

    def settings(self) -> dict[str, dict[str, str]]:
        """Each node's settings as its agents last reported them."""
        merged: dict[str, dict[str, str]] = {}
        for step in self.steps:
            merged.update(step.settings())
        return merged


def _spec(cluster: Cluster, run_id: str, step_id: str, kind: StepKind, round_: int | None,
          hosts: Sequence[str], address: str, port: int, ranks: int,
          options: BetweenOptions, algo: str | None) -> StepSpec:
    return StepSpec(cluster=cluster.name, step_id=f"{run_id[:8]}-{step_id}", kind=kind,
                    round=round_, hosts=tuple(hosts), address=address, port=port,
                    ranks_per_node=ranks, timeout_s=options.step_timeout_s, algo=algo,
                    interface=cluster.interface, sizes=options.sizes,
                    backend=options.backend, whole=kind == "cluster",
                    launcher="slurm" if cluster.slurm is not None else "ssh",
                    nic_test=options.nic_test and kind != "cluster")


def _pair_specs(cluster: Cluster, run_id: str, step: Step, points: Mapping[str, MeetingPoint],
                ranks: int, options: BetweenOptions) -> list[StepSpec]:
    """A round's pairs, each meeting at its first node's meeting point: the address the
    check tested, and a port no other pair of the round binds there."""
    kind: StepKind = "suspect" if step.kind == "suspects" else "pair"
    return [_spec(cluster, run_id, f"{kind}-r{step.round}-{i}", kind, step.round, pair,
                  points[pair[0]].address, points[pair[0]].port, ranks, options, RING)
            for i, pair in enumerate(step.pairs)]


LOST = "lost before its steps"


def _losers(check: ReachCheck) -> dict[str, str] | None:
    """The nodes a check that said no-go leaves out, with why; None where the fault is
    the rendezvous's own (its host, its listener, or no node reaching it), which no
    node left out would mend."""
    rows = {r.host: r for r in check.nodes}
    rendezvous = rows.get(check.rendezvous.host)
    if rendezvous is None or not rendezvous.reached:
        return None
    others = [r for r in check.nodes if not r.rendezvous and r.reached is not None]
    if others and not any(r.reached for r in others):
        return None
    lost = {r.host: (r.error or "sent no report") + (
        "" if r.reached is None else f": it did not reach the rendezvous "
        f"{check.rendezvous}") for r in check.nodes if not r.rendezvous and not r.reached}
    for miss in check.misses:
        # A point no node reaches is its host's; a node that misses one others reach is
        # the node's.
        missed_by = {m.source for m in check.misses if m.point == miss.point}
        everyone = {r.host for r in check.nodes} - {miss.point.host}
        host = miss.point.host if missed_by >= everyone else miss.source
        lost.setdefault(host, f"{miss.source} did not reach {miss.point.host}'s meeting "
                              f"point {miss.point}: {' '.join(miss.error.split())[:200]}")
    return lost


def _reach_the_rest(cluster: Cluster, nodes: Mapping[str, StepNode],
                    unreachable: Mapping[str, str], options: BetweenOptions,
                    cancel: threading.Event) -> tuple[ReachCheck, Cluster, dict[str, str]]:
    """The rendezvous and every meeting point checked, leaving out each node that
    cannot take part (and saying why) while two or more can: the last check, the
    cluster of the nodes that take part, and the nodes lost."""
    reach_nodes = {h: Node(n.transport, n.python or n.target.python) for h, n in nodes.items()}
    addresses = {h: node_address(n.target) for h, n in nodes.items()}
    lost: dict[str, str] = {}
    current = cluster
    while True:
        check = check_reach(current, {h: n for h, n in reach_nodes.items()
                                      if h in current.hosts},
                            {h: r for h, r in unreachable.items() if h in current.hosts},
                            options.reach_timeout_s, cancel=cancel, addresses=addresses)
        if check.go:
            return check, current, lost
        losers = _losers(check)
        rest = [h for h in current.hosts if losers is not None and h not in losers]
        if losers is None or not losers or len(rest) < 2:
            return check, current, lost
        lost.update(losers)
        current = replace(current, hosts=tuple(rest))


def _lost_step(cluster: Cluster, run_id: str, number: int, host: str, why: str,
               options: BetweenOptions, ranks: int, port: int) -> StepRun:
    """A node lost before its steps, stored as a failed one-node cluster step: no
    schedule makes one (fleet/analysis/cluster/judgement.py's `lost_node`)."""
    spec = _spec(cluster, run_id, f"lost-{number}", "cluster", None, (host,), "-", port,
                 ranks, options, None)
    return StepRun(spec, datetime.now(UTC),
                   error=f"{host}: {LOST}: {' '.join(why.split())}"[:2000])


def launch(cluster: Cluster, spec: StepSpec, nodes: Mapping[str, StepNode],
           payload: Payload, cancel: threading.Event, observe: Observe | None) -> StepRun:
    """The step through the cluster's Slurm where the inventory gives it one
    (fleet/cluster/slurm.py), else over fleet's SSH connections (fleet/cluster/step.py)."""
    if cluster.slurm is not None:
        return run_step_slurm(spec, nodes, payload, cluster.slurm, cancel, observe)
    return run_step(spec, nodes, payload, cancel, observe)


def _round(cluster: Cluster, specs: Sequence[StepSpec], nodes: Mapping[str, StepNode],
           payload: Payload, cancel: threading.Event, observe: Observe | None
           ) -> list[StepRun]:
    """A round's pairs at once: each node is in one pair at most."""
    def one(spec: StepSpec) -> StepRun:
        return launch(cluster, spec, nodes, payload, cancel, observe)
    with ThreadPoolExecutor(max(1, len(specs)), "fleet-round") as pool:
        return list(pool.map(one, specs))


def pair_results(judgement: ClusterJudgement) -> list[PairResult]:
    """The judged pairs as the schedule's suspects want them: a failed step or a short
    pair did not pass; a pair that nothing could judge (no fabric) is not held against
    either node."""
    out = []
    for verdict in judgement.pairs:
        if verdict.kind == "cluster" or len(verdict.hosts) != 2:
            continue
        out.append(PairResult(verdict.hosts[0], verdict.hosts[1], verdict.passed is not False))
    return out


def run_between(cluster: Cluster, nodes: Mapping[str, StepNode],
                unreachable: Mapping[str, str], payload: Payload, options: BetweenOptions,
                networks: Mapping[str, NetworkFingerprint], cancel: threading.Event,
                observe: Observe | None = None, gpu_counts: Mapping[str, int] | None = None
                ) -> BetweenRun:
    """Reach, then every step of `cluster`'s schedule among `nodes` (the hosts fleet holds
    a connection to; `unreachable`: the others with why). Nothing is stored here."""
    run = BetweenRun(cluster, uuid.uuid4().hex)
    say = observe or (lambda what, message: None)
    run.reach, taking_part, lost = _reach_the_rest(cluster, nodes, unreachable, options,
                                                   cancel)
    if not run.reach.go:
        run.error = run.reach.message
        return run
    for host, why in lost.items():
        say("cluster", f"{host}: {LOST}, the others measured without it: {why}"[:400])
    hosts = [h for h in taking_part.hosts if h in nodes]
    counts = [c for h in hosts if (c := (gpu_counts or {}).get(h))]
    ranks = options.ranks_per_node or (min(counts) if counts else 1)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    rendezvous = run.reach.rendezvous
    # The rendezvous host first: rank 0 hosts the store where the check listened.
    order = [rendezvous.host, *[h for h in hosts if h != rendezvous.host]]
    run.schedule = plan(order, seed=seed, rounds=options.rounds)
    port = rendezvous.port
    run.steps += [_lost_step(cluster, run.run_id, number, host, why, options, ranks, port)
                  for number, (host, why) in enumerate(lost.items(), 1)]
    points = meeting_points(rendezvous, order, {h: node_address(nodes[h].target)
                                                for h in order})
    for step in run.schedule.steps:
        if cancel.is_set():
            run.error = "interrupted"
            return run
        if step.kind == "cluster":
            say("cluster", f"the whole cluster: {counted(len(step.nodes), 'node')} x "
                           f"{counted(ranks, 'rank')}")
            spec = _spec(cluster, run.run_id, "cluster", "cluster", None, order,
                         rendezvous.address, port, ranks, options, None)
            run.steps.append(launch(cluster, spec, nodes, payload, cancel, observe))
            continue
        say("cluster", f"pair round {step.round} of {run.schedule.rounds}: "
                       f"{counted(len(step.pairs), 'pair')} at once")
        run.steps.extend(_round(cluster, _pair_specs(cluster, run.run_id, step, points, ranks,
                                            options), nodes, payload, cancel, observe))
    run.judgement = judge_cluster(run.results, networks, run.settings())
    if options.suspects and not cancel.is_set():
        try:
            again = suspect_steps(order, pair_results(run.judgement))
        except ClusterError as exc:
            say("cluster", f"no suspects' round: {exc}")
            again = ()
        for step in again:
            if cancel.is_set():
                run.error = "interrupted"
                return run
            say("cluster", f"suspects' round {step.round}: {counted(len(step.pairs), 'pair')}")
            run.steps.extend(_round(cluster, _pair_specs(cluster, run.run_id, step, points, ranks,
                                                options), nodes, payload, cancel, observe))
        if again:
            run.judgement = judge_cluster(run.results, networks, run.settings())
    return run


def measure_again(run: BetweenRun, step_ids: Sequence[str], nodes: Mapping[str, StepNode],
                  payload: Payload, networks: Mapping[str, NetworkFingerprint],
                  cancel: threading.Event, observe: Observe | None = None) -> list[StepRun]:
    """Each step of `step_ids` run again, one at a time (two may share a node), as
    "again-N" with the round it had (fleet/analysis/cluster/trend.py reads the later of
    two measurements of a step); the judgement made again over every step. The steps
    run, in order."""
    say = observe or (lambda what, message: None)
    specs = {s.spec.step_id: s.spec for s in run.steps}
    done = []
    for number, step_id in enumerate(dict.fromkeys(step_ids), 1):
        if cancel.is_set():
            run.error = "interrupted"
            break
        spec = specs[step_id]
        say("cluster", f"measuring {step_id.split('-', 1)[-1]} again "
                       f"({', '.join(spec.hosts)}): below its own past runs")
        again = replace(spec, step_id=f"{run.run_id[:8]}-again-{number}")
        done.append(launch(run.cluster, again, nodes, payload, cancel, observe))
    run.steps.extend(done)
    if done:
        run.judgement = judge_cluster(run.results, networks, run.settings())
    return done
