"""Diagnostic: how long does a power-capped card dwell in each operating point?

Runs the harness's own flushed matmuls back to back in segments separated by short idle
gaps (as the fidelity bench's harness repeats are, with do_bench and torch.utils.benchmark
between them), then a stretch of CUDA-graph replays (the fidelity reference's protocol),
then flushed runs again. Every run is kept with its time on the GPU's clock, and NVML
telemetry is sampled throughout, so harness settings can be replayed offline on the trace.

Segment kinds (--plan): f = the harness's runs, each after the 1.1.0 flush (a memset of the
flush buffer); w = the same runs with nothing between them; g = CUDA-graph replays; i = idle;
and other separators over the same buffer, to find one that evicts the L2 without steering
the card into its slower operating point (bench/RESULTS.md): r = a read (a sum of the
buffer into one float), p = a memset with a non-zero byte, c = a copy of one half of the
buffer onto the other. --evict checks that each separator evicts the L2: after each kind it
times a second pass over a 20 MiB tensor that the first pass left in the L2.

    python3 bench/harness_dwell.py --out $OUT/dwell.json
    python3 bench/harness_dwell.py --plan f10,r10,f10,w10,g10 --evict --out $OUT/dwell.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness_fidelity import PER_GRAPH, replay_batches  # bench/, beside this file

Separator = Callable[[], None] | None


def separators(torch: Any, buf: Any) -> dict[str, Separator]:
    """What may run between two timed products, each over the whole flush buffer."""
    words = buf.view(torch.float32)  # a uint8 sum would widen every byte to int64
    sink = torch.zeros((), dtype=torch.float32, device=buf.device)
    half = buf.numel() // 2
    return {
        "f": buf.zero_,
        "r": lambda: torch.sum(words, dim=0, out=sink),
        "p": lambda: buf.fill_(0x5A),
        "c": lambda: buf[:half].copy_(buf[half:2 * half]),
        "w": None,
    }


def launch(torch: Any, runner: Any, runs: int, sep: Separator) -> list[tuple[Any, Any]]:
    """The harness's own run (Runner._one) with `sep` in place of its flush."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(runs)]
    with torch.cuda.stream(runner.stream):
        for start, stop in pairs:
            if sep is not None:
                sep()
            start.record(runner.stream)
            torch.matmul(runner.a, runner.b, out=runner.c)
            stop.record(runner.stream)
    return pairs


def flushed_segment(torch: Any, runner: Any, seconds: float, origin: Any,
                    t_origin: float, sep: Separator) -> list[tuple[float, float]]:
    """Back-to-back runs, `sep` before each, for `seconds`: (GPU time of the stop event
    since the origin event in s, run time in ms)."""
    rows: list[tuple[float, float]] = []
    batch = 150
    pending = launch(torch, runner, batch, sep)
    t0 = time.perf_counter()
    while True:
        done = time.perf_counter() - t0 >= seconds
        queued = None if done else launch(torch, runner, batch, sep)
        pending[-1][1].synchronize()
        for start, stop in pending:
            rows.append((origin.elapsed_time(stop) / 1e3 + t_origin,
                         float(start.elapsed_time(stop))))
        if queued is None:
            break
        pending = queued
    return rows


def graph_segment(torch: Any, runner: Any, seconds: float, origin: Any,
                  t_origin: float, sep: Separator = None) -> list[tuple[float, float]]:
    rows: list[tuple[float, float]] = []
    for _, pairs in replay_batches(torch, runner.a, runner.b, runner.c, runner.stream,
                                   seconds):
        for start, stop in pairs:
            rows.append((origin.elapsed_time(stop) / 1e3 + t_origin,
                         float(start.elapsed_time(stop)) / PER_GRAPH))
    return rows


def eviction_check(torch: Any, runner: Any, seps: dict[str, Separator],
                   reps: int = 40) -> dict[str, dict[str, float]]:
    """Median time of a bandwidth-bound pass over a 20 MiB tensor right after the same pass
    warmed it into the L2, with each separator between the two, and the separator's own
    time. Without one ("w") the second pass hits the L2; a separator that evicts the L2
    makes it as slow as after "f", whose memset of twice the L2 is the protocol's flush.
    Two probes: a row-wise sum (reads 20 MiB) and an in-place scale (reads and writes it)."""
    x = torch.randn(5 * 1024 * 1024, device=runner.device)  # 20 MiB of float32
    rows = x.view(-1, 256)
    small = torch.empty(rows.shape[0], device=runner.device)
    probes: dict[str, Callable[[], Any]] = {
        "rowsum": lambda: torch.sum(rows, dim=1, out=small),
        "scale": lambda: x.mul_(1.0000001),
    }
    torch.cuda.synchronize()  # x was made on the default stream
    out: dict[str, dict[str, float]] = {}
    with torch.cuda.stream(runner.stream):
        for kind, sep in seps.items():
            seen: dict[str, float] = {}
            for name, probe in probes.items():
                again, cost = [], []
                for _ in range(reps):
                    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                    # Keep the GPU busy while the rest is queued: otherwise it waits on
                    # each launch, and the launch gap (~15 us) is what gets timed.
                    torch.cuda._sleep(1_000_000)
                    probe()
                    events[0].record(runner.stream)
                    if sep is not None:
                        sep()
                    events[1].record(runner.stream)
                    events[2].record(runner.stream)
                    probe()
                    events[3].record(runner.stream)
                    events[3].synchronize()
                    cost.append(events[0].elapsed_time(events[1]) * 1e3)
                    again.append(events[2].elapsed_time(events[3]) * 1e3)
                seen[f"{name}_us"] = statistics.median(again[5:])
                seen["separator_us"] = statistics.median(cost[5:])
            out[kind] = seen
    return out


