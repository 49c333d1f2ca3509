"""A short memory copy measured again without the run's settings that can move it
(agent/rerun/memory.py), on the CPU path with a real child process, and through the
node suite as the agent runs it."""

from __future__ import annotations

import os
from typing import Any

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  CI installs the CPU build: a missing torch must fail there
else:
    pytest.importorskip("torch")

from agent import suites
from agent.node import floors
from agent.node import suite as node
from agent.rerun import memory as memory_rerun
from agent.source import settings
from fleet.model.document import parse_document

BLOCKING = [{"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "source": "environment",
             "applies": True}]


def test_the_committed_floors_judge_the_records_memory_copy() -> None:
    table = floors.load()
    h100 = {"kind": "memory_copy", "gpu_index": 0, "size_bytes": 1 << 30,
            "datasheet_gbs": 3352.0}
    low, basis = memory_rerun.floor(table, "H100-SXM5-80GB", h100) or (0.0, "")
    # 3,003.8 GB/s expected of a healthy H100 SXM5, called 5% under it, as the report.
    assert low == pytest.approx(3003.8 * 0.95, abs=0.01)
    assert basis.startswith("records: 3003.8 GB/s expected of a healthy H100-SXM5-80GB")
    # A variant without records: 70% of its datasheet's HBM, as the report.
    assert memory_rerun.floor(table, "B200", dict(h100, datasheet_gbs=8000.0)) == (
        5600.0, "datasheet: called under 70% of 8000 GB/s")
    assert memory_rerun.floor(table, "B200", dict(h100, datasheet_gbs=None)) is None
    variants = {0: "H100-SXM5-80GB", 1: "H100-SXM5-80GB"}
    figures = [dict(h100, gbs=2760.0), dict(h100, gpu_index=1, gbs=3001.0),
               {"kind": "host_to_device", "gpu_index": 0, "gbs": 1.0, "size_bytes": 1}]
    assert memory_rerun.decide(figures, BLOCKING, table, variants) == {
        "without": ["CUDA_LAUNCH_BLOCKING"], "gpus": [0], "floors": {0: (low, basis)}}
    # A setting that cannot move a copy (cuBLAS's), or nothing short: no rerun.
    assert memory_rerun.decide(figures, [dict(BLOCKING[0], name="CUBLAS_WORKSPACE_CONFIG")],
                               table, variants) is None
    assert memory_rerun.decide(figures[1:], BLOCKING, table, variants) is None


def _short_table() -> dict[str, Any]:
    """Floors no CPU's RAM reaches: every copy is short."""
    return {"memory_share": None, "memory_copy": [
        {"variant": "None", "size_bytes": node.Config.for_cpu().copy_bytes,
         "expected_gbs": 1e7, "floor_gbs": 1e6, "records": ["test"]}]}


def test_the_node_suite_measures_a_short_memory_copy_again_without_the_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("NCCL_ALGO", "Tree")  # moves the all-reduce, not a copy
    said: list[str] = []
    cfg = node.Config.for_cpu()
    cfg.floors = _short_table()
    outcome = suites.run_node(cfg, [], None, said.append)
    [copy] = [f for f in outcome.results if f["kind"] == "memory_copy"]
    again = copy["rerun"]
    assert again["without"] == ["CUDA_LAUNCH_BLOCKING"] and again["floor_gbs"] == 1e6
    assert "CUDA_LAUNCH_BLOCKING" not in again["ran_with"] and "NCCL_ALGO" in again["ran_with"]
    assert again["gbs"] > 0 and again["wall_s"] > 0
    assert any("memory copy short (GPU 0 at " in s and "again without CUDA_LAUNCH_BLOCKING"
               in s for s in said)
    # Host copies are not measured again.
    assert all("rerun" not in f for f in outcome.results if f["kind"] != "memory_copy"
               and f["kind"] != "allreduce")
    from agent.collect import collect

    document = collect(probe_torch=False)
    document["node"] = outcome.results
    parsed = parse_document(document, "the memory rerun's document")
    [stored] = [r for r in parsed.node if r.kind == "memory_copy"]
    assert stored.rerun is not None and stored.rerun.without == ["CUDA_LAUNCH_BLOCKING"]


def test_a_healthy_copy_or_one_without_settings_is_not_measured_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = node.Config.for_cpu()
    cfg.floors = _short_table()
    outcome = suites.run_node(cfg, [], None, lambda _: None)  # no setting in the run
    assert all("rerun" not in f for f in outcome.results if f["kind"] == "memory_copy")
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    cfg.floors = dict(_short_table(), memory_copy=[])
    outcome = suites.run_node(cfg, [], None, lambda _: None)  # nothing judges it
    assert all("rerun" not in f for f in outcome.results if f["kind"] == "memory_copy")


def test_a_rerun_that_fails_says_why_and_leaves_the_figure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    figures = [{"kind": "memory_copy", "gpu_index": 0, "size_bytes": 1 << 20, "gbs": 1.0}]
    failed = memory_rerun.settle(figures, settings.collect(os.environ), _short_table() | {
        "memory_copy": [{"variant": "x", "size_bytes": 1 << 20, "expected_gbs": 10.0,
                         "floor_gbs": 9.0, "records": []}]}, {0: "x"}, "cpu",
        -1, 2, lambda _: None)  # a size no tensor takes: the child fails
    assert failed is not None and "exited" in failed
    assert "rerun" not in figures[0]
