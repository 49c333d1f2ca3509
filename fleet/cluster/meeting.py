"""Where each step's ranks meet (issue 57): the whole cluster at the rendezvous, a pair at
its first node's meeting point, an address and a port that `fleet cluster check` tests
from every node that will connect to it.

A pair meets at the address the other nodes reach its first node by, not at the name
fleet's SSH connects to: an ssh_config alias resolves on the controller only, so the
alias's HostName is taken; on the rendezvous host, `rendezvous_address` (the address on
the cluster's own network) is. Nodes that share an address (several "nodes" behind one
IP, a provider's NAT, loopback) get ports of their own from the cluster's upwards, so that
the pairs of one round, each meeting at a different first node, never bind one port or
join one another's store: four such nodes on one port gave 4 of 6 pairs EADDRINUSE and
one pair joined another's store. Nodes at addresses of their own keep the cluster's port,
as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from fleet.cluster.rendezvous import Rendezvous
from fleet.errors import ClusterError, FleetError
from fleet.inventory import Target
from fleet.inventory.clusters import Cluster
from fleet.transport.ssh import plan_ssh

MAX_PORT = 65535
LOCAL_ADDRESS = "127.0.0.1"  # `transport: local`: this machine, as the loopback nodes reach it


@dataclass(frozen=True)
class MeetingPoint:
    """Where the steps a node hosts meet: its address as the nodes reach it, the port."""

    host: str
    address: str
    port: int

    def __str__(self) -> str:
        return f"{self.address} port {self.port}"


def node_address(target: Target) -> str:
    """The address other nodes reach `target` by: ssh_config's HostName for an alias,
    this machine's loopback for `transport: local`, else the inventory's address."""
    if target.transport == "local":
        return LOCAL_ADDRESS
    try:
        return plan_ssh(target).target.hostname or target.address
    except FleetError:
        return target.address  # the connection says why; the address is what is written


def as_reached(cluster: Cluster, targets: Mapping[str, Target]) -> Cluster:
    """`cluster` with each host's address as the nodes reach it (`node_address`), so
    that the rendezvous, where the inventory names no rendezvous_address, is an address
    the nodes resolve too: an alias or a local host's name resolves on the controller
    only."""
    return replace(cluster, addresses={h: node_address(targets[h]) for h in cluster.hosts})


def meeting_points(rendezvous: Rendezvous, hosts: Sequence[str],
                   addresses: Mapping[str, str]) -> dict[str, MeetingPoint]:
    """Each of `hosts`' meeting point: the rendezvous host's is the rendezvous; the others
    at their address, on the cluster's port or, where an earlier node has that address,
    the next port up. `addresses`: each host's, as `node_address` gives it."""
    taken: dict[str, set[int]] = {rendezvous.address: {rendezvous.port}}
    points = {rendezvous.host: MeetingPoint(rendezvous.host, rendezvous.address,
                                            rendezvous.port)}
    for host in hosts:
        if host == rendezvous.host:
            continue
        address = addresses[host]
        used = taken.setdefault(address, set())
        port = rendezvous.port
        while port in used:
            port += 1
        if port > MAX_PORT:
            raise ClusterError(
                f"cluster {rendezvous.cluster}: {len(used) + 1} nodes share the address "
                f"{address}, and ports from {rendezvous.port} run past {MAX_PORT}: set "
                "clusters.NAME.rendezvous_port lower")
        used.add(port)
        points[host] = MeetingPoint(host, address, port)
    return points
