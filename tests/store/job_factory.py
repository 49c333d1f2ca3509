"""The job suite's figures (fleet-agent/1 `jobs`) for a test document, from a few knobs.

Shaped as /tmp/job_contract.md (issue 37) has agent/job/suite.py emit them: per GPU a training
step and a decode step of four Llama 3 8B layers under each attention backend asked for;
the first (train, flash) judged soaked with its own soak, the others measured right after
it (`follows`). Every derived figure is computed from the counts and times, unrounded, as
the model checks them, and the FLOP per token by the contract's formulas.

    data = json.loads(Path("tests/fixtures/nodes/h200-sxm-x4-lent/document.json").read_text())
    job_factory.with_jobs(data, train_tokens_per_s=79_000.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.model.document import AgentDocument
from fleet.model.job import JobResult

STACK = {"torch_version": "2.13.0+cu130", "cuda_runtime_version": "13.0",
         "cudnn_version": "91002"}
# Meta Llama 3 8B's config.json, four of its 32 layers.
LLAMA = {"layers": 4, "width": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
         "ffn": 14336}
PARAMS = 872_484_864
TRAIN = {**LLAMA, "batch": 2, "seq": 4096, "context": None}
DECODE = {**LLAMA, "batch": 64, "seq": 1, "context": 2048}


def flop_per_token(workload: str, shape: Mapping[str, Any], params: int = PARAMS
                   ) -> tuple[float, float]:
    """The contract's counts: torchtitan's, and Megatron's causal halving of attention."""
    if workload == "train":
        attention = 12.0 * shape["layers"] * shape["width"] * shape["seq"]
        return 6.0 * params + attention, 6.0 * params + attention / 2
    attention = 4.0 * shape["layers"] * shape["heads"] * shape["head_dim"] * shape["context"]
    # One new token attends to the whole context: nothing to halve.
    return 2.0 * params + attention, 2.0 * params + attention


def decode_bytes(shape: Mapping[str, Any], params: int = PARAMS) -> int:
    """bf16 weights plus the K and V cache of every sequence, read once a step."""
    cache = (2 * shape["layers"] * shape["batch"] * shape["context"] * shape["kv_heads"]
             * shape["head_dim"] * 2)
    return 2 * params + cache


def soak(tokens_per_s: float, temperature_c: float = 71.0, soaked: bool = True
         ) -> dict[str, Any]:
    curve = [[2.0 * (i + 1), tokens_per_s * (1.02 - 0.002 * min(i, 10)),
              temperature_c - max(0, 10 - i), 1980.0, 690.0] for i in range(16)]
    return {"soaked": soaked, "seconds": 31.2, "settled_s": 30.0 if soaked else None,
            "cap_s": 45.0, "window_s": 2.0, "span_s": 30.0, "throughput_tolerance": 0.003,
            "temperature_tolerance_c": 1.5, "throughput_change": -0.001,
            "temperature_change_c": 0.4, "temperature_c": temperature_c,
            "temperature_start_c": 40.0, "curve": curve}


