"""One node, judged on its own (issue 38), on the documents a lent 2x H100 SXM5 node gave
with the faults a renter meets made for real (bench/records/2026-11-26-h100x2-node-faults,
tests/fixtures/nodes/h100x2-lent-faults/): healthy, NCCL's peer-to-peer off, peer-to-peer
and shared memory off, another user's process on GPU 1, and one of the agent's own user
on GPU 0. Each document is stored through the real ingest path and reported alone, as a
buyer who probed one node would see it. The job suite's results on a lent 2x H100
(tests/fixtures/jobs/h100x2-lent/) are judged the same way: a GPU shared with another
process is the renter's, whichever figure showed it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import Engine

from fleet.analysis.dataset import CONTENDED_REASON
from fleet.analysis.job.figures import CONTENDED_REASON as JOB_CONTENDED_REASON
from fleet.analysis.matmul.stragglers import StragglerOptions
from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.node import read_node_results
from tests.conftest import FIXTURES

FAULTS = FIXTURES / "nodes" / "h100x2-lent-faults"
JOBS = FIXTURES / "jobs" / "h100x2-lent" / "document.json"
# What the agent saw beside GPU 1 of the same kind of node (foreign.json), in its words
# (agent/timing/contention.py), as agent/job/suite.py puts it on each of a GPU's job results.
BESIDE = ["other processes on the GPU: pid 1852 (user nobody, not the agent's user)",
          "GPU utilization 100% before the measurement started"]


def _document(case: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FAULTS / f"{case}.json").read_text())
    return data


def _report(engine: Engine, *cases: tuple[str, dict[str, Any]],
            options: ReportOptions | None = None) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for host, data in cases:
            ingest.store(parse_document(data, host), Origin("lent", host))
    return build_report(engine, options or ReportOptions(), "test")


def _slowed(result: dict[str, Any], share: float) -> None:
    """A job result as if its GPU ran at `share` of the speed it measured: the same steps
    in more seconds, and every figure that follows from them."""
    result["seconds"] /= share
    for name in ("tokens_per_s", "tflops", "tflops_causal", "mfu", "gbs", "hbm_share"):
        if result[name] is not None:
            result[name] *= share
    result["within_run_ci95"] = [v * share for v in result["within_run_ci95"]]
    result["step_ms"] = {k: v / share if k.endswith("_ms") else v
                         for k, v in result["step_ms"].items()}


def _jobs(gpu: int | None = None, *, beside: bool = True, share: float = 1.0
          ) -> dict[str, Any]:
    """The real job document; GPU `gpu`'s job results (training under both attention
    backends, and decode) at `share` of their speed and, where `beside`, measured beside
    another user's process as agent/job/suite.py flags them (constructed from the real
    document)."""
    data: dict[str, Any] = json.loads(JOBS.read_text())
    for result in data["jobs"]:
        if result["gpu_index"] != gpu:
            continue
        _slowed(result, share)
        if beside:
            result["flags"]["contended"] = True
            result["contention"] = list(BESIDE)
            result["processes"] = [{"pid": 1852, "uid": 65534, "user": "nobody",
                                    "own": False}]
    return data


# Two GPUs make a node for the job's stragglers here: the rule would then call a GPU at
# half its neighbour's speed, so that leaving it out is seen.
PAIR = ReportOptions(stragglers=StragglerOptions(min_gpus=2))


def test_the_healthy_node_alone_raises_nothing(engine: Engine) -> None:
    report = _report(engine, ("h100x2", _document("healthy-1")))
    assert report.dispute == () and report.renter == ()
    figures = read_node_results(engine)
    assert not figures["contended"].any()
    allreduce = figures[figures["kind"] == "allreduce"]
    assert set(allreduce["transport"]) == {"P2P"}
    pairs = figures[figures["kind"] == "peer_copy"]
    assert set(pairs["nvlink_links"]) == {18} and set(pairs["nvlink_fabric"]) == {"switch"}
    host = figures[figures["memory"] == "pinned"]
    # A one-node VM: sysfs says -1, kept as no node.
    assert host["numa_node"].isna().all()


def test_nccl_told_to_skip_peer_to_peer_is_the_renters_setting(engine: Engine) -> None:
    report = _report(engine, ("h100x2", _document("p2p-off")))
    assert report.dispute == ()
    [found] = report.renter
    assert found.kind == "shortfall"
    assert found.title.startswith("h100x2: all-reduce 28.5 GB/s, 9% of the 332 a healthy "
                                  "2-GPU H100 SXM5 node gives (records: ")
    assert found.cause == "NCCL went through host memory: NCCL_P2P_DISABLE=1 was set"
    assert report.counts()["shortfall"] == 1


def test_nccl_through_the_network_names_both_settings(engine: Engine) -> None:
    report = _report(engine, ("h100x2", _document("p2p-shm-off")))
    [found] = report.renter
    assert found.cause == ("NCCL went through the network stack: NCCL_P2P_DISABLE=1 and "
                           "NCCL_SHM_DISABLE=1 were set")
    assert "1% of the 332" in found.title


def _no_setting(data: dict[str, Any], peer_access: bool) -> dict[str, Any]:
    """The peer-to-peer-off node as a platform without the path would show it: the same
    figures, no NCCL setting asking for it (constructed from the real document)."""
    data = copy.deepcopy(data)
    for result in data["node"]:
        if result.get("settings"):
            result["settings"].pop("NCCL_P2P_DISABLE")
            result["transport"]["set_by_environment"] = [
                s for s in result["transport"]["set_by_environment"]
                if not s.startswith("NCCL_P2P_DISABLE")]
        if result["kind"] == "peer_copy":
            result["peer_access"] = peer_access
    return data


def test_a_platform_that_gives_no_peer_path_is_disputed(engine: Engine) -> None:
    report = _report(engine, ("h100x2", _no_setting(_document("p2p-off"), True)),
                     ("h100x2-b", _no_setting(_document("p2p-off"), False)))
    assert report.renter == ()
    by_host = {f.title.split(":")[0]: f for f in report.dispute}
    # Peer access works, yet NCCL took host memory with nothing asking it to.
    assert by_host["h100x2"].kind == "shortfall"
    assert by_host["h100x2"].cause == ("NCCL went through host memory, not peer-to-peer, "
                                       "with no NCCL setting asking for it")
    # No peer access on an SXM board: the peer finding names it, and the all-reduce that
    # follows from it is not called again.
    assert by_host["h100x2-b"].kind == "peer"
    assert "no peer access" in by_host["h100x2-b"].title
    assert [f.kind for f in report.dispute].count("shortfall") == 1


@pytest.mark.parametrize(("case", "busy", "cause"), [
    ("foreign", 1, "a process of another user"),
    ("own", 0, "a process of the renter's own user"),
])
def test_a_busy_gpu_is_the_renters_contention_never_the_providers(
        engine: Engine, case: str, busy: int, cause: str) -> None:
    report = _report(engine, ("h100x2", _document(case)))
    # Nothing to dispute: no straggler, no slow pair, no all-reduce shortfall.
    assert report.dispute == ()
    [found] = report.renter
    assert found.kind == "contention" and found.cause == cause
    assert f"GPU {busy}" in found.title and "the all-reduce" in found.title
    assert found.evidence.startswith("What to do: measure again with the GPU free")
    assert any(d.startswith("other processes on the GPU: pid ") for d in found.details)
    assert any(f"GPU {busy} memory copy: repeats spread" in d for d in found.details)
    assert report.counts()["contention"] == 1 and report.counts()["straggler"] == 0
    # The node as found keeps only what ran free: GPU 0's memory copy on `foreign`.
    [node] = report.node.found
    assert node.allreduce is None and node.one_way is None
    if case == "foreign":
        # The matmul of GPU 1 is out of every median, the cost and "what to buy".
        assert [(e.gpu_index, e.reason) for e in report.excluded] == [(1, CONTENDED_REASON)]
        assert "GPU 1 matmul" in found.title
        assert report.gpus_measured == 1
        assert [row.gpus for row in report.cost] == [1]


@pytest.mark.parametrize("node", [False, True])
def test_an_anonymized_report_names_no_process_beside_the_matmul(
        engine: Engine, node: bool) -> None:
    """GPU 1's matmul beside another user's process (foreign.json): an anonymized report
    puts it to the renter without the process, its user or its pid, as it does a job
    result's (above); with the node figures beside the same process too, or alone."""
    data = _document("foreign")
    if not node:
        data["node"] = []
    report = _report(engine, ("h100x2", data), options=ReportOptions(anonymize=True))
    [found] = report.renter
    assert found.kind == "contention" and "GPU 1 matmul" in found.title
    assert "h100x2" not in found.title
    assert not any("pid" in d or "nobody" in d for d in found.details)
    for fmt in ("md", "html", "json"):
        text = render(report, fmt)
        assert "nobody" not in text and "1852" not in text, fmt


