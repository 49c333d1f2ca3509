"""Timing a copy: CUDA events on the stream that does the work, after warm-up, repeated.

Every repeat is bracketed by its own pair of events, recorded back to back on the copy's
stream with all repeats queued before the one synchronisation, so the device never waits
on the host between them and the figure is what the link carried, not the launch gaps.
Each repeat gives one GB/s sample (bytes counted over its time, 10^9 bytes a second);
the figure is their median, with min, max, CV and the median's 95% interval beside it
(agent/timing/stats.py). On the CPU path the same code times with the host clock.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List, Optional

from agent.timing import stats

WARMUP = 2
REPEATS = 10

Op = Callable[[], None]


def summary(samples_gbs: List[float]) -> Dict[str, Any]:
    """The Bandwidth record of fleet-agent/1 for these GB/s samples."""
    median = statistics.median(samples_gbs)
    mean = statistics.fmean(samples_gbs)
    stdev = statistics.stdev(samples_gbs) if len(samples_gbs) > 1 else 0.0
    low, high = stats.median_interval(samples_gbs)
    return {
        "runs": len(samples_gbs),
        "median_gbs": round(median, 3),
        "min_gbs": round(min(samples_gbs), 3),
        "max_gbs": round(max(samples_gbs), 3),
        "cv": round(stdev / mean, 6) if mean > 0 else 0.0,
        "ci95_gbs": [round(low, 3), round(high, 3)] if len(samples_gbs) >= 6 else None,
        "samples_gbs": [round(s, 3) for s in samples_gbs],
    }


def _gbs(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def time_op(torch: Any, op: Op, counted_bytes: int, stream: Any = None,
            warmup: int = WARMUP, repeats: int = REPEATS,
            during: Optional[Callable[[], None]] = None) -> List[float]:
    """GB/s of `repeats` runs of `op` after `warmup` untimed ones; `op` queues its work on
    the current stream, which is `stream` (None: the CPU, timed by the host clock).
    `during` runs on the host while the timed repeats are in flight (an NVML read of the
    link as it runs under load)."""
    if stream is None:
        for _ in range(warmup):
            op()
        samples = []
        for index in range(repeats):
            start = time.perf_counter()
            op()
            samples.append(_gbs(counted_bytes, time.perf_counter() - start))
            if index == 0 and during is not None:
                during()
        return samples
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            op()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(repeats)]
        for start, stop in pairs:
            start.record(stream)
            op()
            stop.record(stream)
    if during is not None:
        during()
    pairs[-1][1].synchronize()
    return [_gbs(counted_bytes, start.elapsed_time(stop) / 1e3) for start, stop in pairs]


# 1.1.0: host copies run from the GPU's own CPUs (agent/gpu/numa.py), and every figure
# says who else was on its GPUs; the all-reduce names NCCL's transports and settings.
SUITE_VERSION = "1.1.0"
TIMING_METHOD = "cuda-events-per-copy"
CPU_TIMING_METHOD = "host-clock-per-copy"


class Stack:
    """The software a node figure was measured with, carried by every figure."""

    def __init__(self, torch: Any) -> None:
        self.torch_version: Optional[str] = str(torch.__version__)[:128]
        self.cuda_runtime_version: Optional[str] = (
            str(torch.version.cuda) if getattr(torch.version, "cuda", None) else None)
        self.nccl_version: Optional[str] = None
        nccl = getattr(torch.cuda, "nccl", None)
        if torch.cuda.is_available() and nccl is not None:
            try:
                version = nccl.version()
                self.nccl_version = (".".join(str(v) for v in version)
                                     if isinstance(version, tuple) else str(version))
            except Exception:  # a torch built without NCCL
                self.nccl_version = None


def figure(stack: Stack, kind: str, samples_gbs: List[float], size_bytes: int,
           counted: str, backend: str, started: float,
           datasheet: "tuple[Optional[float], Optional[str]]" = (None, None),
           **fields: Any) -> Dict[str, Any]:
    """One NodeResult of fleet-agent/1: the samples' summary and what the figure is."""
    record = summary(samples_gbs)
    result: Dict[str, Any] = {
        "suite_version": SUITE_VERSION, "kind": kind,
        "gpu_index": None, "gpu_uuid": None, "size_bytes": int(size_bytes),
        "gpus_in_run": 1, "backend": backend, "gbs": record["median_gbs"],
        "counted": counted, "stats": record,
        "datasheet_gbs": round(datasheet[0], 3) if datasheet[0] else None,
        "datasheet_source": datasheet[1][:512] if datasheet[1] else None,
        "timing_method": CPU_TIMING_METHOD if backend in ("cpu", "gloo") else TIMING_METHOD,
        "torch_version": stack.torch_version,
        "cuda_runtime_version": stack.cuda_runtime_version,
        "wall_s": round(time.monotonic() - started, 3),
    }
    result.update(fields)
    return result
