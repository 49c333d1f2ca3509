"""How long a step's collectives take on a cluster's fabric: the fabric side of the
schedule's estimates (fleet/cluster/schedule.py), every assumption named with where it
comes from, and checked against published multi-node runs
(`python bench/cluster_fabric_model.py`, tests/fixtures/nccl-tests/multinode/).

One call of a collective over n ranks takes a fixed cost plus its bytes at the fabric's
bus bandwidth, by nccl-tests' definitions (busbw = size / time x the op's factor):

    time = latency(n) + size x factor(op, n) / busbw(op)

- busbw: the ports' rate a node (8 x 400G NDR: 400 GB/s) times a share. A ring moves the
  same bytes over every rank's link whatever the world, so the share does not fall with
  the node count: published, one cluster read 392.7 GB/s at 2 nodes with the ring
  forced and 391.4 at 8 nodes tuned, 128 nodes 367.3 at 16 GiB (nccl-tests #309, #322).
  The whole cluster's share is the lowest published healthy run under NCCL's defaults,
  80% (8 nodes, #309), so that an estimate errs long; a pair's is the pairs' pass line,
  90%, the slowest a passing pair may be (ngc_multinode_perf).
- all-to-all: 12% of the ports' rate, an assumption: the only published multi-node
  all-to-all found read 48 GB/s over 32 GB300 nodes of 8 x 400G across two racks (OCI's
  GB300 quick start), against 667 within one NVLink rack.
- latency(n): 25 us at 16 ranks, 9.5 us more at each doubling: the published 16-byte
  all-reduce took 25.0 us over 16 H100 ranks and 34.8 over 32 (#309; their 8-byte rows,
  each run's first call, 68.5 and 83.4), 63 over 256 A100 ranks (8-128 bytes, NCCL
  #652). The bench shows where this misses: 128 nodes with the ring and LL128
  took 19.4 ms at 1 GiB where the bytes take 6.7 (#322), a fixed cost of milliseconds
  that no small-message row shows.
- The agent's own sweep (agent/cluster/rank.py): 5 warm-up and 20 timed iterations a
  size; a size whose predicted time, at the pace of the size before, passes the 30-s
  budget is not run.

Pure arithmetic; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent.cluster.rank import ITERATIONS, SIZE_BUDGET_S, WARMUP
from agent.cluster.step import BUSBW_FACTORS


@dataclass(frozen=True)
class FabricModel:
    """The fabric's side of a step, as the module's docstring derives each default."""

    fabric_gbs: float = 400.0  # a node's ports: 8 x 400 Gb/s NDR
    whole_share: float = 0.80  # the whole cluster under NCCL's defaults
    pair_share: float = 0.90  # a pair with the ring forced, at the pass line
    alltoall_share: float = 0.12  # assumed: the one published multi-node all-to-all
    latency_us: float = 25.0  # a call's fixed cost at 16 ranks
    latency_doubling_us: float = 9.5  # and what each doubling of the ranks adds

    def busbw_gbs(self, op: str, whole: bool) -> float:
        share = self.alltoall_share if op == "all_to_all" else (
            self.whole_share if whole else self.pair_share)
        return self.fabric_gbs * share

    def latency_s(self, ranks: int) -> float:
        doublings = max(0.0, math.log2(max(ranks, 2)) - 4.0)
        return (self.latency_us + self.latency_doubling_us * doublings) / 1e6

    def call_s(self, op: str, size: int, ranks: int, whole: bool = True) -> float:
        """One call of `op` on `size` bytes over `ranks` ranks."""
        moved = size * BUSBW_FACTORS[op](ranks)
        return self.latency_s(ranks) + moved / (self.busbw_gbs(op, whole) * 1e9)

    def sweep_s(self, ops: Sequence[str], sizes: Sequence[int], ranks: int,
                whole: bool = True, calls: int = WARMUP + ITERATIONS,
                budget_s: float = SIZE_BUDGET_S) -> float:
        """Every op's sweep over `sizes` as the agent runs it: `calls` calls a size,
        stopping an op where a size's predicted time at the pace of the size before
        passes `budget_s` (agent/cluster/rank.py's `_skip`)."""
        total = 0.0
        for op in ops:
            last: tuple[int, float] | None = None
            for size in sizes:
                if last is not None and last[1] * size / last[0] * calls > budget_s:
                    break
                one = self.call_s(op, size, ranks, whole)
                total += one * calls
                last = (size, one)
        return total
