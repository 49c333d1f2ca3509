"""Diagnostic: which harness settings give the steadiest sustained figure on this card?

Runs configurations interleaved, `--repeats` times each, in one process on GPU 0, and
prints each one's median TFLOP/s, spread across repeats and wall time. Used to choose the
defaults (bench/RESULTS.md, "Harness").

    python3 bench/harness_settings.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from agent.matmul import harness

CONFIGS = {
    "cold L2, 4 s": {},
    "warm L2, 4 s": {"warm_l2": True},
    "cold L2, 8 s": {"measure_s": 8.0},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    seen: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONFIGS}
    for repeat in range(args.repeats):
        for name, overrides in CONFIGS.items():
            # The card stays hot across the interleaved runs: 10 s of warm-up is plenty.
            cfg = harness.Config(**{"max_warmup_s": 10.0, **overrides})  # type: ignore[arg-type]
            t0 = time.perf_counter()
            target = harness.GpuTarget(0, None, None)
            r = harness.measure(torch, cfg, target, harness.Coordinator(1), 1, lambda m: None)
            wall = time.perf_counter() - t0
            mean_tflops = 2.0 * cfg.m * cfg.n * cfg.k / (r["stats"]["mean_ms"] * 1e-3) / 1e12
            seen[name].append((r["tflops"], mean_tflops, wall))
            print(f"repeat {repeat + 1} {name}: median-based {r['tflops']:.1f}, mean-based "
                  f"{mean_tflops:.1f} TFLOP/s, steady={r['warmup']['steady']} "
                  f"warm-up {r['warmup']['seconds']:.1f} s, wall {wall:.1f} s", flush=True)
    print(f"\n{'settings':16} {'median':>8} {'spread':>7} {'mean-based':>11} {'spread':>7}")
    for name, rows in seen.items():
        med = [r[0] for r in rows]
        mean = [r[1] for r in rows]
        print(f"{name:16} {statistics.median(med):8.1f} "
              f"{(max(med) - min(med)) / statistics.median(med) * 100:6.2f}% "
              f"{statistics.median(mean):11.1f} "
              f"{(max(mean) - min(mean)) / statistics.median(mean) * 100:6.2f}%")


if __name__ == "__main__":
    main()
