"""`fleet cluster run` and `fleet probe`'s step after the nodes: connect to a cluster's
nodes, find fleet's runtime on each (torch is needed on the nodes, never here), take each
node's latest document from the store (its GPU count sets the ranks a node; its network
fingerprint judges the pairs), run the cluster between its nodes (fleet/cluster/
between.py) and store the run, all of it or nothing (fleet/store/cluster.py).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Engine, select

from fleet.analysis.cluster.stored import stored_trends, trends_of
from fleet.cluster.between import (
    BetweenOptions,
    BetweenRun,
    Observe,
    measure_again,
    run_between,
)
from fleet.cluster.meeting import as_reached
from fleet.cluster.step import StepNode
from fleet.errors import ClusterError, FleetError
from fleet.inventory import LoadedInventory, Target
from fleet.inventory.clusters import Cluster
from fleet.model.network import NetworkFingerprint
from fleet.payload import Payload
from fleet.runtime.provision import prepare_runtime
from fleet.store.cluster import ClusterRun, record_cluster_run
from fleet.store.models import Document, Host, Provider
from fleet.store.network import read_networks
from fleet.transport import open_transport
from fleet.transport.base import Transport
from fleet.transport.hostkeys import KnownHosts
from fleet.transport.ssh import SshOptions, plan_ssh

PARALLEL = 32


@dataclass(frozen=True)
class Connecting:
    """How fleet reaches the nodes over SSH, as `fleet probe` does."""

    connect_timeout_s: float = 10.0
    connect_retries: int = 2
    accept_new_host_keys: bool = False
    cpu: bool = False  # the nodes have no GPU: gloo on the CPU (tests, a dry run)


@dataclass(frozen=True)
class Latest:
    """A node's latest stored document: its id and GPU count."""

    document_id: int
    gpu_count: int


def latest_documents(engine: Engine, cluster: Cluster) -> dict[str, Latest]:
    """Each host of `cluster` with a stored document: the latest one, by host name."""
    found: dict[str, Latest] = {}
    with engine.connect() as conn:
        rows = conn.execute(
            select(Host.name, Document.id, Document.gpu_count, Document.collected_at)
            .join(Provider, Provider.id == Host.provider_id)
            .join(Document, Document.host_id == Host.id)
            .where(Provider.name == cluster.provider, Host.name.in_(cluster.hosts))
            .order_by(Document.collected_at, Document.id))
        for name, document_id, gpus, _ in rows:
            found[name] = Latest(int(document_id), int(gpus))  # the latest wins
    return found


def _networks(engine: Engine, latest: Mapping[str, Latest]) -> dict[str, NetworkFingerprint]:
    by_document = read_networks(engine, documents=[d.document_id for d in latest.values()])
    return {host: by_document[d.document_id] for host, d in latest.items()
            if d.document_id in by_document}


def _node(target: Target, payload: Payload, ssh: SshOptions, cpu: bool,
          cancel: threading.Event, opened: list[Transport], observe: Observe) -> StepNode:
    transport = open_transport(target, plan_ssh(target) if target.transport == "ssh" else None,
                               ssh)
    try:
        transport.connect()
    except BaseException:
        transport.close()
        raise
    opened.append(transport)
    python = None
    if target.runtime.use == "pinned":
        ready = prepare_runtime(transport, target, payload, cpu, cancel,
                                lambda message: observe(target.name, message))
        if ready.python is None:
            raise FleetError(f"{target.key}: no runtime to run the ranks with "
                             f"({ready.why_none}); between nodes the ranks need torch")
        python = ready.python
    return StepNode(target, transport, python)


