"""A short job figure measured again without the run's settings that can move it
(agent/rerun/job.py), on the CPU path with a real child process running the job suite."""

from __future__ import annotations

import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agent.job import records  # noqa: E402
from agent.job import suite as jobs  # noqa: E402
from agent.rerun import job as rerun  # noqa: E402
from agent.source import settings  # noqa: E402
from fleet.errors import AgentError  # noqa: E402
from fleet.model.document import parse_document  # noqa: E402

# On the CPU there is no datasheet peak: the floor is put on TFLOP/s, which a tiny CPU
# stack never reaches a whole one of.
CPU_FLOORS = {("train", None): ("tflops", 1.0, "a whole TFLOP/s (the test's floor)")}


def _results() -> list[dict[str, Any]]:
    results, errors = jobs.run(jobs.Config.for_cpu(), [], None, lambda message: None)
    assert errors == [] and results
    return results


def test_floors_judge_only_the_headline_training_and_bandwidth_decode() -> None:
    train = {"headline": True, "workload": "train", "point": None, "attention": "cudnn",
             "suite_version": "1.1.0", "tokens_per_s": 30_000.0, "mfu": 0.18}
    # No records of the variant: the datasheet's share, as the figure's own tokens/s.
    assert records.short(train) == pytest.approx(
        (50_000.0, "datasheet: mfu 0.180, under 0.3 of its datasheet's dense bf16 peak"))
    assert records.short(dict(train, mfu=0.46, tokens_per_s=76_000.0)) is None
    assert records.short(dict(train, headline=False)) is None  # not what a tuned job gets
    assert records.short(dict(train, mfu=None)) is None  # no peak: nothing judges it
    decode = {"headline": True, "workload": "decode", "point": "bandwidth",
              "attention": "cudnn", "suite_version": "1.1.0", "tokens_per_s": 12_000.0,
              "hbm_share": 0.3}
    assert records.short(decode) is not None
    assert records.short(dict(decode, point="latency")) is None  # one sequence: no floor
    # A variant with records: 5% under its backend's figure, a loss no datasheet share sees.
    h100 = "H100-SXM5-80GB"
    floor = 79_893.0 * 0.95
    assert records.short(dict(train, tokens_per_s=75_000.0, mfu=0.46), variant=h100) == (
        pytest.approx(floor), f"records: 79,893 tokens/s expected of a healthy {h100} "
        f"(cudnn, {records.RECORDS_SOURCE}), called under {floor:,.0f}")
    assert records.short(dict(train, tokens_per_s=76_500.0, mfu=0.47), variant=h100) is None
    # Another suite's shapes are not the records': the datasheet share judges them.
    assert records.short(dict(train, tokens_per_s=75_000.0, mfu=0.46, suite_version="1.0.0"),
                       variant=h100) is None


def test_a_short_job_runs_again_without_the_settings_that_can_move_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("NCCL_ALGO", "Tree")  # moves the all-reduce, not the job
    monkeypatch.setenv("NVSHMEM_DISABLE_NVLS", "1")  # moves nothing fleet measures
    results = _results()
    said: list[str] = []
    failed = rerun.settle(results, settings.collect(os.environ), jobs.Config.for_cpu(),
                          said.append, floors=CPU_FLOORS)
    assert failed is None
    train = next(r for r in results if r["workload"] == "train")
    again = train["rerun"]
    assert again["without"] == ["CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING"]
    # What the child itself ran under: without them, with what the rerun left alone.
    assert not {"CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING"} & set(
        again["ran_with"])
    assert {"NCCL_ALGO", "NVSHMEM_DISABLE_NVLS"} <= set(again["ran_with"])
    assert again["tokens_per_s"] > 0 and again["attention"] == "math"
    assert again["floor_tokens_per_s"] > train["tokens_per_s"]  # a whole TFLOP/s
    assert not again["contended"] and again["wall_s"] > 0
    # Decode is not judged by these floors: no rerun on it.
    assert all("rerun" not in r for r in results if r["workload"] == "decode")
    assert any("again without CUDA_LAUNCH_BLOCKING, PYTORCH_NO_CUDA_MEMORY_CACHING" in s
               for s in said)
    assert os.environ["CUDA_LAUNCH_BLOCKING"] == "1"  # the agent's own environment untouched
    document = _document(results)
    parse_document(document, "the job rerun's document")
    # A rerun that says it ran with what it took out contradicts itself.
    train["rerun"]["ran_with"] = ["CUDA_LAUNCH_BLOCKING"]
    with pytest.raises(AgentError, match="ran without CUDA_LAUNCH_BLOCKING and its process"):
        parse_document(_document(results), "edited")


