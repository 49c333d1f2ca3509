"""How trustworthy is the harness's number? Run on the device tool (a real GPU).

In one call, on M=N=K (8192 by default) bf16, five times each and interleaved: fleet's
harness, `triton.testing.do_bench` (median) and `torch.utils.benchmark` (blocked
autorange), with --nvbench NVIDIA's nvbench (cuda-bench, its default and its entropy
criterion, a burst figure), and the reference's protocol cut to 18 s (--short-reference-s),
which says how much the card itself moves between the repeats' slots. Before them,
--soak-s of graph replays (not counted) bring the card to its working temperature. Then a
long steady-state reference: back-to-back CUDA-graph replays for --reference-s seconds, of
which the last half counts. Prints a table (method, median TFLOP/s, spread across
repeats, wall time per repeat) and writes everything as JSON.

The reference is the work its last half did over the time it took (total FLOPs over total
GPU time, the throughput a training job gets); the median of its per-replay times is
printed beside it, as is the harness's own median-based figure (its headline before 1.2).

    python3 bench/harness_fidelity.py --out $OUT/fidelity.json

With --soak-check (harness 1.3's judgement, issue "Sustained means soaked"): five runs of
the agent's default, soaked benchmark (`python3 -m agent bench`, what `fleet bench` and
`fleet probe` run), each in a process of its own started after a pause of at least 20 s
as a probe finds a card, with the long reference between the second and the third: 300 s
of continuous graph replays from wherever the card is, the level of its last 120 s, in a
process of its own too (no process holds the GPU while the agent measures, which it
would flag as contention). A --quick run ends it. Prints each run's soaked figure, the
level of its first 20 s, its soak and wall time, and the goals.

    python3 bench/harness_fidelity.py --soak-check --out $OUT/soak.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.gpu.fingerprint import fingerprint_gpu, read_system
from agent.matmul import harness
from agent.source.nvml import LiveNvml


def flops(size: int) -> float:
    return 2.0 * size**3


def inputs(torch: Any, size: int) -> tuple[Any, Any, Any]:
    """The harness's own inputs: on a power-capped card the data's values change the power
    per FLOP, so every method must multiply the same matrices."""
    cfg = harness.Config(m=size, n=size, k=size, warm_l2=True)
    runner = harness.Runner(torch, cfg, harness.GpuTarget(0, None, None))
    return runner.a, runner.b, runner.c


def run_harness(torch: Any, size: int, gpus: list[dict[str, Any]], nvml: Any,
                flush: str = "auto") -> dict[str, Any]:
    cfg = harness.Config(m=size, n=size, k=size, gpus=[0], flush=flush)
    t0 = time.perf_counter()
    results, errors = harness.run(cfg, gpus, nvml, lambda message: None)
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(errors)
    r = results[0]
    return {"tflops": r["tflops"], "statistic": r["statistic"],
            "tflops_median": flops(size) / (r["stats"]["median_ms"] * 1e-3) / 1e12,
            # Harness 1.4 names it for what it is; 1.2-1.3 called it tflops_ci95.
            "within_run_ci95": r["measurement"].get("within_run_ci95",
                                                    r["measurement"].get("tflops_ci95")),
            "stats": r["stats"],
            "wall_s": wall, "steady": r["warmup"]["steady"],
            "warmup_s": r["warmup"]["seconds"], "runs": r["stats"]["runs"],
            "window_trimmed_means_ms": r["warmup"]["window_trimmed_means_ms"],
            "cv": r["stats"]["cv"], "telemetry": r["telemetry"], "flags": r["flags"],
            "correctness": r["correctness"], "state": r["warmup"]["state"],
            "measurement": r["measurement"], "harness_wall_s": r["wall_s"],
            "l2_flush": r["provenance"]["l2_flush"], "samples_ms": r["samples_ms"]}


def run_harness_always(torch: Any, size: int, gpus: list[dict[str, Any]],
                       nvml: Any) -> dict[str, Any]:
    """The harness with `flush="always"`: the L2 flushed before every run (1.1's default)."""
    return run_harness(torch, size, gpus, nvml, flush="always")


def run_do_bench(torch: Any, size: int) -> dict[str, Any]:
    import triton.testing

    a, b, c = inputs(torch, size)
    t0 = time.perf_counter()
    ms = triton.testing.do_bench(lambda: torch.matmul(a, b, out=c), return_mode="median")
    wall = time.perf_counter() - t0
    return {"tflops": flops(size) / (ms * 1e-3) / 1e12, "wall_s": wall}


def run_torch_benchmark(torch: Any, size: int) -> dict[str, Any]:
    import torch.utils.benchmark as tub

    a, b, c = inputs(torch, size)
    timer = tub.Timer(stmt="torch.matmul(a, b, out=c)", globals={"torch": torch, "a": a,
                                                                "b": b, "c": c})
    t0 = time.perf_counter()
    measurement = timer.blocked_autorange()
    wall = time.perf_counter() - t0
    return {"tflops": flops(size) / measurement.median / 1e12, "wall_s": wall}


def run_nvbench(torch: Any, size: int, criterion: str | None = None) -> dict[str, Any]:
    """NVIDIA's nvbench on the same product, in a process of its own as a user runs it
    (bench/nvbench_matmul.py); the wall time includes that process's start."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "nvbench.json"
        command = [sys.executable, str(Path(__file__).with_name("nvbench_matmul.py")),
                   "--size", str(size), "--out", str(out)]
        if criterion:
            command += ["--criterion", criterion]
        t0 = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"nvbench failed ({done.returncode}): {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
    result["wall_s"] = wall
    # Each sample nvbench threw away because the clock had fallen below 75% of its
    # maximum: the power cap at work, which its cold figure steps around.
    result["throttle_warnings"] = done.stdout.count("GPU throttled below threshold")
    result["output_tail"] = done.stdout[-4000:]
    return result


def run_nvbench_entropy(torch: Any, size: int) -> dict[str, Any]:
    return run_nvbench(torch, size, "entropy")


PER_GRAPH = 10  # products per graph: the replay's own launch is spread over ten


def replay_batches(torch: Any, a: Any, b: Any, c: Any, stream: Any, seconds: float
                   ) -> Iterator[tuple[float, list[tuple[Any, Any]]]]:
    """Back-to-back replays of a graph of PER_GRAPH products on `stream`, for `seconds`:
    batches of 20 replays, each timed by its own events, each batch waited for on its last
    stop event and given with the seconds since the first was queued. The reference's
    protocol; bench/harness_dwell.py's graph segments use it too."""
    with torch.cuda.stream(stream):
        for _ in range(3):
            torch.matmul(a, b, out=c)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(PER_GRAPH):
            torch.matmul(a, b, out=c)
    t0 = time.perf_counter()
    with torch.cuda.stream(stream):
        while time.perf_counter() - t0 < seconds:
            pairs = []
            for _ in range(20):
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                graph.replay()
                stop.record(stream)
                pairs.append((start, stop))
            pairs[-1][1].synchronize()
            yield time.perf_counter() - t0, pairs


def reference(torch: Any, size: int, seconds: float, nvml: Any = None,
              late_s: float | None = None, nvml_index: int = 0) -> dict[str, Any]:
    """Back-to-back replays of a graph of 10 products (warm L2, no gaps); the last `late_s`
    seconds count (by default the last half). Telemetry is sampled throughout, as the
    harness does, from NVML's GPU `nvml_index` (torch's cuda:0 is that GPU when the
    caller set CUDA_VISIBLE_DEVICES so: bench/node_reference.py)."""
    from agent.timing import telemetry

    sampler = telemetry.Sampler(nvml, nvml.device(nvml_index) if nvml is not None else None)
    a, b, c = inputs(torch, size)
    times: list[tuple[float, float]] = []
    sampler.start()
    t0 = time.perf_counter()
    for now, pairs in replay_batches(torch, a, b, c, torch.cuda.Stream(), seconds):
        times += [(now, s.elapsed_time(e) / PER_GRAPH) for s, e in pairs]
    sampler.stop()
    counted_from = seconds / 2 if late_s is None else seconds - late_s
    late = [ms for when, ms in times if when >= counted_from]
    med = statistics.median(late)
    mean = statistics.fmean(late)  # every replay does the same work: total time / count
    # Per 5 s of the whole run, to show when it settled, with the card's clock and power.
    trace, tele = [], []
    for lo in range(0, int(seconds), 5):
        chunk = [ms for when, ms in times if lo <= when < lo + 5]
        if chunk:
            trace.append(round(flops(size) / (statistics.median(chunk) * 1e-3) / 1e12, 1))
            seen = telemetry.summarise(sampler.between(t0 + lo, t0 + lo + 5))
            tele.append([seen["sm_clock_mhz_median"], seen["power_w_median"],
                         seen["temperature_c_max"]])
    late_tele = telemetry.summarise(sampler.between(t0 + counted_from, t0 + seconds + 1))
    return {"tflops": flops(size) / (mean * 1e-3) / 1e12, "counted_from_s": counted_from,
            "tflops_median": flops(size) / (med * 1e-3) / 1e12, "replays": len(late),
            "seconds": seconds, "per_5s": trace, "per_5s_mhz_w_c": tele,
            "telemetry": late_tele}


def run_short_reference(torch: Any, size: int, nvml: Any, seconds: float) -> dict[str, Any]:
    """The reference's own protocol cut to the harness's wall budget, in each repeat's slot:
    how much the card itself moves between the slots (its thermal and power state follows
    what ran before), with no harness logic in the way. No 20-s method can spread less than
    the card does."""
    t0 = time.perf_counter()
    result = reference(torch, size, seconds, nvml)
    result["wall_s"] = time.perf_counter() - t0
    return result


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


SOAK_PAUSE_S = 20.0
REFERENCE_S = 300.0
REFERENCE_LATE_S = 120.0


def agent_run(extra: list[str], log: Any) -> dict[str, Any]:
    """`python3 -m agent bench` as `fleet bench` runs it, after the pause a probe finds a
    card in; its document's first result, and the process's own wall time."""
    time.sleep(SOAK_PAUSE_S)
    repo = Path(__file__).resolve().parent.parent
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "agent", "bench", *extra], cwd=repo,
                          capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    for line in done.stdout.splitlines()[:-1]:
        print("   ", json.loads(line)["message"], file=log, flush=True)
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"agent bench failed ({done.returncode}): {done.stderr[-2000:]}")
    document = json.loads(done.stdout.splitlines()[-1])["document"]
    if not document["benchmarks"]:
        raise RuntimeError(f"agent bench measured nothing: {document['errors']}")
    return {"result": document["benchmarks"][0], "process_wall_s": wall,
            "errors": document["errors"]}


