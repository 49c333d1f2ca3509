"""Where a cluster's ranks meet, and whether every node can get there before anything
starts.

The controller chooses the rendezvous (a host and a TCP port), then asks every node to
reach it; only when all do does any rank start, so that one node behind a firewall is a
message naming it and the fix, not a collective hanging until its timeout. This module
is the decision, data in and data out; reaching the hosts is the transport's.

The rendezvous host is the one the inventory names (`clusters: {NAME: {rendezvous_host:
...}}`), else the first host in file order whose node suite passed: a node that failed
its own suite would fail the cluster's start for a reason that is not the fabric's. The
port is 29550 unless the inventory says otherwise: not torch's customary MASTER_PORT
(29500) nor torchrun's rendezvous port (29400), so that a renter's job left running on
a node neither holds the port nor is joined by fleet's ranks. A pair's step meets at the
pair's first node on the same port: a round uses each node at most once, so one port
serves every pair of a round.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from fleet.errors import ClusterError
from fleet.inventory.clusters import Cluster, named
from fleet.words import counted

DEFAULT_PORT = 29550
MAX_ERROR = 200  # a node's error text is the remote's; keep a line of it


@dataclass(frozen=True)
class Rendezvous:
    """The host whose rendezvous the ranks join, the address they reach it at, the port."""

    cluster: str
    host: str
    address: str
    port: int
    why: str  # "named in the inventory" or "the first healthy host in file order"

    def __str__(self) -> str:
        at = self.host if self.address == self.host else f"{self.host} ({self.address})"
        return f"{at} port {self.port}"


@dataclass(frozen=True)
class Reach:
    """One node's attempt to reach the rendezvous, as the transport reports it."""

    host: str
    reached: bool
    error: str = ""


@dataclass(frozen=True)
class Decision:
    """Go, or no-go with the nodes that cannot reach the rendezvous and why."""

    go: bool
    rendezvous: Rendezvous
    failed: tuple[Reach, ...]  # nodes that tried and could not
    silent: tuple[str, ...]  # nodes that sent no report
    message: str


def choose_rendezvous(cluster: Cluster, healthy: Collection[str] | None = None
                      ) -> Rendezvous:
    """The cluster's rendezvous among its `healthy` hosts (names; None: all of them)."""
    well = [h for h in cluster.hosts if healthy is None or h in healthy]
    if len(well) < 2:
        failed = [h for h in cluster.hosts if h not in well]
        raise ClusterError(
            f"cluster {cluster.name}: {counted(len(well), 'node')} of {len(cluster.hosts)} "
            f"passed its own suite, too few to test between nodes (failed: {named(failed)}). "
            "Fix or replace the failed nodes, then probe again")
    port = cluster.rendezvous_port or DEFAULT_PORT
    named_host = cluster.rendezvous_host
    if named_host is not None:
        if named_host not in well:
            raise ClusterError(
                f"cluster {cluster.name}: clusters.{cluster.name}.rendezvous_host "
                f"{named_host} failed its own suite. Fix it, or name another host of it "
                f"({named(well)}) as rendezvous_host, or leave it out to take the first "
                "healthy one")
        address = cluster.rendezvous_address or cluster.addresses.get(named_host, named_host)
        return Rendezvous(cluster.name, named_host, address, port, "named in the inventory")
    first = well[0]
    return Rendezvous(cluster.name, first, cluster.addresses.get(first, first), port,
                      "the first healthy host in file order")


def pair_rendezvous(cluster: Cluster, pair: tuple[str, str]) -> Rendezvous:
    """Where a pair's two nodes meet: the first node of the pair, on the cluster's port."""
    first = pair[0]
    if first not in cluster.hosts or pair[1] not in cluster.hosts:
        raise ClusterError(f"the pair {pair[0]}-{pair[1]} is not two nodes of cluster "
                           f"{cluster.name}")
    return Rendezvous(cluster.name, first, cluster.addresses.get(first, first),
                      cluster.rendezvous_port or DEFAULT_PORT, "the pair's first node")


def _fix(report: Reach, rendezvous: Rendezvous) -> str:
    """The way out, from the words of the error (the OS's and Python's)."""
    error = report.error.lower()
    address, port, cluster = rendezvous.address, rendezvous.port, rendezvous.cluster
    if "in use" in error:
        return (f"port {port} is taken on {rendezvous.host}: set clusters.{cluster}."
                "rendezvous_port to a free one")
    if any(w in error for w in ("not known", "resolve", "resolution", "getaddrinfo",
                                "nodename nor servname")):
        return (f"{report.host} cannot resolve {address}: set clusters.{cluster}."
                "rendezvous_address to an IP the nodes reach")
    if "no route" in error or "unreachable" in error:
        return (f"{report.host} has no route to {address}: give clusters.{cluster}."
                "rendezvous_address on the network the nodes share")
    if "timed out" in error or "timeout" in error:
        return (f"something drops TCP {port} on the way: open it (and NCCL's own ports) "
                "between the cluster's nodes in the firewall or security group")
    if "refused" in error:
        return (f"nothing accepted on {address}:{port}: a firewall on {rendezvous.host} "
                "rejects it, or the listener did not start there")
    return f"try it by hand on {report.host}: nc -zv {address} {port}"


def decide(rendezvous: Rendezvous, nodes: Sequence[str], reports: Sequence[Reach]
           ) -> Decision:
    """Go when every one of `nodes` reported reaching the rendezvous; else no-go, naming
    each node that did not and the fix. A node reported twice counts as reached only if
    every report says so."""
    taking_part = set(nodes)
    stray = [r.host for r in reports if r.host not in taking_part]
    if stray:
        raise ClusterError(f"a reachability report names {stray[0]}, which is not a node "
                           f"of this step ({named(list(nodes))}): give this step's reports")
    failed: dict[str, Reach] = {}
    heard: set[str] = set()
    for report in reports:
        heard.add(report.host)
        if not report.reached and report.host not in failed:
            failed[report.host] = report
    silent = tuple(n for n in nodes if n not in heard)
    failures = tuple(failed[n] for n in nodes if n in failed)
    if not failures and not silent:
        return Decision(True, rendezvous, (), (),
                        f"go: {counted(len(nodes), 'node')} reach the rendezvous "
                        f"{rendezvous}")
    out = len(failures) + len(silent)
    lines = [f"no-go, nothing was started: {out} of {counted(len(nodes), 'node')} cannot "
             f"reach the rendezvous {rendezvous} ({rendezvous.why})"]
    others = [n for n in nodes if n != rendezvous.host]
    if others and all(n in failed for n in others):
        lines.append(f"no node reaches it: the fault is likely at {rendezvous.host} or its "
                     "port, not at the nodes")
    for report in failures:
        error = " ".join(report.error.split())[:MAX_ERROR] or "no error text"
        lines.append(f"  {report.host}: {error}; {_fix(report, rendezvous)}")
    for node in silent:
        lines.append(f"  {node}: sent no report; check that fleet reaches it over SSH "
                     "(fleet inventory check, then fleet probe on it alone)")
    return Decision(False, rendezvous, failures, silent, "\n".join(lines))
