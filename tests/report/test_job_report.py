"""The job suite in the report, end to end: documents with job figures (built by
tests/store/job_factory.py as /tmp/job_contract.md shapes them) stored through the real
ingest path, on SQLite and PostgreSQL, then the report as data, Markdown, JSON and HTML
(read in Chromium).

The fleet: four 4 x H100 SXM5 nodes whose soaked matmul is 699.5-700.5 TFLOP/s a GPU;
alpha's two at 2.49 USD per GPU-hour, beta's two at 2.10 USD. Each GPU trains four Llama 3
8B layers at about 79,000 tokens/s and decodes at about 48,000, every GPU of a node at
once, with these faults:
- beta's second node (a hostile name) trains on GPU 3 at 86% of the others, at 84 °C
  against 70 and an SM clock 12% under theirs: its matmul is whole, so the job falls 14
  points further than the matmul, named as a job shortfall whose likely cause is
  cooling;
- alpha-02's GPU 0 decoded beside another process, only its decode flagged so (as an
  older agent or another tool might store it): its results of that run, training too,
  are left out, and put to the renter as its node's contention finding.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from fleet.analysis.contention import JOINED
from fleet.analysis.job.figures import CONTENDED_REASON
from fleet.cli import main
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.report.browser import open_page, screenshot
from tests.store import factory, job_factory

WHEN = dt.datetime(2026, 11, 27, 3, 0, tzinfo=dt.UTC)
EVIL_HOST = '<img src=x onerror="document.title=\'pwned-job\'">'
MATMUL = [700.0, 700.5, 699.5, 700.2]
TRAIN = [79_000.0, 79_300.0, 78_800.0, 79_150.0]
DECODE = [48_000.0, 48_200.0, 47_900.0, 48_100.0]
HBM_GBS = 3350.0
SCALE = 1.003  # alpha-02's job figures against alpha-01's
# Another user's process, in the agent's words (agent/timing/contention.py).
OTHER_USER = "other processes on the GPU: pid 977 (user nobody, not the agent's user)"


def _listing(price: float) -> Listing:
    return Listing({"variant": "H100 SXM5 80GB", "gpu_count": 4}, price, "USD", ())


def _node(host: str, train: list[float], temperatures: tuple[float, ...] = (70.0,) * 4,
          contended_decode: int | None = None, scale: float = 1.0,
          contended_train: int | None = None,
          clocks: tuple[float, ...] = (1980.0,) * 4) -> dict[str, Any]:
    """A node's document; `scale` sets its job figures apart from other nodes' a little,
    as real nodes are (identical hosts would leave the gap tests nothing to weigh)."""
    data = factory.document(host=host, gpus=4, collected_at=WHEN, harness="1.3.0",
                            gpu_tflops=MATMUL)
    jobs = []
    for gpu in data["gpus"]:
        i = gpu["index"]
        beside = [OTHER_USER] if i == contended_train else []
        jobs.append(job_factory.job(gpu, "train", train[i] * scale, gpus_in_run=4,
                                    temperature_c=temperatures[i], sm_clock_mhz=clocks[i],
                                    contention=beside))
        busy = ["pid 4242 (python3) of user other, 3.1 GiB"] if i == contended_decode else []
        jobs.append(job_factory.job(gpu, "decode", DECODE[i] * scale, gpus_in_run=4,
                                    follows="train/flash", temperature_c=temperatures[i],
                                    hbm_gbs=HBM_GBS, contention=busy))
    data["jobs"] = jobs
    AgentDocument.model_validate(data)
    return data


def _fleet(alpha_01: dict[str, Any] | None = None
           ) -> list[tuple[str, str, dict[str, Any], float]]:
    slow = [*TRAIN[:3], 0.86 * TRAIN[3]]
    return [
        ("alpha", "alpha-01", alpha_01 or _node("alpha-01", TRAIN), 2.49),
        ("alpha", "alpha-02", _node("alpha-02", TRAIN, contended_decode=0, scale=SCALE),
         2.49),
        ("beta", "beta-01", _node("beta-01", TRAIN, scale=0.997), 2.10),
        ("beta", EVIL_HOST, _node("beta-02", slow, temperatures=(70.0, 70.0, 70.0, 84.0),
                                  clocks=(1980.0, 1980.0, 1980.0, 1740.0)), 2.10),
    ]


def store_fleet(engine: Engine, alpha_01: dict[str, Any] | None = None) -> None:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for provider, host, data, price in _fleet(alpha_01):
            ingest.store(AgentDocument.model_validate(data),
                         Origin(provider, host, _listing(price)))


def _cost(price: float, tokens: list[float]) -> str:
    """What a million tokens cost at the median, as the report prints it."""
    return f"{price / (statistics.median(tokens) * 3600) * 1e6:.4g}"


# alpha-02 GPU 0's training and decode were left out.
ALPHA_TRAIN = TRAIN + [t * SCALE for t in TRAIN[1:]]
ALPHA_TRAIN_COST = _cost(2.49, ALPHA_TRAIN)
ALPHA_DECODE_COST = _cost(2.49, DECODE + [d * SCALE for d in DECODE[1:]])


def test_the_job_section_and_its_finding_from_a_stored_fleet(engine: Engine) -> None:
    store_fleet(engine)
    report = build_report(engine, ReportOptions(), "test")
    job = report.job
    train = {row.provider: row for row in job.rows if row.config.train}
    decode = {row.provider: row for row in job.rows if not row.config.train}
    alpha = train["alpha"]
    assert (alpha.gpus, alpha.hosts) == (7, 2)
    assert alpha.tokens_per_s == pytest.approx(statistics.median(ALPHA_TRAIN), rel=1e-9)
    # The matmul of the same GPUs in the same run, and the share of it the job keeps.
    assert alpha.matmul_tflops == pytest.approx(700.0, abs=1.0) and alpha.matmul_gpus == 7
    assert (alpha.matmul_config or "").startswith("8192³ bf16, sustained, soaked, cold L2")
    assert alpha.kept == pytest.approx(alpha.tflops / 700.0, rel=0.01)
    assert alpha.mfu == pytest.approx(alpha.tflops / 989.0, rel=1e-9)
    assert alpha.peak_tflops == 989.0 and alpha.tflops_causal < alpha.tflops
    assert alpha.price_per_gpu_hour == 2.49 and alpha.currency == "USD"
    assert f"{alpha.cost_per_million_tokens:.4g}" == ALPHA_TRAIN_COST
    # beta's cheaper hours rank it first on training, its slow GPU notwithstanding.
    assert (train["beta"].rank, alpha.rank) == (1, 2)
    assert train["beta"].sync_tokens_per_s == pytest.approx(
        (0.86 * TRAIN[3] + 0.997 * min(TRAIN)) / 2)
    assert decode["alpha"].gpus == 7 and decode["alpha"].hbm_share is not None
    assert f"{decode['alpha'].cost_per_million_tokens or 0.0:.4g}" == ALPHA_DECODE_COST

    (short,) = job.shortfalls
    assert (short.provider, short.host, short.gpu_index, short.cause) == (
        "beta", EVIL_HOST, 3, "cooling")
    assert short.job_share == pytest.approx(0.86, abs=0.01)
    assert short.matmul_share == pytest.approx(1.0, abs=0.005)
    # Named once: its node's straggler on the job is the same GPU for the same cause.
    assert job.stragglers == ()
    assert [(e.host, e.gpu_index, e.workload, e.reason) for e in job.excluded] == [
        ("alpha-02", 0, "decode", CONTENDED_REASON), ("alpha-02", 0, "train", CONTENDED_REASON)]
    assert report.counts()["job_shortfall"] == 1
    # The decode beside another process, and the training left out with it, are the
    # renter's to clear, on its node.
    (busy,) = report.renter
    assert (busy.kind, busy.provider, busy.title) == (
        "contention", "alpha", "alpha-02: GPU 0 training step, GPU 0 decode measured beside "
        "other work, left out")
    assert busy.details == ("GPU 0 training step: " + JOINED,
                            "pid 4242 (python3) of user other, 3.1 GiB")
    assert busy.cause == "another process or a busy GPU"  # the words name no owner
    assert report.counts()["contention"] == 1
    (finding,) = [f for f in report.dispute if f.kind == "job_shortfall"]
    assert finding.provider == "beta" and finding.cause is not None
    assert finding.cause.startswith("cooling")
    assert "84 °C against the median 70 °C" in finding.evidence
    sync = {(s.host, s.config.workload): s for s in job.sync}
    assert sync[(EVIL_HOST, "train")].slowest_gpu == 3
    assert sync[(EVIL_HOST, "train")].loss == pytest.approx(1 - 0.86 * TRAIN[3] / statistics.median(
        [*TRAIN[:3], 0.86 * TRAIN[3]]), rel=1e-6)


@pytest.mark.parametrize("beside", [True, False])
def test_a_training_step_beside_another_process_is_no_job_shortfall(
        engine: Engine, beside: bool) -> None:
    """alpha-01's GPU 2 trains at 80% of its node, its matmul whole: a job shortfall of
    the provider's when it ran alone, the renter's contention when another user's
    process ran beside it, and then counted in no median, shortfall or comparison."""
    train = [*TRAIN[:2], 0.8 * TRAIN[2], TRAIN[3]]
    store_fleet(engine, _node("alpha-01", train, contended_train=2 if beside else None))
    report = build_report(engine, ReportOptions(), "test")
    job = report.job
    short = {(s.host, s.gpu_index) for s in job.shortfalls}
    counted = {(g.host, g.gpu_index) for g in job.gpus if g.config.train}
    train_gpus = {c.faster_gpus + c.slower_gpus for c in job.comparisons if c.config.train}
    contention = [f for f in report.renter if f.kind == "contention"]
    if not beside:
        assert short == {("alpha-01", 2), (EVIL_HOST, 3)}
        assert ("alpha-01", 2) in counted and train_gpus == {15}
        assert [f.title for f in contention] == [
            "alpha-02: GPU 0 training step, GPU 0 decode measured beside other work, left out"]
        return
    assert short == {(EVIL_HOST, 3)} and report.counts()["job_shortfall"] == 1
    # The provider comparisons (gaps) weigh the fourteen GPUs that trained alone.
    assert ("alpha-01", 2) not in counted and train_gpus == {14}
    assert all((s.host, s.gpu_index) != ("alpha-01", 2) for s in job.stragglers)
    by_host = {f.title.split(":")[0]: f for f in contention}
    # Its decode, not flagged itself, goes with it: the GPU-run is the renter's whole.
    assert by_host["alpha-01"].title == ("alpha-01: GPU 2 training step, GPU 2 decode "
                                         "measured beside other work, left out")
    assert by_host["alpha-01"].cause == "a process of another user"
    assert by_host["alpha-01"].details == (OTHER_USER, "GPU 2 decode: " + JOINED)
    assert report.counts()["contention"] == 2


def test_a_gpu_partly_beside_another_process_is_the_renters_for_the_whole_run(
        engine: Engine) -> None:
    """As above, alpha-01's GPU 2 trains at 80% of its node, but only its decode is
    flagged as beside another process (as an older agent, a hand edit or another tool
    might store it; agent/job/suite.py flags a GPU's results of a run together). The GPU-run is
    the renter's whole: its training step is no job shortfall, straggler or gap of the
    provider's, and joins the decode in its node's contention finding."""
    train = [*TRAIN[:2], 0.8 * TRAIN[2], TRAIN[3]]
    store_fleet(engine, _node("alpha-01", train, contended_decode=2))
    report = build_report(engine, ReportOptions(), "test")
    job = report.job
    assert {(s.host, s.gpu_index) for s in job.shortfalls} == {(EVIL_HOST, 3)}
    assert all((s.host, s.gpu_index) != ("alpha-01", 2) for s in job.stragglers)
    assert all((g.host, g.gpu_index) != ("alpha-01", 2) for g in job.gpus)
    # Sixteen GPUs, less alpha-01's GPU 2 and alpha-02's GPU 0 (the fleet's own partly
    # contended one): fourteen trained in the provider comparisons.
    assert {c.faster_gpus + c.slower_gpus for c in job.comparisons if c.config.train} == {14}
    named = {f.title.split(":")[0] for f in report.dispute}
    assert "alpha-01" not in named
    by_host = {f.title.split(":")[0]: f for f in report.renter if f.kind == "contention"}
    assert by_host["alpha-01"].title == ("alpha-01: GPU 2 training step, GPU 2 decode "
                                         "measured beside other work, left out")
    assert by_host["alpha-01"].details == (
        "GPU 2 training step: " + JOINED, "pid 4242 (python3) of user other, 3.1 GiB")
    assert [(e.gpu_index, e.workload, e.reason) for e in job.excluded
            if e.host == "alpha-01"] == [(2, "decode", CONTENDED_REASON),
                                         (2, "train", CONTENDED_REASON)]


@pytest.fixture
def job_url(store_url: str, engine: Engine) -> str:
    store_fleet(engine)
    return store_url


def _report(url: str, path: Path, *args: str) -> str:
    done = CliRunner().invoke(main, ["report", "-o", str(path), *args, "--db", url],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return path.read_text()


def test_the_job_section_in_markdown_and_json(job_url: str, tmp_path: Path) -> None:
    text = _report(job_url, tmp_path / "r.md", "--format", "md")
    assert "## What a GPU-hour buys for a real job" in text
    assert "### Training step, llama3-8b 4x4096 h32/8 ffn14336 b2 s4096, bf16, flash " \
           "attention (headline), eager, concurrent on 4 GPUs, soaked" in text
    row = next(line for line in text.splitlines() if line.startswith("| 2 | alpha |")
               and ALPHA_TRAIN_COST in line)
    assert f"{ALPHA_TRAIN_COST} USD" in row and "2.49 USD" in row and "of 989" in row
    assert f"{ALPHA_DECODE_COST} USD" in text
    assert "What this is not: One model shape: 4 layers of llama3-8b's published " \
           "configuration, random weights" in text
    assert "- **job\\_shortfall**, beta: &lt;img src=x onerror=" in text
    assert "(likely cause: cooling" in text
    assert "<img" not in text
    data = json.loads(_report(job_url, tmp_path / "r.json", "--format", "json"))
    assert data["findings"]["job_shortfall"] == 1
    rows = [r for r in data["job"]["rows"] if r["provider"] == "alpha"]
    assert {"{:.4g}".format(r["cost_per_million_tokens"]) for r in rows} == {
        ALPHA_TRAIN_COST, ALPHA_DECODE_COST}
    assert data["job"]["shortfalls"][0]["cause"] == "cooling"
    done = CliRunner().invoke(main, ["report", "-o", str(tmp_path / "x.md"),
                                     "--fail-on", "job_shortfall", "--db", job_url])
    assert done.exit_code == 1, done.output


def test_an_anonymized_report_hides_the_job_hosts(job_url: str, tmp_path: Path) -> None:
    text = _report(job_url, tmp_path / "r.md", "--format", "md", "--anonymize")
    assert "alpha-02" not in text and "onerror" not in text and "beta-01" not in text
    assert "- **job\\_shortfall**, Provider " in text


def _section(dom: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">(.*?)</section>', dom, re.S)
    assert found is not None
    return found.group(1)


def _cells(part: str) -> list[list[str]]:
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", part, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if cells:
            text = [" ".join(re.sub(r"<[^>]+>", " ", re.sub(
                r'<div class="evidence">', "; ", c)).split()) for c in cells]
            rows.append([html.unescape(t.replace(" ;", ";")) for t in text])
    return rows


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_job_section_renders_in_chromium(job_url: str, tmp_path: Path) -> None:
    out = tmp_path / "job.html"
    _report(job_url, out)
    page = open_page(out.as_uri(), tmp_path)
    assert page.console == []
    assert "pwned" not in re.search(r"<title>(.*?)</title>", page.dom, re.S).group(1)  # type: ignore[union-attr]
    section = _section(page.dom, "jobs")
    assert "<img" not in section and "&lt;img src=x onerror=" in section
    # One table a workload: each headline configuration a row heading its providers' rows,
    # the backends measured beside it folded under it.
    # (the providers' table, then each GPU's, folded).
    assert re.findall(r'<tr class="config"><th colspan="\d+">(Training step|Decode), llama3-8b',
                      section) == ["Training step", "Training step", "Decode", "Decode"]
    assert section.count('<details class="backends">') == 0  # the factory's: one backend
    assert section.count("What this is not:") == 1
    rows = _cells(section)
    # The training table's row (decode has one column more: GB/s).
    (alpha,) = [r for r in rows if r[:2] == ["2", "alpha"] and len(r) == 10]
    # Rank, provider, variant, GPUs (hosts), tokens/s (range), TFLOP/s (causal, MFU of
    # the peak), kept (of the matmul of the same GPUs and runs), peak memory, per million
    # tokens (at the price), synchronous.
    assert alpha[3] == "7 (2)"
    flop, causal = job_factory.flop_per_token("train", job_factory.TRAIN)
    tokens = statistics.median(ALPHA_TRAIN)
    assert alpha[5].startswith(f"{tokens * flop / 1e12:.1f}; causal "
                               f"{tokens * causal / 1e12:.1f}; MFU ")
    assert alpha[5].endswith(" of 989 dense bf16")
    assert re.fullmatch(r"6\d\.\d%; of 700\.\d, 7 GPUs", alpha[6]), alpha[6]
    assert alpha[7] == "13.2 GB"
    assert alpha[8] == f"{ALPHA_TRAIN_COST} USD; at 2.49 per GPU-hour"
    finding = [r for r in rows if r[0] == "job_shortfall"]
    assert len(finding) == 1 and finding[0][1] == "beta"
    assert "likely cause: cooling" in finding[0][2]
    assert "What this is not: One model shape" in section
    summary = _section(page.dom, "summary")
    assert 'class="tag job_shortfall"' in summary
    screenshot(out.as_uri() + "#jobs", "report-jobs.png", tmp_path)
