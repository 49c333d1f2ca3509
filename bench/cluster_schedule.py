"""How long a cluster's tests take, and how that grows with its node count.

For each node count: the schedule fleet/cluster/schedule.py draws (the whole-cluster
step, then every pair or halves against halves), its rounds, pair tests and estimated
time; every pair beside it, to show why it stops at 16 nodes; and the suspects' round
after the pairs, with some nodes made bad (a pair fails when either of its nodes is bad),
checking that the suspects' round finds exactly the bad nodes.

The estimates rest on per-step durations that are parameters (schedule.Durations: where
the defaults come from is said there); `--measure` times, on this machine, two local
processes starting, importing torch and running gloo's all-reduce and all-gather, the
start cost without a GPU or a network (torch on the CPU, as the venv has it).

Also counts pairs met twice when each round is a fresh shuffle (Imbue's way), against the
turns of one shuffle that halves_rounds uses.

    python bench/cluster_schedule.py --nodes 8 64 1024 --measure
"""

from __future__ import annotations

import argparse
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet.cluster.schedule import (  # noqa: E402
    DEFAULT_ROUNDS,
    Durations,
    PairResult,
    every_pair_rounds,
    plan,
    sort_out,
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
    args = parser.parse_args()
    durations = Durations(args.start_s, args.collectives_s, args.per_node_s)

    print(f"a step: {durations.start_s:g} s start + {durations.collectives_s:g} s "
          f"collectives + {durations.per_node_s:g} s a node; seed {args.seed}")
    print("(assumed; fleet/cluster/schedule.py Durations says where they come from)")
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
