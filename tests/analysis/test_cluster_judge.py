"""The judgement on a cluster's steps between nodes (fleet/analysis/cluster/judgement.py): real
network fingerprints from tests/fixtures/network/ (h100-8x-ib-ndr is 8 x 400 Gb/s NDR,
lent-h100-1x the lent VM with virtio eth0 only), step results built as the store will
hand them over."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cache

import pytest

from fleet.analysis.cluster.judgement import (
    ClusterFinding,
    ClusterJudgement,
    PairVerdict,
    judge_cluster,
    node_fabric,
)
from fleet.errors import ClusterError
from fleet.model.network import NetworkFingerprint
from fleet.model.step import NodeTransport, StepFigure, StepKind, StepResult
from tests.analysis.test_network_findings import load

GIB = 1 << 30
IB = ("NET/IB/0/GDRDMA",)


@cache
def fp(case: str) -> NetworkFingerprint:
    return load(case)


def ib(host: str, gdrdma: bool | None = True, said: tuple[str, ...] = ()) -> NodeTransport:
    return NodeTransport(host, "IB", None, gdrdma, IB if gdrdma else ("NET/IB/0",),
                         tuple(f"mlx5_{i}:1/IB" for i in range(8)), said)


def socket(host: str, said: tuple[str, ...] = ()) -> NodeTransport:
    return NodeTransport(host, "Socket", None, None, ("NET/Socket/0",),
                         ("eth0:10.0.0.5<0>",), said)


def step(hosts: Sequence[str], reduce: float | None, gather: float | None = None, *,
         kind: StepKind = "pair", step_id: str | None = None, algo: str | None = "Ring",
         transports: Sequence[NodeTransport] | None = None, error: str | None = None,
         ranks: int = 8, backend: str = "nccl") -> StepResult:
    figures = []
    if reduce is not None:
        figures += [StepFigure("all_reduce", 16 << 20, reduce * 0.6, 1.0, 1.0),
                    StepFigure("all_reduce", GIB, reduce, reduce / 1.875, 5000.0)]
    if gather is not None:
        figures.append(StepFigure("all_gather", GIB, gather, gather, 3000.0))
    return StepResult(
        cluster="pod", step_id=step_id or "-".join(hosts), kind=kind,
        round=None if kind == "cluster" else 1, hosts=tuple(hosts), ranks_per_node=ranks,
        backend=backend, algo=algo, figures=() if error else tuple(figures),
        transports=tuple(transports if transports is not None else [ib(h) for h in hosts]),
        error=error)


def judge(results: Sequence[StepResult], cases: Mapping[str, str],
          settings: Mapping[str, Mapping[str, str]] | None = None,
          ) -> ClusterJudgement:
    return judge_cluster(results, {h: fp(c) for h, c in cases.items()},
                         {h: {} for h in cases} if settings is None else settings)


def only(judgement: ClusterJudgement, rule: str) -> ClusterFinding:
    found = [f for f in judgement.findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in judgement.findings]
    return found[0]


def pair(judgement: ClusterJudgement, step_id: str) -> PairVerdict:
    return next(p for p in judgement.pairs if p.step_id == step_id)


NDR = {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-ndr"}


def test_node_fabric_is_active_ports_at_their_rate_one_a_rank() -> None:
    eight = node_fabric("a", fp("h100-8x-ib-ndr"), 8)
    assert eight is not None and eight.total_gbps == 3200
    assert "8 x 400 Gb/s infiniband = 400 GB/s" in eight.words
    # one rank a node is promised one port, not eight
    one = node_fabric("a", fp("h100-8x-ib-ndr"), 1)
    assert one is not None and one.total_gbps == 400
    # the HDR port counts at the rate it should run at: its fastest sibling's
    hdr = node_fabric("b", fp("h100-8x-ib-hdr-port"), 8)
    assert hdr is not None and hdr.total_gbps == 3200
    # a port down is not counted
    down = node_fabric("c", fp("h100-8x-ib-port-down"), 8)
    assert down is not None and down.total_gbps == 2800 and down.down == ("mlx5_5",)
    assert node_fabric("vm", fp("lent-h100-1x"), 1) is None
    efa = node_fabric("e", fp("efa-p4d"), 8)
    assert efa is not None and efa.total_gbps is None


def test_healthy_ndr_pair_passes() -> None:
    j = judge([step("ab", 370.0, 380.0)], NDR)
    v = pair(j, "a-b")
    assert (v.op, v.busbw_gbs, v.expected_gbs, v.passed) == ("all_reduce", 370.0, 400.0, True)
    assert v.share == pytest.approx(0.925)
    assert v.cause is None and v.whose is None and v.transport == "IB GDRDMA"
    assert not [f for f in j.findings if f.severity == "fault"]


def test_short_all_gather_fails_the_pair_and_is_named() -> None:
    v = pair(judge([step("ab", 370.0, 300.0)], NDR), "a-b")
    assert (v.op, v.busbw_gbs, v.passed) == ("all_gather", 300.0, False)
    assert (v.all_reduce_gbs, v.all_gather_gbs) == (370.0, 300.0)


def test_short_pair_with_an_hdr_port_is_below_rate_and_the_providers() -> None:
    j = judge([step("ab", 185.0)], {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-hdr-port"})
    v = pair(j, "a-b")
    assert (v.expected_gbs, v.passed, v.cause, v.whose) == (
        400.0, False, "below rate on b", "provider")
    f = only(j, "pair-short")
    assert (f.severity, f.whose, f.hosts, f.steps) == ("fault", "provider", ("a", "b"),
                                                       ("a-b",))
    assert "185 GB/s, 46% of the 400 GB/s" in f.title
    # the slow port named, and its pace: 8 ports at 200 Gb/s carry 200 GB/s
    assert "mlx5_3 at 200 Gb/s" in f.evidence and "carry 200 GB/s" in f.evidence
    assert "azurehpc-health-checks" in f.source and "ngc_multinode_perf" in f.source


def test_gpudirect_off_and_far_nic_are_named() -> None:
    j = judge([step("ab", 200.0, transports=[ib("a"), ib("b", gdrdma=False)]),
               step("ac", 200.0)],
              {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-no-peermem", "c": "h100-8x-ib-far-nic"})
    assert pair(j, "a-b").cause == "GPUDirect off on b"
    assert pair(j, "a-c").cause == "far NIC on c"
    assert {pair(j, s).whose for s in ("a-b", "a-c")} == {"provider"}


def test_a_port_down_is_a_cause_though_not_counted() -> None:
    j = judge([step("ab", 200.0)], {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-port-down"})
    v = pair(j, "a-b")
    assert (v.expected_gbs, v.cause, v.whose) == (350.0, "port down on b", "provider")
    f = only(j, "pair-short")
    assert "b: 7 x 400 Gb/s infiniband = 350 GB/s; not Active, not counted: mlx5_5" in (
        f.evidence)


def test_two_nodes_one_failed_pair_is_no_shared_fault() -> None:
    j = judge([step("ab", 185.0)], {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-hdr-port"})
    assert [f.rule for f in j.findings] == ["pair-short"]
    assert [(n.ratio, n.slow, n.suspect) for n in j.nodes] == [(0.0, False, True)] * 2


def test_gdrdma_unused_under_the_renters_gdr_level() -> None:
    j = judge([step("ab", 200.0, transports=[ib("a"), ib("b", gdrdma=False)])], NDR,
              {"a": {}, "b": {"NCCL_NET_GDR_LEVEL": "LOC"}})
    v = pair(j, "a-b")
    assert (v.cause, v.whose) == ("GPUDirect unused on b", "renter")
    assert "NCCL_NET_GDR_LEVEL=LOC" in only(j, "pair-short").evidence


def test_socket_fallback_on_ib_nodes_with_nothing_asking_is_the_providers() -> None:
    j = judge([step("ab", 3.1, transports=[ib("a"), socket("b")])], NDR)
    v = pair(j, "a-b")
    assert (v.cause, v.whose, v.transport) == ("socket fallback on b", "provider",
                                               "a: IB GDRDMA; b: Socket")
    f = only(j, "pair-short")
    assert f.whose == "provider" and "TCP sockets on b (eth0)" in f.evidence
    assert "8 Active fabric ports" in f.evidence and "NCCL_NET=Socket" in f.source


def test_renter_set_nccl_net_socket_is_the_renters() -> None:
    transports = [socket("a", ("NCCL_NET=Socket",)), socket("b", ("NCCL_NET=Socket",))]
    j = judge([step("ab", 3.1, transports=transports)], NDR,
              {"a": {"NCCL_NET": "Socket"}, "b": {"NCCL_NET": "Socket"}})
    v = pair(j, "a-b")
    assert (v.cause, v.whose) == ("socket fallback on a; socket fallback on b", "renter")
    f = only(j, "pair-short")
    assert f.whose == "renter" and "the run set NCCL_NET=Socket" in f.evidence


@pytest.mark.parametrize(("settings", "said", "whose", "words"), [
    # NCCL read it, the run's environment did not set it: a configuration file
    ({"a": {}, "b": {}}, ("NCCL_IB_DISABLE=1",), "unsettled", "configuration files"),
    # a setting that can take the fabric away
    ({"a": {}, "b": {"NCCL_IB_HCA": "mlx5_9"}}, (), "unsettled", "NCCL_IB_HCA=mlx5_9"),
    # no settings recorded
    ({"a": {}}, (), "unsettled", "not recorded"),
])
def test_socket_fallback_unsettled(settings: Mapping[str, Mapping[str, str]],
                                   said: tuple[str, ...], whose: str, words: str) -> None:
    j = judge([step("ab", 3.1, transports=[ib("a"), socket("b", said)])], NDR, settings)
    f = only(j, "pair-short")
    assert (pair(j, "a-b").whose, f.whose) == (whose, whose)
    assert words in f.evidence


def test_short_with_no_cause_shown() -> None:
    j = judge([step("ab", 300.0)], NDR)
    v = pair(j, "a-b")
    assert (v.cause, v.whose) == ("cause not shown by the fingerprint", "provider")
    # the run's own setting that can move an all-reduce leaves it unsettled; fleet's
    # NCCL_ALGO=Ring and NCCL_DEBUG do not
    own = {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO"}
    j = judge([step("ab", 300.0)], NDR, {"a": own, "b": {**own, "NCCL_IB_QPS_PER_CONNECTION": "1"}})
    assert pair(j, "a-b").whose == "unsettled"
    assert "NCCL_IB_QPS_PER_CONNECTION=1" in only(j, "pair-short").evidence
    assert "NCCL_ALGO" not in only(j, "pair-short").evidence


def test_vm_pair_is_information_only() -> None:
    vm = {"a": "lent-h100-1x", "b": "lent-h100-1x"}
    j = judge([step("ab", 1.2, ranks=1, transports=[socket("a"), socket("b")])], vm)
    v = pair(j, "a-b")
    assert (v.expected_gbs, v.passed, v.busbw_gbs) == (None, None, 1.2)
    f = only(j, "pair-no-fabric")
    assert (f.severity, f.whose) == ("info", None)
    assert "NCCL ran over sockets on eth0" in f.evidence
    assert "no RDMA fabric to judge it by" in f.evidence and "1.2 GB/s" in f.evidence
    assert [f.severity for f in j.findings] == ["info"]  # no socket fallback: nothing to fall from
    assert j.nodes[0].ratio is None and not j.nodes[0].slow


def test_figure_above_the_fabric_is_not_the_networks() -> None:
    j = judge([step("ab", 520.0, algo=None)], NDR)
    v = pair(j, "a-b")
    assert v.passed is None and v.share == pytest.approx(1.3)
    f = only(j, "pair-above-fabric")
    assert (f.severity, f.whose) == ("info", None)
    assert "tree algorithms" in f.evidence and "#196" in f.source
    assert not [f for f in j.findings if f.severity == "fault"]


def test_above_all_reduce_leaves_the_all_gather_judged() -> None:
    j = judge([step("ab", 520.0, 370.0, algo=None)], NDR)
    v = pair(j, "a-b")
    assert (v.op, v.passed) == ("all_gather", True)
    assert only(j, "pair-above-fabric").severity == "info"


FOUR = {h: "h100-8x-ib-ndr" for h in "abcd"}


def every_pair(bad: str | None) -> list[StepResult]:
    return [step(p, 185.0 if bad is None or bad in p else 372.0)
            for p in ("ab", "cd", "ac", "bd", "ad", "bc")]


def test_slow_node_found_by_its_pairs() -> None:
    j = judge(every_pair("d"), FOUR)
    nodes = {n.host: n for n in j.nodes}
    assert (nodes["d"].pairs, nodes["d"].passed, nodes["d"].ratio, nodes["d"].slow) == (
        3, 0, 0.0, True)
    for host in "abc":
        assert (nodes[host].passed, nodes[host].slow, nodes[host].suspect) == (2, False, False)
    f = only(j, "slow-node")
    assert (f.hosts, f.severity, f.whose) == (("d",), "fault", "provider")
    assert "passed 0 of 3" in f.title and set(f.steps) == {"a-d", "b-d", "c-d"}
    assert "with a (a passed 2 of 3)" in f.evidence
    # each of its short pairs says which node is the slow one
    ad = next(x for x in j.findings if x.rule == "pair-short" and x.steps == ("a-d",))
    assert ad.evidence.endswith("d is the slow node by its pairs (a passed 2 of 3)")
    assert "shared-fault" not in {x.rule for x in j.findings}


def test_a_failure_no_bad_partner_explains_is_a_suspect() -> None:
    results = every_pair(None)
    results = [step(r.hosts, 372.0 if r.step_id != "a-b" else 185.0) for r in results]
    j = judge(results, FOUR)
    assert {n.host for n in j.nodes if n.suspect} == {"a", "b"}
    assert not any(n.slow for n in j.nodes)
    assert {f.hosts for f in j.findings if f.rule == "suspect"} == {("a",), ("b",)}
    assert all(f.severity == "info" for f in j.findings if f.rule == "suspect")


def test_every_pair_failing_is_a_shared_fault() -> None:
    j = judge(every_pair(None), FOUR)
    f = only(j, "shared-fault")
    assert (f.severity, f.hosts) == ("fault", ("a", "b", "c", "d"))
    assert "every pair test failed (6 of 6)" in f.evidence
    assert not any(n.slow for n in j.nodes)
    assert "slow-node" not in {x.rule for x in j.findings}


def test_failed_step_names_its_nodes_and_error_and_the_node_every_step_failed() -> None:
    results = every_pair(None)
    results = [step(r.hosts, 372.0) if "d" not in r.hosts else
               step(r.hosts, None, error=f"rendezvous not joined within 120 s ({r.step_id})")
               for r in results]
    j = judge(results, FOUR)
    failed = [f for f in j.findings if f.rule == "step-failed"]
    assert sorted((f.hosts, f.steps) for f in failed) == [
        (("a", "d"), ("a-d",)), (("b", "d"), ("b-d",)), (("c", "d"), ("c-d",))]
    ad = next(f for f in failed if f.steps == ("a-d",))
    assert ad.title == "step a-d (pair a and d) failed"
    assert ad.evidence == "rendezvous not joined within 120 s (a-d)"
    node = only(j, "node-steps-failed")
    assert node.hosts == ("d",) and "every pair step it was in failed (3 of 3)" in node.title
    # a failed pair is a failed step, not a slow fabric (issue 57): d's steps failed
    # where its partners ran with others
    assert pair(j, "a-d").passed is False and pair(j, "a-d").busbw_gbs is None
    assert {n.host for n in j.nodes if n.failing} == {"d"}
    assert not any(n.slow for n in j.nodes)


def test_every_step_failed_is_one_finding() -> None:
    j = judge([step("ab", None, error="connection refused")], NDR)
    assert only(j, "every-step-failed").hosts == ("a", "b")
    assert "step-failed" not in {f.rule for f in j.findings}


def test_whole_cluster_step_compared_with_the_slowest_pair() -> None:
    slow = {"ad": 180.0, "bd": 185.0, "cd": 190.0}
    results = [step("abcd", 171.0, kind="cluster", step_id="whole"),
               *(step(p, slow.get(p, 372.0)) for p in ("ab", "cd", "ac", "bd", "ad", "bc"))]
    j = judge(results, FOUR)
    f = only(j, "cluster-figure")
    assert (f.severity, f.whose, f.hosts, f.steps) == (
        "info", None, ("a", "b", "c", "d"), ("whole",))
    assert f.title == "pod: the whole cluster's all_reduce 171 GB/s"
    assert ("all_reduce busbw 171 GB/s at 1 GiB (43%, not judged: its largest size "
            "was 1 GiB, and healthy clusters reach their rate from 4 GiB) over 4 nodes x 8 "
            "ranks") in f.evidence
    assert "the slowest pair, a and d: all_reduce 180 GB/s" in f.evidence
    assert "the whole cluster gives 95% of it" in f.evidence
    assert len(j.pairs) == 6  # the cluster step is no pair
    # A sweep stopped at 1 GiB is not judged: a healthy 128-node cluster reads 28% there.
    assert not [f for f in j.findings if f.rule in ("cluster-short", "cluster-below-rate")]


def test_a_whole_cluster_short_beside_short_pairs_points_at_them() -> None:
    slow = {"ad": 180.0, "bd": 185.0, "cd": 190.0}
    results = [whole(171.0, 381.0, 379.0, 95.0),
               *(step(p, slow.get(p, 372.0)) for p in ("ab", "cd", "ac", "bd", "ad", "bc"))]
    short = only(judge(results, FOUR), "cluster-short")
    assert (short.severity, short.steps) == ("fault", ("whole",))
    assert short.title == ("pod: the whole cluster's all_reduce 171 GB/s, 43% of the "
                           "400 GB/s its fabric should give")
    assert "3 pairs of 6 short too: see their findings" in short.evidence
    assert "a fault under 75%, 300 GB/s" in short.evidence
    assert "nccl-tests #309" in short.source


def whole(reduce: float, gather: float, scatter: float, alltoall: float) -> StepResult:
    """The whole cluster's step over four NDR nodes, every collective at 16 GiB."""
    figures = tuple(StepFigure(op, 16 * GIB, gbs, gbs, 1000.0) for op, gbs in (
        ("all_reduce", reduce), ("all_gather", gather), ("reduce_scatter", scatter),
        ("all_to_all", alltoall)))
    return StepResult("pod", "whole", "cluster", None, tuple("abcd"), 8, "nccl", None,
                      figures, tuple(ib(h) for h in "abcd"))