def test_a_healthy_job_or_one_without_settings_is_not_run_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    results = _results()
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    healthy = {("train", None): ("tflops", 1e-12, "nothing (the test's floor)")}
    assert rerun.settle(results, settings.collect(os.environ), jobs.Config.for_cpu(),
                        lambda _: None, floors=healthy) is None
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING")
    monkeypatch.setenv("NCCL_PROTO", "LL")  # in the run, but it cannot move a job
    assert rerun.settle(results, settings.collect(os.environ), jobs.Config.for_cpu(),
                        lambda _: None, floors=CPU_FLOORS) is None
    assert all("rerun" not in r for r in results)


def test_a_rerun_that_fails_says_why_and_leaves_the_figures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    results = _results()
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    bad = {"backends": ("no-such-backend",)}
    cfg = jobs.Config.for_cpu()
    monkeypatch.setattr(rerun, "rerun_config", lambda c, b, g, compile: type(c)(**{
        **c.__dict__, **bad}))
    failed = rerun.settle(results, settings.collect(os.environ), cfg, lambda _: None,
                          floors=CPU_FLOORS)
    assert failed is not None and "exited" in failed
    assert all("rerun" not in r for r in results)


def test_the_rerun_child_does_not_take_its_parent_for_another_user(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.timing import contention

    class Nvml:
        def call(self, handle: Any, fn: str) -> list[dict[str, int]]:
            return [{"pid": os.getppid()}]

    assert [p["pid"] for p in contention.others(Nvml(), object())] == [os.getppid()]
    monkeypatch.setenv(contention.PARENT_ENV, str(os.getppid()))
    assert contention.others(Nvml(), object()) == []
    # Only the real parent: a pid named by anyone else is still seen.
    monkeypatch.setenv(contention.PARENT_ENV, str(os.getppid() + 1))
    assert [p["pid"] for p in contention.others(Nvml(), object())] == [os.getppid()]


def _document(results: list[dict[str, Any]]) -> dict[str, Any]:
    from agent.collect import collect

    document = collect(probe_torch=False)
    document["jobs"] = results
    return document


def test_only_what_was_short_is_run_again() -> None:
    # The lent 2x H100's figures under CUDA_LAUNCH_BLOCKING=1: training short, decode not.
    recorded = [{"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "source": "environment",
                 "applies": True}]
    base = {"suite_version": "1.1.0", "headline": True, "gpu_index": 0}
    results = [
        dict(base, workload="train", point=None, attention="cudnn", tokens_per_s=62_937.0,
             mfu=0.384),
        dict(base, workload="train", point=None, attention="flash", tokens_per_s=60_000.0,
             mfu=0.37, headline=False),
        dict(base, workload="decode", point="bandwidth", attention="cudnn",
             tokens_per_s=30_584.0, hbm_share=0.737),
        dict(base, workload="decode", point="latency", attention="flash",
             tokens_per_s=886.8, hbm_share=0.48)]
    variants = {0: "H100-SXM5-80GB"}
    assert rerun.decide(results, recorded, variants=variants) == {
        "without": ["CUDA_LAUNCH_BLOCKING"], "gpus": [0], "backends": ["cudnn"],
        "points": [], "compile": False}
    # A short bandwidth point too: its backend and point, training's backend first.
    results[2] = dict(results[2], attention="efficient", tokens_per_s=20_000.0)
    results[2]["hbm_share"] = 0.48
    assert rerun.decide(results, recorded, variants=variants) == {
        "without": ["CUDA_LAUNCH_BLOCKING"], "gpus": [0], "backends": ["cudnn", "efficient"],
        "points": ["bandwidth"], "compile": False}
    # A short compiled headline is measured again compiled, so that its rerun's headline
    # is the same form's.
    results[0] = dict(results[0], compiled=True)
    assert rerun.decide(results, recorded, variants=variants)["compile"] is True
    # Without a setting that can move a job, or with nothing short: no rerun.
    assert rerun.decide(results, [dict(recorded[0], name="NCCL_ALGO")],
                        variants=variants) is None
    assert rerun.decide(results[3:], recorded, variants=variants) is None


def test_the_records_of_the_figures_own_suite_judge_it() -> None:
    # Suite 1.2.0 moved the bandwidth point to 128 x 8,192: its 18,234 tokens/s is
    # healthy there, and 1.1.0's record (30,978 at 128 x 4,096) must not call it short.
    decode = {"workload": "decode", "point": "bandwidth", "headline": True,
              "attention": "cudnn", "tokens_per_s": 18_200.0, "hbm_share": 0.80}
    assert records.short(dict(decode, suite_version="1.2.0"), variant="H100-SXM5-80GB") is None
    floor, basis = records.short(dict(decode, suite_version="1.2.0", tokens_per_s=16_000.0),
                               variant="H100-SXM5-80GB") or (0.0, "")
    assert floor == pytest.approx(18_234.0 * 0.95)
    assert "2026-11-28-h100x2-decode-8192" in basis
    short_then = records.short(dict(decode, suite_version="1.1.0"), variant="H100-SXM5-80GB")
    assert short_then is not None and short_then[0] == pytest.approx(30_978.0 * 0.95)


def test_the_agents_suite_has_records_and_an_h200_is_judged_by_its_own() -> None:
    # The records judge the suite the agent runs: a version bump without its records
    # would leave every figure to the coarse datasheet floors.
    assert records.RECORDS_SUITE == jobs.SUITE_VERSION
    assert records.RECORDS is records.RECORDS_BY_SUITE[jobs.SUITE_VERSION]
    decode = {"workload": "decode", "point": "bandwidth", "headline": True,
              "attention": "cudnn", "suite_version": "1.3.0", "hbm_share": 0.80}
    # An H100's healthy figure would be an H200's shortfall: each variant its own record.
    assert records.short(dict(decode, tokens_per_s=18_700.0), variant="H100-SXM5-80GB") is None
    floor, basis = records.short(dict(decode, tokens_per_s=18_700.0),
                               variant="H200-SXM-141GB") or (0.0, "")
    assert floor == pytest.approx(26_795.0 * 0.95)
    assert "2026-11-28-h200-job-suite-1.3.0" in basis


def test_a_compiled_figure_is_judged_by_its_own_record_else_its_backends_eager_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    train = {"workload": "train", "point": None, "headline": True, "attention": "cudnn",
             "suite_version": jobs.SUITE_VERSION, "compiled": True, "mfu": 0.5}
    eager = records.RECORDS[("H200-SXM-141GB", "train", None, "cudnn")]
    table = {k: v for k, v in records.RECORDS.items() if not k[3].endswith(records.COMPILED)}
    monkeypatch.setitem(records.RECORDS_BY_SUITE, jobs.SUITE_VERSION, table)
    # No compiled record: the eager one judges it, the lower floor.
    floor, basis = records.short(dict(train, tokens_per_s=0.9 * eager),
                               variant="H200-SXM-141GB") or (0.0, "")
    assert floor == pytest.approx(eager * 0.95) and "cudnn compiled" in basis
    table = dict(table)
    table[("H200-SXM-141GB", "train", None, "cudnn/compiled")] = 1.2 * eager
    monkeypatch.setitem(records.RECORDS_BY_SUITE, jobs.SUITE_VERSION, table)
    assert records.short(dict(train, tokens_per_s=1.1 * eager),
                       variant="H200-SXM-141GB") is not None
    # An eager figure of the same backend keeps the eager record.
    assert records.short(dict(train, compiled=False, tokens_per_s=1.1 * eager),
                       variant="H200-SXM-141GB") is None
