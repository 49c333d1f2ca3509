"""The pairing schedule: every pair for a few nodes, halves against halves for many, then
the suspects against known-good nodes; properties over many counts, figures by hand."""

from __future__ import annotations

from itertools import combinations

import pytest

from agent.cluster.rank import WHOLE_SIZES
from fleet.analysis.cluster.standings import (
    PairResult,
    sort_out,
    standings,
)
from fleet.cluster.fabric_time import FabricModel
from fleet.cluster.schedule import (
    Durations,
    every_pair_fits,
    every_pair_rounds,
    halves_rounds,
    plan,
    suspect_steps,
)
from fleet.errors import ClusterError


def names(count: int) -> list[str]:
    return [f"n{i:04d}" for i in range(count)]


def assert_disjoint(rounds: tuple[tuple[tuple[str, str], ...], ...]) -> None:
    for pairs in rounds:
        used = [node for pair in pairs for node in pair]
        assert len(used) == len(set(used)), f"a node twice in one round: {pairs}"


def test_four_nodes_by_hand() -> None:
    # The circle method: a stays, b c d turn one place a round.
    assert every_pair_rounds(["a", "b", "c", "d"]) == (
        (("a", "d"), ("b", "c")),
        (("a", "b"), ("c", "d")),
        (("a", "c"), ("b", "d")),
    )


@pytest.mark.parametrize("count", range(2, 18))
def test_every_pair_covers_each_pair_once_in_disjoint_rounds(count: int) -> None:
    nodes = names(count)
    rounds = every_pair_rounds(nodes)
    assert_disjoint(rounds)
    tested = [frozenset(p) for pairs in rounds for p in pairs]
    assert len(tested) == count * (count - 1) // 2
    assert set(tested) == {frozenset(p) for p in combinations(nodes, 2)}
    # n-1 rounds for an even count, n for an odd one, where each node sits one out.
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    if count % 2:
        idle = [next(n for n in nodes if all(n not in p for p in pairs)) for pairs in rounds]
        assert sorted(idle) == nodes


def test_two_nodes_are_one_pair_and_fewer_are_refused() -> None:
    assert every_pair_rounds(["a", "b"]) == ((("a", "b"),),)
    for few in ([], ["a"]):
        with pytest.raises(ClusterError, match="needs two nodes"):
            plan(few, seed=1)
    with pytest.raises(ClusterError, match="a is given twice"):
        every_pair_rounds(["a", "b", "a"])


@pytest.mark.parametrize("count", [18, 64, 1024])
def test_halves_put_every_node_in_every_round_and_repeat_no_pair(count: int) -> None:
    rounds = halves_rounds(names(count), 15, seed=3)
    assert len(rounds) == 15
    assert_disjoint(rounds)
    for pairs in rounds:
        assert len(pairs) == count // 2
        assert {n for p in pairs for n in p} == set(names(count))
    assert len({frozenset(p) for pairs in rounds for p in pairs}) == 15 * count // 2


@pytest.mark.parametrize("count", [17, 65])
def test_halves_with_an_odd_count_leave_a_different_node_out_each_round(count: int) -> None:
    rounds = halves_rounds(names(count), 15, seed=3)
    assert_disjoint(rounds)
    idle = [set(names(count)) - {n for p in pairs for n in p} for pairs in rounds]
    assert all(len(out) == 1 for out in idle)
    assert len(set().union(*idle)) == 15


def test_more_rounds_than_turns_still_disjoint() -> None:
    rounds = halves_rounds(names(4), 5, seed=9)
    assert len(rounds) == 5
    assert_disjoint(rounds)


def test_the_seed_decides_and_is_recorded() -> None:
    nodes = names(64)
    first, again = plan(nodes, seed=11), plan(nodes, seed=11)
    assert first == again and first.seed == 11
    assert plan(nodes, seed=12).steps != first.steps


def test_every_pair_while_it_takes_no_more_rounds_than_halves() -> None:
    assert every_pair_fits(16) and every_pair_fits(15)
    assert not every_pair_fits(17) and not every_pair_fits(18)
    assert plan(names(16), seed=1).mode == "every-pair"
    assert plan(names(16), seed=1).rounds == 15
    assert plan(names(17), seed=1).mode == "halves"
    assert plan(names(8), seed=1, mode="halves").mode == "halves"


