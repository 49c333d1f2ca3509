"""The order a cluster's nodes are tested in, as the large fleets test theirs.

After each node's own suite: one step over the whole cluster (all-reduce, all-gather,
reduce-scatter and all-to-all, the figures a renter's job sees), then pairs of nodes in
rounds. In a round each node is in at most one pair, so a round's pairs run at once, each
pair's first node hosting its rendezvous on the cluster's one port.

- A few nodes: every pair (Meta's gcm runs nccl-tests between every pair of nodes), as
  rounds of disjoint pairs by the circle method: n-1 rounds cover the n(n-1)/2 pairs of
  an even n; an odd n takes n rounds, each node sitting one out.
- Many nodes: halves against halves (Imbue's host validation): each round each node of
  one half paired with one of the other, `rounds` times (15, as Imbue's), shuffled from a
  seed the schedule records so that a run can be replayed. Every pair
  is chosen while its rounds are no more than the halves' (n-1 <= 15: up to 16 nodes),
  since up to there it costs no more time and leaves no pair untested.
- Then the suspects (Google's Cluster Health Scanner: random pairs first, then every
  suspect against a known-good node): nodes whose pass ratio fell under a threshold, or
  whose failure no bad partner explains, each paired with a known-good node, as many at
  once as there are known-good nodes.

Each step carries an estimate of its time from `Durations`, which are parameters: see its
docstring for where the defaults come from. Everything here is pure: nodes and a seed in,
the same steps out.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agent.cluster.rank import DEFAULT_SIZES, OPS, PAIR_OPS, WHOLE_SIZES
from fleet.analysis.cluster.standings import (
    DEFAULT_THRESHOLD,
    PairResult,
    checked_nodes,
    sort_out,
)
from fleet.cluster.fabric_time import FabricModel
from fleet.errors import ClusterError

DEFAULT_ROUNDS = 15  # Imbue's host validation runs 15 rounds of halves against halves

Pair = tuple[str, str]
Kind = Literal["cluster", "every-pair", "halves", "suspects"]
Mode = Literal["every-pair", "halves"]


@dataclass(frozen=True)
class Durations:
    """Seconds a step takes, for estimates (`python bench/cluster_schedule.py --record`
    derives the start from real steps; `python bench/cluster_fabric_model.py` checks the
    fabric's side against published runs).

    start_s: the ranks' processes start, import torch and join the rendezvous, before
    any collective, and stop after. Default 7.7: measured, the median of four real steps
    on a lent 2x H100 split into two nodes (NCCL over sockets, one GPU a node; bench/
    records/2026-11-28-cluster-schedule-measured): 7.4-7.9 s of their 24.6-25.0 s.
    collectives_s: a pair's collectives once started (all-reduce and all-gather at
    16 MiB, 256 MiB and 1 GiB, 25 calls a size); None: `fabric`'s, 0.27 s over two
    8-GPU nodes at the pairs' 90% of 8 x 400G. At the split H100's 3 GB/s over sockets
    they took 17.2 s.
    per_node_s: what each node adds to a step's start (NCCL's bootstrap grows with the
    ranks). Default 0.05: an assumption, about 51 s at 1,024 nodes; no multi-node GPU
    cluster was lent to measure it.
    fabric: the collectives' time on the fabric (fleet/cluster/fabric_time.py), for the
    whole cluster's sweep (all four collectives on to 16 GiB: about 18-19 s from 2 to
    1,024 nodes of 8 GPUs, most of it the all-to-all's assumed 12%) and a pair's.
    ranks_per_node: the GPUs a node, 8.
    """

    start_s: float = 7.7
    collectives_s: float | None = None
    per_node_s: float = 0.05
    fabric: FabricModel = field(default_factory=FabricModel)
    ranks_per_node: int = 8

    def pair_collectives_s(self) -> float:
        if self.collectives_s is not None:
            return self.collectives_s
        return self.fabric.sweep_s(PAIR_OPS, DEFAULT_SIZES["nccl"], 2 * self.ranks_per_node,
                                   whole=False)

    def step_s(self, nodes: int, whole: bool = False) -> float:
        """One step over `nodes` nodes (2 for a pair); `whole`: the whole cluster's
        sweep, all four collectives on to 16 GiB."""
        collectives = (self.fabric.sweep_s(OPS, WHOLE_SIZES["nccl"],
                                           nodes * self.ranks_per_node)
                       if whole else self.pair_collectives_s())
        return self.start_s + collectives + self.per_node_s * nodes


@dataclass(frozen=True)
class Step:
    """One step: the whole cluster at once (no pairs), or one round of disjoint pairs."""

    kind: Kind
    round: int  # 1-based within its kind
    nodes: tuple[str, ...]  # the nodes taking part
    pairs: tuple[Pair, ...]  # (rendezvous node, other); () for the cluster step
    idle: tuple[str, ...]  # nodes sitting this step out
    estimate_s: float


@dataclass(frozen=True)
class Schedule:
    """A cluster's steps before any result: the whole cluster, then the pair rounds."""

    nodes: tuple[str, ...]
    mode: Mode
    seed: int  # the halves' shuffles; recorded with every run so that it can be replayed
    steps: tuple[Step, ...]

    @property
    def rounds(self) -> int:
        """Pair rounds (the cluster step is not one)."""
        return sum(1 for s in self.steps if s.pairs)

    @property
    def pair_tests(self) -> int:
        """Pairs tested, counting a pair met twice twice."""
        return sum(len(s.pairs) for s in self.steps)

    @property
    def distinct_pairs(self) -> int:
        """Different pairs tested."""
        return len({frozenset(p) for s in self.steps for p in s.pairs})

    @property
    def estimate_s(self) -> float:
        """The steps' estimates added up: steps run one after another."""
        return sum(s.estimate_s for s in self.steps)


