"""Cards that computed wrong under load, called in "What to dispute"
(fleet/analysis/matmul/integrity.py).

Documents are built (tests/store/factory.py) with each result's `integrity` as the agent
writes it; one goes through the real agent on the CPU with a constructed corruption.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.analysis.matmul.integrity import CAUSE, UNDECIDED
from fleet.model.document import AgentDocument, parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.conftest import ROOT
from tests.store import factory

DIGEST = "0123456789abcdef"


def checked(digest: str = DIGEST, mismatches: int = 0, checks: int = 60) -> dict[str, Any]:
    first = mismatches > 0
    return {"checks": checks, "mismatches": mismatches, "interval_s": 2.0,
            "reference_s": 0.5, "first_mismatch_s": 83.2 if first else None,
            "first_mismatch_temperature_c": 74.0 if first else None,
            "first_mismatch_elements": 17 if first else None,
            "max_elements": 17 if first else 0, "elements": 8192 * 8192,
            "digest": digest, "kernel": None, "injected": False}


def node(host: str, integrity: list[dict[str, Any] | None]) -> AgentDocument:
    data = factory.document(host=host, gpus=len(integrity), harness="1.3.0")
    for result, item in zip(data["benchmarks"], integrity, strict=True):
        if item is not None:
            result["integrity"] = item
    return AgentDocument.model_validate(data)


def report_of(engine: Engine, *documents: AgentDocument) -> Any:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for document in documents:
            ingest.store(document, Origin("alpha", document.host.hostname))
    return build_report(engine, ReportOptions(), "test")


def corruption(report: Any) -> list[Any]:
    return [f for f in report.dispute if f.kind == "corruption"]


def test_healthy_and_old_nodes_have_no_corruption_finding(engine: Engine) -> None:
    report = report_of(engine, node("gpu-01", [checked(), checked()]),
                       node("gpu-02", [None, None]))
    assert corruption(report) == [] and report.counts()["corruption"] == 0


def test_a_product_that_changed_under_load_is_a_card_to_replace(engine: Engine) -> None:
    report = report_of(engine, node("gpu-01", [checked(), checked(mismatches=3)]))
    (found,) = corruption(report)
    assert found.title.startswith("gpu-01 GPU 1 (H100 SXM5 80GB): its product changed")
    assert found.cause == CAUSE
    for words in ("3 of 60 bit-for-bit checks", "first at 83 s of load", "74 °C",
                  "17 of 67108864 elements"):
        assert words in found.evidence
    assert report.counts()["corruption"] == 1
    for form in ("md", "html", "json"):
        assert "its product changed under load" in render(report, form), form


def test_a_digest_apart_from_its_node_names_the_odd_card(engine: Engine) -> None:
    report = report_of(engine, node("gpu-01", [checked(), checked("fedcba9876543210"),
                                               checked(), checked()]))
    (found,) = corruption(report)
    assert "GPU 1 " in found.title and "other bits than the rest" in found.title
    assert "fedcba9876543210" in found.evidence and found.cause == CAUSE


def test_two_cards_that_disagree_are_both_named(engine: Engine) -> None:
    report = report_of(engine, node("gpu-01", [checked(), checked("fedcba9876543210")]))
    (found,) = corruption(report)
    assert "GPUs 0, 1" in found.title and found.cause == UNDECIDED


@pytest.fixture(scope="module")
def corrupted_on_cpu() -> AgentDocument:
    """The real agent's document, its product flipped under load by the test hook: made
    once, and stored on each backend."""
    pytest.importorskip("torch")
    env = dict(os.environ, FLEET_INTEGRITY_FLIP_AFTER="2", FLEET_NVML_REPLAY=str(
        ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json"))
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "bench", "--cpu", "--size", "64", "--measure-s", "0.2",
         "--soak-window-s", "0.05", "--soak-span-s", "0.5", "--soak-cap-s", "1.5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    return parse_document(json.loads(proc.stdout.splitlines()[-1])["document"], "agent bench")


@pytest.mark.xdist_group("corrupted-on-cpu")  # both backends on one worker: one agent run
def test_a_constructed_corruption_on_the_cpu_path_is_called(
        engine: Engine, corrupted_on_cpu: AgentDocument) -> None:
    document = corrupted_on_cpu
    result = document.benchmarks[0]
    assert result.integrity is not None and result.integrity.mismatches == 1
    (found,) = corruption(report_of(engine, document))
    assert "its product changed under load" in found.title
    assert "1 of 64x64" not in found.evidence and "1 of 4096 elements" in found.evidence
    assert "test hook" in found.evidence
