"""A short soaked matmul measured again without the run's settings, then with them
(agent/rerun/matmul.py), on the CPU path with a real child process running the harness."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  CI installs the CPU build: a missing torch must fail there
else:
    pytest.importorskip("torch")

from agent.matmul import harness
from agent.node import floors
from agent.rerun import matmul as rerun
from agent.source import settings
from fleet.model.matmul import MatmulRerun
from tests.agent.test_harness import small

VARIANT = "CPU-TEST"


def _table(result: dict[str, Any], floor_tflops: float) -> dict[str, Any]:
    """A floors table whose one matmul entry is `result`'s configuration."""
    entry = {k: result[k] for k in rerun.KEY}
    return {"matmul": [dict(entry, variant=VARIANT, expected_tflops=floor_tflops * 1.04,
                            floor_tflops=floor_tflops, records=["test"])]}


def _soaked_result() -> dict[str, Any]:
    found, failed = harness.run(small(), [], None, lambda _: None)
    assert failed == [] and len(found) == 1
    # Judged as a soaked figure: the CPU path's soak is too slow for a test.
    return dict(found[0], thermal="soaked")


def test_the_committed_floors_judge_the_records_soaked_matmul() -> None:
    table = floors.load()
    h100 = {"dtype": "bf16", "m": 8192, "n": 8192, "k": 8192, "mode": "sustained",
            "cache": "cold", "thermal": "soaked", "gpu_index": 0}
    low, basis = rerun.floor(table, "H100-SXM5-80GB", h100) or (0.0, "")
    # 678 TFLOP/s expected of a healthy H100 SXM5, called under 3% below it.
    assert low == pytest.approx(678.0 * 0.97, abs=0.01)
    assert basis.startswith("records: 678 TFLOP/s expected of a healthy H100-SXM5-80GB")
    # Another configuration or variant: nothing judges it, nothing is run again.
    assert rerun.floor(table, "H100-SXM5-80GB", dict(h100, thermal="cool-start")) is None
    assert rerun.floor(table, "B200", h100) is None
    recorded = [{"name": "CUBLAS_WORKSPACE_CONFIG", "value": ":4096:8",
                 "source": "environment", "applies": True}]
    variants = {0: "H100-SXM5-80GB", 1: "H100-SXM5-80GB"}
    results = [dict(h100, tflops=640.0), dict(h100, gpu_index=1, tflops=676.0)]
    assert rerun.decide(results, recorded, table, variants) == {
        "without": ["CUBLAS_WORKSPACE_CONFIG"], "gpus": [0],
        "floors": {0: (low, basis)}}
    # A setting that cannot move a matmul (NCCL's), or none at all: no rerun.
    assert rerun.decide(results, [dict(recorded[0], name="NCCL_ALGO")], table,
                        variants) is None
    assert rerun.decide([results[1]], recorded, table, variants) is None


def test_a_short_matmul_is_measured_again_without_then_with_the_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("NCCL_ALGO", "Tree")  # moves the all-reduce, not the matmul
    result = _soaked_result()
    table = _table(result, floor_tflops=1e5)  # no CPU reaches it: short
    calls: list[Any] = []

    def again(cfg: harness.Config) -> list[dict[str, Any]]:
        calls.append(cfg)
        found, failed = harness.run(cfg, [], None, lambda _: None)
        assert failed == []
        return found

    said: list[str] = []
    soaked = dataclasses.replace(small(), protocol="soaked")
    failed = rerun.settle([result], settings.collect(os.environ), soaked, {0: VARIANT},
                          again, said.append, table=table)
    assert failed is None
    pair = result["rerun"]
    assert pair["without"] == ["CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING"]
    # The child ran without them, with what the rerun left alone.
    assert not set(pair["without"]) & set(pair["ran_with"])
    assert "NCCL_ALGO" in pair["ran_with"]
    assert pair["tflops"] > 0 and pair["with_tflops"] > 0 and pair["floor_tflops"] == 1e5
    # The pair's second half ran here, quick, on the short GPU only.
    assert [c.protocol for c in calls] == ["quick"] and calls[0].gpus == [0]
    assert any("again without CUBLAS_WORKSPACE_CONFIG, CUDA_LAUNCH_BLOCKING, then with "
               "them" in s for s in said)
    assert os.environ["CUDA_LAUNCH_BLOCKING"] == "1"  # the agent's own environment untouched
    MatmulRerun.model_validate(pair)
    # A pair that says its child ran with what it took out contradicts itself.
    with pytest.raises(ValueError, match="ran without CUDA_LAUNCH_BLOCKING and its process"):
        MatmulRerun.model_validate(dict(pair, ran_with=["CUDA_LAUNCH_BLOCKING"]))