HEALTHY_PAIRS = [step(p, 372.0) for p in ("ab", "cd", "ac", "bd", "ad", "bc")]


def test_a_healthy_cluster_passes_at_the_published_figures() -> None:
    # 2 nodes of 8 x 400G NDR read 370-396 GB/s all-reduce busbw with the ring forced
    # (issue 57's published runs): 92.5-99% of the ports' 400 GB/s, over the 90% line.
    j = judge([whole(370.0, 381.0, 379.0, 95.0), *HEALTHY_PAIRS], FOUR)
    assert not [f for f in j.findings if f.rule == "cluster-short"]
    f = only(j, "cluster-figure")
    for said in ("all_reduce busbw 370 GB/s at 16 GiB (92%)",
                 "all_gather busbw 381 GB/s at 16 GiB (95%)",
                 "reduce_scatter busbw 379 GB/s at 16 GiB (95%)",
                 "all_to_all busbw 95.0 GB/s at 16 GiB (shown, not judged)",
                 "expected 400 GB/s", "a fault under 75%, its rate from 90%"):
        assert said in f.evidence, f.evidence


def test_a_whole_cluster_short_beside_passing_pairs_is_the_fabric_between_them() -> None:
    # Each pair reaches its ports' rate; the all-reduce of all four nodes does not
    # (the switches between the pairs: oversubscription, routing).
    j = judge([whole(281.0, 377.0, 379.0, 90.0), *HEALTHY_PAIRS], FOUR)
    f = only(j, "cluster-short")
    assert (f.severity, f.whose, f.hosts) == ("fault", "provider", tuple("abcd"))
    assert f.title == ("pod: the whole cluster's all_reduce 281 GB/s, 70% of the "
                       "400 GB/s its fabric should give")
    assert "every judged pair passed (6 pairs)" in f.evidence
    assert "oversubscription" in f.action
    # A reduce-scatter as low is said, not disputed: no published healthy table of one
    # sets a fault line.
    j = judge([whole(368.0, 377.0, 281.0, 90.0), *HEALTHY_PAIRS], FOUR)
    assert not [f for f in j.findings if f.rule == "cluster-short"]
    assert only(j, "cluster-below-rate").title == (
        "pod: the whole cluster's reduce_scatter 281 GB/s, 70% of its fabric's 400 GB/s")


