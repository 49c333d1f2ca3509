"""A cluster's steps against its own earlier runs (fleet/analysis/cluster/trend.py): how
nightly sweeps track the fabric between nodes. The figures are NDR-like (a pair at
~47 GB/s a NIC, as nccl-tests' maintainers report healthy NDR) and socket-like (2.6-3.2
GB/s, as the lent split H100 gave over NET/Socket: bench/records/
2026-11-28-h100x2-cluster-split)."""

from __future__ import annotations

import datetime as dt

import pytest

from fleet.analysis.cluster.trend import TrendRule, pair_trends, trend_findings
from fleet.model.step import StepFigure, StepResult
from fleet.store.cluster import ClusterRun

GIB = 1 << 30
T0 = dt.datetime(2026, 11, 20, 2, 0, tzinfo=dt.UTC)


def _step(step_id: str, hosts: tuple[str, ...], gbs: float, size: int = GIB,
          kind: str = "pair", error: str | None = None) -> StepResult:
    figures = () if error else (
        StepFigure("all_reduce", size, gbs, gbs, 1.0),
        StepFigure("all_gather", size, gbs * 1.1, gbs * 1.1, 1.0))
    return StepResult("pod", step_id, kind, 1 if kind == "pair" else None,  # type: ignore[arg-type]
                      hosts, 8, "nccl", "Ring" if kind == "pair" else None, figures,
                      error=error)


def _run(night: int, steps: list[StepResult],
         settings: dict[str, dict[str, str]] | None = None) -> ClusterRun:
    return ClusterRun("pod", f"run-{night}", T0 + dt.timedelta(days=night), tuple(steps),
                      {}, settings or {}, "lab")


def _nights(pair_gbs: list[float], tonight: float, **kwargs: object) -> list[ClusterRun]:
    """Tonight first, then the nights before it, newest first (as the store reads them)."""
    runs = [_run(i, [_step(f"pair-{i}", ("a", "b"), v)]) for i, v in enumerate(pair_gbs)]
    runs.append(_run(len(pair_gbs), [_step("pair-now", ("b", "a"), tonight)], **kwargs))  # type: ignore[arg-type]
    return runs[::-1]


def test_a_pair_that_lost_a_tenth_of_its_past_is_below_it_and_unsettled() -> None:
    trends = pair_trends(_nights([47.1, 46.8, 47.3, 47.0, 47.2], 41.0))
    # Both collectives of the one step, in any order of its nodes, were compared.
    assert len(trends.compared) == 2 and len(trends.below) == 2
    reduce = next(t for t in trends.below if t.op == "all_reduce")
    assert reduce.nights == 5 and reduce.centre_gbs == pytest.approx(47.1)
    assert reduce.floor_gbs == pytest.approx(47.1 * 0.9)  # 10% is wider than 4 x noise
    assert reduce.drop == pytest.approx(1 - 41.0 / 47.1)
    # One finding a step, on the collective that fell furthest (a tie: the all-reduce).
    [finding] = trend_findings(trends)
    assert finding.rule == "pair-regressed" and finding.severity == "fault"
    assert finding.whose == "unsettled" and finding.hosts == ("b", "a")
    assert finding.title == "Pair b and a: all_reduce 13% under its own past runs"
    assert "41.0 GB/s at 1 GiB tonight (step pair-now), 13% under the median of its " \
           "5 earlier runs, 47.1 GB/s" in finding.evidence
    assert finding.evidence.endswith("all_gather 13% under its past too")
    assert "Measure the pair again with its nodes otherwise idle" in finding.action
    assert "ngc_multinode_perf" in finding.source


def test_a_pair_within_its_past_is_compared_and_not_below() -> None:
    trends = pair_trends(_nights([47.1, 46.8, 47.3, 47.0, 47.2], 44.0))  # 6.5% under: within 10%
    assert len(trends.compared) == 2 and trends.below == ()
    assert trend_findings(trends) == []
    assert trends.summary() == "2 steps compared with their own earlier runs (up to 7): 0 below"


def test_a_pair_whose_past_scatters_is_judged_by_its_own_noise() -> None:
    # Sockets moved 2.6-3.2 GB/s run to run: 4 x that spread, not 10%, is the margin.
    past = [2.6, 3.2, 2.7, 3.1, 2.9]
    trends = pair_trends(_nights(past, 2.55))
    reduce = next(t for t in trends.compared if t.op == "all_reduce")
    assert reduce.noise_gbs == pytest.approx(1.4826 * 0.2)
    assert reduce.floor_gbs == pytest.approx(2.9 - 4 * 1.4826 * 0.2)
    assert not reduce.below  # 12% under its median, inside its own spread
    assert pair_trends(_nights(past, 1.5)).below  # half of it is not


