"""bench/expected_catalog.py: the catalog of fleet/expected.py is what the records give,
and a record folder of agent documents in any of the agent's forms is read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from fleet import expected
from tests.bench import scripts
from tests.conftest import FIXTURES

catalog = scripts.load("expected_catalog")


def test_fleet_expected_holds_what_the_records_give() -> None:
    _, _, observations = catalog.load(catalog.DEFAULT_RECORDS)
    figures, matmul = expected.build(observations)
    assert catalog.differences(figures, matmul) == []
    # Every entry names records that exist.
    for entry in (*expected.FIGURES, *expected.MATMUL):
        for record in entry.records:
            assert (catalog.RECORDS / record).is_dir(), record


def test_a_folder_of_documents_in_every_form(tmp_path: Path) -> None:
    document = json.loads((FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json")
                          .read_text())
    folder = tmp_path / "2026-11-26-h100x2-node-faults"
    folder.mkdir()

    def at(minute: int) -> dict[str, object]:
        return {**document, "collected_at": f"2026-11-26T12:{minute:02d}:00+00:00"}

    def events(minute: int) -> str:
        return "\n".join([json.dumps({"event": "progress", "stage": "node", "message": "."}),
                          json.dumps({"event": "document", "document": at(minute)})]) + "\n"

    (folder / "plain.json").write_text(json.dumps(at(0)))
    (folder / "run-1.jsonl").write_text(events(1))
    with gzip.open(folder / "run-2.jsonl.gz", "wt") as handle:
        handle.write(events(2))
    (folder / "suite.json").write_text(json.dumps({"runs": [{"document": at(3)},
                                                            {"document": at(4)}],
                                                   "summary": []}))
    # The same document twice (a run's events and the store) counts once.
    (folder / "run-3.jsonl").write_text(events(4))
    (folder / "notes.txt").write_text("not a document")
    runs = catalog.runs_in(folder)
    assert [run.label for run in runs] == [
        "plain.json", "run-1.jsonl line 2", "run-2.jsonl.gz line 2", "run-3.jsonl line 2",
        "suite.json run 1"]
    assert {run.record for run in runs} == {folder.name}
    _, table, observations = catalog.load([folder])
    # 36 figures a run, five runs, each a node of the record's.
    assert len(table) == 36 * 5 and set(table["host"]) == {folder.name}
    figures, matmul = expected.build(observations)
    allreduce = [e for e in figures if e.key.kind == "allreduce" and e.key.size_bytes
                 == expected.GiB]
    assert [(e.key.gpus_in_run, e.key.nvlink_fabric, e.key.nvlink_links, e.gbs, e.n)
            for e in allreduce] == [(4, "switch", 18, 352.6, 1)]
    assert [(m.key.variant, m.n, m.figures) for m in matmul] == [
        ("H200-SXM-141GB", 1, 20)]