def test_a_healthy_matmul_a_quick_one_or_one_without_settings_is_not_run_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    result = _soaked_result()
    soaked = dataclasses.replace(small(), protocol="soaked")

    def again(cfg: harness.Config) -> list[dict[str, Any]]:
        raise AssertionError("no rerun expected")

    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    ran = settings.collect(os.environ)
    healthy = _table(result, floor_tflops=1e-9)
    assert rerun.settle([result], ran, soaked, {0: VARIANT}, again, lambda _: None,
                        table=healthy) is None
    short = _table(result, floor_tflops=1e5)
    # A cool-start run is not what the floors judge.
    assert rerun.settle([result], ran, small(), {0: VARIANT}, again, lambda _: None,
                        table=short) is None
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING")
    assert rerun.settle([result], settings.collect(os.environ), soaked, {0: VARIANT}, again,
                        lambda _: None, table=short) is None
    assert "rerun" not in result


def test_a_pair_that_fails_says_why_and_leaves_the_figure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    result = _soaked_result()
    table = _table(result, floor_tflops=1e5)

    def again(cfg: harness.Config) -> list[dict[str, Any]]:
        raise harness.HarnessError("the GPU fell off the bus")

    soaked = dataclasses.replace(small(), protocol="soaked")
    failed = rerun.settle([result], settings.collect(os.environ), soaked, {0: VARIANT},
                          again, lambda _: None, table=table)
    assert failed is not None and "the GPU fell off the bus" in failed
    # The child alone settles nothing: the figure stands without a rerun.
    assert "rerun" not in result
    # A child that cannot run (a shape the harness refuses) says how it exited.
    bad = dataclasses.replace(soaked, dtype="no-such-dtype")
    failed = rerun.settle([result], settings.collect(os.environ), bad, {0: VARIANT}, again,
                          lambda _: None, table=table)
    assert failed is not None and "exited" in failed


def test_runs_cut_short_with_the_settings_on_are_theirs_not_another_tenants() -> None:
    cut = {"contention": ["91 interrupted run(s) excluded, at least 1.5x the median run: "
                          "run 232 (2.630 ms)"]}
    seen = {"contention": ["other processes on the GPU: pid 4242 (python3, user bob)"]}
    # With the settings on, CUDA_LAUNCH_BLOCKING=1 cuts runs short itself.
    assert not rerun._seen_others(cut, settings_on=True)
    # Without them, nothing of the run's own does: something else is on the card.
    assert rerun._seen_others(cut, settings_on=False)
    assert rerun._seen_others(seen, settings_on=True)
    assert not rerun._seen_others({"contention": []}, settings_on=False)


def test_a_rerun_that_raises_leaves_the_figures_and_says_so() -> None:
    from agent.suites import measured_again as _measured_again

    results = [{"gpu_index": 0, "rerun": {"half": "written"}}]

    def broken() -> str | None:
        raise KeyError("floor_tflops")

    [error] = _measured_again("benchmark", "matmul again without the run's settings",
                              results, broken)
    assert error["stage"] == "benchmark"
    assert error["message"] == ("matmul again without the run's settings: did not run "
                                "(KeyError: 'floor_tflops'); the original figures stand")
    assert results == [{"gpu_index": 0}]  # nothing half-written stands
    assert _measured_again("benchmark", "x", results, lambda: None) == []