def job(gpu: Mapping[str, Any], workload: str, tokens_per_s: float, *,
        attention: str = "flash", steps: int = 96, thermal: str = "soaked",
        follows: str | None = None, compiled: bool = False, graph: bool = False,
        gpus_in_run: int = 1, concurrency: str = "concurrent",
        contention: Sequence[str] = (), stack: Mapping[str, str] = STACK,
        temperature_c: float = 71.0, sm_clock_mhz: float = 1980.0,
        not_soaked: bool = False, peak_tflops: float | None = None,
        hbm_gbs: float | None = None, suite_version: str = "1.0.0") -> dict[str, Any]:
    """One JobResult of `gpu` (a document's GPU) at about `tokens_per_s`, validated.

    Peak TFLOP/s and HBM GB/s are the GPU's datasheet's unless given."""
    shape = dict(TRAIN if workload == "train" else DECODE)
    tokens_per_step = shape["batch"] * (shape["seq"] if workload == "train" else 1)
    seconds = tokens_per_step * steps / tokens_per_s
    rate = tokens_per_step * steps / seconds
    flop, causal = flop_per_token(workload, shape)
    tflops = rate * flop / 1e12
    sheet = (gpu.get("variant") or {}).get("datasheet") or {}
    peak = peak_tflops if peak_tflops is not None else (sheet.get("peak_tflops") or {}).get(
        "bf16")
    hbm = hbm_gbs if hbm_gbs is not None else sheet.get("memory_bandwidth_gbs")
    step_ms = 1e3 * seconds / steps
    decode = workload == "decode"
    moved = decode_bytes(shape) if decode else None
    gbs = moved * steps / seconds / 1e9 if moved is not None else None
    judged = thermal == "soaked" and follows is None
    result = {
        "suite_version": suite_version, "workload": workload, "gpu_index": gpu["index"],
        "gpu_uuid": gpu["uuid"], "model": "llama3-8b",
        "model_source": "Meta Llama 3 8B config.json (hidden_size 4096, 32 heads, 8 KV "
                        "heads, intermediate_size 14336), 4 of its 32 layers",
        "shape": shape, "params": PARAMS, "dtype": "bf16", "attention": attention,
        "compiled": compiled, "compile_s": 41.5 if compiled else None,
        "graph": graph, "optimizer": None if decode else "adamw-fused",
        "concurrency": concurrency, "gpus_in_run": gpus_in_run, "thermal": thermal,
        "follows": follows, "tokens_per_step": tokens_per_step, "steps": steps,
        "seconds": seconds, "tokens_per_s": rate,
        "step_ms": {"runs": steps, "median_ms": step_ms, "trimmed_mean_ms": step_ms,
                    "mean_ms": step_ms, "min_ms": 0.99 * step_ms, "max_ms": 1.02 * step_ms,
                    "stdev_ms": 0.004 * step_ms, "cv": 0.004,
                    "ci95_low_ms": 0.998 * step_ms, "ci95_high_ms": 1.002 * step_ms},
        "within_run_ci95": [0.997 * rate, 1.003 * rate],
        "flop_per_token": flop, "flop_per_token_causal": causal,
        "flop_source": "torchtitan: 6 x params + 12 x layers x width x seq (train); 2 x "
                       "params + 4 x layers x heads x head_dim x context (decode)",
        "tflops": tflops, "tflops_causal": rate * causal / 1e12,
        "peak_tflops": peak, "peak_source": None if peak is None else "datasheet, dense bf16",
        "mfu": None if peak is None else tflops / peak,
        "bytes_per_step": moved, "gbs": gbs,
        "hbm_gbs": hbm if decode else None,
        "hbm_source": "datasheet" if decode and hbm is not None else None,
        "hbm_share": gbs / hbm if gbs is not None and hbm else None,
        "peak_memory_bytes": 13_200_000_000 if not decode else 6_100_000_000,
        "loss": None if decode else 10.37,
        "correctness": {"passed": True, "loss_finite": True, "grad_max_rel_error": 0.012,
                        "tolerance": 0.05, "shape": "2 layers, width 256, batch 2 x 256",
                        "reference": "float32, math attention"},
        "flags": {"not_soaked": not_soaked, "contended": bool(contention),
                  "power_capped": True, "thermal_throttled": False, "hw_slowdown": False},
        "soak": soak(rate, temperature_c, soaked=not not_soaked) if judged else None,
        "telemetry": {"samples": 40, "sm_clock_mhz_median": sm_clock_mhz,
                      "mem_clock_mhz_median": 2619.0, "power_w_median": 690.0,
                      "temperature_c_max": temperature_c + 2.0,
                      "reason_shares": {"sw_power_cap": 0.6}},
        "contention": list(contention),
        "processes": [{"pid": 4242, "uid": 1001, "user": "other", "own": False}]
        if contention else [],
        "provenance": {**stack, "device_name": gpu.get("name")},
        "wall_s": 52.3,
    }
    JobResult.model_validate(result)
    return result


def jobs(document: Mapping[str, Any], *, train_tokens_per_s: float = 79_000.0,
         decode_tokens_per_s: float = 48_000.0, attentions: Sequence[str] = ("flash", "cudnn"),
         gpu_scale: Mapping[int, float] | None = None, **knobs: Any) -> list[dict[str, Any]]:
    """Per GPU of `document`, train then decode under each of `attentions`: train/flash
    soaked and judged, the rest following it. `gpu_scale[i]` scales GPU i's figures."""
    gpus = sorted(document["gpus"], key=lambda g: g["index"])
    knobs.setdefault("gpus_in_run", max(1, len(gpus)))
    results = []
    for gpu in gpus:
        scale = (gpu_scale or {}).get(gpu["index"], 1.0)
        for workload, rate in (("train", train_tokens_per_s), ("decode", decode_tokens_per_s)):
            for attention in attentions:
                # A cool start follows nothing; soaked, only train/flash has its own load.
                lead = (workload == "train" and attention == attentions[0]) or \
                    knobs.get("thermal") == "cool-start"
                results.append(job(gpu, workload, rate * scale, attention=attention,
                                   follows=None if lead else f"train/{attentions[0]}",
                                   **knobs))
    return results


def with_jobs(document: dict[str, Any], **knobs: Any) -> dict[str, Any]:
    """`document` with its job suite's figures (`jobs`' knobs), validated."""
    document["jobs"] = jobs(document, **knobs)
    AgentDocument.model_validate(document)
    return document
