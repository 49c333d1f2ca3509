"""The lent nodes' own documents (issue #32: a 4x H200 SXM node and a one-GPU H100 SXM5,
2026-11-26, bench/records/2026-11-26-*-node-*), stored through the real ingest path and
reported: a healthy node as it really measured must show its figures beside the
datasheet and raise no finding."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Engine

from fleet.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.node import read_node_results
from tests.conftest import FIXTURES

NODES = FIXTURES / "nodes"


def _store(engine: Engine, case: str, host: str) -> None:
    path = NODES / case / "document.json"
    document = parse_document(json.loads(Path(path).read_text()), str(path))
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(document, Origin("lent", host))


def test_the_lent_nodes_are_stored_and_reported_without_a_finding(engine: Engine) -> None:
    _store(engine, "h200-sxm-x4-lent", "h200x4")
    _store(engine, "h100-sxm5-lent", "h100")
    figures = read_node_results(engine)
    # Four GPUs: 4 memory + 16 host copies + 6 pairs x 2 + 4 all-reduce sizes; one GPU: 5.
    assert figures.groupby("host", observed=True).size().to_dict() == {"h100": 5,
                                                                       "h200x4": 36}
    report = build_report(engine, ReportOptions(), "test")
    counts = report.counts()
    assert {k: counts[k] for k in ("hostlink", "peer", "straggler", "gap", "health")} == {
        "hostlink": 0, "peer": 0, "straggler": 0, "gap": 0, "health": 0}
    text = render(report, "md")
    # As the lent node measured (bench/RESULTS.md, "The whole node").
    assert "4,220 GB/s, 88% of 4,800" in text
    assert "3,006 GB/s, 90% of 3,350" in text
    assert "yes (NVLINK)" in text
    assert "353 GB/s, 78% of 450 (4 GPUs, 1 GiB)" in text
    assert "4 x 663.2 = 2652.6 (GPU 0)" in text
