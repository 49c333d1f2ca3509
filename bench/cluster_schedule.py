"""How long a cluster's tests take, and how that grows with its node count.

For each node count: the schedule fleet/cluster/schedule.py draws (the whole-cluster
step, then every pair or halves against halves), its rounds, pair tests and estimated
time; every pair beside it, to show why it stops at 16 nodes; and the suspects' round
after the pairs, with some nodes made bad (a pair fails when either of its nodes is bad),
checking that the suspects' round finds exactly the bad nodes.

The estimates rest on per-step durations that are parameters (schedule.Durations: where
the defaults come from is said there); `--record DIR` replaces them with a real step's:
the agent's cluster events of a lent GPU node's steps (bench/device_cluster_split.sh's
tarball), whose wall less the collectives' own time (each size's warm-up and timed
iterations at its median time) is the start, and whose collectives, at the figures'
sizes and iterations, are timed again at a fabric's busbw (`--busbw`, GB/s a rank;
nccl-tests' definitions: an all-reduce moves size x 2(n-1)/n a rank, an all-gather
size x (n-1)/n). `--measure` times, on this machine, two local processes starting,
importing torch and running gloo's all-reduce and all-gather, the start cost without a
GPU or a network (torch on the CPU, as the venv has it).

Also counts pairs met twice when each round is a fresh shuffle (Imbue's way), against the
turns of one shuffle that halves_rounds uses.

    python bench/cluster_schedule.py --nodes 8 64 1024 --measure
    python bench/cluster_schedule.py --record bench/records/2026-11-28-h100x2-cluster-split
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet.analysis.cluster.standings import (  # noqa: E402
    PairResult,
    sort_out,
)
from fleet.cluster.schedule import (  # noqa: E402
    DEFAULT_ROUNDS,
    Durations,
    every_pair_rounds,
    plan,
    suspect_steps,
)

RANK = """
import os, sys, time
t0 = time.perf_counter()
import torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank,
                        world_size=2)
t1 = time.perf_counter()
x = torch.ones(4 * 1024 * 1024)  # 16 MiB of float32
for _ in range(5):
    dist.all_reduce(x)
out = [torch.empty_like(x) for _ in range(2)]
dist.all_gather(out, x)
t2 = time.perf_counter()
dist.destroy_process_group()
if rank == 0:
    print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def measure_gloo(repeat: int) -> list[tuple[float, float, float]]:
    """(wall of the two processes, import + init, collectives) per repeat, seconds."""
    runs = []
    for _ in range(repeat):
        port = str(_free_port())
        start = time.perf_counter()
        ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(r), port],
                                  stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
                 for r in (0, 1)]
        outs = [p.communicate(timeout=300)[0] for p in ranks]
        wall = time.perf_counter() - start
        if any(p.returncode for p in ranks):
            raise SystemExit(f"a gloo rank failed: {[p.returncode for p in ranks]}")
        init_s, coll_s = (float(v) for v in outs[0].split())
        runs.append((wall, init_s, coll_s))
    return runs


def recorded_steps(record: Path) -> list[dict[str, Any]]:
    """The agent's cluster events (`fleet-cluster/1`) of the record's healthy steps: every
    *.jsonl in its tarballs whose event has figures and no error."""
    steps = []
    for tgz in sorted(record.glob("*.tgz")):
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member) if member.name.endswith(".jsonl") else None
                if handle is None:
                    continue
                for line in handle.read().decode().splitlines():
                    event = json.loads(line)
                    step = event.get("cluster")
                    if step and step.get("figures") and not step.get("errors"):
                        steps.append(step)
    if not steps:
        raise SystemExit(f"{record}: no cluster step with figures in its *.tgz")
    return steps


