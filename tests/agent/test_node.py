"""The node suite (agent/node/suite.py and the modules it runs): datasheet figures, NVML's path
between two GPUs, nccl-tests' arithmetic, and the CPU path end to end, with real spawned
gloo ranks, as `fleet bench --cpu --suite node` runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from agent.gpu import links
from agent.node import collective, peers
from agent.node import suite as node
from agent.source.nvml import ReplayNvml
from fleet.model.document import parse_document
from tests.conftest import ROOT

H100 = {"index": 0, "architecture": "Hopper", "nvlink_links_active": 18,
        "pcie_gen_max": 5, "pcie_width_max": 16}
A100_PCIE = {"index": 1, "architecture": "Ampere", "nvlink_links_active": 0,
             "pcie_gen_max": 4, "pcie_width_max": 16}


def test_pcie_figures_per_direction() -> None:
    # 32 GT/s x 128/130 / 8 bits = 3.938 GB/s a lane; x16 = 63.02 (the reference: 63).
    assert links.pcie_gbs(5, 16) == 63.02
    # Gen4 x8, a slot trained down: a quarter of Gen5 x16.
    assert links.pcie_gbs(4, 8) == 15.75
    assert links.pcie_gbs(3, 16) == 15.75
    assert links.pcie_gbs(None, 16) is None and links.pcie_gbs(5, 0) is None
    gbs, source = links.pcie_figure(4, 16)
    assert gbs == 31.51 and source is not None and source.startswith("PCIe Gen4 x16")


def test_nvlink_figures_by_generation() -> None:
    # Hopper: NVLink 4, 18 links of 25 GB/s each way (900 GB/s both ways).
    assert links.nvlink_figure(H100)[0] == 450.0
    assert links.nvlink_figure({**H100, "architecture": "Ampere", "nvlink_links_active": 12}
                               )[0] == 300.0
    assert links.nvlink_figure(A100_PCIE) == (None, None)
    assert links.nvlink_figure({**H100, "architecture": "Turing"}) == (None, None)


def _recording(answers: dict[str, Any]) -> ReplayNvml:
    return ReplayNvml({"format": "nvml-recording/1", "source": "constructed",
                       "system": {}, "devices": [answers, {}]})


def test_the_path_between_two_gpus_comes_from_nvml() -> None:
    nvlink = _recording({"nvmlDeviceGetP2PStatus(GPU1,NVML_P2P_CAPS_INDEX_NVLINK)": 0})
    assert peers.topology(nvlink, nvlink.device(0), nvlink.device(1)) == "NVLINK"
    # No NVLink peer status: the PCIe path nvidia-smi topo -m would print.
    host = _recording({
        "nvmlDeviceGetP2PStatus(GPU1,NVML_P2P_CAPS_INDEX_NVLINK)": 4,
        "nvmlDeviceGetTopologyCommonAncestor(GPU1)": 50})
    assert peers.topology(host, host.device(0), host.device(1)) == "SYS"
    refused = _recording({
        "nvmlDeviceGetP2PStatus(GPU1,NVML_P2P_CAPS_INDEX_NVLINK)":
            {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"},
        "nvmlDeviceGetTopologyCommonAncestor(GPU1)": 30})
    assert peers.topology(refused, refused.device(0), refused.device(1)) == "PHB"
    old = _recording({})  # a driver without either call
    assert peers.topology(old, old.device(0), old.device(1)) is None


def test_a_pair_is_held_to_nvlink_only_where_nvml_says_nvlink() -> None:
    assert peers.pair_datasheet("NVLINK", H100, {**H100, "index": 1})[0] == 450.0
    # The same two SXM cards without the fabric: the host link is all they get.
    gbs, source = peers.pair_datasheet("SYS", H100, {**H100, "index": 1})
    assert gbs == 63.02 and source is not None and "through the host" in source
    assert peers.pair_datasheet("PHB", H100, A100_PCIE)[0] == 31.51
    assert node.allreduce_datasheet(["NVLINK"] * 6, [H100] * 4)[0] == 450.0
    # Some pairs on NVLink, some through the host, and NVML did not say where the links
    # go: whether a ring can keep off the host is not known, so no figure (issue 38; it
    # was the host link's, which made the share look higher than it is).
    assert node.allreduce_datasheet(["NVLINK", "SYS"], [H100] * 3) == (None, None)
    assert node.allreduce_datasheet(["SYS", "NODE", "SYS"], [H100] * 3)[0] == 63.02


def test_bus_bandwidth_is_nccl_tests_algbw_scaled_by_2_n_minus_1_over_n() -> None:
    stack = node.bandwidth.Stack.__new__(node.bandwidth.Stack)
    stack.torch_version, stack.cuda_runtime_version, stack.nccl_version = "2.13.0", "13.0", "2.28.9"
    rows = [{"size": 1_000_000_000, "ms": [10.0, 10.0, 20.0]}]
    [result] = collective.figures(rows, 4, "nccl", "bf16", stack, 0.0, (450.0, "sheet"))
    # 1e9 bytes in 10 ms: algbw 100 GB/s; busbw 100 x 2 x 3 / 4 = 150. In 20 ms: 75.
    assert result["stats"]["samples_gbs"] == [150.0, 150.0, 75.0]
    assert result["gbs"] == 150.0 and result["algbw_gbs"] == 100.0
    assert result["gpus_in_run"] == 4 and result["nccl_version"] == "2.28.9"
    assert result["datasheet_gbs"] == 450.0


def test_a_failing_rank_is_named_with_its_reason() -> None:
    with pytest.raises(collective.CollectiveError, match=r"rank 0 of 2 exited 1: .*"):
        collective.run([None, None], "no-such-backend", [1 << 20], timeout_s=120)


def _agent(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "agent", "bench", "--cpu", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])["document"]
    return document


def test_the_cpu_path_runs_the_suite_with_real_ranks() -> None:
    document = _agent("--suite", "node")
    parse_document(document, "the CPU path's document")  # the controller takes it
    assert document["benchmarks"] == [] and document["errors"] == []
    kinds = sorted((r["kind"], r.get("memory"), r["backend"], r["gpus_in_run"])
                   for r in document["node"])
    assert kinds == [("allreduce", None, "gloo", 2), ("allreduce", None, "gloo", 2),
                     ("device_to_host", "pageable", "cpu", 1),
                     ("host_to_device", "pageable", "cpu", 1),
                     ("memory_copy", None, "cpu", 1)]
    reduce = [r for r in document["node"] if r["kind"] == "allreduce"]
    assert [r["size_bytes"] for r in reduce] == [1 << 20, 4 << 20]
    for result in document["node"]:
        assert result["gbs"] > 0 and result["stats"]["runs"] == 6
        assert result["stats"]["min_gbs"] <= result["gbs"] <= result["stats"]["max_gbs"]
        assert result["datasheet_gbs"] is None  # RAM is no link with a datasheet


def test_gemm_only_leaves_the_suite_out_and_a_failing_all_reduce_leaves_the_rest() -> None:
    document = _agent("--suite", "gemm", "--quick", "--size", "64", "--measure-s", "0.3",
                      "--max-warmup-s", "0.5", "--max-total-s", "2")
    assert document["node"] == [] and len(document["benchmarks"]) == 1
    cfg = node.Config.for_cpu()
    cfg.allreduce_timeout_s = 0.01  # no rank imports torch that fast
    outcome = node.run(cfg, [], None, lambda message: None)
    assert [r["kind"] for r in outcome.results] == [
        "memory_copy", "host_to_device", "device_to_host"]
    [error] = outcome.errors
    assert error["stage"] == "node"
    assert error["message"].startswith("all-reduce over 2 ranks: CollectiveError: the "
                                       "2-rank all-reduce did not finish in 0.01 s")


PY38_CHECK = """
import agent.node.suite, agent.node.collective, agent.node.peers, agent.node.hostlink
import agent.node.memory, agent.gpu.links
assert agent.gpu.links.pcie_gbs(5, 16) == 63.02
print("ok")
"""


def test_the_suite_imports_on_python_3_8(python38: str) -> None:
    # torch is not there; the modules import it only when they run.
    done = subprocess.run([python38, "-c", PY38_CHECK], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_fleet_bench_prints_the_suite_in_80_columns() -> None:
    done = subprocess.run([sys.executable, "-m", "fleet", "bench", "--cpu", "--suite", "node"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    assert any(line.startswith("all-reduce 2 ranks fp32") for line in lines), done.stdout
    assert any(line.startswith("RAM copy (CPU path)") for line in lines), done.stdout


def test_the_matmul_alone_still_counts_the_replays_during_the_run(
        h100_recording: Any) -> None:
    from agent.collect import collect
    from agent.matmul.harness import Config as HarnessConfig

    cfg = HarnessConfig(device="cpu", m=64, n=64, k=64, protocol="quick", measure_s=0.2,
                        max_warmup_s=0.3, max_total_s=1.0)
    document = collect(str(h100_recording), probe_torch=False, bench=cfg)
    health = document["gpus"][0]["health"]
    # The recording answers the replay counter the same before and after: no rise. No
    # link was read under load without the node suite.
    assert (health["pcie_replays"], health["pcie_replays_during_run"]) == (0, 0)
    assert health["pcie_gen_load"] is None and health["verdict"] == "healthy"


def test_without_a_gpu_the_document_says_so_once() -> None:
    # This machine (and CI's) has no NVIDIA GPU and no driver.
    def errors(*args: str) -> list[dict[str, Any]]:
        done = subprocess.run([sys.executable, "-m", "agent", "bench", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        found: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])[
            "document"]["errors"]
        return found

    assert errors("--suite", "node") == [
        {"stage": "node", "message": "no NVIDIA GPU: no node to measure"}]
    # Every suite, the storage suite in 3 s rather than its 30 (it has tests of its own).
    assert errors("--storage-budget-s", "3") == [
        {"stage": "benchmark", "message": "no NVIDIA GPU: nothing to benchmark"}]
