"""Where each step's ranks meet, tested before anything starts (issue 57): a pair meets
at its first node's address as the nodes reach it (an ssh_config alias resolved, the
rendezvous host's `rendezvous_address`), on a port no other pair of its round binds
there; `fleet cluster check` listens on each meeting point and has every other node
connect to it, through real sshd servers and `transport: local` on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fleet.cluster.meeting import meeting_points, node_address
from fleet.cluster.rendezvous import Rendezvous
from fleet.errors import ClusterError
from fleet.inventory import load_inventory
from tests.cluster.test_reach import (  # noqa: F401 (fixtures)
    check,
    client_key,
    home,
    port_free,
    servers,
    ssh,
    write_inventory,
)
from tests.probe.sshd import SshServer, free_port


def test_nodes_on_one_address_meet_on_ports_of_their_own() -> None:
    rendezvous = Rendezvous("pod", "a", "10.0.0.1", 29550, "named in the inventory")
    # Four nodes on one address: the rendezvous host keeps the cluster's port, each other
    # node the next one up; nodes at addresses of their own keep the cluster's port.
    points = meeting_points(rendezvous, ["a", "b", "c", "d", "e"], {
        "a": "ssh-name-of-a", "b": "10.0.0.1", "c": "10.0.0.1", "d": "10.0.0.1",
        "e": "10.0.0.5"})
    assert {h: (p.address, p.port) for h, p in points.items()} == {
        "a": ("10.0.0.1", 29550), "b": ("10.0.0.1", 29551), "c": ("10.0.0.1", 29552),
        "d": ("10.0.0.1", 29553), "e": ("10.0.0.5", 29550)}
    high = Rendezvous("pod", "a", "10.0.0.1", 65535, "named in the inventory")
    with pytest.raises(ClusterError, match=r"run past 65535: set clusters\.NAME\.rendezvous_port"):
        meeting_points(high, ["a", "b"], {"a": "10.0.0.1", "b": "10.0.0.1"})


def test_an_ssh_alias_and_rendezvous_address_are_the_addresses_tested(
        home: Path, client_key: Path, servers: list[SshServer]) -> None:  # noqa: F811
    # h1 and h2 are ssh_config aliases, which resolve on the controller only; h1 is the
    # rendezvous host at rendezvous_address. The pair h2 hosts meets at the alias's
    # HostName, where the check listened and h1 connected.
    config = home / "ssh_config"
    config.write_text("".join(f"Host node-{i}\n  HostName 127.0.0.1\n  Port {s.port}\n"
                              for i, s in enumerate(servers[:2], 1)))
    port = free_port()
    path = write_inventory(home, client_key, {
        "h1": {"address": "node-1", "ssh_config": str(config)},
        "h2": {"address": "node-2", "ssh_config": str(config)}},
        {"rendezvous_host": "h1", "rendezvous_address": "127.0.0.1",
         "rendezvous_port": port})
    inventory = load_inventory(path)
    assert [node_address(t) for t in inventory.targets] == ["127.0.0.1", "127.0.0.1"]
    result = check(path)
    assert result.go, result.message
    assert [(p.host, p.address, p.port) for p in result.points] == [
        ("h2", "127.0.0.1", port + 1)]
    assert port_free(port) and port_free(port + 1)
    # Without rendezvous_address the rendezvous is the alias's HostName too, not the
    # alias, which the nodes could not resolve.
    path = write_inventory(home, client_key, {
        "h1": {"address": "node-1", "ssh_config": str(config)},
        "h2": {"address": "node-2", "ssh_config": str(config)}}, {"rendezvous_port": port})
    result = check(path)
    assert result.go, result.message
    assert (result.rendezvous.host, result.rendezvous.address) == ("h1", "127.0.0.1")


def test_a_pairs_port_taken_is_no_go_naming_the_meeting_point(
        home: Path, client_key: Path, servers: list[SshServer]) -> None:  # noqa: F811
    # h2's meeting point is the port after the rendezvous's: take a pair of ports both
    # free (a free port's next one may be another test's, as CI found).
    for _ in range(50):
        port = free_port()
        taken = socket.socket()
        try:
            taken.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            taken.close()
    else:
        pytest.fail("no two free ports in a row on 127.0.0.1 in 50 tries", pytrace=False)
    path = write_inventory(home, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]), "here": {"transport": "local"}},
        {"rendezvous_port": port})
    try:
        taken.listen()
        result = check(path)
    finally:
        taken.close()
    assert not result.go and result.decision.go  # the rendezvous itself was reached
    [miss] = [m for m in result.misses if m.source == "h2"]
    assert (miss.point.host, miss.point.port) == ("h2", port + 1)
    assert "Address already in use" in miss.error
    said = " ".join(result.message.split())
    assert said.startswith("no-go, nothing was started: 1 pair meeting point not reached "
                           "from every node that will connect to it")
    assert (f"h2: h2's meeting point (127.0.0.1 port {port + 1}): cannot listen on "
            f"127.0.0.1 port {port + 1}: Address already in use; port {port + 1} is taken "
            "on h2") in said
    assert port_free(port) and port_free(port + 2)