def test_whose_process_it_was_is_escaped(engine: Engine) -> None:
    data = _document("foreign")
    for result in data["node"] + data["benchmarks"]:
        result["contention"] = [line.replace("user nobody", "user <img src=x onerror=alert(1)>")
                                for line in result["contention"]]
    report = _report(engine, ("h100x2", data))
    html = render(report, "html")
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    markdown = render(report, "md")
    assert "<img src=x" not in markdown


def test_a_matmul_left_out_for_interrupted_runs_says_so() -> None:
    from fleet.analysis.contention import find_contention
    from fleet.analysis.dataset import Excluded

    interrupted = ("2 interrupted run(s) excluded, at least 1.5x the median run: run 7 "
                   "(3.412 ms), run 40 (3.390 ms)")
    excluded = Excluded("lent", "h100x2", 0, "H100-SXM5-80GB", 1, CONTENDED_REASON)
    [found] = find_contention(pd.DataFrame(), [(excluded, interrupted)])
    assert found.cause == "runs interrupted by something outside the card"
    assert found.title == "h100x2: GPU 0 matmul measured beside other work, left out"
    [other] = find_contention(pd.DataFrame(), [(excluded, None)])
    assert other.cause == "another process or a busy GPU"


def test_job_results_beside_another_process_are_the_renters_contention(
        engine: Engine) -> None:
    report = _report(engine, ("h100x2", _jobs(1, share=0.5)), options=PAIR)
    # Nothing of the job to dispute: GPU 1 at half GPU 0's speed is no straggler of it.
    # (The card's own health finding is the real node's: a row remapped in its life.)
    assert [f.kind for f in report.dispute] == ["health"]
    [found] = report.renter
    assert found.kind == "contention" and found.cause == "a process of another user"
    # One unit per GPU and workload, whichever attention backends it ran.
    assert found.title == ("h100x2: GPU 1 training step, GPU 1 decode measured beside "
                           "other work, left out")
    assert found.details == tuple(BESIDE)
    assert found.evidence.startswith("What to do: measure again with the GPU free")
    assert {kind: n for kind, n in report.counts().items() if n} == {
        "contention": 1, "health": 1}
    job = report.job
    assert {g.gpu_index for g in job.gpus} == {0}
    assert [row.gpus for row in job.rows] == [1, 1, 1]
    assert job.stragglers == () and job.shortfalls == () and job.gaps == ()
    assert [(e.gpu_index, e.workload, e.results, e.reason) for e in job.excluded] == [
        (1, "decode", 1, JOB_CONTENDED_REASON), (1, "train", 2, JOB_CONTENDED_REASON)]
    markdown = render(report, "md")
    yours = markdown.split("Yours to fix", 1)[1]
    assert "h100x2: GPU 1 training step, GPU 1 decode measured beside other work" in yours
    assert "pid 1852 (user nobody, not the agent's user)" in yours


