"""A pair's per-NIC RDMA test judged (fleet/analysis/cluster/nics.py): each port of node
0 with the node 1 port it met (its peer), the lesser side's ib_write_bw against the
lesser port's rate, a port short beside every partner named alone, and the tests that
did not run said with each side's reason."""

from __future__ import annotations

from dataclasses import replace

from fleet.analysis.cluster.nics import nic_findings, port_pairs
from fleet.model.step import NicFigure, NodeNics, StepResult
from tests.analysis.test_cluster_judge import NDR, judge, only, step

NDR_GBPS = 400.0


def nics(host: str, role: str, figures: list[float | None], gdr: bool = True,
         errors: dict[int, str] | None = None, peers: list[str | None] | None = None
         ) -> NodeNics:
    return NodeNics(host, role, None, tuple(
        NicFigure(i, f"mlx5_{i}", 1, NDR_GBPS, g, gdr, (errors or {}).get(i),
                  f"mlx5_{i}/1" if peers is None else peers[i])
        for i, g in enumerate(figures)))


def nic_step(hosts: str, first: list[float | None], second: list[float | None],
             gdr: bool = True, **extra: dict[int, str]) -> StepResult:
    a, b = hosts
    return replace(step(hosts, 372.0), nics=(
        nics(a, "server", first, gdr, extra.get("first_errors")),
        nics(b, "client", second, gdr, extra.get("second_errors"))))


def test_every_port_at_its_rate_says_nothing() -> None:
    s = nic_step("ab", [391.0] * 8, [392.5] * 8)
    pairs, untested, none = port_pairs(s)
    assert len(pairs) == 8 and not untested and not none
    assert [p.gbps for p in pairs] == [391.0] * 8  # the lesser side
    assert nic_findings("pod", [s]) == []


def test_a_short_port_pair_names_both_ends_from_one_test() -> None:
    s = nic_step("ab", [391.0, 391.0, 391.0, 180.0], [392.0, 392.0, 392.0, 181.0])
    (f,) = nic_findings("pod", [s])
    assert (f.rule, f.severity, f.whose, f.hosts) == ("nic-short", "fault", "provider",
                                                      ("a", "b"))
    assert f.title == ("a's mlx5_3/1 or b's mlx5_3/1: ib_write_bw 180 Gb/s, 45% of its "
                       "400 Gb/s")
    assert "which of the two ports cannot be told from one test" in f.evidence
    assert "GPUDirect" in f.evidence and f.steps == ("a-b",)
    # One measurement, blind to the renter's own traffic: measured again before disputed.
    assert "traffic of the renter's own on these ports is not seen" in f.evidence
    assert f.action.startswith("Measure the pair again with the nodes idle")


def test_from_host_memory_a_short_port_is_not_settled() -> None:
    # fleet does not pin the host-memory run to the NIC's NUMA node: the host's side of
    # the path is not ruled out.
    (f,) = nic_findings("pod", [nic_step("ab", [391.0, 150.0], [391.0, 150.0], gdr=False)])
    assert (f.rule, f.whose) == ("nic-short", "unsettled")
    assert "host memory, not pinned to the NIC's NUMA node" in f.evidence
    assert "numactl" in f.action


def test_a_port_short_beside_every_partner_is_named_alone_once() -> None:
    # b's mlx5_3 is short against a's and c's; a's and c's are fine elsewhere.
    steps = [nic_step("ab", [391.0] * 3 + [190.0], [391.0] * 3 + [190.0]),
             nic_step("cb", [391.0] * 3 + [185.0], [391.0] * 3 + [185.0]),
             nic_step("ac", [391.0] * 4, [391.0] * 4)]
    (f,) = nic_findings("pod", steps)
    assert f.title == "b's mlx5_3/1: ib_write_bw 185 Gb/s, 46% of its 400 Gb/s"
    assert f.steps == ("a-b", "c-b") and set(f.hosts) == {"a", "b", "c"}
    assert "b's mlx5_3/1 was short beside every port it met" in f.evidence


def test_one_partner_met_twice_is_not_every_partner() -> None:
    # The same two ports short in two steps: still either of them.
    steps = [nic_step("ab", [150.0], [150.0]), nic_step("ab", [151.0], [151.0])]
    steps[1] = replace(steps[1], step_id="a-b-again")
    found = nic_findings("pod", steps)
    assert [f.title.split(":")[0] for f in found] == ["a's mlx5_0/1 or b's mlx5_0/1"] * 2


def test_ports_meet_by_their_peer_and_the_rest_say_why() -> None:
    # Node 0's mlx5_1 is down (not in its report); node 1's mlx5_1 says why it met none.
    a = NodeNics("a", "server", None, (
        NicFigure(0, "mlx5_0", 1, 400.0, 391.0, True, None, "mlx5_0/1"),
        NicFigure(1, "mlx5_2", 1, 400.0, 150.0, True, None, "mlx5_2/1")))
    b = NodeNics("b", "client", None, (
        NicFigure(0, "mlx5_0", 1, 400.0, 391.0, True, None, "mlx5_0/1"),
        NicFigure(1, "mlx5_2", 1, 400.0, 151.0, True, None, "mlx5_2/1"),
        NicFigure(2, "mlx5_1", 1, 400.0, None, False,
                  "the other node's mlx5_1/1 is not Active")))
    s = replace(step("ab", 372.0), nics=(a, b))
    found = {f.rule: f for f in nic_findings("pod", [s])}
    # mlx5_2 met mlx5_2, not the next port in order.
    assert found["nic-short"].title.startswith("a's mlx5_2/1 or b's mlx5_2/1")
    assert found["nic-untested"].evidence == (
        "b's mlx5_1/1: the other node's mlx5_1/1 is not Active")


def test_tests_that_did_not_run_are_said_with_both_sides_reasons() -> None:
    s = nic_step("ab", [391.0, None, 391.0], [391.0, None, 391.0],
                 first_errors={1: "ib_write_bw exited 1: the client closed the connection"},
                 second_errors={1: "no RDMA device detected"})
    # Port 2 measured, but neither side reports its rate.
    s = replace(s, nics=tuple(replace(side, tests=tuple(
        replace(t, rate_gbps=None) if t.index == 2 else t for t in side.tests))
        for side in s.nics))
    (f,) = nic_findings("pod", [s])
    assert (f.rule, f.severity) == ("nic-untested", "info")
    assert f.title == "a and b: 2 port tests did not run"
    assert ("a's mlx5_1/1 to b's mlx5_1/1: a's mlx5_1/1: ib_write_bw exited 1: the client "
            "closed the connection; b's mlx5_1/1: no RDMA device detected") in f.evidence
    assert ("a's mlx5_2/1 to b's mlx5_2/1: 391.0 Gb/s, but neither port's rate is known"
            in f.evidence)
    skipped = replace(s, nics=(NodeNics("a", "server", "no active RDMA port"),
                               NodeNics("b", "client", "the other node: no active RDMA "
                                                       "port")))
    (f,) = nic_findings("pod", [skipped])
    assert f.title == "a and b: no per-NIC test ran"
    assert f.evidence == ("a: no active RDMA port; b: the other node: no active RDMA port")


def test_the_cluster_judgement_carries_them() -> None:
    j = judge([nic_step("ab", [391.0, 150.0], [391.0, 150.0])], NDR)
    f = only(j, "nic-short")
    assert f.title.startswith("a's mlx5_1/1 or b's mlx5_1/1: ib_write_bw 150 Gb/s")
    # A step run without the test says nothing of its ports.
    assert not [f for f in judge([step("ab", 372.0)], NDR).findings
                if f.rule.startswith("nic-")]