def test_too_little_past_no_verdict() -> None:
    trends = pair_trends(_nights([47.1, 46.8, 47.3, 47.0], 20.0))
    assert trends.compared == () and trend_findings(trends) == []
    assert trends.summary() == "no step has 5 earlier runs to compare with yet"
    # The window keeps the newest runs only: five good nights beyond a window of four
    # leave four, too few.
    assert pair_trends(_nights([47.1, 46.8, 47.3, 47.0, 46.9], 20.0),
                       TrendRule(window=4)).compared == ()


def test_only_the_same_step_is_compared() -> None:
    # Another size, another pair, a failed step: nothing to set beside tonight's.
    runs = [_run(i, [_step(f"p{i}", ("a", "b"), 47.0, size=GIB // 4),
                     _step(f"q{i}", ("a", "c"), 47.0),
                     _step(f"r{i}", ("a", "d"), 0.0, error="rank 1 died")])
            for i in range(6)]
    tonight = _run(9, [_step("p", ("a", "b"), 10.0), _step("q", ("a", "d"), 10.0),
                       _step("r", ("a", "c"), 10.0, kind="cluster")])
    assert pair_trends([tonight, *runs[::-1]]).compared == ()


def test_a_changed_setting_makes_it_the_renters() -> None:
    before = {"a": {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, "b": {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}}
    runs = [_run(i, [_step(f"pair-{i}", ("a", "b"), 47.0)], before) for i in range(5)]
    now = {"a": {"NCCL_IB_HCA": "mlx5_0"}, "b": before["b"]}
    tonight = _run(5, [_step("pair-now", ("a", "b"), 24.0)], now)
    [finding] = trend_findings(pair_trends([tonight, *runs[::-1]]))
    assert finding.whose == "renter"
    assert "changed since: NCCL_IB_HCA" in finding.evidence
    assert finding.action.startswith("Set them back")
    # What fleet sets itself on some steps (NCCL_ALGO=Ring on the pairs) is no change.
    ring = {h: {**v, "NCCL_ALGO": "Ring"} for h, v in before.items()}
    tonight = _run(5, [_step("pair-now", ("a", "b"), 24.0)], before)
    runs_ring = [_run(i, [_step(f"pair-{i}", ("a", "b"), 47.0)], ring) for i in range(5)]
    [finding] = trend_findings(pair_trends([tonight, *runs_ring[::-1]]))
    assert finding.whose == "unsettled"
    # A host whose settings tonight were not recorded says nothing of a change.
    tonight = _run(5, [_step("pair-now", ("a", "b"), 24.0)], {})
    [finding] = trend_findings(pair_trends([tonight, *runs[::-1]]))
    assert finding.whose == "unsettled"


def test_the_whole_cluster_is_tracked_too() -> None:
    hosts = ("a", "b", "c", "d")
    runs = [_run(i, [_step(f"c{i}", hosts, 180.0, kind="cluster")]) for i in range(5)]
    tonight = _run(5, [_step("c", hosts[::-1], 120.0, kind="cluster")])
    [finding] = trend_findings(pair_trends([tonight, *runs[::-1]]))
    assert finding.title == "The whole cluster: all_reduce 33% under its own past runs"


def test_a_step_measured_again_is_judged_by_the_later_figure() -> None:
    # fleet/cluster/measure.py measures a step below its past again before storing: a
    # transient dip that the second measurement does not repeat is no finding; one it
    # repeats is, with both figures said.
    past = [_run(i, [_step(f"pair-{i}", ("a", "b"), v)])
            for i, v in enumerate([47.1, 46.8, 47.3, 47.0, 47.2])]
    transient = _run(5, [_step("pair-now", ("a", "b"), 38.0),
                         _step("again-1", ("b", "a"), 46.9)])
    trends = pair_trends([transient, *past[::-1]])
    assert trends.below == () and len(trends.compared) == 2
    reduce = next(t for t in trends.compared if t.op == "all_reduce")
    assert (reduce.step_id, reduce.tonight_gbs) == ("again-1", 46.9)
    assert (reduce.first_step_id, reduce.first_gbs) == ("pair-now", 38.0)
    lasting = _run(5, [_step("pair-now", ("a", "b"), 38.0),
                       _step("again-1", ("a", "b"), 39.0)])
    [finding] = trend_findings(pair_trends([lasting, *past[::-1]]))
    assert "39.0 GB/s at 1 GiB tonight (step again-1)" in finding.evidence
    assert "measured again in the same run, the first time 38.0 GB/s (step pair-now)" \
        in finding.evidence
