"""Whose a short job figure is (fleet/analysis/job/whose.py), on a lent 4x H100's real
suite 1.1.0 document (bench/records/2026-11-27-h100x4-job-backends, run 4) made to read as
a renter's PYTORCH_NO_CUDA_MEMORY_CACHING=1 run would (every training step at 40%), stored
through the real ingest path and reported alone."""

from __future__ import annotations

import copy
import gzip
import json
from functools import cache
from typing import Any

from sqlalchemy import Engine

from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.conftest import ROOT

RUN = ROOT / "bench/records/2026-11-27-h100x4-job-backends/run-4.jsonl.gz"
SETTING = {"name": "PYTORCH_NO_CUDA_MEMORY_CACHING", "value": "1", "withheld": None,
           "source": "environment", "family": "torch", "applies": True}
FLOOR = 79_893.0 * 0.95  # agent/rerun/job.py RECORDS less its 5% margin


@cache
def _lent() -> dict[str, Any]:
    with gzip.open(RUN, "rt", encoding="utf-8") as fh:
        events = [json.loads(line) for line in fh]
    document: dict[str, Any] = events[-1]["document"]
    return document


def _slowed(result: dict[str, Any], share: float) -> None:
    """`result` as if every step took 1/share as long: its figures follow."""
    result["seconds"] /= share
    for name in ("tokens_per_s", "tflops", "tflops_causal", "mfu"):
        result[name] *= share
    result["within_run_ci95"] = [v * share for v in result["within_run_ci95"]]
    result["step_ms"] = {k: (v / share if k.endswith("_ms") else v)
                         for k, v in result["step_ms"].items()}
    result["step_ms"]["ci95_low_ms"], result["step_ms"]["ci95_high_ms"] = sorted(
        (result["step_ms"]["ci95_low_ms"], result["step_ms"]["ci95_high_ms"]))


def _short(rerun_tokens: float | None, contended: bool = False) -> dict[str, Any]:
    """Run 4 with the renter's setting in the run and every training step at 40%; where
    `rerun_tokens` is given, each GPU's headline measured again without it at that."""
    data = copy.deepcopy(_lent())
    data["settings"] = [*data["settings"], SETTING]
    for result in data["jobs"]:
        if result["workload"] != "train":
            continue
        _slowed(result, 0.4)
        if result["headline"] and rerun_tokens is not None:
            result["rerun"] = {
                "without": ["PYTORCH_NO_CUDA_MEMORY_CACHING"], "floor_tokens_per_s": FLOOR,
                "floor_basis": "records: 79,893 tokens/s expected", "attention": "cudnn",
                "tokens_per_s": rerun_tokens, "mfu": rerun_tokens * 6.04e9 / 989e12,
                "hbm_share": None, "contended": contended, "ran_with": ["NCCL_NVLS_ENABLE"],
                "wall_s": 24.0}
    return data


def _report(engine: Engine, data: dict[str, Any], anonymize: bool = False) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(parse_document(data, "h100x4"), Origin("lent", "h100x4"))
    return build_report(engine, ReportOptions(anonymize=anonymize), "test")


def _job_findings(findings: tuple[Any, ...]) -> list[Any]:
    return [f for f in findings if f.kind == "job_shortfall"]


def test_a_rerun_that_is_whole_makes_the_short_job_the_renters(engine: Engine) -> None:
    report = _report(engine, _short(79_700.0))
    found = _job_findings(report.renter)
    assert [f.title for f in found] == [
        f"h100x4 GPU {i}: the job is short under the run's own settings" for i in range(4)]
    # What was measured is the evidence; whose it is, the cause the report shows inline.
    assert found[0].evidence == ("GPU 0 training step 31,960 tokens/s (MFU 0.20), under its "
                                 f"floor of {FLOOR:,.0f}")
    assert found[0].cause == ("PYTORCH_NO_CUDA_MEMORY_CACHING=1 (environment): 79,700 "
                              "tokens/s (MFU 0.49) without it, measured again in the same "
                              "run: a setting of the run's environment costing 60%; unset it")
    assert _job_findings(report.dispute) == [] and _job_findings(report.unsettled) == []
    # Neither ranked nor priced: the node's every job figure is left out, with the words.
    assert report.job.gpus == () and report.job.rows == ()
    assert {e.gpu_index for e in report.job.excluded} == {0, 1, 2, 3}
    assert all(e.reason.startswith("the renter's: GPU ") for e in report.job.excluded)
    page = render(report, "html")
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (environment): 79,700 tokens/s" in page


