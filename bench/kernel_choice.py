"""Diagnostic: which cuBLAS kernel does the harness's matmul get, run after run?

Seen on the lent H100 (bench/RESULTS.md): the first harness run in a process gave 678
TFLOP/s at 1485 MHz, later ones 694 at 1380 MHz: less work per clock, so another kernel.
This prints the kernel name profiled in each repeat beside the harness's figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch.profiler import ProfilerActivity, profile

from agent.matmul import harness


def kernel_names(runner: harness.Runner) -> list[str]:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner.timed(2)
    return sorted({e.name[:90] for e in prof.events() if "gemm" in e.name.lower()
                   or "sm90" in e.name.lower() or "cutlass" in e.name.lower()})


def main() -> None:
    cfg = harness.Config(max_warmup_s=8.0, measure_s=3.0)
    for repeat in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        target = harness.GpuTarget(0, None, None)
        runner = harness.Runner(torch, cfg, target)
        names = kernel_names(runner)
        result = harness.measure(torch, cfg, target, harness.Coordinator(1), 1, lambda m: None)
        print(f"repeat {repeat + 1}: {result['tflops']:.1f} TFLOP/s, "
              f"warm-up {result['warmup']['seconds']} s; kernels {names}", flush=True)


if __name__ == "__main__":
    main()