def measure_cluster(inventory: LoadedInventory, cluster: Cluster, engine: Engine,
                    payload: Payload, options: BetweenOptions, connecting: Connecting,
                    cancel: threading.Event, observe: Observe,
                    healthy: Collection[str] | None = None) -> tuple[BetweenRun, int]:
    """Run `cluster` between its nodes (those in `healthy` where given: the nodes whose
    own suite passed) and store it: (the run, the steps stored)."""
    targets = {t.name: t for t in inventory.targets if t.cluster == cluster.name}
    hosts = [h for h in cluster.hosts if healthy is None or h in healthy]
    for host in hosts:
        if targets[host].transport == "ssh":
            plan_ssh(targets[host])  # a mistake in ssh_config stops here, before connecting
    cluster = as_reached(cluster, targets)
    ssh = SshOptions(KnownHosts(accept_new=connecting.accept_new_host_keys),
                     connecting.connect_timeout_s, connecting.connect_retries, cancel)
    nodes: dict[str, StepNode] = {}
    unreachable: dict[str, str] = {}
    opened: list[Transport] = []
    try:
        with ThreadPoolExecutor(max(1, min(PARALLEL, len(hosts))), "fleet-connect") as pool:
            futures = {h: pool.submit(_node, targets[h], payload, ssh, connecting.cpu, cancel,
                                      opened, observe) for h in hosts}
            for host, future in futures.items():
                try:
                    nodes[host] = future.result()
                except FleetError as exc:
                    unreachable[host] = str(exc)
        latest = latest_documents(engine, cluster)
        networks = _networks(engine, latest)
        run = run_between(
            _only(cluster, hosts), nodes, unreachable, payload, options, networks, cancel,
            observe, {h: d.gpu_count for h, d in latest.items()} if not connecting.cpu else None)
        if options.again and run.steps and run.error is None:
            # A step below its own past is measured again before anything is said of it:
            # one slow run of a step is not yet a fall (bench/cluster_trend_flags.py).
            tonight = ClusterRun(cluster.name, run.run_id, dt.datetime.now(dt.UTC),
                                 run.results, {}, run.settings(), cluster.provider)
            below = trends_of(engine, tonight).below
            if below:
                measure_again(run, [t.step_id for t in below], nodes, payload, networks,
                              cancel, observe)
    finally:
        for transport in opened:
            transport.close()
    stored = 0
    if run.steps and run.error != "interrupted":
        stored = record_cluster_run(
            engine, run.run_id, run.results,
            {h: (latest[h].document_id if h in latest else None) for h in hosts},
            run.settings(),
            started_at={s.spec.step_id: s.started_at for s in run.steps},
            wall_s={s.spec.step_id: s.wall_s for s in run.steps},
            provider=cluster.provider)
        run.trends = stored_trends(engine, cluster.name, run.run_id, cluster.provider)
    return run, stored


@dataclass(frozen=True)
class ClusterOutcome:
    """One cluster after its nodes' own probes: its run and the steps stored, or why
    nothing ran (too few nodes passed their own probe, a rendezvous that cannot be)."""

    cluster: Cluster
    run: BetweenRun | None
    stored: int
    skipped: str | None = None


def measure_clusters(inventory: LoadedInventory, passed: Collection[str], engine: Engine,
                     payload: Payload, options: BetweenOptions, connecting: Connecting,
                     cancel: threading.Event, observe: Observe) -> list[ClusterOutcome]:
    """Every cluster of `inventory` between its nodes whose own probe passed (`passed`:
    their keys, provider/host), one after another."""
    outcomes = []
    for cluster in inventory.clusters:
        healthy = {h for h, key in zip(cluster.hosts, cluster.keys, strict=True)
                   if key in passed}
        if len(healthy) < 2:
            outcomes.append(ClusterOutcome(
                cluster, None, 0, f"{len(healthy)} of {len(cluster.hosts)} nodes passed "
                                  "their own probe, too few to measure between nodes"))
            continue
        try:
            run, stored = measure_cluster(inventory, cluster, engine, payload, options,
                                          connecting, cancel, observe, healthy)
        except ClusterError as exc:
            outcomes.append(ClusterOutcome(cluster, None, 0, str(exc)))
            continue
        outcomes.append(ClusterOutcome(cluster, run, stored))
    return outcomes


def _only(cluster: Cluster, hosts: list[str]) -> Cluster:
    """The cluster with only `hosts` (a node that failed its own suite is left out)."""
    if list(cluster.hosts) == hosts:
        return cluster
    from dataclasses import replace
    rendezvous = cluster.rendezvous_host if cluster.rendezvous_host in hosts else None
    return replace(cluster, hosts=tuple(hosts), rendezvous_host=rendezvous,
                   rendezvous_address=cluster.rendezvous_address if rendezvous else None)
