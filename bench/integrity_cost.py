"""What checking the product bit for bit under load costs (agent/matmul/integrity.py).

On every GPU at once, the harness's own continuous load (agent/matmul/harness.py, Runner) at the
standard 8192³ bf16: a warm-up, then blocks of load alternating without and with the
checks (one a soak window, as the harness does), so that the card's drift as it heats
falls on both alike. Throughput is the products over the wall time of the blocks (a
check runs between chunks, outside every CUDA-event-timed run, so the events would not
see it). Beside it, the check's own GPU time from CUDA events around the comparison
alone, and what one check a window costs from it: the A/B difference is bounded by the
blocks' noise (~0.2-0.7% on a power-capped H100), the event figure by nothing.

    python3 bench/integrity_cost.py                      # every GPU, ~80 s
    python3 bench/integrity_cost.py --block-s 10 --pairs 3 --out $OUT/integrity_cost.json
    python3 bench/integrity_cost.py --cpu --size 256 --block-s 1 --pairs 1 --warm-s 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.matmul import harness, integrity
from agent.timing import soak


def _load(runner: harness.Runner, seconds: float, check: integrity.Check | None,
          batch: int) -> tuple[int, float]:
    """Products done and wall seconds of `seconds` of continuous load."""
    stream = runner.continuous(lambda: batch)
    runs, start, end = 0, None, 0.0
    try:
        for c0, c1, got in stream:
            if check is not None:
                check.after_chunk(c1)
            start = c0 if start is None else start
            runs, end = runs + len(got), c1
            if end - start >= seconds:
                break
    finally:
        stream.close()
    if runner.stream is not None:
        runner.stream.synchronize()
    return runs, end - (start or end)


def compare_ms(torch: Any, runner: harness.Runner, reference: Any, repeats: int = 50) -> float:
    """GPU (or CPU) milliseconds of one comparison of the product with its reference."""
    def once() -> Any:
        return (runner.c.view(torch.int16) != reference.view(torch.int16)).sum()

    once()
    if not runner.cuda:
        t0 = time.perf_counter()
        for _ in range(repeats):
            once().item()
        return (time.perf_counter() - t0) * 1e3 / repeats
    with torch.cuda.stream(runner.stream):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(runner.stream)
        for _ in range(repeats):
            once()
        stop.record(runner.stream)
    stop.synchronize()
    return float(start.elapsed_time(stop)) / repeats


def one_gpu(torch: Any, cfg: harness.Config, index: int, args: argparse.Namespace,
            out: dict[int, dict[str, Any]], barrier: threading.Barrier) -> None:
    runner = harness.Runner(torch, cfg, harness.GpuTarget(index, None, None))
    runner.check()
    barrier.wait()
    t0 = time.perf_counter()
    per_run_ms = max(sorted(runner.timed(3))[1], (time.perf_counter() - t0) * 1e3 / 3, 1e-3)
    batch = max(2, int(soak.WINDOW_S / 4 * 1e3 / per_run_ms))
    _load(runner, args.warm_s, None, batch)
    flops = 2.0 * cfg.m * cfg.n * cfg.k
    off: list[float] = []
    on: list[float] = []
    check = integrity.Check(torch, runner.c, runner.stream, time.perf_counter(),
                            args.interval_s)
    for _ in range(args.pairs):
        for kind, into in (("off", off), ("on", on)):
            runs, wall = _load(runner, args.block_s, check if kind == "on" else None, batch)
            into.append(runs * flops / wall / 1e12)
    found = check.finish()
    ms = compare_ms(torch, runner, check.reference)
    level_off, level_on = statistics.fmean(off), statistics.fmean(on)
    out[index] = {
        "gpu": index, "device": torch.cuda.get_device_name(index) if runner.cuda else "cpu",
        "tflops_off": off, "tflops_on": on,
        "cost_ab": 1.0 - level_on / level_off,
        # The blocks' own scatter: an A/B difference inside it is noise.
        "block_spread": (max(off + on) - min(off + on)) / level_off,
        "compare_ms": ms, "interval_s": args.interval_s,
        "cost_events": ms / (args.interval_s * 1e3),
        "checks": found["checks"], "mismatches": found["mismatches"],
        "digest": found["digest"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=harness.DEFAULT_SIZE)
    parser.add_argument("--warm-s", type=float, default=20.0)
    parser.add_argument("--block-s", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--interval-s", type=float, default=soak.WINDOW_S)
    parser.add_argument("--cpu", action="store_true", help="the CPU path (a smoke test)")
    parser.add_argument("--out", help="write every figure here as JSON")
    args = parser.parse_args()
    torch = harness.import_torch()
    harness._configure_precision(torch, "bf16")
    cfg = harness.Config(m=args.size, n=args.size, k=args.size,
                         device="cpu" if args.cpu else "cuda")
    gpus = [0] if args.cpu else list(range(torch.cuda.device_count()))
    out: dict[int, dict[str, Any]] = {}
    barrier = threading.Barrier(len(gpus))
    threads = [threading.Thread(target=one_gpu, args=(torch, cfg, i, args, out, barrier))
               for i in gpus]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in gpus:
        r = out.get(i)
        if r is None:
            print(f"GPU {i}: failed (see the traceback above)")
            continue
        print(f"GPU {i} {r['device']}: off {statistics.fmean(r['tflops_off']):.1f} "
              f"on {statistics.fmean(r['tflops_on']):.1f} TFLOP/s "
              f"(A/B cost {100 * r['cost_ab']:+.3f}%, blocks spread "
              f"{100 * r['block_spread']:.2f}%); compare {r['compare_ms']:.3f} ms a check, "
              f"one per {r['interval_s']:g} s = {100 * r['cost_events']:.4f}% of GPU time; "
              f"{r['checks']} checks, {r['mismatches']} mismatched, digest {r['digest']}")
    if args.out:
        Path(args.out).write_text(json.dumps(list(out.values()), indent=1) + "\n")
    return 0 if len(out) == len(gpus) else 1


if __name__ == "__main__":
    sys.exit(main())