def test_a_whole_cluster_under_its_rate_as_healthy_ones_under_nccls_defaults() -> None:
    # 80% of the ports' rate: what one healthy 8 x 400G cluster read at 8 nodes under
    # NCCL's defaults (98% tuned): said, with the tuning, and not disputed.
    j = judge([whole(320.0, 377.0, 379.0, 90.0), *HEALTHY_PAIRS], FOUR)
    assert not [f for f in j.findings if f.rule == "cluster-short"]
    f = only(j, "cluster-below-rate")
    assert (f.severity, f.whose) == ("info", None)
    assert f.title == "pod: the whole cluster's all_reduce 320 GB/s, 80% of its fabric's 400 GB/s"
    assert "all_gather" not in f.evidence and "NCCL_MIN_CTAS=24" in f.action


def test_gathers_over_many_nodes_are_shown_not_judged() -> None:
    hosts = [f"n{i:02d}" for i in range(32)]
    figures = tuple(StepFigure(op, 16 * GIB, gbs, gbs, 1000.0) for op, gbs in (
        ("all_reduce", 340.0), ("all_gather", 200.0), ("reduce_scatter", 280.0)))
    big = StepResult("pod", "whole", "cluster", None, tuple(hosts), 8, "nccl", None,
                     figures, tuple(ib(h) for h in hosts))
    j = judge([big], {h: "h100-8x-ib-ndr" for h in hosts})
    assert not [f for f in j.findings if f.rule == "cluster-short"]
    # all_reduce's 85% is judged (below its rate, said); the gathers' 50% and 70% are not.
    assert only(j, "cluster-below-rate").evidence.startswith(
        "all_reduce busbw 340 GB/s at 16 GiB, 85%; under")
    said = only(j, "cluster-figure").evidence
    assert ("all_gather busbw 200 GB/s at 16 GiB (50%, not judged over more than 16 nodes, "
            "where published runs fall with the node count)") in said
    # The same figures over 16 nodes are judged: said, the lowest first.
    j = judge([replace(big, hosts=tuple(hosts[:16]), transports=big.transports[:16])],
              {h: "h100-8x-ib-ndr" for h in hosts[:16]})
    assert not [f for f in j.findings if f.rule == "cluster-short"]
    assert only(j, "cluster-below-rate").title.startswith(
        "pod: the whole cluster's all_gather 200")