def collectives_s(figures: list[dict[str, Any]], busbw_gbs: float | None = None,
                  ranks: int | None = None) -> float:
    """The figures' collectives, every warm-up and timed iteration: at their own median
    times, or at `busbw_gbs` a rank over `ranks` ranks."""
    total = 0.0
    for f in figures:
        calls = int(f["warmup"]) + int(f["iterations"])
        if busbw_gbs is None:
            total += calls * float(f["time_us"]) / 1e6
            continue
        n = ranks or int(f["ranks"])
        factor = 2 * (n - 1) / n if f["op"] == "all_reduce" else (n - 1) / n
        total += calls * int(f["size_bytes"]) * factor / (busbw_gbs * 1e9)
    return total


def from_record(record: Path, busbw_gbs: float, ranks: int) -> tuple[float, float]:
    """(start s, collectives s at `busbw_gbs` over `ranks`) from the record's steps,
    printing each step's wall and what it is made of."""
    starts = []
    print(f"steps measured in {record}:")
    for step in recorded_steps(record):
        own = collectives_s(step["figures"])
        start = float(step["wall_s"]) - own
        starts.append(start)
        busbw = max(float(f["busbw_gbs"]) for f in step["figures"])
        print(f"  {step['step']['id']} node {step['step']['node_rank']}: wall "
              f"{step['wall_s']:.1f} s = collectives {own:.1f} s "
              f"(busbw up to {busbw:.2f} GB/s, {step['figures'][0]['ranks']} ranks) + "
              f"start and teardown {start:.1f} s")
    at = collectives_s(recorded_steps(record)[0]["figures"], busbw_gbs, ranks)
    start = statistics.median(starts)
    print(f"  start (median) {start:.1f} s; the same collectives at {busbw_gbs:g} GB/s a "
          f"rank over {ranks} ranks: {at:.1f} s")
    return start, at


def fresh_shuffle_repeats(count: int, rounds: int, seeds: int) -> list[int]:
    """Pairs tested twice when every round is a fresh shuffle, one figure a seed."""
    found = []
    for seed in range(seeds):
        rng = random.Random(seed)
        met: set[frozenset[int]] = set()
        tests = 0
        order = list(range(count))
        for _ in range(rounds):
            rng.shuffle(order)
            half = count // 2
            for pair in zip(order[:half], order[half:2 * half], strict=True):
                met.add(frozenset(pair))
                tests += 1
        found.append(tests - len(met))
    return found