def _circle_round(order: Sequence[str | None], turn: int) -> tuple[Pair, ...]:
    """Turn `turn` of the circle method: the first seat stays, the others move `turn`
    places, and seat i meets seat size-1-i (the first half against the second). A node
    meeting the stand-in None sits the round out."""
    size = len(order)
    rest = order[1:]
    turn %= size - 1
    seats = [order[0], *rest[turn:], *rest[:turn]]
    pairs = ((seats[i], seats[size - 1 - i]) for i in range(size // 2))
    return tuple((a, b) for a, b in pairs if a is not None and b is not None)


def _seating(nodes: Sequence[str]) -> list[str | None]:
    return [*nodes, None] if len(nodes) % 2 else list(nodes)


def every_pair_rounds(nodes: Sequence[str]) -> tuple[tuple[Pair, ...], ...]:
    """Every pair of `nodes` once, as rounds of disjoint pairs (the circle method): one
    node stays put while the others turn one place a round. n-1 rounds for an even n; an
    odd n gains a stand-in, and whoever meets it sits the round out (n rounds). A pair's
    first node is the one listed first."""
    given = checked_nodes(nodes)
    index = {n: i for i, n in enumerate(given)}
    seating = _seating(given)
    rounds = []
    for turn in range(len(seating) - 1):
        pairs = [(a, b) if index[a] < index[b] else (b, a)
                 for a, b in _circle_round(seating, turn)]
        rounds.append(tuple(sorted(pairs, key=lambda p: index[p[0]])))
    return tuple(rounds)


def halves_rounds(nodes: Sequence[str], rounds: int, seed: int
                  ) -> tuple[tuple[Pair, ...], ...]:
    """`rounds` rounds of halves against halves, drawn from `seed`: the nodes shuffled
    once, then in each round a different turn of the circle method seats them, the first
    half against the second. Imbue shuffles afresh each round; turns of one shuffle keep
    its randomness and never seat a pair together twice within n-1 rounds, where fresh
    shuffles test about 50 of 480 pairs twice at 64 nodes in 15 rounds, a tenth of the
    tests wasted (bench/cluster_schedule.py). An odd count leaves one node out a round,
    a different one each round while the rounds are fewer than the nodes."""
    given = checked_nodes(nodes)
    if rounds < 1:
        raise ClusterError(f"rounds must be 1 or more, got {rounds}")
    rng = random.Random(seed)
    order = list(given)
    rng.shuffle(order)
    seating = _seating(order)
    turns = len(seating) - 1
    # Which turns, in what order: a sample while there are enough, then round again.
    chosen: list[int] = []
    while len(chosen) < rounds:
        chosen += rng.sample(range(turns), min(turns, rounds - len(chosen)))
    return tuple(_circle_round(seating, turn) for turn in chosen)


def every_pair_fits(count: int, rounds: int = DEFAULT_ROUNDS) -> bool:
    """Whether every pair of `count` nodes takes no more rounds than halves would."""
    return (count - 1 if count % 2 == 0 else count) <= rounds


def _round_steps(kind: Kind, given: Sequence[str], rounds: Iterable[tuple[Pair, ...]],
                 durations: Durations) -> list[Step]:
    steps = []
    for number, pairs in enumerate(rounds, start=1):
        busy = {n for p in pairs for n in p}
        steps.append(Step(kind=kind, round=number,
                          nodes=tuple(n for n in given if n in busy), pairs=pairs,
                          idle=tuple(n for n in given if n not in busy),
                          estimate_s=durations.step_s(2)))
    return steps


def plan(nodes: Sequence[str], *, seed: int, rounds: int = DEFAULT_ROUNDS,
         durations: Durations | None = None, mode: Mode | None = None) -> Schedule:
    """The cluster's steps: the whole cluster, then every pair where that takes no more
    than `rounds` rounds (or `mode` says so), else `rounds` rounds of halves."""
    given = checked_nodes(nodes)
    durations = durations or Durations()
    chosen: Mode = mode or ("every-pair" if every_pair_fits(len(given), rounds) else "halves")
    whole = Step(kind="cluster", round=1, nodes=given, pairs=(), idle=(),
                 estimate_s=durations.step_s(len(given), whole=True))
    drawn = (every_pair_rounds(given) if chosen == "every-pair"
             else halves_rounds(given, rounds, seed))
    return Schedule(nodes=given, mode=chosen, seed=seed,
                    steps=(whole, *_round_steps(chosen, given, drawn, durations)))


# --- After the pair rounds ----------------------------------------------------------------

def suspect_steps(nodes: Sequence[str], results: Iterable[PairResult], *,
                  threshold: float = DEFAULT_THRESHOLD, durations: Durations | None = None
                  ) -> tuple[Step, ...]:
    """Each suspect (see `sort_out`) paired with a known-good node, one it has not met
    where it can be, in as few rounds as the known-good nodes allow; the known-good node
    hosts the pair's rendezvous. Against a known-good node a suspect that fails again is
    the fault."""
    given = checked_nodes(nodes)
    durations = durations or Durations()
    results = list(results)
    verdicts = sort_out(given, results, threshold=threshold)
    suspects, good = verdicts.suspects, verdicts.known_good
    if not suspects:
        return ()
    if not good:
        raise ClusterError(
            f"no node is known to be good ({len(suspects)} of {len(given)} are suspect): "
            "the fault is likely shared (the fabric, a switch, the rendezvous, NCCL's "
            "settings), or with two nodes a failed pair cannot say whose it is. Look at "
            "the whole-cluster step and the fabric before testing nodes one by one")
    met = {frozenset((r.first, r.second)) for r in results}
    rounds: list[tuple[Pair, ...]] = []
    for start in range(0, len(suspects), len(good)):
        free = list(good)
        pairs: list[Pair] = []
        for suspect in suspects[start:start + len(good)]:
            partner = next((g for g in free if frozenset((g, suspect)) not in met), free[0])
            free.remove(partner)
            pairs.append((partner, suspect))
        rounds.append(tuple(pairs))
    return tuple(_round_steps("suspects", given, rounds, durations))
