"""The summary's "What to dispute" at a glance: each finding one line (what, where, how far
off, the likely cause), its evidence and details folded beneath, in the HTML (read by
html.parser, and in Chromium) and the Markdown (read as GitHub reads it: CommonMark, here
markdown-it-py, which rich brings); a GPU's slow pairs one finding under that GPU.

The stores: tests/report/scene.py's procurement scene (a listing mismatch and a listing
that hides two variants, beta's 3% gap at a lower power limit, alpha-01's straggler, the
power limit below the datasheet's), and a 4-GPU node whose GPU 3 reaches each other GPU
10% slower than the node's other pairs run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from sqlalchemy import Engine

from fleet.findings.finding import Finding
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.report.browser import open_page, screenshot
from tests.report.scene import store_scene
from tests.store import factory, node_factory

EVIL_PROVIDER = '<script>document.title="pwned-provider"</script>'
EVIL_HOST = '<img src=x onerror="document.title=\'pwned-host\'">'
EVIL_CAUSE = '</summary><img src=x onerror="document.title=\'pwned-cause\'">'
EVIL_DETAIL = '</li></ul><script>document.title="pwned-detail"</script> *bold* [x](y)'
SXM = {"variant": "H100 SXM5 80GB", "gpu_count": 8}


@dataclass
class Element:
    """An element of a parsed page: enough of a DOM to walk the summary's lists."""

    tag: str
    attrs: dict[str, str | None]
    children: list[Element | str] = field(default_factory=list)

    def text(self) -> str:
        """Its text and its descendants', whitespace folded."""
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join("".join(parts).split())

    def kids(self, tag: str) -> list[Element]:
        return [c for c in self.children if isinstance(c, Element) and c.tag == tag]

    def first(self, tag: str, cls: str | None = None) -> Element:
        """The first descendant `tag` (of class `cls`), depth first."""
        for c in self.children:
            if isinstance(c, Element):
                if c.tag == tag and (cls is None or cls in (c.attrs.get("class") or "").split()):
                    return c
                try:
                    return c.first(tag, cls)
                except LookupError:
                    pass
        raise LookupError(f"no <{tag} class={cls}> under <{self.tag}>")


class _Tree(HTMLParser):
    VOID = frozenset({"meta", "br", "img", "input", "link", "hr", "circle", "line", "rect",
                      "polyline"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs))
        self.stack[-1].children.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        # An element left open (a <p> HTML closes by itself) closes with its parent.
        if tag in self.VOID or tag not in (e.tag for e in self.stack[1:]):
            return
        while self.stack.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Element:
    tree = _Tree()
    tree.feed(page)
    tree.close()
    return tree.root


def line_of(f: Finding) -> str:
    """A finding's line as the HTML shows it: tag, provider, title, likely cause."""
    cause = f" likely cause: {f.cause}" if f.cause else ""
    return " ".join(f"{f.kind} {f.provider}: {f.title}{cause}".split())


def md_line_of(f: Finding) -> str:
    """A finding's line as the Markdown shows it."""
    cause = f" (likely cause: {f.cause})" if f.cause else ""
    return f"{f.kind}, {f.provider}: {f.title}{cause}"


def html_findings(page: str) -> list[tuple[str, str, list[str]]]:
    """(line, evidence, details) of each finding of the HTML's "What to dispute", each
    checked to be one folded <details>, closed, whose <summary> holds only the line."""
    found = []
    for item in parse(page).first("ul", "findings").kids("li"):
        (folded,) = item.kids("details")
        assert "open" not in folded.attrs  # folded until the reader opens it
        (summary,) = folded.kids("summary")
        # One line: the summary holds inline text only, nothing that breaks a line.
        inline = {c.tag for c in summary.children if isinstance(c, Element)}
        assert inline <= {"span", "strong"}, inline
        (evidence,) = folded.kids("div")
        lists = folded.kids("ul")
        details = [li.text() for li in lists[0].kids("li")] if lists else []
        found.append((summary.text(), evidence.text(), details))
    return found


def dispute_part(markdown: str) -> str:
    return markdown.split("### What to dispute\n", 1)[1].split("\nFindings:", 1)[0]