def test_steps_and_estimates_by_hand() -> None:
    # A fabric of 100 GB/s, no fixed cost, the all-to-all at the same pace.
    fabric = FabricModel(fabric_gbs=100.0, whole_share=1.0, alltoall_share=1.0,
                         latency_us=0.0, latency_doubling_us=0.0)
    durations = Durations(start_s=1.0, collectives_s=2.0, per_node_s=0.5, fabric=fabric,
                          ranks_per_node=1)
    schedule = plan(["a", "b", "c", "d"], seed=0, durations=durations)
    whole, *pairs = schedule.steps
    assert (whole.kind, whole.nodes, whole.pairs) == ("cluster", ("a", "b", "c", "d"), ())
    # Over 4 ranks: an all-reduce moves 1.5 x its size, the other three 0.75 x; sizes
    # 16 MiB to 16 GiB, 25 calls each.
    swept = sum(WHOLE_SIZES["nccl"]) * (1.5 + 3 * 0.75) * 25 / 100e9
    assert whole.estimate_s == pytest.approx(1 + swept + 4 * 0.5)
    assert [s.estimate_s for s in pairs] == [1 + 2 + 2 * 0.5] * 3
    assert schedule.estimate_s == pytest.approx(whole.estimate_s + 3 * 4)
    assert (schedule.rounds, schedule.pair_tests, schedule.distinct_pairs) == (3, 6, 6)
    odd = plan(["a", "b", "c"], seed=0, durations=durations)
    assert [s.idle for s in odd.steps[1:]] == [("a",), ("c",), ("b",)]


def test_the_fabric_model_by_hand() -> None:
    model = FabricModel()
    # 25 us at 16 ranks, 9.5 us a doubling; 1 GiB all-reduce at 80% of 400 GB/s.
    assert model.latency_s(16) == pytest.approx(25e-6)
    assert model.latency_s(1024) == pytest.approx((25 + 6 * 9.5) * 1e-6)
    assert model.call_s("all_reduce", 1 << 30, 16) == pytest.approx(
        25e-6 + (1 << 30) * 2 * 15 / 16 / 320e9)
    assert model.call_s("all_gather", 1 << 30, 16, whole=False) == pytest.approx(
        25e-6 + (1 << 30) * 15 / 16 / 360e9)
    # Over sockets at 3 GB/s the sweep stops where the agent's budget would: 1 GiB's 25
    # calls take 17 s, 4 GiB's would take 67 s, over its 30.
    slow = FabricModel(fabric_gbs=3.0, whole_share=1.0, latency_us=0.0)
    one_gib = 25 * (1 << 30) * 2 * 15 / 16 / 3e9
    swept = slow.sweep_s(["all_reduce"], WHOLE_SIZES["nccl"], 16)
    assert swept == pytest.approx(one_gib * (1 + 1 / 4 + 1 / 64))


def test_figures_at_eight_sixty_four_and_a_thousand_nodes() -> None:
    # As docs/cluster.md's table gives them: the whole cluster 26.9 / 29.9 / 78.0 s, a
    # round of pairs 8.07 s (7.7 start + 0.27 collectives + 0.1 for its two nodes).
    for count, rounds, tests, whole, total in ((8, 7, 28, 26.9, 83.3),
                                               (64, 15, 480, 29.9, 151.0),
                                               (1024, 15, 7680, 78.0, 199.0)):
        schedule = plan(names(count), seed=46)
        assert (schedule.rounds, schedule.pair_tests) == (rounds, tests)
        assert round(schedule.steps[0].estimate_s, 1) == whole
        assert round(schedule.estimate_s, 1) == total
        assert round(schedule.steps[1].estimate_s, 2) == 8.07


def results_with_bad(schedule_nodes: list[str], bad: set[str], seed: int
                     ) -> list[PairResult]:
    schedule = plan(schedule_nodes, seed=seed)
    return [PairResult(a, b, a not in bad and b not in bad)
            for step in schedule.steps for a, b in step.pairs]