def reference_run(size: int) -> dict[str, Any]:
    """The long reference, in a process of its own (--reference-only)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "reference.json"
        subprocess.run([sys.executable, __file__, "--reference-only", "--size", str(size),
                        "--out", str(out)], check=True, timeout=REFERENCE_S + 300)
        result: dict[str, Any] = json.loads(out.read_text())
    return result


def soak_line(run: dict[str, Any]) -> str:
    r = run["result"]
    soak = r.get("soak") or {}
    tele = r["telemetry"]
    first = soak.get("first_20s_tflops")
    return (f"{r['tflops']:.1f} TFLOP/s {r['thermal']}"
            + (f", first 20 s {first:.1f} (drop {100 * soak['drop']:+.2f}%)" if first else "")
            + (f", soak {soak['seconds']:.0f} s ({'soaked' if soak['soaked'] else 'NOT soaked'}"
               f" at {soak['settled_s']} s; throughput {soak['throughput_change']}, "
               f"temperature {soak['temperature_change_c']} C over the span)" if soak else
               f", warm-up {r['warmup']['seconds']:.1f} s ({r['warmup']['state']})")
            + f", {soak.get('temperature_c') or tele['temperature_c_max']} C, "
              f"{tele['sm_clock_mhz_median']} MHz, {tele['power_w_median']} W, "
              f"measured {r['measurement']['seconds']:.0f} s, harness wall {r['wall_s']:.0f} s, "
              f"process {run['process_wall_s']:.0f} s, flags "
              f"{[k for k, v in r['flags'].items() if v]}")


def soak_check(size: int, repeats: int, out: Path, second_reference: bool) -> None:
    """The judgement of harness 1.3's soaked figure against the long reference (and, with
    `second_reference`, a second one after the last repeat: how far the card's own
    continuous level moves over the same minutes)."""
    log = sys.stdout
    runs: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []

    def take_reference() -> None:
        ref = reference_run(size)
        refs.append(ref)
        print(f"reference {len(refs)}: {ref['tflops']:.1f} TFLOP/s over its last "
              f"{REFERENCE_LATE_S:g} s of {REFERENCE_S:g}; per 5 s {ref['per_5s']}; "
              f"per 5 s MHz, W, C {ref['per_5s_mhz_w_c']}", flush=True)

    for repeat in range(repeats):
        if repeat == min(2, repeats - 1):
            take_reference()
        run = agent_run(["--size", str(size)], log)
        runs.append(run)
        print(f"repeat {repeat + 1}: {soak_line(run)}", flush=True)
    if second_reference:
        take_reference()
    quick = agent_run(["--size", str(size), "--quick"], log)
    print(f"quick: {soak_line(quick)}", flush=True)
    reference_tflops = statistics.fmean(ref["tflops"] for ref in refs)
    values = [run["result"]["tflops"] for run in runs]
    firsts = [run["result"]["soak"]["first_20s_tflops"] for run in runs]
    summary = {
        "reference_tflops": reference_tflops, "references": [r["tflops"] for r in refs],
        "soaked_tflops": values, "soaked_median": statistics.median(values),
        "vs_reference": statistics.median(values) / reference_tflops - 1,
        "each_vs_reference": [v / reference_tflops - 1 for v in values],
        "spread": spread(values),
        "temperature_c": [run["result"]["soak"]["temperature_c"] for run in runs],
        "first_20s_tflops": firsts, "first_20s_vs_reference":
            statistics.median(firsts) / reference_tflops - 1,
        "quick_tflops": quick["result"]["tflops"],
        "quick_vs_reference": quick["result"]["tflops"] / reference_tflops - 1,
        "process_wall_s": [run["process_wall_s"] for run in runs],
        "soaked": [run["result"]["soak"]["soaked"] for run in runs],
    }
    out.write_text(json.dumps({"size": size, "summary": summary, "references": refs,
                               "runs": runs, "quick": quick}, indent=1))
    each = ", ".join(f"{v:.1f}" for v in values)
    print(f"\nsoaked {statistics.median(values):.1f} (each {each}) vs reference "
          f"{reference_tflops:.1f} ({', '.join(f'{r:.1f}' for r in summary['references'])}): "
          f"{100 * summary['vs_reference']:+.2f}% (goal within 0.3%); spread "
          f"{100 * summary['spread']:.2f}% (goal at most 0.5%); process wall "
          f"{max(summary['process_wall_s']):.0f} s at most (goal at most 150); first 20 s "
          f"{statistics.median(firsts):.1f} ({100 * summary['first_20s_vs_reference']:+.2f}%); "
          f"quick {summary['quick_tflops']:.1f} ({100 * summary['quick_vs_reference']:+.2f}%)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference-s", type=float, default=60.0)
    parser.add_argument("--soak-s", type=float, default=60.0,
                        help="graph replays before the first repeat, not counted: the card "
                             "starts the repeats at its working temperature rather than "
                             "warming through them (a fresh card moved 1%% in 4 minutes); "
                             "0 for none")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--also-flush-always", action="store_true",
                        help="add a method: the harness with flush=always (the L2 "
                             "flushed before every run, as 1.1 did by default)")
    parser.add_argument("--nvbench", action="store_true",
                        help="add two methods: NVIDIA's nvbench (PyPI cuda-bench) with its "
                             "default and its entropy stopping criterion, each run as a "
                             "process of its own (bench/nvbench_matmul.py); a burst figure")
    parser.add_argument("--short-reference-s", type=float, default=18.0,
                        help="add a method: the reference's graph replays for this long "
                             "(its last half counted) in each repeat's slot, the card's own "
                             "spread between slots; 0 leaves it out")
    parser.add_argument("--soak-check", action="store_true",
                        help="harness 1.3's judgement: five soaked agent runs around a 300-s "
                             "reference (see the module's docstring)")
    parser.add_argument("--second-reference", action="store_true",
                        help="with --soak-check: a second long reference after the last repeat")
    parser.add_argument("--reference-only", action="store_true", help=argparse.SUPPRESS)
    # With --reference-only (bench/node_reference.py runs one a GPU, all at once).
    parser.add_argument("--gpu", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--late-s", type=float, default=REFERENCE_LATE_S,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.soak_check:
        soak_check(args.size, args.repeats, args.out, args.second_reference)
        return

    import torch

    if args.reference_only:
        nvml = LiveNvml()
        seconds = REFERENCE_S if args.reference_s == 60.0 else args.reference_s
        ref = reference(torch, args.size, seconds, nvml, late_s=min(args.late_s, seconds / 2),
                        nvml_index=args.gpu)
        args.out.write_text(json.dumps(ref))
        return

    nvml = LiveNvml()
    system = read_system(nvml)
    gpus = [fingerprint_gpu(nvml, i, system, euid=0) for i in range(system["gpu_count"])]
    methods = {"fleet harness": run_harness, "triton do_bench": run_do_bench,
               "torch.utils.benchmark": run_torch_benchmark}
    if args.also_flush_always:
        methods["fleet, flush always"] = run_harness_always
    if args.nvbench:
        methods["nvbench"] = run_nvbench
        methods["nvbench entropy"] = run_nvbench_entropy
    if args.short_reference_s > 0:
        methods[f"graph {args.short_reference_s:g} s"] = run_short_reference
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in methods}
    soak = None
    if args.soak_s > 0:
        soak = reference(torch, args.size, args.soak_s, nvml)
        print(f"soak: {args.soak_s:g} s of graph replays, not counted; per 5 s "
              f"{soak['per_5s']}; per 5 s MHz, W, C {soak['per_5s_mhz_w_c']}", flush=True)
    for repeat in range(args.repeats):
        for name, func in methods.items():
            if func in (run_harness, run_harness_always):
                result = func(torch, args.size, gpus, nvml)
            elif func is run_short_reference:
                result = func(torch, args.size, nvml, args.short_reference_s)
            else:
                result = func(torch, args.size)
            runs[name].append(result)
            extra = ""
            if "steady" in result:
                tele = result["telemetry"]
                meas = result["measurement"]
                points = ", ".join(f"{p['tflops']:.1f} x{p['share']:.2f} "
                                   f"@{p['sm_clock_mhz']} MHz" for p in meas["operating_points"])
                extra = (f" {result['state']} after {result['warmup_s']:.1f} s, measured "
                         f"{meas['seconds']:.1f} s, SM {tele['sm_clock_mhz_median']} MHz, "
                         f"{tele['power_w_median']} W, {tele['temperature_c_max']} C; "
                         f"levels {points}")
                extra += (f"; median-based {result['tflops_median']:.1f}, "
                          f"within-run interval {result['within_run_ci95']}")
            elif "per_5s" in result:
                tele = result["telemetry"]
                extra = (f" per 5 s {result['per_5s']}, SM {tele['sm_clock_mhz_median']} MHz, "
                         f"{tele['power_w_median']} W, {tele['temperature_c_max']} C")
            elif "batch_tflops" in result:
                extra = (f" cold; batch {result['batch_tflops']:.1f}; "
                         f"{result['throttle_warnings']} samples dropped as throttled")
            print(f"repeat {repeat + 1} {name}: {result['tflops']:.1f} TFLOP/s "
                  f"({result['wall_s']:.1f} s){extra}", flush=True)
    ref = reference(torch, args.size, args.reference_s, nvml)
    print(f"reference: {ref['tflops']:.1f} TFLOP/s (median replay: "
          f"{ref['tflops_median']:.1f}) over {ref['replays']} graph replays; "
          f"per 5 s: {ref['per_5s']}; per 5 s MHz, W, C: {ref['per_5s_mhz_w_c']}", flush=True)
    # nvbench's second figure, from the same runs: its batch (back-to-back) mean.
    for name in [n for n, results in runs.items() if results[0].get("batch_tflops")]:
        runs[f"{name}, batch"] = [{**r, "tflops": r["batch_tflops"]} for r in runs[name]]
    table = []
    for name, results in runs.items():
        values = [r["tflops"] for r in results]
        med = statistics.median(values)
        row = {"method": name, "median_tflops": med, "spread": spread(values),
               "vs_reference": med / ref["tflops"] - 1,
               "wall_s_median": statistics.median(r["wall_s"] for r in results),
               "wall_s_max": max(r["wall_s"] for r in results), "values": values}
        if "tflops_median" in results[0]:
            # The same runs with the median as the statistic, against the median reference.
            by_median = [r["tflops_median"] for r in results]
            row["by_median"] = {"median_tflops": statistics.median(by_median),
                                "spread": spread(by_median), "values": by_median,
                                "vs_median_reference": statistics.median(by_median)
                                / ref["tflops_median"] - 1}
        table.append(row)
    args.out.write_text(json.dumps({"size": args.size, "device": gpus[0]["name"],
                                    "serial": gpus[0].get("serial"),
                                    "driver": system["driver_version"],
                                    "torch": torch.__version__, "reference": ref, "soak": soak,
                                    "table": table, "runs": runs}, indent=1))
    print(f"\n{'method':24} {'median TFLOP/s':>15} {'spread':>8} {'vs ref':>8} {'wall s':>7} "
          f"{'max':>5}")
    for row in table:
        print(f"{row['method']:24} {row['median_tflops']:15.1f} {row['spread'] * 100:7.2f}% "
              f"{row['vs_reference'] * 100:+7.2f}% {row['wall_s_median']:7.1f} "
              f"{row['wall_s_max']:5.1f}")
    print(f"{'reference (graph, late)':24} {ref['tflops']:15.1f}")
    print("\nthe same runs by their median (the statistic before 1.2), against the median "
          f"replay {ref['tflops_median']:.1f}:")
    for row in table:
        if "by_median" in row:
            m = row["by_median"]
            print(f"{row['method']:24} {m['median_tflops']:15.1f} {m['spread'] * 100:7.2f}% "
                  f"{m['vs_median_reference'] * 100:+7.2f}%")


if __name__ == "__main__":
    main()