def markdown_findings(markdown: str) -> list[tuple[str, str, list[str]]]:
    """(line, summary, sub-bullets) of each finding of the Markdown's "What to dispute",
    as a CommonMark reader renders it: a bullet whose first paragraph is the line, with a
    <details> folding its sub-bullets."""
    page = MarkdownIt("commonmark").render(dispute_part(markdown))
    (findings,) = parse(page).kids("ul")
    found = []
    for item in findings.kids("li"):
        (line,) = item.kids("p")
        (folded,) = item.kids("details")
        (summary,) = folded.kids("summary")
        (bullets,) = folded.kids("ul")
        found.append((line.text(), summary.text(), [li.text() for li in bullets.kids("li")]))
    return found


def test_each_finding_is_one_line_with_its_evidence_folded(engine: Engine) -> None:
    store_scene(engine)
    report = build_report(engine, ReportOptions(), "test")
    kinds = [f.kind for f in report.dispute]
    assert {"mismatch", "gap", "straggler", "drift"} <= set(kinds)
    by_kind = {f.kind: f for f in report.dispute}
    straggler = by_kind["straggler"]
    assert straggler.title == "alpha-01 GPU 3: 10% below the rest of its node on the matmul"
    assert straggler.evidence.startswith("8192³ bf16, sustained, soaked")
    assert "TFLOP/s against 69" in straggler.evidence
    # beta's gap: what differs is one line each, the first (its power limit) the cause.
    gap = by_kind["gap"]
    assert gap.title.startswith("beta is 3.") and gap.title.endswith(
        "% slower than alpha on H100 SXM5 80GB")
    assert gap.cause == "power limit 650 W vs 700 W"
    assert gap.details[0] == "power limit: 650 W on beta, 700 W on alpha"
    assert "Differs" not in gap.evidence and gap.evidence.endswith("What differs:")
    (drift,) = [f for f in report.dispute if f.kind == "drift"]
    assert drift.title == ("H100 SXM5 80GB: power limit 650 W on 16 GPUs, below the "
                           "datasheet's 700 W")
    assert drift.details == ("beta-01", "beta-02")
    mixed = next(f for f in report.dispute if f.title.startswith("listing "))
    assert mixed.title == "listing H100 SXM5 80GB: 2 variants behind it"
    assert mixed.details == ("H100 PCIe 80GB on 8 GPUs of 1 host",
                             "H100 SXM5 80GB on 8 GPUs of 1 host")

    # HTML: a line each, the evidence and each detail folded beneath it.
    assert html_findings(render(report, "html")) == [
        (line_of(f), " ".join(f.evidence.split()), list(f.details)) for f in report.dispute]

    # Markdown: the line a bullet, the evidence and details its sub-bullets, folded.
    markdown = render(report, "md")
    assert markdown_findings(markdown) == [
        (md_line_of(f), "evidence", [f.evidence, *f.details]) for f in report.dispute]
    # Read as plain text, each finding is one bullet at the margin, the rest indented.
    lines = dispute_part(markdown).strip().splitlines()
    assert [line for line in lines if not line.startswith((" ", "\t")) and line] == [
        line for line in lines if line.startswith("- **")]
    assert len([line for line in lines if line.startswith("- **")]) == len(report.dispute)
    assert "- **straggler**, alpha: alpha-01 GPU 3: 10% below the rest of its node on the " \
           "matmul\n" in markdown

    # JSON carries each finding's cause and details.
    data = json.loads(render(report, "json"))
    (gap_json,) = [d for d in data["dispute"] if d["kind"] == "gap"]
    assert gap_json["cause"] == "power limit 650 W vs 700 W"
    assert gap_json["details"] == list(gap.details)


def _node(host: str, **knobs: Any) -> AgentDocument:
    data = factory.document(host=host, gpus=4, harness="1.3.0",
                            collected_at=dt.datetime(2026, 11, 26, 3, 0, tzinfo=dt.UTC),
                            gpu_tflops=[700.0, 700.5, 699.5, 700.2])
    return AgentDocument.model_validate(node_factory.with_node(data, **knobs))


