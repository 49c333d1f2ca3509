"""The health finding, stored through the real ingest path on both backends, and in the
report's HTML, Markdown and JSON and `fleet report --fail-on health`.

The fleet:
- alpha-01: 8 x H100 SXM5; GPU 2 failing (uncorrectable ECC errors, a pending remap), GPU 5
  degraded (its link below its maximum under load), the rest healthy. alpha-02: 8 healthy.
- beta-01, beta-02: 8 GPUs each whose driver could not tell (unknown); one reason given.
- gamma-01: 8 GPUs fingerprinted by an agent before the health counters (not read).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import Engine

from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.store import factory
from tests.store.conftest import migrated_sqlite
from tests.store.health import give_health, health
from tests.store.node_factory import with_node

WHEN = dt.datetime(2026, 11, 26, 3, 0, tzinfo=dt.UTC)
ECC = "2 uncorrectable ECC errors since the driver loaded"
REMAP = "a row remap is pending: applied at the next reset"
LINK = "PCIe link at Gen4 x16 under load, below its Gen5 x16"
BLIND = "ECC and row remapping are not visible in this vGPU"
EVIL = '<img src=x onerror="document.title=\'pwned-reason\'">'


def _document(host: str, by_index: dict[int, dict[str, Any]] | None = None,
              rest: dict[str, Any] | None = None) -> AgentDocument:
    data = factory.document(host=host, gpus=8, collected_at=WHEN, harness="1.3.0")
    return AgentDocument.model_validate(give_health(data, by_index or {}, rest))


def store_fleet(engine: Engine, unwell: bool = True) -> None:
    """The fleet of the module's docstring; `unwell` False: every card healthy."""
    sick = {2: health("failing", [ECC, REMAP], ecc_uncorrected_volatile=2,
                      remapped_pending=True),
            5: health("degraded", [LINK])} if unwell else {}
    unknown = health("unknown", [BLIND], counters=False)
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(_document("alpha-01", sick, health()), Origin("alpha", "alpha-01"))
        ingest.store(_document("alpha-02", rest=health()), Origin("alpha", "alpha-02"))
        if unwell:
            for host in ("beta-01", "beta-02"):
                ingest.store(_document(host, rest=unknown), Origin("beta", host))
            ingest.store(_document("gamma-01"), Origin("gamma", "gamma-01"))


def test_a_healthy_fleet_has_no_health_finding(engine: Engine) -> None:
    store_fleet(engine, unwell=False)
    report = build_report(engine, ReportOptions(), "test")
    assert report.counts()["health"] == 0
    assert [f for f in report.dispute if f.kind == "health"] == []
    (alpha,) = report.health.counts
    assert (alpha.provider, alpha.healthy, alpha.gpus) == ("alpha", 16, 16)
    assert [s.health_text for h in report.found for s in h.setups] == ["healthy", "healthy"]
    assert "No GPU in scope is failing, degraded or of unknown health." in render(report, "md")


def test_every_gpu_not_healthy_is_named_with_its_reasons(engine: Engine) -> None:
    store_fleet(engine)
    report = build_report(engine, ReportOptions(), "test")
    health_ = report.health
    assert [(g.provider, g.host, g.gpu_index, g.verdict, g.reasons)
            for g in health_.unwell] == [
        ("alpha", "alpha-01", 2, "failing", (ECC, REMAP)),
        ("alpha", "alpha-01", 5, "degraded", (LINK,))]
    # Unknown said once for the provider, naming both hosts.
    (blind,) = health_.unknown
    assert (blind.provider, blind.gpus, blind.hosts, blind.reasons) == (
        "beta", 16, ("beta-01", "beta-02"), (BLIND,))
    counts = {c.provider: (c.healthy, c.degraded, c.failing, c.unknown, c.not_read)
              for c in health_.counts}
    assert counts == {"alpha": (14, 1, 1, 0, 0), "beta": (0, 0, 0, 16, 0),
                      "gamma": (0, 0, 0, 0, 8)}
    assert report.counts()["health"] == 3
    findings = [(f.provider, f.title, f.evidence) for f in report.dispute
                if f.kind == "health"]
    assert findings == [
        ("alpha", "alpha-01 GPU 2 (H100 SXM5 80GB) is failing", f"{ECC}; {REMAP}"),
        ("alpha", "alpha-01 GPU 5 (H100 SXM5 80GB) is degraded", LINK),
        ("beta", "health unknown on 16 GPUs of 2 hosts",
         f"the driver could not tell on beta-01, beta-02 ({BLIND}); unknown is never "
         "taken for healthy")]
    # The fleet as found: the unwell GPUs apart from their node, the old agent's "not read".
    found = {h.host: h for h in report.found}
    alpha = found["alpha-01"]
    assert [(s.gpus, s.health_text) for s in alpha.setups] == [
        ((0, 1, 3, 4, 6, 7), "healthy"), ((2,), "failing"), ((5,), "degraded")]
    assert alpha.differs == ("health",)
    assert [(s.gpus, s.health_text) for s in found["gamma-01"].setups] == [
        (tuple(range(8)), "not read")]
    assert found["beta-01"].agree and found["beta-01"].setups[0].health == "unknown"