def test_without_a_rerun_a_short_job_is_unsettled_and_never_disputed(engine: Engine) -> None:
    report = _report(engine, _short(None))
    found = _job_findings(report.unsettled)
    assert len(found) == 4 and _job_findings(report.renter) == []
    assert _job_findings(report.dispute) == []
    assert found[0].cause is not None
    assert "not measured again without them: PYTORCH_NO_CUDA_MEMORY_CACHING=1 " \
           "(environment)" in found[0].cause
    assert report.job.gpus == ()


def test_a_rerun_beside_another_process_settles_nothing(engine: Engine) -> None:
    report = _report(engine, _short(79_700.0, contended=True))
    found = _job_findings(report.unsettled)
    assert len(found) == 4 and "measured again beside another process" in str(found[0].cause)


def test_still_short_without_the_setting_the_figures_stay_the_providers(
        engine: Engine) -> None:
    report = _report(engine, _short(31_900.0))
    assert _job_findings(report.renter) == [] and _job_findings(report.unsettled) == []
    assert {g.gpu_index for g in report.job.gpus} == {0, 1, 2, 3}


def test_a_healthy_lent_run_has_nothing_to_settle(engine: Engine) -> None:
    report = _report(engine, copy.deepcopy(_lent()))
    assert report.job.whose == () and len(report.job.gpus) >= 4


def test_an_anonymized_report_hides_an_odd_value(engine: Engine) -> None:
    data = _short(None)
    data["settings"].append({"name": "TORCH_LOGS_OUT", "value": "/home/alice/torch.log",
                             "withheld": None, "source": "environment", "family": "torch",
                             "applies": True})
    report = _report(engine, data, anonymize=True)
    cause = str(_job_findings(report.unsettled)[0].cause)
    assert "/home/alice" not in cause and "TORCH_LOGS_OUT=(hidden in an anonymized " \
        "report) (environment)" in cause


def test_a_provider_gap_whose_slower_side_ran_under_such_settings_is_unsettled() -> None:
    # CUDA_LAUNCH_BLOCKING=1 between a training step's kernels costs a few percent on every
    # GPU alike: no floor of a variant without records sees it, and no rule within a node;
    # only the comparison between providers does, and there it is not the provider's.
    import random

    from fleet.analysis.compare import GapOptions
    from fleet.analysis.matmul.stragglers import StragglerOptions
    from fleet.report.job import JobInput, job_section
    from tests.analysis.job_frames import job_frame, matmul_frame
    from tests.analysis.test_job import crowd

    rng = random.Random(9)
    alpha, alpha_figures = crowd(rng, sd=0.004, hosts=3)
    beta, beta_figures = crowd(rng, sd=0.004, hosts=3, provider="beta")
    slow = [dict(r, tokens_per_s=r["tokens_per_s"] * 0.94, tflops=r["tflops"] * 0.94,
                 mfu=r["mfu"] * 0.94) for r in beta]
    frames = JobInput(job_frame(alpha + slow), matmul_frame(alpha_figures + beta_figures))
    section = job_section(frames, {}, GapOptions(), StragglerOptions())
    assert [c.slower for c in section.gaps if c.config.train] == ["beta"]  # the provider's
    suspect = "CUDA_LAUNCH_BLOCKING=1 (environment)"
    slow = [dict(r, job_suspects=suspect) for r in slow]
    frames = JobInput(job_frame(alpha + slow), matmul_frame(alpha_figures + beta_figures))
    section = job_section(frames, {}, GapOptions(), StragglerOptions())
    assert section.gaps == () and section.counts()["gap"] == 0
    assert not any(f[0] == "gap" for f in section.findings())
    train = [f for f in section.unsettled() if f[0] == "gap" and "training" in f[2]]
    assert len(train) == 1 and train[0][1] == "beta"
    assert train[0][4] == ("beta's figures were measured under settings that can move a job "
                           f"and not measured again without them: {suspect}; unset them and "
                           "measure again before disputing it")
    # The faster side's settings say nothing of the slower's shortfall.
    alpha = [dict(r, job_suspects=suspect) for r in alpha]
    slow = [dict(r, job_suspects=None) for r in slow]
    frames = JobInput(job_frame(alpha + slow), matmul_frame(alpha_figures + beta_figures))
    section = job_section(frames, {}, GapOptions(), StragglerOptions())
    assert [c.slower for c in section.gaps if c.config.train] == ["beta"]
