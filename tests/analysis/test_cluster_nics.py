"""A pair's per-NIC RDMA test judged (fleet/analysis/cluster/nics.py): port pairs by rank,
the lesser side's ib_write_bw against the lesser port's rate, a port short beside every
partner named alone, and the tests that did not run said with why."""

from __future__ import annotations

from dataclasses import replace

from fleet.analysis.cluster.nics import nic_findings, port_pairs
from fleet.model.step import NicFigure, NodeNics, StepResult
from tests.analysis.test_cluster_judge import NDR, judge, only, step

NDR_GBPS = 400.0


def nics(host: str, role: str, figures: list[float | None],
         errors: dict[int, str] | None = None) -> NodeNics:
    return NodeNics(host, role, None, tuple(
        NicFigure(i, f"mlx5_{i}", 1, NDR_GBPS, g, False, (errors or {}).get(i))
        for i, g in enumerate(figures)))


def nic_step(hosts: str, first: list[float | None], second: list[float | None],
             first_errors: dict[int, str] | None = None) -> StepResult:
    a, b = hosts
    return replace(step(hosts, 372.0), nics=(
        nics(a, "server", first, first_errors), nics(b, "client", second)))


def test_every_port_at_its_rate_says_nothing() -> None:
    s = nic_step("ab", [391.0] * 8, [392.5] * 8)
    pairs, skipped = port_pairs(s)
    assert len(pairs) == 8 and not skipped
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
    assert "host memory" in f.evidence and f.steps == ("a-b",)


def test_a_port_short_beside_every_partner_is_named_alone() -> None:
    # b's mlx5_3 is short against a's and c's; a's and c's are fine elsewhere.
    steps = [nic_step("ab", [391.0] * 3 + [190.0], [391.0] * 3 + [190.0]),
             nic_step("cb", [391.0] * 3 + [185.0], [391.0] * 3 + [185.0]),
             nic_step("ac", [391.0] * 4, [391.0] * 4)]
    found = nic_findings("pod", steps)
    assert [f.title.split(":")[0] for f in found] == ["b's mlx5_3/1", "b's mlx5_3/1"]
    assert "b's mlx5_3/1 was short beside every partner it met" in found[0].evidence


def test_tests_that_did_not_run_are_said_with_why() -> None:
    s = nic_step("ab", [391.0, None, 391.0], [391.0, None],
               first_errors={1: "ib_write_bw: Couldn't connect to 10.0.0.2:29550"})
    (f,) = nic_findings("pod", [s])
    assert (f.rule, f.severity) == ("nic-untested", "info")
    assert f.title == "a and b: 2 of the per-NIC tests did not run"
    assert "a's mlx5_1/1: ib_write_bw: Couldn't connect to 10.0.0.2:29550" in f.evidence
    assert "a's mlx5_2/1: b has no port of rank 3" in f.evidence
    skipped = replace(s, nics=(NodeNics("a", "server", "no active RDMA port"),
                               nics("b", "client", [391.0])))
    (f,) = nic_findings("pod", [skipped])
    assert f.title == "a and b: no per-NIC test ran"
    assert f.evidence == "a: no active RDMA port"


def test_the_cluster_judgement_carries_them() -> None:
    j = judge([nic_step("ab", [391.0, 150.0], [391.0, 150.0])], NDR)
    f = only(j, "nic-short")
    assert f.title.startswith("a's mlx5_1/1 or b's mlx5_1/1: ib_write_bw 150 Gb/s")
    # A step run without the test says nothing of its ports.
    assert not [f for f in judge([step("ab", 372.0)], NDR).findings
                if f.rule.startswith("nic-")]
