"""bench/job_flags.py on the real records of a lent 4x H100 SXM5 node
(bench/records/2026-11-26-h100x4-jobs), through fleet's own parse, store and report: the
job shortfall rule calls none of the healthy GPUs, names GPU 2 when the other user's
process beside it is hidden from the agent, and leaves it to the renter's contention
finding when the agent saw it. What each run should give is counted off the records."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.analysis.contention import JOB_UNITS
from tests.bench import scripts

jf = scripts.load("job_flags")


def _results(name: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = jf.document(name)["jobs"]
    return results


def _counted(result: dict[str, Any]) -> bool:
    flags = result["flags"]
    return not flags["contended"] and not flags["not_soaked"] \
        and result["correctness"]["passed"]


@pytest.fixture(scope="module")
def healthy() -> list[tuple[Any, list[Any]]]:
    found: list[tuple[Any, list[Any]]] = jf.false_flags()
    return found


@pytest.fixture(scope="module")
def contended() -> dict[str, Any]:
    data: dict[str, Any] = jf.paired(jf.document(jf.CONTENDED), jf.document(jf.MATMUL_RUN))
    return data


def test_the_pairing_keeps_all_1_and_takes_the_job_runs_jobs(contended: dict[str, Any]
                                                             ) -> None:
    matmul = jf.document(jf.MATMUL_RUN)
    jobs = jf.document(jf.CONTENDED)
    assert contended["benchmarks"] == matmul["benchmarks"]
    assert contended["node"] == matmul["node"] and contended["gpus"] == matmul["gpus"]
    assert contended["jobs"] == jobs["jobs"]
    assert contended["collected_at"] == jobs["collected_at"] != matmul["collected_at"]


def test_no_healthy_gpu_is_called(healthy: list[tuple[Any, list[Any]]]) -> None:
    assert [judged.name for judged, _ in healthy] == [*jf.HEALTHY, jf.CONTENDED]
    for judged, judgements in healthy:
        # Every training result the rule may count is judged, one per GPU and backend.
        expected = {(r["gpu_index"], r["attention"]) for r in _results(judged.name)
                    if r["workload"] == "train" and _counted(r)}
        assert {(j.gpu.gpu_index, j.gpu.config.attention) for j in judgements} == expected
        assert len(expected) >= 6  # three GPUs at least, both backends
        assert judged.shortfalls == (), judged.name
        for j in judgements:  # what the rule computed, within its margins
            assert j.points <= 3 and j.job_share > 0.97


def test_gpu_2_slowed_for_real_is_named_when_the_agent_did_not_see_why(
        contended: dict[str, Any]) -> None:
    busy = [r for r in contended["jobs"] if r["gpu_index"] == jf.BUSY_GPU]
    assert all(r["flags"]["contended"] and r["contention"] for r in busy)
    judged = jf.judge(jf.hidden(contended, jf.BUSY_GPU, jf.HIDDEN["all"]), "hidden")
    backends = {r["attention"] for r in busy if r["workload"] == "train"}
    assert {s.config.attention for s in judged.shortfalls} == backends
    for s in judged.shortfalls:
        assert s.gpu_index == jf.BUSY_GPU
        result = next(r for r in busy if r["workload"] == "train"
                      and r["attention"] == s.config.attention)
        assert s.tokens_per_s == pytest.approx(result["tokens_per_s"])
        assert s.matmul_share - s.job_share > 0.03
        # Its training and decode fell together at its crowd's clock: the GPU's time went
        # elsewhere. Not cooling, though it is the node's hottest card.
        assert s.cause == "shared" and s.temperature_c > (s.median_temperature_c or 0) + 3
    assert judged.contention == ()
    assert all(g.gpu_index == jf.BUSY_GPU for g in judged.stragglers)


def test_decode_alone_is_no_job_shortfall(contended: dict[str, Any]) -> None:
    judged = jf.judge(jf.hidden(contended, jf.BUSY_GPU, jf.HIDDEN["decode"]), "decode")
    assert judged.shortfalls == ()
    # Its training steps were still seen, and take its decode of the same run with them.
    [found] = judged.contention
    assert found.units == (f"GPU {jf.BUSY_GPU} training step", f"GPU {jf.BUSY_GPU} decode")
    assert judged.stragglers == () and judged.dispute == ()


def test_gpu_2_as_recorded_is_the_renters(contended: dict[str, Any]) -> None:
    judged = jf.as_recorded()
    busy = [r for r in contended["jobs"] if r["gpu_index"] == jf.BUSY_GPU]
    assert not any(g.gpu_index == jf.BUSY_GPU for g in judged.gpus)
    assert sum(e.results for e in judged.excluded if e.gpu_index == jf.BUSY_GPU) == len(busy)
    assert judged.shortfalls == () and judged.stragglers == ()
    [found] = judged.contention
    workloads = {r["workload"] for r in busy}
    assert set(found.units) == {f"GPU {jf.BUSY_GPU} {JOB_UNITS[w]}" for w in workloads}
    assert found.own is False  # another user's process, as the records say
