"""What a cluster's pair steps show of each node, asked the two questions a pair can
answer, each from the pairs that can answer it (issue 57).

- **Does a step run between these nodes?** Every pair step answers: one that ran (its
  figures judged or not) says yes for both nodes; one that failed (a rank crashed, hung,
  had no torch, or the pair could not meet) says no.
- **Does the pair carry what its fabric should?** Only the judged pairs answer: passed or
  short. A pair nothing could judge (gloo, sockets without a fabric, EFA's unknown rate,
  a node not fingerprinted) and a step that failed say nothing of the fabric.

Each question's answers go through the pass-ratio rule
(fleet/analysis/cluster/standings.py's `sort_out`, Imbue's pass ratio and Google's
Cluster Health Scanner): a node is accused where it is under the threshold and failed
beside a partner the other pairs cleared; a fault is shared only where no node is
cleared and no one node is in every failure (three failed pairs of three nodes have no
node in common; a bad node's two failures do). Before issue 57 a step that failed
counted as a short pair and unjudged pairs counted for nothing, so one crashed node
among three, whose third pair ran, read as a shared fault of the fabric with every node
"suspect 0%".

Pure: verdicts in, standings out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from fleet.analysis.cluster.standings import (
    DEFAULT_THRESHOLD,
    PairResult,
    Standing,
    sort_out,
    standings,
)
from fleet.analysis.cluster.verdicts import ClusterFinding, PairVerdict

Outcome = Literal["passed", "short", "failed", "unjudged"]

SOURCE_PAIRS = ("fleet/analysis/cluster/standings.py: Imbue's pass ratio per host, Google's "
                "Cluster Health Scanner's suspects against known-good nodes")
SOURCE_RAN = (f"{SOURCE_PAIRS}; fleet/analysis/cluster/pair_evidence.py: a pair step that ran "
              "clears both its nodes of a step's failure, judged or not")
FAILED = "the step failed: "  # a failed step's verdict cause (fleet/analysis/cluster/judgement.py)
SHOWN = 4  # pairs named in a finding's evidence before "and N more"

# A failed step's error, as the agent and the controller word it (agent/cluster/rank.py,
# step.py; fleet/cluster/step.py), read for what happened; the first match wins.
_KINDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("address already in use", "eaddrinuse"),
     "its meeting port was taken when the step started"),
    (("no module named 'torch'", "no module named torch", "no runtime to run the ranks"),
     "no torch to run the ranks"),
    (("could not join the rendezvous",), "the pair did not meet at its rendezvous"),
    (("no report within", "said nothing", "silent"), "a rank hung"),
    (("died", "killed", "signal", "exited", "ended without a report"), "a rank crashed"),
    (("interrupted", "stopped by"), "the step was stopped"),
)


def outcome(verdict: PairVerdict) -> Outcome:
    """What a pair verdict says: judged (passed or short), failed (the step gave no
    figure: its error) or ran without a judgement."""
    if verdict.passed is True:
        return "passed"
    if verdict.passed is False:
        return "short" if verdict.op is not None else "failed"
    return "unjudged"


def failure_words(error: str, hosts: Sequence[str] = ()) -> str:
    """What a failed step's error says happened, and on which of `hosts` where its first
    words name one (the controller puts the failing node first)."""
    lowered = error.lower()
    what = next((words for keys, words in _KINDS if any(k in lowered for k in keys)),
                "the step failed")
    named = next((h for h in hosts if error.startswith(f"{h}: ")), None)
    return f"{what} on {named}" if named else what


@dataclass(frozen=True)
class Accused:
    """One question's answer over a cluster's pairs.

    table: each node's pairs answered and passed. cleared: the known-good nodes (every
    failure of theirs beside a suspect). named: under the threshold, failed beside a
    cleared partner: the node the failures point at. common: the nodes in every failed
    pair. shared: failures that no node explains (none cleared, none in every failure,
    three nodes or more answered).
    """

    table: dict[str, Standing]
    cleared: frozenset[str]
    suspects: frozenset[str]
    named: frozenset[str]
    common: frozenset[str]
    failed: tuple[PairResult, ...]
    shared: bool

    def answered(self, host: str) -> bool:
        """Whether a pair of `host` answered the question."""
        return self.table[host].tested > 0


def accuse(order: Sequence[str], results: Iterable[PairResult],
           threshold: float = DEFAULT_THRESHOLD) -> Accused:
    """The schedule's rule over `results`, with the nodes in every failure."""
    given = list(results)
    table = standings(order, given)
    sorted_out = sort_out(order, given, threshold=threshold)
    cleared = frozenset(sorted_out.known_good)
    failed = tuple(r for r in given if not r.passed)
    named = frozenset(
        h for h in sorted_out.suspects if table[h].tested and table[h].ratio < threshold
        and any(partner in cleared for r in failed
                for node, partner in ((r.first, r.second), (r.second, r.first))
                if node == h))
    common: frozenset[str] = frozenset()
    if failed:
        common = frozenset.intersection(*(frozenset((r.first, r.second)) for r in failed))
    answered = [h for h in order if table[h].tested]
    shared = bool(failed) and not cleared and not common and len(answered) > 2
    return Accused(table, cleared, frozenset(sorted_out.suspects), named, common, failed,
                   shared)


