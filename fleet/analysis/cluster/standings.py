"""The pass-ratio rule after a cluster's pair rounds (Imbue's pass ratio per host, Google's
Cluster Health Scanner's suspects against known-good nodes): each node's passes over its
pair tests, the suspects to test again and the known-good nodes to test them against.

A judgement, not a schedule: the schedule (fleet/cluster/schedule.py) pairs the suspects
this names with known-good nodes, and the cluster's judgement
(fleet/analysis/cluster/slow_node.py) names the slow node by the same rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleet.errors import ClusterError

# A bad node fails nearly every pair, a good one only those beside bad nodes: under half
# passed is the bad side while fewer than half of a node's partners are bad.
DEFAULT_THRESHOLD = 0.5


def checked_nodes(nodes: Sequence[str]) -> tuple[str, ...]:
    """The nodes of one cluster, each once and at least two; ClusterError otherwise."""
    given = tuple(nodes)
    twice = [n for n, count in Counter(given).items() if count > 1]
    if twice:
        raise ClusterError(f"{twice[0]} is given twice among the cluster's nodes; list each "
                           "node once")
    if len(given) < 2:
        raise ClusterError(f"a cluster needs two nodes to test between them, got "
                           f"{len(given)} ({', '.join(given) or 'none'}); the node suite "
                           "tests one node alone")
    return given


@dataclass(frozen=True)
class PairResult:
    """One pair's verdict: both collectives reached their floor (passed) or not."""

    first: str
    second: str
    passed: bool


@dataclass(frozen=True)
class Standing:
    """A node's pair tests so far."""

    node: str
    passed: int
    tested: int

    @property
    def ratio(self) -> float:
        """Passes over tests; 0 for a node never tested."""
        return self.passed / self.tested if self.tested else 0.0


def standings(nodes: Sequence[str], results: Iterable[PairResult]) -> dict[str, Standing]:
    """Each node's passes and tests, from the pair results."""
    given = checked_nodes(nodes)
    known = set(given)
    passed: Counter[str] = Counter()
    tested: Counter[str] = Counter()
    for result in results:
        for node in (result.first, result.second):
            if node not in known:
                raise ClusterError(f"a pair result names {node}, which is not a node of this "
                                   "cluster: give the results of this cluster's run only")
            tested[node] += 1
            passed[node] += result.passed
    return {n: Standing(n, passed[n], tested[n]) for n in given}


@dataclass(frozen=True)
class Verdicts:
    """After the pair rounds: who is tested again, and who they are tested against."""

    suspects: tuple[str, ...]  # lowest pass ratio first
    known_good: tuple[str, ...]  # highest pass ratio first


def sort_out(nodes: Sequence[str], results: Iterable[PairResult], *,
             threshold: float = DEFAULT_THRESHOLD) -> Verdicts:
    """Suspects: nodes never tested, whose pass ratio is under `threshold`, or that failed
    beside a partner whose ratio is not (a failure no bad partner explains, as a flaky
    link's). Known good: every other tested node, its failures all beside suspects."""
    given = checked_nodes(nodes)
    results = list(results)
    table = standings(given, results)
    low = {n for n in given if not table[n].tested or table[n].ratio < threshold}
    unexplained = {node for r in results if not r.passed
                   for node, partner in ((r.first, r.second), (r.second, r.first))
                   if partner not in low}
    place = {n: i for i, n in enumerate(given)}
    suspects = sorted(low | unexplained, key=lambda n: (table[n].ratio, place[n]))
    good = sorted((n for n in given if n not in low and n not in unexplained),
                  key=lambda n: (-table[n].ratio, place[n]))
    return Verdicts(tuple(suspects), tuple(good))
