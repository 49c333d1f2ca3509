"""The rendezvous: which host and port, and go / no-go from each node's reachability."""

from __future__ import annotations

import pytest

from fleet.cluster.rendezvous import (
    DEFAULT_PORT,
    Reach,
    Rendezvous,
    choose_rendezvous,
    decide,
    pair_rendezvous,
)
from fleet.errors import ClusterError
from fleet.inventory import inventory_from_text
from fleet.inventory.clusters import Cluster

POD = Cluster(name="pod", provider="lambda", hosts=("g1", "g2", "g3", "g4"),
              where="inv.yaml:3:14: providers.lambda.cluster",
              addresses={"g1": "10.0.0.1", "g2": "10.0.0.2", "g3": "10.0.0.3",
                         "g4": "10.0.0.4"})
RDV = Rendezvous("pod", "g1", "10.0.0.1", 29550, "the first healthy host in file order")


def test_the_first_healthy_host_on_the_default_port() -> None:
    assert DEFAULT_PORT == 29550  # neither torch's customary 29500 nor torchrun's 29400
    assert choose_rendezvous(POD) == RDV
    chosen = choose_rendezvous(POD, healthy={"g2", "g4"})
    assert (chosen.host, chosen.address, chosen.port) == ("g2", "10.0.0.2", 29550)


def test_the_inventory_names_it() -> None:
    loaded = inventory_from_text("""\
providers:
  lambda:
    cluster: pod
    hosts:
      g1: {address: 203.0.113.1}
      g2: {address: 203.0.113.2}
      g3: {address: 203.0.113.3}
clusters:
  pod: {rendezvous_host: g2, rendezvous_address: 10.1.0.2, rendezvous_port: 31000}
""", "inv.yaml")
    [cluster] = loaded.clusters
    chosen = choose_rendezvous(cluster)
    assert (chosen.host, chosen.address, chosen.port, chosen.why) == (
        "g2", "10.1.0.2", 31000, "named in the inventory")
    assert str(chosen) == "g2 (10.1.0.2) port 31000"
    with pytest.raises(ClusterError, match=r"rendezvous_host g2 failed its own suite.*g1, g3"):
        choose_rendezvous(cluster, healthy={"g1", "g3"})


def test_too_few_healthy_nodes_is_refused_naming_the_failed() -> None:
    with pytest.raises(ClusterError, match=r"1 node of 4 passed.*g2, g3, g4"):
        choose_rendezvous(POD, healthy={"g1"})


def test_a_pair_meets_at_its_first_node() -> None:
    chosen = pair_rendezvous(POD, ("g3", "g1"))
    assert (chosen.host, chosen.address, chosen.port) == ("g3", "10.0.0.3", 29550)
    with pytest.raises(ClusterError, match="not two nodes of cluster pod"):
        pair_rendezvous(POD, ("g3", "g9"))


def test_go_when_every_node_reaches_it() -> None:
    decision = decide(RDV, POD.hosts, [Reach(h, True) for h in POD.hosts])
    assert decision.go and not decision.failed and not decision.silent
    assert decision.message == "go: 4 nodes reach the rendezvous g1 (10.0.0.1) port 29550"


@pytest.mark.parametrize(("error", "fix"), [
    ("[Errno 110] Connection timed out", "open it (and NCCL's own ports)"),
    ("[Errno 111] Connection refused", "a firewall on g1 rejects it"),
    ("[Errno -2] Name or service not known", "clusters.pod.rendezvous_address to an IP"),
    ("[Errno 113] No route to host", "on the network the nodes share"),
    ("something else entirely", "nc -zv 10.0.0.1 29550"),
])
def test_no_go_names_the_node_and_the_fix(error: str, fix: str) -> None:
    reports = [Reach("g1", True), Reach("g2", True), Reach("g3", False, error),
               Reach("g4", True)]
    decision = decide(RDV, POD.hosts, reports)
    assert not decision.go
    assert [r.host for r in decision.failed] == ["g3"]
    head, *lines = decision.message.splitlines()
    assert head.startswith("no-go, nothing was started: 1 of 4 nodes cannot reach")
    assert lines == [lines[0]] and lines[0].startswith(f"  g3: {error};")
    assert fix in lines[0]


def test_the_rendezvous_hosts_own_port_in_use() -> None:
    decision = decide(RDV, POD.hosts, [
        Reach("g1", False, "OSError: [Errno 98] Address already in use"),
        *(Reach(h, True) for h in ("g2", "g3", "g4"))])
    assert "port 29550 is taken on g1: set clusters.pod.rendezvous_port" in decision.message


def test_silent_nodes_and_everyone_failing() -> None:
    reports = [Reach("g1", True), Reach("g2", False, "timed out"),
               Reach("g3", False, "timed out")]
    decision = decide(RDV, POD.hosts, reports)
    assert decision.silent == ("g4",)
    assert "3 of 4 nodes cannot reach" in decision.message
    assert "  g4: sent no report" in decision.message
    assert "likely at g1" not in decision.message
    everyone = decide(RDV, POD.hosts, [Reach("g1", True), *(
        Reach(h, False, "timed out") for h in ("g2", "g3", "g4"))])
    assert "no node reaches it: the fault is likely at g1 or its port" in everyone.message


def test_a_node_reported_twice_must_reach_it_both_times() -> None:
    reports = [*(Reach(h, True) for h in POD.hosts), Reach("g2", False, "timed out")]
    assert [r.host for r in decide(RDV, POD.hosts, reports).failed] == ["g2"]


def test_a_report_from_outside_the_step_is_refused() -> None:
    with pytest.raises(ClusterError, match="names g9, which is not a node"):
        decide(RDV, ("g1", "g2"), [Reach("g1", True), Reach("g9", True)])