def suspects_round(nodes: list[str], bad: set[str], seed: int, rounds: int,
                   durations: Durations) -> tuple[int, int, float, bool]:
    """(suspects, suspect rounds, their time, whether the round finds exactly `bad`)."""
    schedule = plan(nodes, seed=seed, rounds=rounds, durations=durations)
    results = [PairResult(a, b, a not in bad and b not in bad)
               for step in schedule.steps for a, b in step.pairs]
    verdicts = sort_out(nodes, results)
    steps = suspect_steps(nodes, results, durations=durations)
    # Against a known-good node a suspect fails only if it is bad itself.
    failed = {b for step in steps for a, b in step.pairs if a in bad or b in bad}
    exact = failed == bad and not bad & set(verdicts.known_good)
    return len(verdicts.suspects), len(steps), sum(s.estimate_s for s in steps), exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 1024])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--start-s", type=float, default=Durations.start_s)
    parser.add_argument("--collectives-s", type=float, default=Durations.collectives_s)
    parser.add_argument("--per-node-s", type=float, default=Durations.per_node_s)
    parser.add_argument("--bad-shares", type=float, nargs="+", default=[0.01, 0.1],
                        help="shares of nodes made bad for the suspects' round (besides "
                             "one bad node; at least 1)")
    parser.add_argument("--measure", action="store_true",
                        help="time two local gloo processes (torch on the CPU)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--record", type=Path,
                        help="a record of real cluster steps: their start, and their "
                             "collectives at --busbw, replace --start-s and --collectives-s")
    parser.add_argument("--busbw", type=float, default=360.0,
                        help="busbw in GB/s the fabric gives a pair, for --record (default: "
                             "the pairs' 90%% of two 8-GPU nodes' 8 x 400G NDR, as "
                             "fleet/cluster/fabric_time.py prices a pair)")
    parser.add_argument("--ranks", type=int, default=16,
                        help="ranks of a pair step, for --record (default: two 8-GPU nodes)")
    args = parser.parse_args()
    durations = Durations(args.start_s, args.collectives_s, args.per_node_s)
    where = "assumed; fleet/cluster/schedule.py Durations says where they come from"
    if args.record is not None:
        start, at = from_record(args.record, args.busbw, args.ranks)
        durations = Durations(round(start, 2), round(at, 2), args.per_node_s)
        where = (f"start measured, collectives at {args.busbw:g} GB/s a rank; the "
                 "per-node cost assumed")
        print()

    print(f"a step: {durations.start_s:g} s start + {durations.pair_collectives_s():.2f} s "
          f"a pair's collectives + {durations.per_node_s:g} s a node; seed {args.seed}")
    print("(the whole cluster's collectives: fleet/cluster/fabric_time.py)")
    print(f"({where})")
    print()
    print(f"{'nodes':>6} {'mode':<10} {'rounds':>6} {'pair tests':>10} {'distinct':>9} "
          f"{'cluster s':>9} {'pairs s':>8} {'total s':>8}")
    totals = {}
    for count in args.nodes:
        nodes = [f"node-{i:04d}" for i in range(count)]
        schedule = plan(nodes, seed=args.seed, rounds=args.rounds, durations=durations)
        whole = schedule.steps[0].estimate_s
        print(f"{count:>6} {schedule.mode:<10} {schedule.rounds:>6} "
              f"{schedule.pair_tests:>10,} {schedule.distinct_pairs:>9,} {whole:>9.1f} "
              f"{schedule.estimate_s - whole:>8.1f} {schedule.estimate_s:>8.1f}")
        totals[count] = schedule.estimate_s
        if schedule.mode != "every-pair":
            every = every_pair_rounds(nodes)
            pairs_s = len(every) * durations.step_s(2)
            print(f"{'':>6} {'(every)':<10} {len(every):>6} "
                  f"{sum(len(r) for r in every):>10,} {sum(len(r) for r in every):>9,} "
                  f"{whole:>9.1f} {pairs_s:>8.1f} {whole + pairs_s:>8.1f}")
    print()
    print("suspects' round after the pairs (a pair fails when either node is bad):")
    print(f"{'nodes':>6} {'bad':>4} {'suspects':>8} {'rounds':>6} {'time s':>7} "
          f"{'finds the bad':>13} {'total s':>8}")
    for count in args.nodes:
        nodes = [f"node-{i:04d}" for i in range(count)]
        for bad_count in sorted({1, *(max(1, math.ceil(count * share))
                                      for share in args.bad_shares)}):
            bad = set(random.Random(args.seed + bad_count).sample(nodes, bad_count))
            suspects, rounds, spent, exact = suspects_round(
                nodes, bad, args.seed, args.rounds, durations)
            print(f"{count:>6} {bad_count:>4} {suspects:>8} {rounds:>6} {spent:>7.1f} "
                  f"{'yes' if exact else 'NO':>13} {totals[count] + spent:>8.1f}")
    print()
    print(f"pairs tested twice in {args.rounds} rounds, mean of 200 seeds (turns of one "
          "shuffle: 0\nwhile rounds < nodes):")
    for count in args.nodes:
        if count > 16:
            found = fresh_shuffle_repeats(count, args.rounds, 200)
            tests = args.rounds * (count // 2)
            print(f"{count:>6} nodes: fresh shuffle each round {statistics.mean(found):.1f} "
                  f"of {tests:,} (min {min(found)}, max {max(found)})")
    if args.measure:
        print()
        runs = measure_gloo(args.repeat)
        print(f"two local gloo processes on this machine ({os.cpu_count()} cores), "
              f"{args.repeat} runs:")
        print("  wall " + ", ".join(f"{w:.2f}" for w, _, _ in runs) + " s")
        print("  import torch + init " + ", ".join(f"{i:.2f}" for _, i, _ in runs) + " s")
        print("  5 all-reduces + 1 all-gather of 16 MiB "
              + ", ".join(f"{c:.2f}" for _, _, c in runs) + " s")


if __name__ == "__main__":
    main()
