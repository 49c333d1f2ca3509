"""Whose a short soaked matmul is, settled by the agent's pair (agent/rerun/matmul.py:
quick on the hot card without the run's settings, then with them; fleet/analysis/node/whose.py
`whose_matmul`), on the lent 4x H200 node's real document with GPU 3's matmul made 6%
slow, stored through the real ingest path (SQLite and PostgreSQL) and reported alone."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.matmul_rerun import read_matmul_reruns
from tests.conftest import FIXTURES

H200X4 = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
CUBLAS = {"name": "CUBLAS_WORKSPACE_CONFIG", "value": ":4096:8", "withheld": None,
          "source": "environment", "family": "cublas", "applies": True}
SLOW = 0.94  # GPU 3 at 627 TFLOP/s where a healthy H200 gives 669: called under 649


def _slow(result: dict[str, Any], share: float) -> None:
    """`result`'s matmul at `share` of itself: every time it rests on stretched."""
    result["tflops"] *= share
    result["stats"] = {k: (v / share if k.endswith("_ms") else v)
                       for k, v in result["stats"].items()}
    result["samples_ms"] = [v / share for v in result["samples_ms"]]
    soak = result["soak"]
    soak["drop"] = 1.0 - result["tflops"] / soak["first_20s_tflops"]


def _document(pair: tuple[float, float] | None, contended: bool = False,
              settings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The healthy node's document, GPU 3 6% slow under CUBLAS_WORKSPACE_CONFIG and,
    where `pair` is given, measured again: (without the setting, with it) TFLOP/s."""
    data: dict[str, Any] = copy.deepcopy(json.loads(H200X4.read_text()))
    data["settings"] = [CUBLAS] if settings is None else settings
    slow = next(r for r in data["benchmarks"] if r["gpu_index"] == 3)
    _slow(slow, SLOW)
    if pair is not None:
        slow["rerun"] = {"without": ["CUBLAS_WORKSPACE_CONFIG"], "protocol": "quick",
                         "floor_tflops": 649.318, "floor_basis": "records: 669.4 TFLOP/s",
                         "tflops": pair[0], "with_tflops": pair[1], "contended": contended,
                         "ran_with": [], "wall_s": 24.5}
    return data


def _report(engine: Engine, data: dict[str, Any]) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(parse_document(data, "h200x4"), Origin("lent", "h200x4"))
    return build_report(engine, ReportOptions(), "test")


def _shortfalls(found: tuple[Any, ...]) -> list[Any]:
    return [f for f in found if f.kind == "shortfall" and "matmul" in f.title]


def test_a_setting_that_costs_the_pair_its_floor_is_the_renters(engine: Engine) -> None:
    report = _report(engine, _document((670.0, 628.0)))
    assert _shortfalls(report.dispute) == [] and _shortfalls(report.unsettled) == []
    [found] = _shortfalls(report.renter)
    assert found.title.startswith("h200x4: GPU 3 matmul 626.8 ")
    assert found.cause is not None and found.cause.startswith(
        "GPU 3 measured again quick on the hot card: 670.0 TFLOP/s without "
        "CUBLAS_WORKSPACE_CONFIG=:4096:8 (environment), 628.0 with it straight after: a "
        "setting of the run's environment costing 6.3%, the GPU clearing its 649.")
    assert found.cause.endswith("without it; unset it")
    # Stored as sent, on both backends.
    [stored] = read_matmul_reruns(engine, [1])
    assert (stored.gpu_index, stored.rerun_tflops, stored.with_tflops, stored.without,
            stored.floor_tflops, stored.contended) == (
        3, 670.0, 628.0, ("CUBLAS_WORKSPACE_CONFIG",), 649.318, False)
    page = render(report, "md")
    assert "costing 6.3%" in page


def test_still_short_without_the_settings_is_the_providers(engine: Engine) -> None:
    report = _report(engine, _document((631.0, 630.0)))
    [found] = _shortfalls(report.dispute)
    assert found.cause is not None and "631.0 TFLOP/s without CUBLAS_WORKSPACE_CONFIG" \
        in found.cause and ": still under the " in found.cause
    assert _shortfalls(report.renter) == [] and _shortfalls(report.unsettled) == []


def test_settings_that_cost_nothing_leave_the_soaked_shortfall_the_cards(
        engine: Engine) -> None:
    # Quick on the hot card it clears the soaked floor either way: the settings are not
    # what held the soaked figure down.
    report = _report(engine, _document((668.0, 667.0)))
    [found] = _shortfalls(report.dispute)
    assert found.cause is not None and "it cost nothing measurable (+0.1%)" \
        in found.cause


@pytest.mark.parametrize(("pair", "contended", "why"), [
    ((668.0, 658.0), False, "it cost +1.5%, within what the pair can tell apart"),
    ((670.0, 628.0), True, "with another process on the GPU: it settles nothing"),
])
def test_a_pair_that_cannot_tell_leaves_it_unsettled(
        engine: Engine, pair: tuple[float, float], contended: bool, why: str) -> None:
    report = _report(engine, _document(pair, contended))
    assert _shortfalls(report.dispute) == [] and _shortfalls(report.renter) == []
    [found] = _shortfalls(report.unsettled)
    assert found.cause is not None and why in found.cause
    assert found.details == ("CUBLAS_WORKSPACE_CONFIG=:4096:8 (environment)",)


def test_a_setting_the_pair_did_not_take_out_leaves_it_unsettled(engine: Engine) -> None:
    blocking = {"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "withheld": None,
                "source": "environment", "family": "cuda", "applies": True}
    report = _report(engine, _document((670.0, 628.0), settings=[CUBLAS, blocking]))
    [found] = _shortfalls(report.unsettled)
    assert found.cause is not None and "it ran still under CUDA_LAUNCH_BLOCKING=1" \
        in found.cause


def test_without_a_pair_settings_leave_it_unsettled_and_none_leave_it_the_providers(
        engine: Engine) -> None:
    report = _report(engine, _document(None))
    [found] = _shortfalls(report.unsettled)
    assert found.cause is not None and found.cause.startswith(
        "GPU 3 matmul was measured under settings that can move it and not measured again "
        "without them: CUBLAS_WORKSPACE_CONFIG=:4096:8 (environment)")


def test_without_settings_it_is_disputed(engine: Engine) -> None:
    report = _report(engine, _document(None, settings=[]))
    [found] = _shortfalls(report.dispute)
    assert found.title.startswith("h200x4: GPU 3 matmul 626.8 ")


def test_a_pair_on_a_cool_start_result_is_refused() -> None:
    from fleet.errors import AgentError

    data = _document((670.0, 628.0))
    slow = next(r for r in data["benchmarks"] if r["gpu_index"] == 3)
    slow["thermal"] = "cool-start"
    slow["soak"] = None
    with pytest.raises(AgentError, match="only a soaked result is measured again"):
        parse_document(data, "edited")


def test_runs_the_settings_cut_short_are_put_to_them_not_to_another_tenant(
        engine: Engine) -> None:
    # The lent H100 under CUDA_LAUNCH_BLOCKING=1 (bench/records/2026-11-28-h100-matmul-
    # whose): the harness left 91 runs out as interrupted and flagged the figure; the pair
    # read 668.3 TFLOP/s without the settings, 610.9 with them.
    blocking = {"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "withheld": None,
                "source": "environment", "family": "cuda", "applies": True}
    data = _document((668.3, 610.9), settings=[CUBLAS, blocking])
    slow = next(r for r in data["benchmarks"] if r["gpu_index"] == 3)
    slow["rerun"]["without"] = ["CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING"]
    slow["flags"]["contended"] = True
    slow["contention"] = ["91 interrupted run(s) excluded, at least 1.5x the median run: "
                          "run 232 (2.630 ms)"]
    report = _report(engine, data)
    assert _shortfalls(report.dispute) == [] and _shortfalls(report.unsettled) == []
    [found] = [f for f in report.renter if f.kind == "contention"]
    assert found.cause == "settings of the run's environment, measured again without them"
    assert ("measured again quick without CUBLAS_WORKSPACE_CONFIG, CUDA_LAUNCH_BLOCKING: "
            "668.3 TFLOP/s, 610.9 with them, 8.6% lost to them: unset them") in found.details
    # Without a pair, the same runs are something outside the card, as before.
    del slow["rerun"]
    engine_report = _report_again(engine, data)
    [found] = [f for f in engine_report.renter if f.kind == "contention"]
    assert found.cause == "runs interrupted by something outside the card"


def _report_again(engine: Engine, data: dict[str, Any]) -> Report:
    """The same host probed again: its newest document is the one the report reads."""
    data = copy.deepcopy(data)
    data["collected_at"] = "2026-11-28T00:00:00+00:00"
    return _report(engine, data)


def test_a_gemm_only_run_s_short_matmul_is_judged_too(engine: Engine) -> None:
    # `--suite gemm`: no node figure at all. The matmul is still judged alone; before,
    # the node section returned before it.
    data = _document(None, settings=[])
    data["node"] = []
    report = _report(engine, data)
    [found] = _shortfalls(report.dispute)
    assert found.title.startswith("h200x4: GPU 3 matmul 626.8 ")