def test_a_gpus_slow_pairs_are_one_finding_under_that_gpu(engine: Engine) -> None:
    slow = {(0, 3): 0.9, (1, 3): 0.9, (2, 3): 0.9}
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(_node("gpu-03", pair_scale=slow), Origin("alpha", "gpu-03"))
        ingest.store(_node("gpu-04"), Origin("alpha", "gpu-04"))
    report = build_report(engine, ReportOptions(), "test")
    (group,) = report.node.outliers
    assert group.shared_gpu == 3
    (finding,) = [f for f in report.dispute if f.kind == "straggler"]
    assert finding.title == ("gpu-03 GPU 3: pairs 0-3, 1-3, 2-3 (one way and both ways) 10% "
                             "below the rest of its node")
    # One line per pair, its one-way and both-ways figures on it.
    assert [d.split(":")[0] for d in finding.details] == ["pair 0-3", "pair 1-3", "pair 2-3"]
    for line in finding.details:
        assert ": one way " in line and ", both ways " in line, line
        shortfalls = [float(x) for x in re.findall(r"\(([\d.]+)% lower;", line)]
        assert len(shortfalls) == 2 and all(9.5 < x < 10.5 for x in shortfalls), line
    assert finding.evidence.startswith(
        "each figure against the median of the same figure on the node's 5 other pairs")

    (html_line,) = [f for f in html_findings(render(report, "html"))
                    if f[0].startswith("straggler")]
    assert html_line == (line_of(finding), finding.evidence, list(finding.details))
    (md_line,) = [f for f in markdown_findings(render(report, "md"))
                  if f[0].startswith("straggler")]
    assert md_line[2] == [finding.evidence, *finding.details]


def _hostile(engine: Engine) -> Report:
    """The scene with a hostile provider and host whose power limit is below the
    datasheet's (a drift finding naming the host in its details), and a finding whose
    cause and details are hostile text."""
    store_scene(engine, extra=[(EVIL_PROVIDER, EVIL_HOST, {
        "gpu_tflops": [700.0] * 8, "harness": "1.3.0", "power_limit_w": 600.0},
        Listing(SXM, 2.0, "USD", ()))])
    report = build_report(engine, ReportOptions(), "test")
    assert any(f.provider == EVIL_PROVIDER and f.details == (EVIL_HOST,)
               for f in report.dispute if f.kind == "drift")
    told = Finding("peer", EVIL_PROVIDER, f"{EVIL_HOST}: pairs", "evidence",
                   cause=EVIL_CAUSE, details=(EVIL_DETAIL, EVIL_HOST))
    return dataclasses.replace(report, findings=(*report.dispute, told, *report.renter,
                                                 *report.unsettled))


def test_hostile_causes_and_details_are_text_in_every_form(engine: Engine) -> None:
    report = _hostile(engine)
    page = render(report, "html")
    assert "<img" not in page and "<script>document" not in page
    assert "&lt;/summary&gt;&lt;img src=x onerror=" in page
    assert "&lt;/li&gt;&lt;/ul&gt;&lt;script&gt;" in page
    # The hostile finding is still one line with its two details, not a broken list.
    (*_, told) = html_findings(page)
    assert told == (f"peer {EVIL_PROVIDER}: {EVIL_HOST}: pairs likely cause: {EVIL_CAUSE}",
                    "evidence", [EVIL_DETAIL, EVIL_HOST])
    markdown = render(report, "md")
    assert "<img" not in markdown and "<script" not in markdown and "</li>" not in markdown
    assert "(likely cause: &lt;/summary&gt;&lt;img" in markdown
    assert "  - &lt;/li&gt;&lt;/ul&gt;&lt;script&gt;" in markdown and "\\*bold\\*" in markdown
    (*_, told_md) = markdown_findings(markdown)
    assert told_md[2] == ["evidence", EVIL_DETAIL, EVIL_HOST]  # as text, markup undone
    data = json.loads(render(report, "json"))
    assert data["dispute"][-1]["cause"] == EVIL_CAUSE
    assert data["dispute"][-1]["details"] == [EVIL_DETAIL, EVIL_HOST]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_summary_reads_in_chromium(engine: Engine, tmp_path: Path) -> None:
    report = _hostile(engine)
    out = tmp_path / "summary.html"
    out.write_text(render(report, "html"), encoding="utf-8")
    page = open_page(out.as_uri(), tmp_path)
    assert page.console == []
    assert "pwned" not in page.dom.split("</title>", 1)[0]
    assert "<img" not in page.dom and "<script>document" not in page.dom
    # Every finding a closed <details> in the DOM Chromium built, its line the summary.
    found = html_findings(page.dom)
    assert [line for line, _, _ in found] == [line_of(f) for f in report.dispute]
    assert sum(len(details) for _, _, details in found) == sum(
        len(f.details) for f in report.dispute)
    screenshot(out.as_uri(), "summary.png", tmp_path, height=1400)
