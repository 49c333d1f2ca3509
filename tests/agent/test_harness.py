"""The harness's code path on the CPU (small sizes), and clock locking against recordings.

The real figures come from the GPU (bench/harness_fidelity.py, bench/RESULTS.md); here
the protocol's logic must hold: the gate catches a wrong product, results carry their
statistics, flags and provenance, and locking restores the clock and records refusals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import torch  # CI installs the CPU build: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch", reason="the harness tests need torch: "
                                "pip install torch==2.13.0 (a CPU build)")

from agent import harness
from agent.nvml import ReplayNvml
from fleet.document import parse_document
from tests.conftest import ROOT


def small(**overrides: Any) -> harness.Config:
    base: dict[str, Any] = dict(m=96, n=80, k=64, device="cpu", measure_s=0.2, window_s=0.05,
                                max_warmup_s=0.3, flush_bytes=1 << 20)
    base.update(overrides)
    return harness.Config(**base)


def cpu_target(nvml: Any = None) -> harness.GpuTarget:
    target = harness.GpuTarget(0, 0 if nvml else None, None)
    if nvml is not None:
        target.nvml, target.handle = nvml, nvml.device(0)
    return target


def measure(cfg: harness.Config, target: harness.GpuTarget) -> dict[str, Any]:
    return harness.measure(torch, cfg, target, harness.Coordinator(1), 1, lambda m: None)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32", "fp32"])
def test_each_dtype_passes_the_gate_and_reports_consistent_statistics(dtype: str) -> None:
    result = measure(small(dtype=dtype), cpu_target())
    s = result["stats"]
    assert result["correctness"]["passed"], result["correctness"]
    assert result["correctness"]["max_rel_error"] < harness.TOLERANCE[dtype]
    assert s["runs"] == len(result["samples_ms"]) > 0
    assert s["min_ms"] <= s["ci95_low_ms"] <= s["median_ms"] <= s["ci95_high_ms"] <= s["max_ms"]
    assert result["tflops"] == pytest.approx(2 * 96 * 80 * 64 / (s["median_ms"] * 1e-3) / 1e12)
    assert result["dtype"] == dtype and result["cache"] == "cold"
    assert result["provenance"]["flush_bytes"] == 1 << 20
    assert "torch.float32_matmul_precision" in result["provenance"]["env"]


def test_tf32_and_fp32_set_different_precision() -> None:
    fp32 = measure(small(dtype="fp32"), cpu_target())["provenance"]["env"]
    assert fp32["torch.float32_matmul_precision"] == "highest"
    harness._configure_precision(torch, "tf32")
    try:
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        harness._configure_precision(torch, "fp32")


class WrongProduct:
    """torch, except that matmul leaves a third of the output unwritten."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def matmul(a: Any, b: Any, out: Any) -> Any:
        torch.matmul(a, b, out=out)
        out[: out.shape[0] // 3].zero_()
        return out


def test_the_correctness_gate_fails_a_wrong_product() -> None:
    runner = harness.Runner(WrongProduct(), small(), cpu_target())
    err, rows = runner.check()
    assert rows == 64
    assert err > 0.1


def test_warm_cache_and_burst_modes_are_labelled() -> None:
    result = measure(small(warm_l2=True, mode="burst", pause_ms=5.0), cpu_target())
    assert result["cache"] == "warm" and result["provenance"]["flush_bytes"] == 0
    assert result["mode"] == "burst" and result["pause_ms"] == 5.0
    # Each burst run sleeps 5 ms first: in 0.2 s there can be at most 40 of them.
    assert 1 <= result["stats"]["runs"] <= 40


def lock_recording(set_answer: Any, reset_answer: Any = None) -> ReplayNvml:
    data = json.loads((ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json")
                      .read_text())
    device = data["devices"][0]
    device["nvmlDeviceSetGpuLockedClocks(1410,1410)"] = set_answer
    device["nvmlDeviceResetGpuLockedClocks"] = reset_answer
    return ReplayNvml(data)


def test_clock_lock_is_applied_restored_and_marked() -> None:
    nvml = lock_recording(None)
    result = measure(small(lock_clocks_mhz=1410), cpu_target(nvml))
    assert result["flags"]["clocks_locked"] is True
    assert result["clock_lock"] == {"requested_mhz": 1410, "applied": True, "error": None}
    # Telemetry came from NVML (here the recording) through the measurement window.
    assert result["telemetry"]["samples"] > 0
    assert result["telemetry"]["sm_clock_mhz_median"] == 345


def test_a_refused_clock_lock_is_recorded_and_nothing_is_reset() -> None:
    nvml = lock_recording({"nvml_error": "NVML_ERROR_NO_PERMISSION"},
                          {"nvml_error": "NVML_ERROR_UNKNOWN"})
    result = measure(small(lock_clocks_mhz=1410), cpu_target(nvml))
    assert result["flags"]["clocks_locked"] is False
    assert result["clock_lock"]["error"] == "NVML_ERROR_NO_PERMISSION"
    assert "unlock_error" not in result["clock_lock"]


def test_a_failed_reset_after_locking_is_reported() -> None:
    nvml = lock_recording(None, {"nvml_error": "NVML_ERROR_NO_PERMISSION"})
    result = measure(small(lock_clocks_mhz=1410), cpu_target(nvml))
    assert result["clock_lock"]["unlock_error"] == "NVML_ERROR_NO_PERMISSION"


def test_other_processes_on_the_gpu_flag_contention() -> None:
    data = json.loads((ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json")
                      .read_text())
    data["devices"][0]["nvmlDeviceGetComputeRunningProcesses"] = [
        {"pid": 999999, "usedGpuMemory": 1 << 30}]
    result = measure(small(), cpu_target(ReplayNvml(data)))
    assert result["flags"]["contended"] is True
    assert "999999" in result["contention"][0]


def test_bad_options_are_refused() -> None:
    with pytest.raises(harness.HarnessError, match="dtype"):
        small(dtype="int8").validate()
    with pytest.raises(harness.HarnessError, match="mode"):
        small(mode="peak").validate()


def test_agent_bench_on_cpu_emits_a_valid_document(tmp_path: Path) -> None:
    env = dict(os.environ, FLEET_NVML_REPLAY=str(
        ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json"))
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "bench", "--cpu", "--size", "64", "--measure-s", "0.2",
         "--max-warmup-s", "0.3"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert any(e["event"] == "progress" and e["stage"] == "benchmark" for e in events)
    document = parse_document(events[-1]["document"], "agent bench")
    assert len(document.benchmarks) == 1
    assert document.benchmarks[0].m == 64 and document.benchmarks[0].stats.runs > 0
    assert document.gpus[0].name == "NVIDIA H100 80GB HBM3"