def kernel_names(torch: Any, runner: Any) -> dict[str, list[str]]:
    from torch.profiler import ProfilerActivity, profile

    def names(prof: Any) -> list[str]:
        return sorted({e.name[:90] for e in prof.events() if "memset" not in e.name.lower()
                       and ("gemm" in e.name.lower() or "sm90" in e.name.lower()
                            or "nvjet" in e.name.lower() or "cutlass" in e.name.lower())})

    out = {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner.timed(2)
    out["eager"] = names(prof)
    stream = runner.stream
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        torch.matmul(runner.a, runner.b, out=runner.c)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    out["graph"] = names(prof)
    return out


def per_second(rows: list[tuple[float, float]], size: int) -> list[tuple[int, float]]:
    out = []
    if not rows:
        return out
    first = int(rows[0][0])
    for sec in range(first, int(rows[-1][0]) + 1):
        chunk = [ms for t, ms in rows if sec <= t < sec + 1]
        if chunk:
            mean_ms = sum(chunk) / len(chunk)
            out.append((sec, 2.0 * size**3 / (mean_ms * 1e-3) / 1e12))
    return out


def state(mhz: float, watts: float) -> str:
    """The two operating points seen on lent H100s (bench/RESULTS.md): L at 1455-1500 MHz
    and 690-693 W, H at 1335-1395 MHz and 696-699 W."""
    if watts >= 695.0 and mhz < 1425.0:
        return "H"
    if watts < 694.5 and mhz >= 1425.0:
        return "L"
    return "?"


def summary(segments: list[dict[str, Any]], samples: list[Any], size: int,
            t_origin: float) -> list[dict[str, Any]]:
    """Each segment's throughput, clock, power and state over its whole length and its
    second half (the first seconds after a switch of separator are the transition)."""
    out = []
    for seg in segments:
        rows = seg["rows"]
        if not rows:
            continue
        t_a, t_b = rows[0][0], rows[-1][0]
        entry: dict[str, Any] = {"kind": seg["kind"], "from_s": round(t_a - t_origin, 1),
                                 "to_s": round(t_b - t_origin, 1)}
        for label, lo in (("all", t_a), ("late", (t_a + t_b) / 2)):
            ms = [m for t, m in rows if t >= lo]
            tele = [x for x in samples if lo <= x[0] <= t_b]
            mhz = statistics.median(x[1] for x in tele) if tele else float("nan")
            watts = statistics.median(x[3] for x in tele) if tele else float("nan")
            per_s = [tf for sec, tf in per_second(rows, size) if sec >= int(lo)]
            seconds = [state(statistics.median(x[1] for x in c), statistics.median(x[3] for x in c))
                       for sec in range(int(lo), int(t_b) + 1)
                       if (c := [x for x in tele if sec <= x[0] < sec + 1])]
            entry[label] = {
                "tflops": round(2.0 * size**3 / (statistics.median(ms) * 1e-3) / 1e12, 1),
                "per_second_min_max": [round(min(per_s), 1), round(max(per_s), 1)]
                if per_s else None,
                "sm_clock_mhz": mhz, "power_w": round(watts, 1), "state": state(mhz, watts),
                "seconds_L_H_other": [seconds.count("L"), seconds.count("H"),
                                      seconds.count("?")]}
        out.append(entry)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--plan", default="f18,i1.5,f18,i1.5,f18,i1.5,f18,i1.5,f18,i1.5,"
                        "f18,i1.5,g60,i1.5,f30",
                        help="segments of KIND SECONDS: f memset flush, r read flush, p "
                             "non-zero memset, c half-to-half copy, w no flush, g graph "
                             "replays, i idle")
    parser.add_argument("--evict", action="store_true",
                        help="after the plan, check that each separator evicts the L2")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kernels", action="store_true",
                        help="first print the GEMM kernels of an eager run and a graph replay")
    args = parser.parse_args()

    import torch

    from agent.matmul import harness
    from agent.source.nvml import LiveNvml
    from agent.timing import telemetry

    nvml = LiveNvml()
    handle = nvml.device(0)
    sampler = telemetry.Sampler(nvml, handle, interval_s=0.02)
    cfg = harness.Config(m=args.size, n=args.size, k=args.size, flush="always")  # its "f"
    target = harness.GpuTarget(0, 0, None, nvml, handle)
    runner = harness.Runner(torch, cfg, target)
    err, _ = runner.check()
    seps = separators(torch, runner.flush)
    try:
        serial = nvml.call(handle, "nvmlDeviceGetSerial")
    except Exception as exc:  # the serial only labels the card
        serial = f"unknown ({exc})"
    print(f"card serial {serial}", flush=True)
    if args.kernels:
        print("kernels:", kernel_names(torch, runner), flush=True)
    sampler.start()
    time.sleep(0.5)
    origin = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    origin.record(runner.stream)
    runner.stream.synchronize()
    t_origin = time.perf_counter()
    segments = []
    for step in args.plan.split(","):
        kind, seconds = step[0], float(step[1:])
        t0 = time.perf_counter()
        if kind == "i":
            time.sleep(seconds)
            continue
        func = graph_segment if kind == "g" else flushed_segment
        rows = func(torch, runner, seconds, origin, t_origin, seps.get(kind))
        segments.append({"kind": kind, "host_start": t0, "rows": rows})
        secs = per_second(rows, args.size)
        print(f"segment {kind}{seconds:g} from {t0 - t_origin:.1f} s: per-second TFLOP/s "
              + " ".join(f"{v:.0f}" for _, v in secs), flush=True)
    sampler.stop()
    evict: dict[str, dict[str, float]] = {}
    if args.evict:
        # R: a read of four times the flush buffer, surely past the L2: if the pass after
        # "r" is as slow as after "R", reading the buffer once evicted all of the L2.
        big = torch.zeros(4 * runner.flush.numel(), dtype=torch.uint8, device=runner.device)
        big_words = big.view(torch.float32)
        big_sink = torch.zeros((), dtype=torch.float32, device=runner.device)
        kinds = dict(seps, R=lambda: torch.sum(big_words, dim=0, out=big_sink))
        evict = eviction_check(torch, runner, kinds)
    for kind, seen in evict.items():
        print(f"eviction {kind}: " + ", ".join(f"{k} {v:.1f}" for k, v in seen.items()),
              flush=True)
    samples = sampler.between(t_origin - 1, time.perf_counter() + 1)
    table = summary(segments, samples, args.size, t_origin)
    args.out.write_text(json.dumps({
        "size": args.size, "correctness": err, "t_origin": t_origin, "serial": serial,
        "plan": args.plan, "eviction": evict, "summary": table,
        "segments": [{"kind": s["kind"], "host_start": s["host_start"] - t_origin,
                      "rows": [[round(t - t_origin, 5), round(ms, 5)] for t, ms in s["rows"]]}
                     for s in segments],
        "telemetry": [[round(s[0] - t_origin, 4), *s[1:]] for s in samples],
    }))
    # Per-second telemetry beside throughput, for the log.
    for s in segments:
        for sec, tf in per_second(s["rows"], args.size):
            chunk = [x for x in samples if sec <= x[0] < sec + 1]
            if chunk:
                print(f"{sec - t_origin:6.1f} s {s['kind']} {tf:6.1f} TFLOP/s SM "
                      f"{statistics.median(x[1] for x in chunk):6.1f} MHz mem "
                      f"{statistics.median(x[2] for x in chunk):5.0f} "
                      f"{statistics.median(x[3] for x in chunk):5.1f} W "
                      f"{max(x[4] for x in chunk):3.0f} C reasons "
                      f"{sorted({int(x[5]) for x in chunk if x[5] == x[5]})}")
    print(f"card {serial}; segment, whole | second half: TFLOP/s (per-second range), SM MHz, "
          f"W, state, seconds in L/H/other")
    for e in table:
        print(f"{e['kind']} {e['from_s']:6.1f}-{e['to_s']:6.1f} s: " + " | ".join(
            f"{x['tflops']:.1f} ({x['per_second_min_max']}) {x['sm_clock_mhz']:.0f} MHz "
            f"{x['power_w']:.1f} W {x['state']} {x['seconds_L_H_other']}"
            for x in (e["all"], e["late"])))
    for kind, seen in evict.items():
        print(f"eviction {kind} (20 MiB pass after it): "
              + ", ".join(f"{k} {v:.1f}" for k, v in seen.items()))


if __name__ == "__main__":
    main()
