"""The node suite in the report, end to end: documents with node figures stored through
the real ingest path, on SQLite and PostgreSQL, then `fleet report` as Markdown, JSON and
HTML (read in Chromium).

The fleet: six 4 x H100 SXM5 nodes, each figure as tests/store/node_factory.py makes it
(the lent 4x H100's: HBM copy 3,010 GB/s, pinned host copies 55.2, pairs 396 one way and
771 both ways, all-reduce bus bandwidth 361.5 GB/s at 1 GiB), with faults:
- beta-01 trained down to Gen4 x8, its pinned copies at 88% of that (13.8 GB/s);
- beta-02 without peer access (NVML path SYS, 20 GB/s a pair, all-reduce 40 GB/s);
- gamma-01's pair 0-3 at 85% of the node's others;
and alpha-01's matmul is the lent node's (issue 32): 669.0, 667.4, 660.4, 670.0 TFLOP/s.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from fleet.cli import main
from fleet.errors import InputError
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.sweep.run import check_fail_on
from tests.report.browser import open_page
from tests.store import factory, node_factory

WHEN = dt.datetime(2026, 11, 26, 3, 0, tzinfo=dt.UTC)
SXM = Listing({"variant": "H100 SXM5 80GB", "gpu_count": 4}, 2.49, "USD", ())
LENT = [669.0, 667.4, 660.4, 670.0]
GiB = 1 << 30
LOW_BUSBW = {16 << 20: 20.0, GiB: 40.0}


def _host(host: str, tflops: list[float] | None = None, **knobs: Any) -> dict[str, Any]:
    data = factory.document(host=host, gpus=4, collected_at=WHEN, harness="1.3.0",
                            gpu_tflops=tflops or [700.0, 700.5, 699.5, 700.2])
    return node_factory.with_node(data, **knobs)


def _fleet() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("alpha", "alpha-01", _host("alpha-01", LENT)),
        ("alpha", "alpha-02", _host("alpha-02")),
        ("beta", "beta-01", _host("beta-01", link=(4, 8), pinned_gbs=13.8, pageable_gbs=6.0)),
        ("beta", "beta-02", _host("beta-02", peer_access=False, topology="SYS",
                                  peer_gbs=20.0, both_ways_gbs=38.0, busbw_gbs=LOW_BUSBW)),
        ("gamma", "gamma-01", _host("gamma-01", pair_scale={(0, 3): 0.85})),
        ("gamma", "gamma-02", _host("gamma-02")),
    ]


def store_fleet(engine: Engine) -> None:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for provider, host, data in _fleet():
            ingest.store(AgentDocument.model_validate(data), Origin(provider, host, SXM))


def test_the_node_figures_and_findings_of_a_stored_fleet(engine: Engine) -> None:
    store_fleet(engine)
    report = build_report(engine, ReportOptions(), "test")
    node = report.node
    assert [n.host for n in node.found] == ["alpha-01", "alpha-02", "beta-01", "beta-02",
                                            "gamma-01", "gamma-02"]
    found = {n.host: n for n in node.found}
    alpha = found["alpha-02"]
    assert alpha.memory is not None and alpha.memory.datasheet_gbs == 3350.0
    assert 0.89 < (alpha.memory.share or 0) < 0.91
    assert alpha.link == "Gen5 x16" and alpha.peer_access == "yes"
    assert alpha.allreduce is not None and alpha.allreduce.size == "1 GiB"
    assert found["beta-01"].link == "Gen4 x8 (max Gen5 x16)"
    assert (found["beta-02"].peer_access, found["beta-02"].paths) == ("no", "SYS")

    (link,) = node.host_links
    assert (link.host, link.problem, link.gpus, link.link) == (
        "beta-01", "below maximum", (0, 1, 2, 3), "Gen4 x8")
    (peers,) = node.missing_peers
    assert (peers.host, len(peers.without_access), peers.paths) == ("beta-02", 6, ("SYS",))
    # beta-02's pairs and all-reduce stand far apart, and follow from its missing peer
    # access: one finding, not four.
    assert node.apart == ()
    # The pair's two figures, one way and both ways, are one finding.
    (pair,) = node.outliers
    assert (pair.host, pair.units) == ("gamma-01", ("pair 0-3",))
    assert [o.name for o in pair.outliers] == ["GPUs 0 and 3 (both ways)", "GPU 0 to GPU 3"]
    assert pair.title == ("gamma-01 pair 0-3 (one way and both ways): 15% below the rest of "
                          "its node")
    (line,) = pair.details  # the pair's two figures on one line
    assert line.startswith("pair 0-3: one way 33") and ", both ways 65" in line
    assert node.gaps == ()  # two hosts a side, one of them faulty: never systematic

    (sync,) = [s for s in node.sync if s.host == "alpha-01"]
    assert (sync.gpus, sync.slowest_gpu) == (4, 2)
    assert sync.slowest_tflops == pytest.approx(660.4, abs=0.5)
    assert sync.median_tflops == pytest.approx(668.2, abs=0.5)

    counts = report.counts()
    assert (counts["hostlink"], counts["peer"]) == (1, 1)
    assert counts["straggler"] == len(report.stragglers) + 1
    kinds = [f.kind for f in report.dispute]
    assert kinds.count("hostlink") == 1 and kinds.count("peer") == 1
    (cost,) = [c for c in report.cost if c.provider == "alpha"]
    assert cost.sync_tflops is not None and cost.sync_tflops < cost.median_tflops
    assert cost.sync_cost_per_pflop_hour is not None and cost.cost_per_pflop_hour is not None
    assert cost.sync_cost_per_pflop_hour > cost.cost_per_pflop_hour


def test_an_anonymized_report_names_the_nodes_by_their_aliases(engine: Engine) -> None:
    store_fleet(engine)
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    names = {(n.provider, n.host) for n in report.node.found}
    assert all(p.startswith("Provider ") for p, _ in names)
    assert not any(h.startswith(("alpha", "beta", "gamma")) for _, h in names)
    (link,) = report.node.host_links
    assert link.host in {h.host for h in report.found}
    text = render(report, "md") + render(report, "json")
    assert "beta-01" not in text and "gamma-01" not in text


@pytest.fixture
def node_url(store_url: str, engine: Engine) -> str:
    store_fleet(engine)
    return store_url


def _report(url: str, path: Path, *args: str) -> str:
    done = CliRunner().invoke(main, ["report", "-o", str(path), *args, "--db", url],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return path.read_text()


def test_fleet_report_shows_the_node_in_markdown_and_json(node_url: str,
                                                           tmp_path: Path) -> None:
    text = _report(node_url, tmp_path / "r.md", "--format", "md")
    assert "### Memory and links" in text
    row = next(line for line in text.splitlines() if line.startswith("| beta \\| beta-01 |")
               or line.startswith("| beta | beta-01 |"))
    assert "Gen4 x8 (max Gen5 x16)" in row and "13.8 / 13.8 GB/s, 88% of 15.75" in row
    assert "- **hostlink**, beta: beta-01 GPUs 0, 1, 2, 3: host link trained down to " \
           "Gen4 x8 (supports Gen5 x16)." in text
    assert "- **peer**, beta: beta-02: no peer access between GPUs on 6 of 6 pairs of an " \
           "NVLink node." in text
    assert "### The synchronous figure" in text
    assert "4 x 660." in text
    data = json.loads(_report(node_url, tmp_path / "r.json", "--format", "json"))
    assert (data["findings"]["hostlink"], data["findings"]["peer"]) == (1, 1)
    found = {n["host"]: n for n in data["node"]["found"]}
    assert found["beta-01"]["link"] == "Gen4 x8 (max Gen5 x16)"
    assert found["alpha-02"]["memory"]["datasheet_gbs"] == 3350.0
    assert data["node"]["host_links"][0]["evidence"].startswith(
        "under load the link ran at Gen4 x8, below the Gen5 x16 the card and system support")
    assert {row["sync_tflops"] is not None for row in data["cost"]} == {True}
    done = CliRunner().invoke(main, ["report", "-o", str(tmp_path / "x.md"),
                                     "--fail-on", "hostlink", "--db", node_url])
    assert done.exit_code == 1, done.output


def _section(dom: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">(.*?)</section>', dom, re.S)
    assert found is not None
    return found.group(1)


def _cells(part: str) -> list[list[str]]:
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", part, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if cells:
            # A cell's second line (its share of the datasheet) read after a "; ".
            rows.append([html.unescape(" ".join(re.sub(r"<[^>]+>", "", re.sub(
                r'<div class="evidence">', "; ", c)).split())) for c in cells])
    return rows


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_node_renders_in_chromium(node_url: str, tmp_path: Path) -> None:
    out = tmp_path / "node.html"
    _report(node_url, out)
    page = open_page(out.as_uri(), tmp_path)
    assert page.console == []
    table = _section(page.dom, "found").split('id="node-figures"', 1)[1]
    rows = {row[1]: row for row in _cells(table)}
    # Provider, host, memory copy, host link, PCIe under load, pairs one way and both
    # ways, peer access (path), all-reduce.
    assert rows["beta-01"][3:5] == ["13.8 / 13.8 GB/s; 88% of 15.75",
                                    "below max Gen4 x8 (max Gen5 x16)"]
    assert rows["beta-02"][5:8] == ["20.0 GB/s; 4% of 450", "38.0 GB/s; 4% of 900",
                                    "no (SYS)"]
    assert rows["alpha-02"][7] == "yes (NVLINK)"
    assert rows["alpha-02"][8].endswith("4 GPUs, 1 GiB")
    findings = _cells(_section(page.dom, "node"))
    kinds = [row[0] for row in findings]
    assert kinds.count("hostlink") == 1 and kinds.count("peer") == 1
    assert kinds.count("straggler") == 1
    (sync,) = [row for row in findings if row[:2] == ["alpha", "alpha-01"]]
    assert sync[4].startswith("4 x 660.") and sync[4].endswith("(GPU 2)")
    assert sync[5].startswith("4 x 668.")


def test_the_node_kinds_are_fail_on_kinds_of_the_report_and_the_sweep() -> None:
    assert check_fail_on("hostlink,peer,straggler") == ("hostlink", "peer", "straggler")
    with pytest.raises(InputError, match="found by the night's report"):
        check_fail_on("hostlink", report=False)


def test_what_a_host_said_of_its_links_is_escaped(engine: Engine) -> None:
    # The topology is the host's own text: a hostile one is shown, never run.
    evil = '<img src=x onerror="alert(1)">'[:32]
    data = _host("delta-01", peer_access=False, topology=evil, peer_gbs=20.0,
                 both_ways_gbs=38.0, busbw_gbs=LOW_BUSBW)
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("delta", "delta-01", SXM))
    report = build_report(engine, ReportOptions(), "test")
    page = render(report, "html")
    # Named in the finding and in the fleet as found, escaped both times.
    assert page.count("NVML path &lt;img src=x onerror=") == 2
    assert evil not in page
    text = render(report, "md")
    assert "<img" not in text