def judged_results(verdicts: Iterable[PairVerdict]) -> list[PairResult]:
    """The fabric's question: the judged pairs only."""
    return [PairResult(v.hosts[0], v.hosts[1], outcome(v) == "passed") for v in verdicts
            if len(v.hosts) == 2 and outcome(v) in ("passed", "short")]


def ran_results(verdicts: Iterable[PairVerdict]) -> list[PairResult]:
    """The steps' question: every pair step, judged or not."""
    return [PairResult(v.hosts[0], v.hosts[1], outcome(v) != "failed") for v in verdicts
            if len(v.hosts) == 2]


def _error(verdict: PairVerdict) -> str:
    cause = verdict.cause or ""
    return cause[len(FAILED):] if cause.startswith(FAILED) else cause


def _some(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown if len(items) <= SHOWN else f"{shown} and {len(items) - SHOWN} more"


def _failing(cluster: str, host: str, mine: Sequence[PairVerdict],
             others: Sequence[PairVerdict]) -> ClusterFinding:
    failed = [v for v in mine if outcome(v) == "failed"]
    every = len(failed) == len(mine)
    title = (f"{host}: every pair step it was in failed ({len(failed)} of {len(mine)})"
             if every else f"{host}: {len(failed)} of {len(mine)} pair steps it was in "
             "failed")
    kinds = sorted({failure_words(_error(v), v.hosts) for v in failed})
    lines = [f"{v.step_id} with {next(p for p in v.hosts if p != host)}: {_error(v)}"
             for v in failed]
    ran = [f"{' and '.join(v.hosts)}" for v in others if outcome(v) != "failed"]
    evidence = (f"{'; '.join(kinds)}: " + "; ".join(lines)
                + f"; pair steps without {host} ran: {_some(ran)}")
    return ClusterFinding(
        cluster, "node-steps-failed", "fault", "unsettled", (host,),
        title + ", where its partners ran with others", evidence,
        f"Look at {host} first: the others ran steps without it. Read its steps' errors "
        "(a rank that died or hung is the node's, its driver's or NCCL's; no torch is its "
        "runtime's), fix it, then run the cluster again; its fabric is not judged by a "
        "step that gave no figure.", SOURCE_RAN, tuple(v.step_id for v in failed))


def _steps_shared(cluster: str, pairs: Sequence[PairVerdict], order: Sequence[str]
                  ) -> ClusterFinding:
    failed = [v for v in pairs if outcome(v) == "failed"]
    kinds = sorted({failure_words(_error(v), v.hosts) for v in failed})
    return ClusterFinding(
        cluster, "shared-fault", "fault", "unsettled", tuple(order),
        f"{cluster}: pair steps failed whichever nodes met, no node is known good",
        f"{len(failed)} of {len(pairs)} pair steps failed, no one node in all of them: "
        f"{'; '.join(kinds)}; a step that gave no figure says nothing of the fabric",
        "Look at what the steps share before the nodes one by one: the meeting ports "
        "(fleet cluster check), the firewall between the nodes, torch and NCCL on the "
        "nodes; then run the cluster again.", SOURCE_RAN, tuple(v.step_id for v in failed))


def step_findings(cluster: str, order: Sequence[str], pairs: Sequence[PairVerdict],
                  runs: Accused) -> list[ClusterFinding]:
    """From the steps' question: each node its failed pair steps point at (its partners
    ran with others), or failures no node explains."""
    if runs.shared:
        return [_steps_shared(cluster, pairs, [h for h in order if runs.answered(h)])]
    return [_failing(cluster, h, [v for v in pairs if h in v.hosts],
                     [v for v in pairs if h not in v.hosts])
            for h in order if h in runs.named]
