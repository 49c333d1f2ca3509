"""Valid fleet-agent/1 documents for store tests and benchmarks, built from a few knobs.

Each benchmark result's statistics are computed from its own samples and its TFLOP/s from
its median, so a stored result can be checked against the numbers it was made from.
Every document is validated by the model before it is returned.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import random
import statistics
from typing import Any

from fleet.model.document import AgentDocument

VARIANTS: dict[str, dict[str, Any]] = {
    "H100 SXM5 80GB": {"name": "NVIDIA H100 80GB HBM3", "pci": "0x233010DE", "family": "H100",
                       "form_factor": "SXM", "memory_gb": 80, "power": 700.0, "peak": 989.0},
    "H100 PCIe 80GB": {"name": "NVIDIA H100 PCIe", "pci": "0x233110DE", "family": "H100",
                       "form_factor": "PCIe", "memory_gb": 80, "power": 350.0, "peak": 756.0},
    "A100 SXM4 80GB": {"name": "NVIDIA A100-SXM4-80GB", "pci": "0x20B210DE", "family": "A100",
                       "form_factor": "SXM", "memory_gb": 80, "power": 400.0, "peak": 312.0},
}
CAPABILITIES = ("application_clocks", "locked_gpu_clocks", "locked_memory_clocks",
                "power_limit", "persistence_mode", "compute_mode", "ecc")


def gpu_uuid(host: str, index: int) -> str:
    """The same in every process (unlike hash(), which is salted per process)."""
    digest = hashlib.sha256(f"{host}/{index}".encode()).hexdigest()[:12]
    return f"GPU-{digest[:8]}-0000-4000-8000-{digest}"


def capability(verdict: str = "no") -> dict[str, Any]:
    return {"verdict": verdict, "method": "inferred",
            "evidence": ["nvmlDeviceGetAPIRestriction: restricted"], "probe": None}


def gpu(index: int, uuid: str | None, variant: str = "H100 SXM5 80GB",
        power_limit_w: float | None = None) -> dict[str, Any]:
    v = VARIANTS[variant]
    power = v["power"] if power_limit_w is None else power_limit_w
    return {
        "index": index, "name": v["name"], "uuid": uuid, "serial": f"SN{index:06d}",
        "board_part_number": None, "vbios_version": "96.00.99.00.01",
        "inforom_image_version": None, "gsp_firmware_version": None,
        "pci_bus_id": f"00000000:{index + 0x18:02X}:00.0", "pci_device_id": v["pci"],
        "pci_subsystem_id": None, "architecture": "Hopper",
        "cuda_compute_capability": "9.0", "driver_version": "580.159.04",
        "cuda_driver_version": "13.0", "memory_total_mib": v["memory_gb"] * 1024,
        "memory_used_mib": 0, "cuda_cores": None, "sm_count": 132,
        "power_limit_w": power, "power_limit_default_w": v["power"],
        "power_limit_enforced_w": power, "power_limit_min_w": 200.0,
        "power_limit_max_w": v["power"], "power_draw_w": 70.5, "persistence_mode": True,
        "compute_mode": "Default", "ecc_enabled": True, "ecc_pending": False,
        "mig_enabled": False, "mig_pending": False, "mig_devices": [],
        "virtualization_mode": "passthrough", "pcie_gen_current": 5, "pcie_gen_max": 5,
        "pcie_width_current": 16, "pcie_width_max": 16, "nvlink_links_active": 18,
        "nvlink_links_total": 18, "clocks_event_reasons": 1,
        "clocks_event_reason_names": ["gpu_idle"], "temperature_c": 31,
        "performance_state": "P0", "utilization_gpu_pct": 0, "processes": [],
        "sm_clock_mhz": 345, "mem_clock_mhz": 2619, "max_sm_clock_mhz": 1980,
        "max_mem_clock_mhz": 2619, "app_sm_clock_target_mhz": 1755,
        "app_sm_clock_default_mhz": 1755, "app_mem_clock_target_mhz": 2619,
        "app_mem_clock_default_mhz": 2619, "boost_sm_clock_max_mhz": 1980,
        "supported_memory_clocks": {"count": 1, "min_mhz": 2619, "max_mhz": 2619},
        "supported_graphics_clocks": {"count": 4, "min_mhz": 345, "max_mhz": 1980},
        "supported_clock_table": {"2619": [1980, 1755, 1200, 345]},
        "variant": {
            "family": v["family"], "memory_gb": v["memory_gb"],
            "form_factor": v["form_factor"], "label": variant, "matched_by": "pci_id",
            "pci_device_id": v["pci"], "vgpu_profile": None, "note": None,
            "datasheet": {"default_power_w": v["power"], "max_sm_clock_mhz": 1980,
                          "memory_bandwidth_gbs": None, "peak_tflops": {"bf16": v["peak"]},
                          "source": "tests/store/factory.py"},
        },
        "capabilities": {name: capability() for name in CAPABILITIES},
        "unavailable": {"nvmlDeviceGetBoardPartNumber": "NVML_ERROR_NOT_SUPPORTED"},
    }


def samples(rng: random.Random, median_ms: float, count: int) -> list[float]:
    return [median_ms * (1.0 + rng.gauss(0.0, 0.01)) for _ in range(count)]


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    cut = len(ordered) // 10
    trimmed = ordered[cut:len(ordered) - cut] or ordered
    mean = math.fsum(values) / len(values)
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "runs": len(values), "median_ms": statistics.median(values),
        "trimmed_mean_ms": math.fsum(trimmed) / len(trimmed), "mean_ms": mean,
        "min_ms": ordered[0], "max_ms": ordered[-1], "stdev_ms": stdev,
        "cv": stdev / mean, "ci95_low_ms": ordered[max(0, len(ordered) // 2 - 2)],
        "ci95_high_ms": ordered[min(len(ordered) - 1, len(ordered) // 2 + 2)],
    }


OLD_STACK = ("2.9.0", "12.8", "12.8.4")  # torch, CUDA runtime, cuBLAS
NEW_STACK = ("2.13.0+cu130", "13.0", "13.0.2")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def soak(tflops: float, drop: float, temperature_c: float, soaked: bool = True
         ) -> dict[str, Any]:
    """A soak whose first 20 s ran `drop` above the soaked `tflops` (drop = 1 - tflops /
    first_20s_tflops, as the model checks), settling at `temperature_c`."""
    first = tflops / (1.0 - drop)
    curve = [[10.0 * (i + 1), first - (first - tflops) * min(1.0, i / 6),
              temperature_c - 30.0 * max(0.0, 1.0 - i / 6), 1410.0, 699.0]
             for i in range(12)]
    return {"soaked": soaked, "seconds": 120.0, "settled_s": 110.0 if soaked else None,
            "cap_s": 600.0, "window_s": 10.0,
            "span_s": 60.0, "throughput_tolerance": 0.002, "temperature_tolerance_c": 1.0,
            "throughput_change": 0.0005, "temperature_change_c": 0.3,
            "first_20s_tflops": first, "drop": 1.0 - tflops / first,
            "temperature_c": temperature_c, "temperature_start_c": temperature_c - 30.0,
            "curve": curve}


def benchmark(index: int, uuid: str | None, tflops_target: float, rng: random.Random,
              runs: int = 50, size: int = 8192, dtype: str = "bf16",
              power_capped: bool = True, sm_clock_mhz: float = 1410.0,
              power_w: float = 699.5, harness: str = "1", thermal: str | None = None,
              drop: float = 0.01, temperature_c: float = 70.0,
              stack: tuple[str, str, str] = OLD_STACK) -> dict[str, Any]:
    """One result. Harness 1.2 and later compute TFLOP/s over the trimmed mean; 1.3 and
    later say their thermal state ("soaked" unless `thermal` says otherwise), and a soaked
    result carries its soak (`drop`, `temperature_c` under load)."""
    flops = 2.0 * size ** 3
    median_target = flops / (tflops_target * 1e12) * 1e3
    values = samples(rng, median_target, runs)
    stats = summary(values)
    modern = _version(harness) >= (1, 2)
    if _version(harness) >= (1, 3) and thermal is None:
        thermal = "soaked"
    tflops = flops / (stats["trimmed_mean_ms" if modern else "median_ms"] * 1e-3) / 1e12
    extra: dict[str, Any] = {}
    if modern:
        extra["statistic"] = "trimmed_mean"
    if thermal is not None:
        extra["thermal"] = thermal
    if thermal == "soaked":
        extra["soak"] = soak(tflops, drop, temperature_c)
    return {
        "gpu_index": index, "gpu_uuid": uuid, "harness_version": harness,
        "timing_method": "cuda-events", "mode": "sustained", "pause_ms": 0.0,
        "cache": "cold", "concurrency": "concurrent", "gpus_in_run": 8, "dtype": dtype,
        "m": size, "n": size, "k": size,
        "tflops": tflops, **extra,
        "stats": stats,
        "warmup": {"steady": True, "seconds": 3.5, "windows": 4,
                   "band": 0.005, "window_trimmed_means_ms": [median_target] * 4},
        "correctness": {"max_rel_error": 0.002, "tolerance": 0.02, "rows_checked": 64,
                        "passed": True},
        "flags": {"power_capped": power_capped, "thermal_throttled": False,
                  "hw_slowdown": False, "contended": False, "not_steady": False,
                  "correctness_failed": False, "clocks_locked": False},
        "contention": [], "clock_lock": None,
        "telemetry": {"samples": 40, "sm_clock_mhz_median": sm_clock_mhz,
                      "mem_clock_mhz_median": 2619.0, "power_w_median": power_w,
                      "temperature_c_max": 61.0 if thermal != "soaked" else
                      temperature_c + 2.0,
                      "reason_shares": {"sw_power_cap": 0.95} if power_capped else {}},
        "telemetry_series": [[0.1 * i, 1410.0, 2619.0, 699.0, 55.0 + i % 5, 4.0]
                             for i in range(10)],
        "samples_ms": values,
        "provenance": {"torch_version": stack[0], "cuda_runtime_version": stack[1],
                       "cublas_version": stack[2], "device_name": "NVIDIA H100 80GB HBM3",
                       "sm_count": 132, "l2_bytes": 52428800, "flush_bytes": 104857600,
                       "inputs": "randn seed 1, scaled to bf16",
                       "env": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}},
        "wall_s": 12.5,
    }


def document(host: str = "gpu-01", gpus: int = 2, variant: str = "H100 SXM5 80GB",
             tflops: float = 680.0, runs: int = 50, seed: int = 0,
             collected_at: dt.datetime | None = None, with_uuid: bool = True,
             errors: list[dict[str, Any]] | None = None, power_limit_w: float | None = None,
             results_per_gpu: int = 1, gpu_tflops: list[float] | None = None,
             driver_version: str | None = None, sm_clock_mhz: float = 1410.0,
             power_w: float = 699.5, variants: list[str] | None = None,
             harness: str = "1", thermal: str | None = None, drop: float = 0.01,
             temperature_c: float = 70.0, gpu_drops: list[float] | None = None,
             gpu_temperatures: list[float] | None = None,
             stack: tuple[str, str, str] = OLD_STACK) -> dict[str, Any]:
    """One host's document: `gpus` GPUs of one variant, `results_per_gpu` results each.

    Each GPU's TFLOP/s is `tflops` with 2% GPU-to-GPU noise, or exactly `gpu_tflops[i]`
    (up to the 1% run-to-run noise of its samples, which the median mostly removes);
    `variants` gives each GPU its own variant. Harness "1" by default (cool-start, as
    every result before 1.3); `harness="1.3.0"` gives soaked results whose first 20 s ran
    `drop` (or `gpu_drops[i]`) above them, at `temperature_c` (or `gpu_temperatures[i]`)
    under load, measured on `stack` (torch, CUDA runtime, cuBLAS).
    """
    rng = random.Random(f"{host}/{seed}")
    when = collected_at or dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)
    gpu_list = []
    results = []
    for index in range(gpus):
        uuid = gpu_uuid(host, index) if with_uuid else None
        card = gpu(index, uuid, variants[index] if variants else variant, power_limit_w)
        if driver_version is not None:
            card["driver_version"] = driver_version
        gpu_list.append(card)
        for _ in range(results_per_gpu):
            target = (gpu_tflops[index] if gpu_tflops is not None
                      else tflops * (1.0 + rng.gauss(0, 0.02)))
            results.append(benchmark(
                index, uuid, target, rng, runs=runs, sm_clock_mhz=sm_clock_mhz,
                power_w=power_w, harness=harness, thermal=thermal,
                drop=gpu_drops[index] if gpu_drops is not None else drop,
                temperature_c=(gpu_temperatures[index] if gpu_temperatures is not None
                               else temperature_c), stack=stack))
    data = {
        "format": "fleet-agent/1", "agent_version": "0.1.0",
        "collected_at": when.isoformat(timespec="seconds"),
        "source": {"kind": "nvml", "path": None, "note": "live driver"},
        "no_gpu_reason": None, "probe_writes": False,
        "host": {
            "hostname": host, "os": "Ubuntu 22.04.4 LTS", "os_id": "ubuntu",
            "kernel": "5.15.0-105-generic", "arch": "x86_64", "cpu_model": "AMD EPYC 9454",
            "cpu_count": 96, "memory_total_mib": 1031000, "platform": "vm",
            "hypervisor": "kvm", "container": None, "virtualization_evidence": ["cpuinfo"],
            "python_version": "3.10.12", "python_executable": "/usr/bin/python3",
            "torch_version": stack[0], "cuda_runtime_version": stack[1],
            "cudnn_version": None, "cublas_version": stack[2], "torch_error": None,
            "is_root": False, "user": "ubuntu",
        },
        "system": {"driver_version": "580.159.04", "cuda_driver_version": "13.0",
                   "nvml_version": "13.580.159.04", "gpu_count": gpus, "unavailable": {}},
        "gpus": gpu_list,
        "benchmarks": results,
        "errors": errors or [],
    }
    AgentDocument.model_validate(data)
    return data