@pytest.mark.parametrize(("count", "bad"), [(8, {"n0003"}), (64, {"n0005", "n0040"}),
                                            (1024, {f"n{i:04d}" for i in range(0, 1024, 97)})])
def test_suspects_are_the_bad_nodes_and_each_meets_a_known_good_one(
        count: int, bad: set[str]) -> None:
    nodes = names(count)
    results = results_with_bad(nodes, bad, seed=5)
    verdicts = sort_out(nodes, results)
    assert set(verdicts.suspects) == bad
    assert not bad & set(verdicts.known_good)
    steps = suspect_steps(nodes, results)
    assert len(steps) == 1
    assert_disjoint(tuple(s.pairs for s in steps))
    met = {suspect: good for s in steps for good, suspect in s.pairs}
    assert set(met) == bad
    assert all(good in verdicts.known_good for good in met.values())


def test_suspects_take_as_many_rounds_as_known_good_nodes_allow() -> None:
    # n0 and n1 passed everything; n2..n6 failed every test they had.
    nodes = names(7)
    results = [PairResult("n0000", "n0001", True)] + [
        PairResult(a, b, False) for a, b in combinations(nodes[2:], 2)]
    steps = suspect_steps(nodes, results)
    assert len(steps) == 3  # 5 suspects, 2 known-good nodes a round
    assert [len(s.pairs) for s in steps] == [2, 2, 1]
    for step in steps:
        assert {good for good, _ in step.pairs} <= {"n0000", "n0001"}
    assert sorted(s for step in steps for _, s in step.pairs) == nodes[2:]


def test_a_failure_no_bad_partner_explains_makes_both_suspect() -> None:
    # A flaky link between a and b: each passed 3 of 4, above the threshold, but their
    # failure was beside a node whose ratio is fine.
    results = [PairResult("a", "b", False), PairResult("a", "c", True),
               PairResult("a", "d", True), PairResult("a", "e", True),
               PairResult("b", "c", True), PairResult("b", "d", True),
               PairResult("b", "e", True), PairResult("c", "d", True)]
    verdicts = sort_out(["a", "b", "c", "d", "e"], results)
    assert set(verdicts.suspects) == {"a", "b"}
    steps = suspect_steps(["a", "b", "c", "d", "e"], results)
    # Both met every known-good node already, so any will do; the pairs stay disjoint.
    assert len(steps) == 1 and len(steps[0].pairs) == 2
    assert_disjoint((steps[0].pairs,))


def test_a_suspect_meets_a_known_good_node_it_has_not_met() -> None:
    results = [PairResult("a", "b", True), PairResult("c", "d", True),
               PairResult("a", "s", False), PairResult("s", "b", False)]
    [step] = suspect_steps(["a", "b", "c", "d", "s"], results)
    assert step.pairs == (("c", "s"),)


def test_threshold_and_untested_nodes() -> None:
    nodes = ["a", "b", "c", "d", "x"]
    results = [PairResult("a", "b", True), PairResult("a", "c", True),
               PairResult("c", "d", False), PairResult("d", "b", False),
               PairResult("d", "a", True)]
    table = standings(nodes, results)
    assert (table["d"].passed, table["d"].tested) == (1, 3)
    assert table["x"].ratio == 0.0
    assert set(sort_out(nodes, results).suspects) == {"d", "x"}
    # At threshold 0.3, d's 1 of 3 is let off, but its failures now have no bad partner.
    assert set(sort_out(nodes, results, threshold=0.3).suspects) == {"b", "c", "d", "x"}


def test_no_known_good_node_is_said_with_the_likely_cause() -> None:
    with pytest.raises(ClusterError, match=r"no node is known to be good.*fabric"):
        suspect_steps(["a", "b"], [PairResult("a", "b", False)])
    assert suspect_steps(["a", "b"], [PairResult("a", "b", True)]) == ()


def test_results_from_another_cluster_are_refused() -> None:
    with pytest.raises(ClusterError, match="names z, which is not a node"):
        standings(["a", "b"], [PairResult("a", "z", True)])
