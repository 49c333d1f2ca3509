"""A GPU's memory bandwidth: one large device-to-device copy, repeated.

Counted as STREAM counts a copy: the bytes read plus the bytes written (twice the
buffer), so that the figure stands beside the datasheet's HBM bandwidth, which counts
both directions of the memory's traffic. nvbandwidth's device-local copy and SuperBench's
gpu-copy count the buffer once: their figure for the same copy is half fleet's. A slow
HBM stack or a memory clock held low shows here, where the compute-bound matmul hides it.
"""

from __future__ import annotations

import time
from typing import Any, Dict

from agent.gpu import links
from agent.node import bandwidth


def measure(torch: Any, device: Any, stream: Any, gpu: Dict[str, Any], size: int,
            stack: bandwidth.Stack, repeats: int = bandwidth.REPEATS) -> Dict[str, Any]:
    """The memory_copy figure of the GPU at `device` (or the CPU's RAM on the CPU path)."""
    started = time.monotonic()
    src = torch.empty(size, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    samples = bandwidth.time_op(torch, lambda: dst.copy_(src, non_blocking=True), 2 * size,
                                stream, repeats=repeats)
    return bandwidth.figure(
        stack, "memory_copy", samples, size, "read + written (2 x size)",
        "cuda" if stream is not None else "cpu", started,
        datasheet=links.hbm_figure(gpu) if stream is not None else (None, None),
        gpu_index=gpu.get("index"), gpu_uuid=gpu.get("uuid"))