def test_an_anonymized_report_names_the_unwell_gpus_by_alias(engine: Engine) -> None:
    store_fleet(engine)
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    text = render(report, "json")
    for secret in ("alpha", "beta", "gamma"):
        assert secret not in text, secret
    assert [g.verdict for g in report.health.unwell] == ["failing", "degraded"]
    assert report.health.unwell[0].provider.startswith("Provider ")


@pytest.fixture
def fleet_url(tmp_path: Path) -> str:
    """The fleet in SQLite, with a hostile reason on alpha-02's GPU 0."""
    url = migrated_sqlite(tmp_path / "fleet.db")
    engine = open_engine(resolve(url))
    store_fleet(engine)
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(_document("zeta-01", {0: health("degraded", [EVIL])}, health()),
                     Origin("zeta", "zeta-01"))
    engine.dispose()
    return url


def fleet(*args: str, db: str) -> Result:
    from fleet.cli import main

    return CliRunner().invoke(main, [*args, "--db", db], catch_exceptions=False)


def test_fail_on_health_exits_one_and_every_form_shows_the_finding(
        fleet_url: str, tmp_path: Path) -> None:
    failed = fleet("report", "--fail-on", "health", "-o", str(tmp_path / "r.html"),
                   db=fleet_url)
    assert failed.exit_code == 1, failed.output
    assert "--fail-on: 4 health found" in failed.output
    # gamma's cards were not read: counted, never a finding.
    passed = fleet("report", "--provider", "gamma", "--fail-on", "health", "-o",
                   "/dev/null", db=fleet_url)
    assert passed.exit_code == 0, passed.output
    html = (tmp_path / "r.html").read_text()
    assert 'id="health"' in html
    assert f"{ECC}; {REMAP}" in html
    assert '<span class="tag failing">failing</span>' in html
    assert '<span class="tag not-read">not read</span>' in html
    # What the host sent is text, never markup.
    assert "<img" not in html and "&lt;img src=x onerror=" in html

    assert fleet("report", "--format", "md", "-o", str(tmp_path / "r.md"),
                 db=fleet_url).exit_code == 0
    md = (tmp_path / "r.md").read_text()
    assert "## Health" in md
    assert "| alpha | 16 | 14 | 1 | 1 | 0 | 0 |" in md
    assert "| gamma | 8 | 0 | 0 | 0 | 0 | 8 |" in md
    assert (f"- **failing**, alpha alpha-01 GPU 2 (H100 SXM5 80GB): {ECC}; {REMAP}"
            in md)
    assert "- **unknown**, beta: health unknown on 16 GPUs of 2 hosts; the driver" in md
    assert "<img" not in md and "&lt;img src=x onerror=" in md
    assert re.search(r"\nFindings: [^\n]*\bhealth 4\b", md)

    assert fleet("report", "--format", "json", "-o", str(tmp_path / "r.json"),
                 db=fleet_url).exit_code == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["findings"]["health"] == 4
    assert [(g["host"], g["gpu_index"], g["verdict"]) for g in data["health"]["unwell"]] == [
        ("alpha-01", 2, "failing"), ("alpha-01", 5, "degraded"), ("zeta-01", 0, "degraded")]
    assert data["health"]["not_read"] == 8
    assert [d["kind"] for d in data["dispute"]].count("health") == 4


def test_fail_on_health_passes_a_healthy_fleet(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path / "fleet.db")
    engine = open_engine(resolve(url))
    store_fleet(engine, unwell=False)
    engine.dispose()
    done = fleet("report", "--fail-on", "health", "-o", "/dev/null", db=url)
    assert done.exit_code == 0, done.output


def test_a_link_trained_down_is_one_finding_not_one_per_gpu_twice(engine: Engine) -> None:
    # The agent judges each GPU degraded for its link under load; the node suite's figures
    # show the same link: the host-link finding names it once, with the copies' speeds.
    link = ("the host link ran at Gen4 under load; the card and slot support Gen5")
    data = factory.document(host="delta-01", gpus=4, collected_at=WHEN, harness="1.3.0")
    data = give_health(data, {}, health("degraded", [link]))
    data = with_node(data, link=(4, 16), pinned_gbs=27.6)
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("delta", "delta-01"))
    report = build_report(engine, ReportOptions(), "test")
    kinds = [(f.kind, f.title) for f in report.dispute]
    assert kinds == [("hostlink", "delta-01 GPUs 0, 1, 2, 3: host link trained down to "
                                  "Gen4 x16 (supports Gen5 x16)")]
    assert report.counts()["health"] == 0 and report.counts()["hostlink"] == 1
    # The verdicts still stand in the table: four degraded cards.
    assert [(c.provider, c.degraded) for c in report.health.counts] == [("delta", 4)]