def test_the_same_slow_gpu_free_of_other_work_is_the_providers(engine: Engine) -> None:
    """The rule the contended GPU escaped above calls it when nothing else ran on it."""
    report = _report(engine, ("h100x2", _jobs(1, beside=False, share=0.5)), options=PAIR)
    assert report.renter == ()
    assert {(s.gpu_index, s.config.workload, s.config.attention)
            for s in report.job.stragglers} == {
        (1, "train", "flash"), (1, "train", "cudnn"), (1, "decode", "flash")}
    assert report.counts()["contention"] == 0 and report.job.excluded == ()


def test_a_job_node_with_no_other_work_raises_no_contention(engine: Engine) -> None:
    report = _report(engine, ("h100x2", _jobs()), options=PAIR)
    assert report.renter == () and [f.kind for f in report.dispute] == ["health"]
    assert {kind: n for kind, n in report.counts().items() if n} == {"health": 1}
    assert report.job.excluded == () and {g.gpu_index for g in report.job.gpus} == {0, 1}


def test_an_anonymized_report_puts_it_to_the_renter_without_the_process(
        engine: Engine) -> None:
    report = _report(engine, ("h100x2", _jobs(1)),
                     options=ReportOptions(anonymize=True))
    [found] = report.renter
    assert found.title.endswith(": GPU 1 training step, GPU 1 decode measured beside "
                                "other work, left out")
    assert "h100x2" not in found.title
    # What the process was (its user) stays with the store, as the job frame's words do.
    assert found.details == ("another process or a busy GPU",)
    assert "nobody" not in render(report, "md")
