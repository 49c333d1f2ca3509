"""A sweep's history in the report: the night each change began, and TFLOP/s over nights."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from sqlalchemy import Engine

from fleet.analysis.dataset import Scope
from fleet.analysis.sweep.history import GpuState, HostNight, Night
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.report.timeline import _only
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.sweep.run import write_report
from tests.store import factory

NIGHTS = 8
SLOW_FROM = 6  # alpha-02 GPU 5 runs 10% slower from this night on (after min_history nights)
DRIVER_FROM = 3  # beta-01 gets a new driver on this night


def _store_nights(engine: Engine) -> list[int]:
    runs = []
    for night in range(1, NIGHTS + 1):
        when = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC) + dt.timedelta(days=night)
        with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
            for provider, host in (("alpha", "alpha-01"), ("alpha", "alpha-02"),
                                   ("beta", "beta-01")):
                tflops = [700.0 + 0.5 * ((night + i) % 3) for i in range(8)]
                if host == "alpha-02" and night >= SLOW_FROM:
                    tflops[5] = 630.0
                driver = "590.44.01" if host == "beta-01" and night >= DRIVER_FROM else None
                data = factory.document(host=host, gpus=8, collected_at=when, seed=night,
                                        gpu_tflops=tflops, driver_version=driver)
                ingest.store(AgentDocument.model_validate(data),
                             Origin(provider, host, Listing(price_per_gpu_hour=2.0,
                                                            currency="USD")))
            assert ingest.run_id is not None
            runs.append(ingest.run_id)
    return runs


def test_the_report_says_which_night_each_change_began(engine: Engine) -> None:
    runs = _store_nights(engine)
    report = build_report(engine, ReportOptions(scope=Scope(sweep="nightly")), "test")
    history = report.history
    assert history is not None and [run for run, _ in history.nights] == runs
    began = {(e.kind, e.run_id) for e in history.events}
    assert ("regression", runs[SLOW_FROM - 1]) in began
    assert ("change", runs[DRIVER_FROM - 1]) in began
    regressions = [e for e in history.events if e.kind == "regression"]
    assert len(regressions) == 1 and "alpha/alpha-02 GPU 5" in regressions[0].text
    (change,) = [e for e in history.events if e.kind == "change"]
    assert change.text == ("beta/beta-01 GPUs 0, 1, 2, 3, 4, 5, 6, 7: driver_version "
                           "580.159.04 -> 590.44.01")
    assert {e.kind for e in history.events} == {"regression", "change"}
    assert report.counts()["regression"] == 1  # it lasts to the newest night

    (chart,) = history.charts
    medians = [line for line in chart.lines if line.provider_median]
    assert [line.provider for line in medians] == ["alpha", "beta"]
    assert all(len(line.points) == NIGHTS for line in chart.lines)
    assert [line.label for line in chart.lines if line.regressed] == ["alpha-02 GPU 5"]

    # The sweep's chart: two providers' medians and 24 GPUs; each offer's nights apart.
    assert [(c.provider, len(c.lines)) for c in history.offer_charts] == [
        ("alpha", 1 + 16), ("beta", 1 + 8)]
    html = render(report, "html")
    history_part = html[html.index('<section id="history">'):]
    assert history_part.count('class="series') == 2 + 24
    assert "The night each change began" in html
    md = render(report, "md")
    assert f"#{runs[SLOW_FROM - 1]}" in md and "regression: alpha/alpha-02 GPU 5" in md


def test_a_nights_report_shows_the_history_up_to_that_night(engine: Engine) -> None:
    runs = _store_nights(engine)
    third = build_report(engine, ReportOptions(scope=Scope(sweep="nightly",
                                                           runs=(runs[2],))), "test")
    assert third.history is not None and len(third.history.nights) == 3
    assert third.results == 24  # tonight's measurements only
    assert {e.kind for e in third.history.events} == {"change"}


def test_anonymized_history_names_no_provider_or_host(engine: Engine) -> None:
    _store_nights(engine)
    report = build_report(engine, ReportOptions(scope=Scope(sweep="nightly"),
                                                anonymize=True), "test")
    for fmt in ("html", "md", "json"):
        text = render(report, fmt)
        assert not re.search(r"alpha|beta-01|GPU-[0-9a-f]{8}", text), fmt
        # alpha-02 regressed: whichever letter and number alpha and it were dealt.
        assert re.search(r"Provider ([AB])/\1-[12] GPU 5", text), fmt


def test_the_history_keeps_to_the_reports_providers(engine: Engine) -> None:
    """alpha regressed; a report of beta alone neither counts nor shows it."""
    _store_nights(engine)
    report = build_report(engine, ReportOptions(scope=Scope(sweep="nightly",
                                                            providers=("beta",))), "test")
    assert report.history is not None
    assert [e.kind for e in report.history.events] == ["change"]
    assert report.counts()["regression"] == 0
    assert "alpha" not in render(report, "html")


def test_aliases_cover_only_the_reports_providers(engine: Engine) -> None:
    """Lettered from the whole sweep, a report of beta alone could call it "Provider B",
    and so say that the store holds another provider."""
    _store_nights(engine)
    for _ in range(10):
        report = build_report(engine, ReportOptions(scope=Scope(sweep="nightly",
                                                                providers=("beta",)),
                                                    anonymize=True), "test")
        assert report.providers == ("Provider A",)
        assert "Provider B" not in render(report, "json")


def test_a_variant_filter_keeps_a_failed_night_of_a_host_that_carries_it() -> None:
    """Dropped, a host that failed one night would read as gone that night and new the
    next; a host that never carried the variant stays out."""
    when = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    sxm = GpuState(0, "GPU-0", "H100 SXM5 80GB", {}, {})
    pcie = GpuState(0, "GPU-1", "H100 PCIe 80GB", {}, {})
    nights = [Night(1, when, {"a/x": HostNight("a", "x", "stored", (sxm,)),
                              "a/y": HostNight("a", "y", "stored", (pcie,))}),
              Night(2, when, {"a/x": HostNight("a", "x", "failed"),
                              "a/y": HostNight("a", "y", "failed")})]
    carriers = {"a/x"}
    kept = [_only(night, (), ("H100 SXM5 80GB",), carriers) for night in nights]
    assert [sorted(night.hosts) for night in kept] == [["a/x"], ["a/x"]]
    assert kept[1].hosts["a/x"].status == "failed"


def test_a_nights_report_that_cannot_be_written_still_counts_its_findings(
        engine: Engine, tmp_path: Path) -> None:
    """`fleet sweep --fail-on regression,gap` must not pass because the report's file
    could not be written: the findings are counted all the same."""
    runs = _store_nights(engine)
    url = engine.url.render_as_string(hide_password=False)
    missing = tmp_path / "no-such-directory" / "night.html"
    path, counts, error = write_report("nightly", runs[-1], url, str(missing))
    assert path is None and error is not None and "no-such-directory" in error
    assert counts["regression"] >= 1
    path, again, error = write_report("nightly", runs[-1], url, str(tmp_path / "night.html"))
    assert path == tmp_path / "night.html" and path.exists() and error is None
    assert again == counts
