"""Whose a short memory copy is, settled by the agent's rerun without the run's settings
(agent/rerun/memory.py, fleet/analysis/node/whose.py), on the lent 4x H200 node's real
document with GPU 2's copy made 10% slow under CUDA_LAUNCH_BLOCKING=1, stored through the
real ingest path (SQLite and PostgreSQL) and reported alone."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.conftest import FIXTURES
from tests.report.test_whose import _scaled

H200X4 = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
BLOCKING = {"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "withheld": None,
            "source": "environment", "family": "cuda", "applies": True}


def _document(rerun_share: float | None, settings: list[dict[str, Any]] | None = None,
              kind: str = "memory_copy") -> dict[str, Any]:
    """The healthy node's document, GPU 2's memory copy at 90% under `settings`
    (CUDA_LAUNCH_BLOCKING=1) and, where `rerun_share` is given, measured again without
    them at that share of its healthy figure."""
    data: dict[str, Any] = copy.deepcopy(json.loads(H200X4.read_text()))
    data["settings"] = [BLOCKING] if settings is None else settings
    slow = next(r for r in data["node"] if r["kind"] == kind and r["gpu_index"] == 2)
    healthy = slow["stats"]
    slow["stats"] = _scaled(healthy, 0.90)
    slow["gbs"] = slow["stats"]["median_gbs"]
    if rerun_share is not None:
        again = _scaled(healthy, rerun_share)
        slow["rerun"] = {
            "without": ["CUDA_LAUNCH_BLOCKING"], "kept": [], "floor_gbs": 4009.855,
            "floor_basis": "records: 4220.9 GB/s expected", "gbs": again["median_gbs"],
            "min_gbs": again["min_gbs"], "max_gbs": again["max_gbs"],
            "samples_gbs": again["samples_gbs"], "ran_with": [], "wall_s": 6.1}
    return data


def _report(engine: Engine, data: dict[str, Any]) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(parse_document(data, "h200x4"), Origin("lent", "h200x4"))
    return build_report(engine, ReportOptions(), "test")


def _memory(found: tuple[Any, ...]) -> list[Any]:
    return [f for f in found if f.kind == "shortfall" and "memory" in f.title]


def test_a_copy_clear_without_the_setting_is_the_renters(engine: Engine) -> None:
    report = _report(engine, _document(1.0))
    assert _memory(report.dispute) == [] and _memory(report.unsettled) == []
    [found] = _memory(report.renter)
    assert found.cause is not None and found.cause.startswith(
        "GPU 2 memory copy 3,80")
    assert ("under CUDA_LAUNCH_BLOCKING=1 (environment), 4,22" in found.cause
            and "without it, measured again in the same run: a setting of the run's "
            "environment costing 10%; unset it" in found.cause)


def test_a_copy_still_short_without_it_is_the_providers(engine: Engine) -> None:
    report = _report(engine, _document(0.905))
    [found] = _memory(report.dispute)
    assert found.cause is not None and "GPU 2 memory copy measured again in the same run " \
        "without CUDA_LAUNCH_BLOCKING=1 (environment)" in found.cause
    assert _memory(report.renter) == [] and _memory(report.unsettled) == []


@pytest.mark.parametrize("settings", [[BLOCKING], []])
def test_without_a_rerun_it_is_unsettled_under_suspects_and_disputed_without(
        engine: Engine, settings: list[dict[str, Any]]) -> None:
    report = _report(engine, _document(None, settings))
    if settings:
        [found] = _memory(report.unsettled)
        assert found.details == ("CUDA_LAUNCH_BLOCKING=1 (environment)",)
    else:
        assert len(_memory(report.dispute)) == 1

