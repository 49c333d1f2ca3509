"""A real job-suite document (a lent 2x H100 SXM5, tests/fixtures/jobs/h100x2-lent) read by
the controller as a user's would be: validated, stored on SQLite and PostgreSQL, read back
through `fleet.Store().jobs()` with the agent's own figures, and reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fleet
from fleet.errors import AgentError
from fleet.model.document import parse_document
from fleet.report.render import write_report
from tests.conftest import FIXTURES

REAL = FIXTURES / "jobs" / "h100x2-lent" / "document.json"


def test_the_real_document_validates_as_the_agent_wrote_it() -> None:
    data = json.loads(REAL.read_text())
    document = parse_document(data, str(REAL))
    # Per GPU: flash training (soaked, judged), cuDNN training and decode after it.
    assert [(j.gpu_index, j.workload, j.attention, j.follows) for j in document.jobs] == [
        (0, "train", "flash", None), (0, "train", "cudnn", "train/flash"),
        (0, "decode", "flash", "train/flash"), (1, "train", "flash", None),
        (1, "train", "cudnn", "train/flash"), (1, "decode", "flash", "train/flash")]
    assert all(j.correctness.passed for j in document.jobs)


def test_a_real_result_that_is_edited_is_refused() -> None:
    data = json.loads(REAL.read_text())
    data["jobs"][0]["tokens_per_s"] *= 1.1  # a figure its own steps and seconds deny
    with pytest.raises(AgentError, match=r"jobs\.0.*tokens_per_s"):
        parse_document(data, str(REAL))


def test_the_real_document_reads_back_with_its_figures(store_url: str,
                                                       tmp_path: Path) -> None:
    agent = {(r["gpu_index"], r["workload"], r["attention"]): r
             for r in json.loads(REAL.read_text())["jobs"]}
    with fleet.Store(store_url) as store:
        store.ingest([REAL], provider="lentcloud")
        jobs = store.jobs()
        assert len(jobs) == 6
        for row in jobs.itertuples():
            sent = agent[(row.gpu_index, row.workload, row.attention)]
            assert row.tokens_per_s == pytest.approx(sent["tokens_per_s"], rel=1e-12)
            assert row.mfu == pytest.approx(sent["mfu"])
            assert row.variant == "H100-SXM5-80GB" and row.provider == "lentcloud"
        # The interval a repeat falls in holds the node's other two runs of the same
        # GPUs (bench/records/2026-11-26-h100x2-jobs, runs 1 and 3). The job's spread was
        # measured on these very runs: this checks the interval's arithmetic and that the
        # frame carries it, not its coverage (no other repeated job run exists yet).
        others = {(0, "train"): (74_177.0, 74_568.1), (1, "train"): (75_454.0, 75_644.9),
                  (0, "decode"): (31_674.5, 31_718.6), (1, "decode"): (31_684.5, 31_715.2)}
        for row in jobs[jobs.attention == "flash"].itertuples():
            for figure in others[(row.gpu_index, row.workload)]:
                assert row.repeat_low < figure < row.repeat_high
        # Compared within a configuration: flash and cuDNN, train and decode apart.
        assert jobs.config.nunique() == 3
        report = tmp_path / "report.md"
        write_report(store.report(), "md", str(report))
    text = report.read_text()
    assert "What a GPU-hour buys for a real job" in text
    assert "74,467" in text and "31,689" in text  # GPU 0's training, decode (both GPUs)
