"""The report's "Between the nodes" section end to end, on SQLite and PostgreSQL: three
nodes' agent documents stored through the real ingest path with real network
fingerprints (a and b 8 x NDR; the third, whose name is markup, the same with one port
at HDR), a cluster run stored beside them (fleet/store/cluster.py), the report built and
rendered. The pairs, nodes, whole figure and findings are in the section; the provider's
fault is in "What to dispute", the renter's in "Yours to fix", the unsettled apart; a
host's strings reach the page as text, in Chromium too."""

from __future__ import annotations

import datetime as dt
import html
import re
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine

from fleet.model.document import parse_document
from fleet.model.step import NodeTransport, StepKind, StepResult
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.cluster import record_cluster_run
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.report.browser import open_page
from tests.store import network_factory
from tests.store.test_cluster_store import figures, ib

EVIL = "<script>console.log('pwned')</script>"
START = dt.datetime(2026, 11, 28, 9, 0, tzinfo=dt.UTC)
CASES = {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-ndr", EVIL: "h100-8x-ib-hdr-port"}


def _step(step_id: str, kind: StepKind, hosts: tuple[str, ...], reduce: float | None,
          round_: int | None = None, error: str | None = None,
          transports: tuple[NodeTransport, ...] | None = None) -> StepResult:
    return StepResult("pod", step_id, kind, round_, hosts, 8, "nccl", "Ring",
                      () if reduce is None else figures(reduce, reduce + 10),
                      tuple(ib(h) for h in hosts) if transports is None else transports,
                      error)


def _store(engine: Engine, run_id: str = "run-1", start: dt.datetime = START,
           steps: list[StepResult] | None = None,
           settings: dict[str, dict[str, str]] | None = None) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        documents: dict[str, int | None] = {
            h: ingest.store(parse_document(network_factory.document(case, f"node-{i}"), h),
                            Origin("lent", h)).document_id
            for i, (h, case) in enumerate(CASES.items())}
    steps = steps if steps is not None else [
        _step("whole", "cluster", ("a", "b", EVIL), 330.0),
        _step("r1-ab", "pair", ("a", "b"), 370.0, 1),
        _step("r2-ae", "pair", ("a", EVIL), 185.0, 2),
        _step("r3-be", "pair", ("b", EVIL), None, 3, error=f"rank 9 of {EVIL} died",
              transports=(ib("b"),))]
    record_cluster_run(engine, run_id, steps, documents,
                       settings if settings is not None else {h: {} for h in CASES},
                       started_at={s.step_id: start for s in steps}, provider="lent")
    return build_report(engine, ReportOptions(), "test")


def _section(page: str) -> str:
    found = re.search(r'<section id="cluster">(.*?)</section>', page, re.S)
    assert found is not None
    return found.group(1)


def _cells(part: str) -> list[list[str]]:
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", part, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if cells:
            rows.append([html.unescape(" ".join(re.sub(r"<[^>]+>", " ", c).split()))
                         for c in cells])
    return rows


def test_the_newest_run_is_shown_with_its_pairs_nodes_and_findings(engine: Engine) -> None:
    report = _store(engine)
    (view,) = report.cluster.clusters
    assert (view.cluster, view.provider, view.run_id, view.steps, view.failed) == (
        "pod", "lent", "run-1", 4, 1)
    # A sweep that stopped at 1 GiB is shown with its share, not judged.
    unjudged = "not judged: its largest size was 1 GiB, and healthy clusters reach their rate "
    assert view.whole.startswith(f"all_reduce busbw 330 GB/s at 1 GiB (82%, {unjudged}"
                                 f"from 4 GiB); all_gather busbw 340 GB/s at 1 GiB (85%, "
                                 f"{unjudged}from 4 GiB) over 3 nodes x 8 ranks")
    page = render(report, "html")
    rows = _cells(_section(page))
    # Round, nodes, transport, all-reduce, all-gather, expected, share, verdict.
    assert rows[:3] == [
        ["1", "a and b", "NET/IB GDRDMA", "370 GB/s", "380 GB/s", "400 GB/s", "92%",
         "passed"],
        ["2", f"a and {EVIL}", "NET/IB GDRDMA", "185 GB/s", "195 GB/s", "400 GB/s", "46%",
         f"short below rate on {EVIL} (the provider's)"],
        ["3", f"b and {EVIL}", f"b: NET/IB GDRDMA; {EVIL}: not said", "-", "-", "400 GB/s",
         "-", f"failed the step failed: rank 9 of {EVIL} died (unsettled)"]]
    # Node, judged pairs, passed, ratio, standing, not judged: the failed step says
    # nothing of the fabric (issue 57); b, whose step with the slow node failed, is
    # to be tested again.
    assert rows[3:] == [["a", "2", "1", "50%", "", "-"],
                        ["b", "1", "1", "100%", "suspect", "1 failed"],
                        [EVIL, "1", "0", "0%", "slow", "1 failed"]]
    # The provider's short pair is disputed; the failed step is not settled.
    (disputed,) = [f for f in report.dispute
                   if f.kind == "network" and f.title.startswith("a and ")]
    assert disputed.title == (f"a and {EVIL}: all_reduce 185 GB/s, 46% of the 400 GB/s "
                              f"their fabric should give (below rate on {EVIL})")
    assert disputed.provider == "lent"
    assert disputed.details[0].startswith("action: ")
    assert disputed.details[2] == "cluster pod, run run-1, steps r2-ae"
    assert any(f.title == "step r3-be (pair b and " + EVIL + ") failed"
               for f in report.unsettled)
    assert not any("r3-be" in f.title for f in report.dispute)
    # The network's own fault on the HDR node (below rate), the pair's and the slow
    # node's (its judged pair short with a known-good partner: the failed step is no
    # evidence against the fabric, issue 57) disputed; counted with the steps not
    # settled, as each is listed. The whole cluster's 82% at 1 GiB is not: healthy
    # clusters read 28-72% there.
    assert len([f for f in report.dispute if f.kind == "network"]) == 3
    assert any(f.title.startswith(f"{EVIL}: the slow node") for f in report.dispute)
    assert not any("the whole cluster" in f.title for f in report.dispute)
    assert report.counts()["network"] == 3 + len(
        [f for f in report.unsettled if f.kind == "network"])
    md = render(report, "md")
    assert "## Between the nodes" in md
    assert "| 1 | a and b | NET/IB GDRDMA | 370 GB/s | 380 GB/s | 400 GB/s | 92% | passed |" in md


def test_a_hosts_strings_are_text_on_the_page(engine: Engine) -> None:
    report = _store(engine)
    page, md = render(report, "html"), render(report, "md")
    assert "<script>console.log" not in page
    assert "&lt;script&gt;console.log(&#39;pwned&#39;)&lt;/script&gt;" in _section(page)
    assert "<script>" not in md and "&lt;script&gt;console.log" in md


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_section_renders_in_chromium(engine: Engine, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text(render(_store(engine), "html"), encoding="utf-8")
    page = open_page(out.as_uri(), tmp_path)
    assert not [line for line in page.console if "pwned" in line]
    section = _section(page.dom)
    assert "<script>" not in section and "&lt;script&gt;" in section
    assert section.count("<tr") == 2 + 3 + 3  # two heads, three pairs, three nodes


def test_only_the_newest_run_is_shown(engine: Engine) -> None:
    _store(engine, "old", START, [_step("r1-ab", "pair", ("a", "b"), 100.0, 1)])
    report = _store(engine, "new", START + dt.timedelta(hours=2),
                    [_step("r1-ab", "pair", ("a", "b"), 371.0, 1)])
    (view,) = report.cluster.clusters
    assert view.run_id == "new"
    assert [(p.all_reduce, p.verdict) for p in view.pairs] == [("371 GB/s", "passed")]


def test_a_socket_fallback_the_run_asked_for_is_the_renters(engine: Engine) -> None:
    socket = tuple(NodeTransport(h, "Socket", None, None, ("NET/Socket/0",),
                                 ("eth0:10.0.0.5<0>",)) for h in ("a", "b"))
    asked = {"NCCL_NET": "Socket"}
    report = _store(engine, steps=[_step("r1-ab", "pair", ("a", "b"), 20.0, 1,
                                         transports=socket)],
                    settings={"a": asked, "b": asked, EVIL: {}})
    (view,) = report.cluster.clusters
    (pair,) = view.pairs
    assert (pair.transport, pair.verdict, pair.whose) == ("NET/Socket", "short",
                                                          "the renter's")
    renters = [f for f in report.renter if f.kind == "network"]
    assert renters and all("a and b" in f.title for f in renters)
    assert not any(f.title.startswith("a and b") for f in report.dispute)


def test_no_cluster_steps_no_section(engine: Engine) -> None:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(parse_document(network_factory.document("h100-8x-ib-ndr", "a"), "a"),
                     Origin("lent", "a"))
    report = build_report(engine, ReportOptions(), "test")
    assert not report.cluster.shown
    assert 'id="cluster"' not in render(report, "html")
    assert "Between the nodes" not in render(report, "md")


def test_an_anonymized_report_shows_the_section_under_its_aliases(engine: Engine) -> None:
    # The same judgement, every name the report's alias: the hosts as the other sections
    # alias them, the cluster "Cluster N", the steps numbered, no address, the failed
    # step's error (which names a host) withheld.
    secret = {"a": {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_COMM_ID": "a:29500"},
              "b": {"NCCL_IB_HCA": "mlx5_0"}, EVIL: {}}
    _store(engine, settings=secret)
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    [view] = report.cluster.clusters
    assert view.cluster == "Cluster 1" and view.provider.startswith("Provider ")
    aliases = {p.nodes for p in view.pairs}
    assert len(aliases) == 3 and all(re.fullmatch(r"[A-Z]+-\d and [A-Z]+-\d", a)
                                     for a in aliases)
    assert [p.step_id for p in view.pairs] == ["step 2", "step 3", "step 4"]
    # The judgement stands under the aliases: the HDR node's pair short, the provider's.
    short = next(p for p in view.pairs if p.step_id == "step 3")
    assert (short.verdict, short.whose) == ("short", "the provider's")
    assert "below rate" in short.cause
    failed = next(p for p in view.pairs if p.step_id == "step 4")
    assert failed.verdict == "failed" and failed.cause == (
        "the step failed: its error names hosts and addresses: withheld in an anonymized "
        "report")
    [dispute] = [f for f in report.dispute if f.kind == "network"
                 and f.details[-1].startswith("cluster ") and " and " in f.title]
    assert re.fullmatch(r"[A-Z]+-\d and [A-Z]+-\d: all_reduce 185 GB/s, 46% of the 400 "
                        r"GB/s .*", dispute.title)
    assert dispute.details[2] == "cluster Cluster 1, run (hidden), steps step 3"
    text = render(report, "html") + render(report, "md") + render(report, "json")
    for real in ("console.log", "r2-ae", "r1-ab", "r3-be", "run-1", '"lent"', '"pod"',
                 "cluster pod", "a:29500", "rank 9"):
        assert real not in text, real
    assert "Between the nodes" in text and dispute.title in text


def test_a_step_under_its_past_is_said_under_the_aliases_too(engine: Engine) -> None:
    # Five earlier runs gave the a-EVIL pair twice tonight's figure: the section says so,
    # as not settled (no setting changed), under the report's aliases when anonymized.
    for night in range(1, 6):
        _store(engine, f"past-{night}", START - dt.timedelta(days=night), steps=[
            _step(f"whole-{night}", "cluster", ("a", "b", EVIL), 330.0),
            _step(f"r1-ab-{night}", "pair", ("a", "b"), 370.0, 1),
            _step(f"r2-ae-{night}", "pair", ("a", EVIL), 370.0, 2)])
    _store(engine)
    plain = build_report(engine, ReportOptions(), "test")
    [view] = plain.cluster.clusters
    assert view.past == ("6 steps compared with their own earlier runs (up to 7): 2 below")
    [below] = [f for f in view.findings if f.rule == "pair-regressed"]
    assert below.whose == "unsettled" and below.steps == ("r2-ae",)
    assert below.title == f"Pair a and {EVIL}: all_reduce 50% under its own past runs"
    assert any(f.title == below.title for f in plain.unsettled)
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    [view] = report.cluster.clusters
    [below] = [f for f in view.findings if f.rule == "pair-regressed"]
    assert re.fullmatch(r"Pair [A-Z]+-\d and [A-Z]+-\d: all_reduce 50% under its own past "
                        r"runs", below.title)
    assert below.steps == ("step 3",) and "(step step 3)" in below.evidence
    text = render(report, "html") + render(report, "md") + render(report, "json")
    assert below.title in text and "r2-ae" not in text and "console.log" not in text


def test_the_library_gives_the_judged_steps_as_a_frame(engine: Engine) -> None:
    # fleet.Store.cluster_pairs: the same judgement as the report's, a row a step.
    import fleet
    from fleet.api import CLUSTER_COLUMNS

    _store(engine)
    store = fleet.Store(engine.url.render_as_string(hide_password=False))
    try:
        frame = store.cluster_pairs()
    finally:
        store.close()
    assert list(frame.columns) == [c.name for c in CLUSTER_COLUMNS]
    rows = {r.step: r for r in frame.itertuples()}
    assert set(rows) == {"whole", "r1-ab", "r2-ae", "r3-be"}
    assert (rows["r1-ab"].all_reduce_gbs, rows["r1-ab"].expected_gbs,
            bool(rows["r1-ab"].passed)) == (370.0, 400.0, True)
    short = rows["r2-ae"]
    assert (bool(short.passed), short.whose, short.hosts) == (False, "provider", f"a {EVIL}")
    assert "below rate" in short.cause
    failed = rows["r3-be"]
    assert failed.error == f"rank 9 of {EVIL} died" and failed.whose == "unsettled"
    assert rows["whole"].kind == "cluster" and rows["whole"].round is pd.NA
    assert str(frame.provider.dtype) == "category" and str(frame.started_at.dt.tz) == "UTC"


def test_counters_and_nic_tests_are_shown_under_the_aliases_too(engine: Engine) -> None:
    # The markup host's port flapped and its mlx5_3 is short against a's: both findings
    # name it, so an anonymized report must name its alias, never the host.
    from dataclasses import replace as with_

    from fleet.model.step import NicFigure, NodeNics, PortCounters

    def side(host: str, role: str, short: float, error: str | None = None) -> NodeNics:
        # mlx5_4 measured nothing: perftest's words, which name a host.
        return NodeNics(host, role, None, tuple(
            NicFigure(i, f"mlx5_{i}", 1, 400.0,
                      None if i == 4 else short if i == 3 else 391.0, True,
                      error if i == 4 else None, f"mlx5_{i}/1") for i in range(5)))

    pair = with_(_step("r2-ae", "pair", ("a", EVIL), 370.0, 2),
                 counters=(PortCounters("a", 8),
                           PortCounters(EVIL, 8, (("mlx5_3/1", "link_downed", 2),))),
                 nics=(side("a", "server", 150.0),
                       side(EVIL, "client", 151.0, "couldn't connect to gpu-secret.example."
                                                   "com:29550: no ib_write_bw server")))
    _store(engine, steps=[_step("whole", "cluster", ("a", "b", EVIL), 330.0), pair])
    plain = build_report(engine, ReportOptions(), "test")
    [view] = plain.cluster.clusters
    rules = {f.rule: f for f in view.findings}
    assert EVIL in rules["link-flap"].title and EVIL in rules["nic-short"].title
    assert "gpu-secret.example.com" in rules["nic-untested"].evidence
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    [view] = report.cluster.clusters
    rules = {f.rule: f for f in view.findings}
    assert re.fullmatch(r"[A-Z]+-\d: mlx5_3/1's link went down 2 times during the steps",
                        rules["link-flap"].title), rules["link-flap"].title
    assert re.fullmatch(r"[A-Z]+-\d's mlx5_3/1 or [A-Z]+-\d's mlx5_3/1: ib_write_bw 150 "
                        r"Gb/s, 38% of its 400 Gb/s", rules["nic-short"].title)
    assert "perftest's words name hosts and addresses" in rules["nic-untested"].evidence
    text = render(report, "html") + render(report, "md") + render(report, "json")
    assert "console.log" not in text and "mlx5_3/1" in text
    assert "gpu-secret" not in text
