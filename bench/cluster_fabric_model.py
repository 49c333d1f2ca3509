"""The fabric side of the cluster's time model (fleet/cluster/fabric_time.py) against
published multi-node nccl-tests runs (tests/fixtures/nccl-tests/multinode/: 2 to 128
nodes of 8 x H100 with 8 x 400G).

For each run: at each size fleet's whole-cluster sweep runs (16 MiB to 16 GiB) that the
run printed, the all-reduce's published time against the model's, and the sweep's 25
calls a size summed over those sizes, which is what the schedule's estimate of the whole
cluster's step adds up. The model prices the whole cluster at 80% of the ports' rate (the
lowest healthy run under NCCL's defaults), so that it errs long; a tuned or ring-forced
run is faster than it by design.

    python bench/cluster_fabric_model.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.cluster.rank import ITERATIONS, OPS, WARMUP, WHOLE_SIZES  # noqa: E402
from fleet.cluster.fabric_time import FabricModel  # noqa: E402
from tests.analysis.published_nccl import runs  # noqa: E402


def size_words(size: int) -> str:
    return f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 20} MiB"


def main() -> None:
    model = FabricModel()
    calls = WARMUP + ITERATIONS
    said = [f"{k} {v:g}" for k, v in vars(model).items()]
    print("model: " + ", ".join(said[:3]) + ",\n       " + ", ".join(said[3:]))
    print("\nall_reduce, published against the model (ms a call)\n")
    print(f"{'run':<24} {'nodes':>5} {'size':>7} {'published':>10} {'model':>8} "
          f"{'ratio':>6}")
    for run in runs():
        shared = [r for r in run.rows if r.size_bytes in WHOLE_SIZES["nccl"]]
        for r in shared:
            mine = model.call_s("all_reduce", r.size_bytes, run.ranks) * 1e3
            print(f"{run.name[:-4]:<24} {run.nodes:>5} {size_words(r.size_bytes):>7} "
                  f"{r.time_us / 1e3:>10.2f} {mine:>8.2f} {mine / (r.time_us / 1e3):>6.2f}")
        published = sum(r.time_us / 1e6 for r in shared) * calls
        modelled = sum(model.call_s("all_reduce", r.size_bytes, run.ranks)
                       for r in shared) * calls
        print(f"{'':<24} {'':>5} {'sweep':>7} {published:>9.2f}s {modelled:>7.2f}s "
              f"{modelled / published:>6.2f}")
        print(f"{'':<10} ({calls} calls at each of "
              f"{', '.join(size_words(r.size_bytes) for r in shared)})")
    print("\nThe whole cluster's four collectives as the schedule prices them\n"
          "(start 7.7 s and 0.05 s a node aside), seconds:")
    print(f"{'nodes':>6} {'total':>6} " + " ".join(f"{op:>14}" for op in OPS))
    for nodes in (2, 8, 64, 128, 1024):
        per_op = {op: model.sweep_s([op], WHOLE_SIZES["nccl"], nodes * 8) for op in OPS}
        print(f"{nodes:>6} {sum(per_op.values()):>6.1f} "
              + " ".join(f"{s:>14.1f}" for s in per_op.values()))


if __name__ == "__main__":
    main()