def test_a_whole_cluster_above_its_ports_is_said_not_judged_short() -> None:
    # NVLS or SHARP reduce in the switch: an all-reduce busbw above the ports' total is
    # not the network's rate, and not short.
    j = judge([whole(480.0, 380.0, 379.0, 95.0), *HEALTHY_PAIRS], FOUR)
    assert not [f for f in j.findings if f.rule == "cluster-short"]
    assert "above the ports' total" in only(j, "cluster-figure").evidence


def test_socket_fallback_on_the_whole_cluster_step() -> None:
    transports = [ib("a"), socket("b"), ib("c"), ib("d")]
    j = judge([step("abcd", 5.0, kind="cluster", step_id="whole", transports=transports)],
              FOUR)
    f = only(j, "socket-fallback")
    assert (f.hosts, f.whose, f.severity) == (("b",), "provider", "fault")


def test_unknown_rate_and_gloo_are_not_judged() -> None:
    efa = {"a": "efa-p4d", "b": "efa-p4d"}
    j = judge([step("ab", 80.0, transports=[
        NodeTransport(h, "AWS Libfabric", "aws-ofi-nccl", True) for h in "ab"])], efa)
    assert pair(j, "a-b").passed is None
    assert "efa driver reports a constant" in only(j, "pair-unjudged").evidence
    j = judge([step("ab", 2.0, backend="gloo", transports=[])], NDR)
    assert pair(j, "a-b").transport == "gloo (TCP)"
    assert "goes over TCP sockets" in only(j, "pair-unjudged").evidence


