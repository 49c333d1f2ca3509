"""Diagnostic: does the card's level depend on where the operands sit, or on the start?

The harness's five repeats on one card differ by 0.3-1.4% (bench/RESULTS.md, "Harness
1.2.0") while the two halves of one repeat agree within 0.1-0.25%: each repeat lands on a
level and keeps it. Two things change between repeats: the operands are allocated afresh
(other addresses), and the card starts from a pause. This separates them, in one process,
on GPU 0, with the harness's own inputs and unflushed back-to-back runs:

- A: copies of the same A, B and C at several places in memory, timed in turn without a
  gap (the next slot is queued before the last is collected), several rounds in a shuffled
  order. If the place matters, a copy keeps its level from round to round.
- B: one place, a pause of --pause-s before each of several cycles.
- C: fresh copies at a fresh place before each cycle, with the same pause.
- D (`--phases D`): how the level moves after a pause, by length of pause: for each pause in
  --pauses, idle that long, then --trace-s of runs traced in 0.5 s slots.

Every run's time and NVML telemetry are kept. Reads only; changes no GPU setting.

    python3 bench/placement_check.py --out $OUT/placement.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.matmul import harness
from agent.source.nvml import LiveNvml
from agent.timing import stats, telemetry


class Place:
    """One copy of the operands, behind a pad that moves it elsewhere in memory."""

    def __init__(self, torch: Any, a: Any, b: Any, pad_mib: int) -> None:
        self.pad = torch.empty(pad_mib << 20, dtype=torch.uint8, device=a.device)
        self.a, self.b = a.clone(), b.clone()
        self.c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        self.pad_mib = pad_mib
        self.ptrs = [t.data_ptr() for t in (self.a, self.b, self.c)]


def launch(torch: Any, stream: Any, place: Place, runs: int) -> list[tuple[Any, Any]]:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(runs)]
    with torch.cuda.stream(stream):
        for start, stop in pairs:
            start.record(stream)
            torch.matmul(place.a, place.b, out=place.c)
            stop.record(stream)
    return pairs


def collect(pairs: list[tuple[Any, Any]]) -> list[float]:
    pairs[-1][1].synchronize()
    return [float(s.elapsed_time(e)) for s, e in pairs]


def run_slots(torch: Any, stream: Any, slots: list[tuple[str, Place]], runs: int,
              sampler: telemetry.Sampler, flop: float) -> list[dict[str, Any]]:
    """Slots back to back: the next is queued before the host waits on the one before."""
    out: list[dict[str, Any]] = []
    pending = launch(torch, stream, slots[0][1], runs)
    t0 = time.perf_counter()
    for i, (label, place) in enumerate(slots):
        queued = launch(torch, stream, slots[i + 1][1], runs) if i + 1 < len(slots) else None
        times = collect(pending)
        t1 = time.perf_counter()
        out.append(summary(label, place, times, sampler.between(t0, t1), flop))
        t0 = t1
        if queued is not None:
            pending = queued
    return out


def summary(label: str, place: Place, times: list[float], seen: list[list[float]],
            flop: float) -> dict[str, Any]:
    tele = telemetry.summarise(seen)
    return {"label": label, "pad_mib": place.pad_mib, "ptrs": place.ptrs,
            "tflops": flop / (stats.trimmed_mean(times) * 1e-3) / 1e12,
            "tflops_median": flop / (statistics.median(times) * 1e-3) / 1e12,
            "runs": len(times), "sm_mhz": tele["sm_clock_mhz_median"],
            "power_w": tele["power_w_median"], "temp_c": tele["temperature_c_max"],
            "times_ms": [round(t, 5) for t in times]}


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--places", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--slot-s", type=float, default=1.5)
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--cycle-s", type=float, default=3.0)
    parser.add_argument("--pause-s", type=float, default=1.0)
    parser.add_argument("--warmup-s", type=float, default=20.0)
    parser.add_argument("--phases", default="ABC")
    parser.add_argument("--pauses", default="1,3,10,1,3,10")
    parser.add_argument("--trace-s", type=float, default=25.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch

    nvml = LiveNvml()
    sampler = telemetry.Sampler(nvml, nvml.device(0))
    cfg = harness.Config(m=args.size, n=args.size, k=args.size)
    runner = harness.Runner(torch, cfg, harness.GpuTarget(0, None, None))
    stream = runner.stream
    flop = 2.0 * args.size ** 3
    rng = random.Random(20261124)
    places = [Place(torch, runner.a, runner.b, pad_mib=37 + 211 * i)
              for i in range(args.places)]
    torch.cuda.synchronize()
    per_run = statistics.median(collect(launch(torch, stream, places[0], 5)))
    runs = max(10, int(args.slot_s * 1e3 / per_run))
    sampler.start()
    record: dict[str, Any] = {"size": args.size, "args": vars(args) | {"out": str(args.out)},
                              "per_run_ms": per_run}

    warm = max(1, round(args.warmup_s / args.slot_s))
    record["warmup"] = run_slots(torch, stream, [("warmup", places[0])] * warm, runs,
                                 sampler, flop)
    print("warm-up per slot:", [round(s["tflops"], 1) for s in record["warmup"]], flush=True)

    if "D" in args.phases:
        record["D"] = transient(torch, stream, places[0], per_run, args, sampler, flop)
    if "A" in args.phases:
        placements(torch, stream, places, runs, args, rng, sampler, flop, record)
    if "B" in args.phases or "C" in args.phases:
        pauses(torch, stream, places, runner, per_run, args, rng, sampler, flop, record)
    sampler.stop()
    args.out.write_text(json.dumps(record))


def transient(torch: Any, stream: Any, place: Place, per_run: float, args: Any,
              sampler: telemetry.Sampler, flop: float) -> list[dict[str, Any]]:
    traces = []
    runs = max(5, int(500 / per_run))
    for pause in (float(p) for p in args.pauses.split(",")):
        time.sleep(pause)
        slots = run_slots(torch, stream, [(f"D pause {pause}", place)]
                          * round(args.trace_s / 0.5), runs, sampler, flop)
        late = statistics.fmean(s["tflops"] for s in slots[-10:])
        per_s = [round(statistics.fmean(s["tflops"] for s in slots[i:i + 2]), 1)
                 for i in range(0, len(slots), 2)]
        print(f"D pause {pause} s: per second {per_s}; last 5 s {late:.1f}; "
              f"temp {slots[0]['temp_c']}->{slots[-1]['temp_c']} C, MHz "
              f"{[s['sm_mhz'] for s in slots[::4]]}", flush=True)
        for s in slots:
            s.pop("times_ms")
        traces.append({"pause_s": pause, "slots": slots})
    return traces


def placements(torch: Any, stream: Any, places: list[Place], runs: int, args: Any,
               rng: random.Random, sampler: telemetry.Sampler, flop: float,
               record: dict[str, Any]) -> None:
    order: list[tuple[str, Place]] = []
    for r in range(args.rounds):
        idx = list(range(args.places))
        rng.shuffle(idx)
        order += [(f"A r{r} p{i}", places[i]) for i in idx]
    record["A"] = run_slots(torch, stream, order, runs, sampler, flop)
    by_place: dict[int, list[float]] = {}
    for s in record["A"]:
        by_place.setdefault(int(s["label"].split("p")[-1]), []).append(s["tflops"])
    means = {p: statistics.fmean(v) for p, v in sorted(by_place.items())}
    within = statistics.fmean(statistics.stdev(v) for v in by_place.values())
    print("A: per place, each round (TFLOP/s):", flush=True)
    for p, v in sorted(by_place.items()):
        print(f"  place {p} (pad {places[p].pad_mib} MiB): {[round(x, 1) for x in v]} "
              f"mean {means[p]:.1f}", flush=True)
    print(f"A: spread of place means {spread(list(means.values())) * 100:.2f}%, "
          f"mean SD within a place across rounds {within:.2f} TFLOP/s, SD of place means "
          f"{statistics.stdev(means.values()):.2f}", flush=True)


def pauses(torch: Any, stream: Any, places: list[Place], runner: Any, per_run: float,
           args: Any, rng: random.Random, sampler: telemetry.Sampler, flop: float,
           record: dict[str, Any]) -> None:
    cycle_runs = max(10, int(args.cycle_s * 1e3 / per_run))
    record["B"], record["C"] = [], []
    for c in range(args.cycles):
        for phase in ("B", "C"):
            place = places[0]
            if phase == "C":
                place = Place(torch, runner.a, runner.b, pad_mib=rng.randrange(1, 2000))
                torch.cuda.synchronize()
            time.sleep(args.pause_s)
            t0 = time.perf_counter()
            times = collect(launch(torch, stream, place, cycle_runs))
            # The last two thirds: the start's own transient is not the level.
            late = times[len(times) // 3:]
            record[phase].append(summary(f"{phase} c{c}", place, late,
                                         sampler.between(t0, time.perf_counter()), flop))
            del place
    for phase, what in (("B", "same place, after a pause"),
                        ("C", "fresh place, after a pause")):
        v = [s["tflops"] for s in record[phase]]
        print(f"{phase} ({what}): {[round(x, 1) for x in v]} spread {spread(v) * 100:.2f}% "
              f"SD {statistics.stdev(v):.2f}; MHz {[s['sm_mhz'] for s in record[phase]]}",
              flush=True)


if __name__ == "__main__":
    main()
