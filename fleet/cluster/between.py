"""A cluster measured between its nodes, for real: every node reaches the rendezvous
(fleet/cluster/reach.py), then the schedule's steps run one after another (fleet/cluster/
schedule.py): the whole cluster at once, then the pair rounds (a round's pairs at once,
each meeting at its first node on the cluster's port), then each suspect against a
known-good node. Each step is fleet/cluster/step.py's, all or nothing; the judgement
(fleet/analysis/cluster.py) decides which pairs passed, and so who the suspects are.

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

from fleet.analysis.cluster import ClusterJudgement, judge_cluster
from fleet.analysis.cluster_trend import Trends
from fleet.cluster.reach import DEFAULT_TIMEOUT_S, Node, ReachCheck, check_reach
from fleet.cluster.results import StepKind, StepResult
from fleet.cluster.schedule import (
    DEFAULT_ROUNDS,
    PairResult,
    Schedule,
    Step,
    plan,
    suspect_steps,
)
from fleet.cluster.step import StepNode, StepRun, StepSpec, run_step
from fleet.errors import ClusterError
from fleet.inventory.clusters import Cluster
from fleet.model.network import NetworkFingerprint
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


def _address(cluster: Cluster, host: str, nodes: Mapping[str, StepNode]) -> str:
    return cluster.addresses.get(host) or nodes[host].target.address


def _spec(cluster: Cluster, run_id: str, step_id: str, kind: StepKind, round_: int | None,
          hosts: Sequence[str], address: str, port: int, ranks: int,
          options: BetweenOptions, algo: str | None) -> StepSpec:
    return StepSpec(cluster=cluster.name, step_id=f"{run_id[:8]}-{step_id}", kind=kind,
                    round=round_, hosts=tuple(hosts), address=address, port=port,
                    ranks_per_node=ranks, timeout_s=options.step_timeout_s, algo=algo,
                    interface=cluster.interface, sizes=options.sizes,
                    backend=options.backend)


def _pair_specs(cluster: Cluster, run_id: str, step: Step, port: int, ranks: int,
                options: BetweenOptions, nodes: Mapping[str, StepNode]) -> list[StepSpec]:
    kind: StepKind = "suspect" if step.kind == "suspects" else "pair"
    return [_spec(cluster, run_id, f"{kind}-r{step.round}-{i}", kind, step.round, pair,
                  _address(cluster, pair[0], nodes), port, ranks, options, RING)
            for i, pair in enumerate(step.pairs)]


def _round(specs: Sequence[StepSpec], nodes: Mapping[str, StepNode], payload: Payload,
           cancel: threading.Event, observe: Observe | None) -> list[StepRun]:
    """A round's pairs at once: each node is in one pair at most."""
    def one(spec: StepSpec) -> StepRun:
        return run_step(spec, nodes, payload, cancel,
                        (lambda host, m: observe(host, m)) if observe else None)
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
    reach_nodes = {h: Node(n.transport, n.python or n.target.python) for h, n in nodes.items()}
    run.reach = check_reach(cluster, reach_nodes, unreachable, options.reach_timeout_s,
                            cancel=cancel)
    if not run.reach.go:
        run.error = run.reach.message
        return run
    hosts = [h for h in cluster.hosts if h in nodes]
    counts = [c for h in hosts if (c := (gpu_counts or {}).get(h))]
    ranks = options.ranks_per_node or (min(counts) if counts else 1)
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    rendezvous = run.reach.rendezvous
    # The rendezvous host first: rank 0 hosts the store where the check listened.
    order = [rendezvous.host, *[h for h in hosts if h != rendezvous.host]]
    run.schedule = plan(order, seed=seed, rounds=options.rounds)
    port = rendezvous.port
    for step in run.schedule.steps:
        if cancel.is_set():
            run.error = "interrupted"
            return run
        if step.kind == "cluster":
            say("cluster", f"the whole cluster: {counted(len(step.nodes), 'node')} x "
                           f"{counted(ranks, 'rank')}")
            spec = _spec(cluster, run.run_id, "cluster", "cluster", None, order,
                         rendezvous.address, port, ranks, options, None)
            run.steps.append(run_step(spec, nodes, payload, cancel, observe))
            continue
        say("cluster", f"pair round {step.round} of {run.schedule.rounds}: "
                       f"{counted(len(step.pairs), 'pair')} at once")
        run.steps.extend(_round(_pair_specs(cluster, run.run_id, step, port, ranks, options,
                                            nodes), nodes, payload, cancel, observe))
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
            run.steps.extend(_round(_pair_specs(cluster, run.run_id, step, port, ranks,
                                                options, nodes), nodes, payload, cancel,
                                    observe))
        if again:
            run.judgement = judge_cluster(run.results, networks, run.settings())
    return run


def measure_again(run: BetweenRun, step_ids: Sequence[str], nodes: Mapping[str, StepNode],
                  payload: Payload, networks: Mapping[str, NetworkFingerprint],
                  cancel: threading.Event, observe: Observe | None = None) -> list[StepRun]:
    """Each step of `step_ids` run again, one at a time (two may share a node), as
    "again-N" with the round it had (fleet/analysis/cluster_trend.py reads the later of
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
        done.append(run_step(again, nodes, payload, cancel, observe))
    run.steps.extend(done)
    if done:
        run.judgement = judge_cluster(run.results, networks, run.settings())
    return done