def test_one_cluster_at_a_time() -> None:
    other = StepResult("other", "x", "pair", 1, ("c", "d"), 8, "nccl", "Ring")
    with pytest.raises(ClusterError, match="2 clusters"):
        judge_cluster([step("ab", 370.0), other], {})
    with pytest.raises(ClusterError, match="no step results"):
        judge_cluster([], {})


def counted_step(hosts: str, reduce: float, rose: dict[str, tuple[tuple[str, str, int], ...]],
                 kind: StepKind = "pair") -> StepResult:
    from fleet.model.step import PortCounters

    base = step(hosts, reduce, kind=kind)
    return replace(base, counters=tuple(PortCounters(h, 8, rose.get(h, ())) for h in hosts))


def test_a_link_that_went_down_during_the_steps_is_the_providers_fault() -> None:
    # Both pairs pass: the flap is named by its counter alone, NIC and port.
    j = judge([counted_step("ab", 372.0, {"b": (("mlx5_3/1", "link_downed", 2),
                                                 ("mlx5_3/1", "symbol_error", 40))}),
               counted_step("cd", 371.0, {})], FOUR)
    f = only(j, "link-flap")
    assert (f.severity, f.whose, f.hosts) == ("fault", "provider", ("b",))
    assert f.title == "b: mlx5_3/1's link went down 2 times during the steps"
    assert "link_downed rose by 2 on b's mlx5_3/1" in f.evidence
    assert "symbol_error +40" in f.evidence
    assert "azure_ib_link_flapping.nhc" in f.source
    # Its other errors, at full rate in a pair that passed: said, not disputed.
    errors = only(j, "port-errors")
    assert (errors.severity, errors.whose) == ("info", None)


