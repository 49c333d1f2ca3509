"""Health verdicts of a rule since withdrawn (fleet/analysis/health/older_rule.py), on the real
document that holds them: the lent 2x H100's health soak of 2026-11-26
(bench/records/2026-11-26-h100x2-health), whose agent called both healthy GPUs degraded
for NVLink data CRC errors at 0.07-0.87 a second, a rule the agent has since withdrawn
(it judges CRC errors only at DCGM's 100 a second). Stored through the real ingest path on
both backends and reported: judged again by the rule of now from the document's own
counters, it is disputed no more; without the counters that rule needs, it is said apart,
not settled; a real fault beside it, and a rate the rule of now does fail, stay disputed.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from agent.health import card
from fleet.analysis.health import older_rule as older_rule
from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.models import Fingerprint
from tests.conftest import FIXTURES, ROOT

SOAK = ROOT / "bench" / "records" / "2026-11-26-h100x2-health" / "bench.jsonl.gz"
LENT = FIXTURES / "jobs" / "h100x2-lent" / "document.json"
REMAP = "1 row remapped for uncorrectable errors"


def _soak() -> dict[str, Any]:
    """The soak's document, as its agent's last `document` event holds it."""
    with gzip.open(SOAK, "rt") as handle:
        events = [json.loads(line) for line in handle if line.startswith("{")]
    (document,) = [e["document"] for e in events if e.get("event") == "document"]
    return copy.deepcopy(document)


def _store(engine: Engine, data: dict[str, Any], host: str = "soak") -> None:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(parse_document(data, host), Origin("lent", host))


def _health(report: Any) -> tuple[list[str], list[str]]:
    disputed = [f.title for f in report.dispute if f.kind == "health"]
    unsettled = [f.title for f in report.unsettled if f.kind == "health"]
    return disputed, unsettled


def test_the_soak_holds_the_withdrawn_rule_s_verdicts() -> None:
    # What the report would otherwise dispute: both GPUs degraded, every reason a CRC
    # count below DCGM's rate, under an agent whose version the fix never changed.
    data = _soak()
    assert data["agent_version"] == "0.1.0"
    for gpu in data["gpus"]:
        health = gpu["health"]
        assert (health["verdict"], health["action"]) == ("degraded", "none")
        assert len(health["reasons"]) == 18
        assert all(older_rule.crc_reason(r) for r in health["reasons"])
        assert older_rule.by_withdrawn_rule(health) and older_rule.carries(health)
        rates = [(r["crc_data"] + r["crc_flit"]) / health["run_seconds"]
                 for r in health["nvlink_errors_during_run"]]
        assert min(rates) > 0.07 and max(rates) < 0.87 < card.NVLINK_CRC_PER_S
        # The rule of now on the same counters.
        assert older_rule.judged_now(health, gpu["pcie_gen_max"],
                                     gpu["pcie_width_max"]) == ("healthy", "none", [])
    # The rule of now no longer holds the withdrawn words: they tell the older rule.
    assert older_rule.WITHDRAWN_CRC not in card.RULE


def test_a_withdrawn_rule_s_verdict_is_judged_again_and_not_disputed(engine: Engine) -> None:
    _store(engine, _soak())
    report = build_report(engine, ReportOptions(), "test")
    assert _health(report) == ([], [])
    assert report.counts()["health"] == 0
    (lent,) = report.health.counts
    assert (lent.healthy, lent.degraded, lent.gpus) == (2, 0, 2)
    assert [s.health_text for h in report.found for s in h.setups] == ["healthy"]
    # The store keeps the agent's word; the report judges it again.
    with engine.connect() as conn:
        stored = conn.execute(select(Fingerprint.health)).scalars().all()
    assert stored == ["degraded", "degraded"]


def test_without_the_counters_the_rule_needs_it_is_not_settled(engine: Engine) -> None:
    data = _soak()
    for gpu in data["gpus"]:
        gpu["health"]["run_seconds"] = None  # the rises without the span they cover
    _store(engine, data)
    report = build_report(engine, ReportOptions(), "test")
    disputed, unsettled = _health(report)
    assert disputed == []
    assert unsettled == [
        "soak GPU 0 (H100-SXM5-80GB) called degraded by an older agent's rule",
        "soak GPU 1 (H100-SXM5-80GB) called degraded by an older agent's rule"]
    first = report.unsettled[0]
    assert first.cause == older_rule.OLDER and first.provider == "lent"
    assert len(first.details) == 18 and all(older_rule.crc_reason(d) for d in first.details)
    assert "probe again with this agent" in first.evidence
    for fmt in ("md", "html"):
        text = render(report, fmt)
        assert "Not settled" in text and "called degraded by an older agent" in text


def test_a_real_fault_beside_it_stays_disputed_on_its_own_reason(engine: Engine) -> None:
    data = _soak()
    health = data["gpus"][1]["health"]
    health["remapped_rows"]["uncorrectable"] = 1
    health["reasons"] = [*health["reasons"], REMAP]
    _store(engine, data)
    report = build_report(engine, ReportOptions(), "test")
    assert _health(report) == (["soak GPU 1 (H100-SXM5-80GB) is degraded"], [])
    (gpu,) = report.health.unwell
    assert (gpu.gpu_index, gpu.verdict, gpu.reasons, gpu.action) == (
        1, "degraded", (REMAP,), "none")


@pytest.mark.parametrize("rule", ["withdrawn", "now"])
def test_a_rate_the_rule_of_now_fails_stays_disputed(engine: Engine, rule: str) -> None:
    # Link 3 of GPU 1 at 865 CRC errors a second, a thousand times the soak's: failing by
    # either rule, whichever the document carries.
    data = _soak()
    gpu = data["gpus"][1]
    health = gpu["health"]
    health["nvlink_errors_during_run"][3]["crc_data"] = 94_000
    verdict, action, reasons = card.decide(
        {k: v for k, v in health.items() if k not in ("verdict", "action", "reasons", "rule")},
        gpu["pcie_gen_max"], gpu["pcie_width_max"])
    assert (verdict, action, len(reasons)) == ("failing", "reset", 1)
    if rule == "now":
        health.update(verdict=verdict, action=action, reasons=reasons, rule=card.RULE)
    else:
        health.update(verdict="failing", action="reset",
                      reasons=[*reasons, *(r for r in health["reasons"] if "link 3 " not in r)])
    _store(engine, data)
    report = build_report(engine, ReportOptions(), "test")
    assert _health(report) == (
        ["soak GPU 1 (H100-SXM5-80GB) is failing: ask the provider to reset it"], [])
    (failing,) = report.health.unwell
    assert failing.reasons == tuple(reasons)
    assert "865 a second" in failing.reasons[0]


def test_a_provider_fault_of_its_day_is_untouched(engine: Engine) -> None:
    # The lent 2x H100 (jobs): GPU 1 degraded for a row remapped for uncorrectable errors
    # and 410 in its life, by an older wording of a rule that still holds: no CRC reason,
    # nothing judged again, still disputed.
    _store(engine, json.loads(Path(LENT).read_text()), "lent-jobs")
    report = build_report(engine, ReportOptions(), "test")
    assert _health(report) == (["lent-jobs GPU 1 (H100-SXM5-80GB) is degraded"], [])
    (gpu,) = report.health.unwell
    assert gpu.reasons[0] == REMAP


def test_an_anonymized_report_judges_it_again_too(engine: Engine) -> None:
    _store(engine, _soak())
    data = _soak()
    data["collected_at"] = "2026-11-26T18:20:00+00:00"
    for gpu in data["gpus"]:
        gpu["health"]["run_seconds"] = None
    _store(engine, data, "soak-2")
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    disputed, unsettled = _health(report)
    assert disputed == [] and len(unsettled) == 2
    assert all("soak" not in t for t in unsettled)