def test_errors_on_a_node_in_a_short_pair_name_its_port() -> None:
    j = judge([counted_step("ab", 372.0, {}),
               counted_step("cd", 180.0, {"d": (("mlx5_5/1", "symbol_error", 1_250),
                                                 ("mlx5_5/1", "port_rcv_errors", 9))})],
              FOUR)
    f = only(j, "port-errors")
    assert (f.severity, f.whose, f.hosts) == ("fault", "provider", ("d",))
    assert f.title == "d: mlx5_5/1 counted errors in its short steps"
    assert f.evidence == ("mlx5_5/1: port_rcv_errors +9, symbol_error +1,250; in 1 step "
                          "judged short: c-d")
    assert not [x for x in j.findings if x.rule == "link-flap"]


def test_no_counter_that_rose_says_nothing() -> None:
    j = judge([counted_step("ab", 372.0, {}), counted_step("cd", 180.0, {})], FOUR)
    assert not [f for f in j.findings if f.rule in ("link-flap", "port-errors")]


def test_the_whole_clusters_figure_says_which_nccl_each_node_loaded() -> None:
    same = replace(whole(370.0, 381.0, 379.0, 95.0), transports=tuple(
        replace(ib(h), version="2.28.9+cuda13.0") for h in "abcd"))
    said = only(judge([same, *HEALTHY_PAIRS], FOUR), "cluster-figure").evidence
    assert "NCCL 2.28.9+cuda13.0 on 4 nodes" in said
    mixed = replace(same, transports=(*same.transports[:3],
                                      replace(ib("d"), version="2.21.5+cuda12.4")))
    said = only(judge([mixed, *HEALTHY_PAIRS], FOUR), "cluster-figure").evidence
    assert ("NCCL versions differ: a 2.28.9+cuda13.0, b 2.28.9+cuda13.0, c 2.28.9+cuda13.0, "
            "d 2.21.5+cuda12.4") in said
