"""A cluster's pairs against their own past runs: how nightly sweeps track the fabric
between nodes (issue 46), as fleet/analysis/sweep/history.py tracks each GPU against its own past.

A pair's figure is judged against its fabric (fleet/analysis/cluster/judgement.py: 90% of the
lesser node's ports x rate); that says nothing of a pair that gave 47 GB/s a NIC for a
month and gives 41 tonight, still above the line. Here each step of tonight's run is
set beside the same step of the cluster's earlier runs: the same nodes (in any order),
the same collective at its largest size, the same backend, NCCL_ALGO and ranks a node.
With `centre` the median of its figures over the previous `window` runs (at least
`min_history`, else no verdict) and `noise` 1.4826 x their MAD, tonight is below its
past when

    tonight < centre - max(k x noise, min_relative x centre)

`min_relative` = 10%: what NVIDIA's multinode test allows a pair under its ports' rate
(ngc_multinode_perf passes a pair at 90%), so a pair that lost more than that of its
own past has lost more than the test forgives of the fabric. k = 4 keeps a pair whose
nights scatter wide (sockets, a shared fabric) from alarming on its usual spread.
`min_history` = 5, as the GPU rule's (fleet/analysis/sweep/history.py): the MAD of three runs is
their middle deviation, near 0 where two of them agree, and the 10% floor alone then
judged a pair whose healthy runs now and then moved 15-20% (and once twofold) from one
to the next. On real runs
between loopback nodes (bench/cluster_trend_flags.py; bench/RESULTS.md, "A cluster, not
a node"), healthy runs called below their past: 1 of 7 and 3 of 9 with 3, 0 of 5 and
1 of 7 with 5, 0 of 7 with 5 and measuring again.

A step below its past is measured again in the same run before anything is said
(fleet/cluster/measure.py): the verdict rests on the later measurement, the first said
beside it.

Whose it is: the renter's where the run's own settings that can move NCCL (NCCL_*, and
what agent/source/settings.py records; those fleet sets itself aside) differ on the
pair's nodes from those its past ran under; unsettled otherwise, since two measurements
minutes apart cannot rule out the renter's own traffic on those nodes that night. The
action says how to settle it: measure the pair again with the nodes otherwise idle.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fleet.analysis.cluster.fabric import gbs
from fleet.analysis.cluster.judgement import fleets_own, largest, pair_words, size_words
from fleet.analysis.cluster.verdicts import ClusterFinding
from fleet.analysis.node.whose import Party
from fleet.model.step import OPS, StepResult
from fleet.words import counted

SOURCE = ("fleet's rule on a pair's own past (fleet/analysis/cluster/trend.py): more than "
          "10% under the median of its earlier runs, as NVIDIA's multinode test "
          "(ngc_multinode_perf) passes a pair at 90% of its ports' rate, and more than 4 x "
          "its run-to-run noise")
# A step's identity across runs: its nodes (sorted), op, backend, NCCL_ALGO, ranks a node,
# and the largest size measured: the whole cluster's sweep stops where free memory or its
# budget runs out, and a figure at 4 GiB is not one at 16 GiB of another night.
Key = tuple[tuple[str, ...], str, str, str | None, int, int]


class ClusterRun(Protocol):
    """What a stored run gives the rule (fleet/store/cluster.py's ClusterRun)."""

    @property
    def cluster(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def results(self) -> tuple[StepResult, ...]: ...
    @property
    def settings(self) -> dict[str, dict[str, str]]: ...


@dataclass(frozen=True)
class TrendRule:
    """How a pair's figure tonight is judged against its own past runs."""

    window: int = 7
    min_history: int = 5
    k: float = 4.0
    min_relative: float = 0.10


RULE = TrendRule()


@dataclass(frozen=True)
class PairTrend:
    """One step of tonight's run beside the same step of the cluster's earlier runs.

    tonight_gbs: its busbw at its largest size; centre_gbs: the median of its past runs'
    (as many as `nights`), noise_gbs: 1.4826 x their MAD; floor_gbs: the figure it is
    below its past under; changed: the settings that differ from its past's, "NAME" each
    (on either node); below: whether tonight is under the floor."""

    cluster: str
    run_id: str
    step_id: str
    kind: str
    hosts: tuple[str, ...]
    op: str
    size_bytes: int
    tonight_gbs: float
    centre_gbs: float
    noise_gbs: float
    floor_gbs: float
    nights: int
    below: bool
    changed: tuple[str, ...] = ()
    # Where the run measured the step twice (again, below its past the first time): the
    # first measurement's step and figure; the verdict rests on the later.
    first_step_id: str | None = None
    first_gbs: float | None = None

    @property
    def drop(self) -> float:
        """How far under its past's median tonight is, as a fraction of it."""
        return 1.0 - self.tonight_gbs / self.centre_gbs if self.centre_gbs > 0 else 0.0


@dataclass(frozen=True)
class Trends:
    """Tonight's steps that had a past to compare with, and those below it."""

    compared: tuple[PairTrend, ...] = ()

    @property
    def below(self) -> tuple[PairTrend, ...]:
        """The steps under their own past's floor."""
        return tuple(t for t in self.compared if t.below)

    def summary(self, rule: TrendRule = RULE) -> str:
        """A line: how many steps were compared with their past runs, how many are below."""
        if not self.compared:
            return (f"no step has {counted(rule.min_history, 'earlier run')} to compare "
                    "with yet")
        return (f"{counted(len(self.compared), 'step')} compared with their own earlier "
                f"runs (up to {rule.window}): {len(self.below)} below")


def _key(step: StepResult, op: str, size: int) -> Key:
    return (tuple(sorted(step.hosts)), op, step.backend, step.algo, step.ranks_per_node,
            size)


@dataclass(frozen=True)
class _Figure:
    step: StepResult
    gbs: float
    size: int
    first: StepResult | None = None  # an earlier measurement of the step in the run
    first_gbs: float | None = None


def _figures(run: ClusterRun) -> dict[Key, _Figure]:
    """Each measured step's figure at its largest size, by its identity across runs. A
    run that measured the same nodes twice (a step below its past measured again, a
    suspect against a partner it met in a round) is read by the later, the earlier kept
    beside it."""
    found: dict[Key, _Figure] = {}
    for step in run.results:
        if step.error is not None:
            continue
        for op in OPS:
            figure = largest(step.figures, op)
            if figure is None or figure.busbw_gbs <= 0:
                continue
            key = _key(step, op, figure.size_bytes)
            before = found.get(key)
            found[key] = _Figure(step, figure.busbw_gbs, figure.size_bytes,
                                 before.step if before else None,
                                 before.gbs if before else None)
    return found


def _changed(tonight: ClusterRun, past: Sequence[ClusterRun], hosts: Sequence[str]
             ) -> tuple[str, ...]:
    """The settings' names whose values differ on `hosts` between tonight and any run
    of `past` that recorded them (a run without a host's settings says nothing), but
    those fleet sets itself on its steps."""
    names: set[str] = set()
    for host in hosts:
        now: Mapping[str, str] | None = tonight.settings.get(host)
        if now is None:
            continue
        for run in past:
            then = run.settings.get(host)
            if then is None:
                continue
            names |= {n for n in set(now) | set(then)
                      if now.get(n) != then.get(n) and not fleets_own(n)}
    return tuple(sorted(names))


def pair_trends(runs: Sequence[ClusterRun], rule: TrendRule = RULE) -> Trends:
    """Tonight's run (`runs[0]`, a cluster's runs newest first, as read_cluster_runs
    gives them with latest=False) against the runs before it."""
    if not runs:
        return Trends()
    tonight, earlier = runs[0], [r for r in runs[1:] if r.cluster == runs[0].cluster]
    history = [_figures(run) for run in earlier]
    compared = []
    for key, now in _figures(tonight).items():
        step, value, size = now.step, now.gbs, now.size
        past = [(run, h[key].gbs) for run, h in zip(earlier, history, strict=True)
                if key in h and h[key].size == size][:rule.window]
        if len(past) < rule.min_history:
            continue
        values = [v for _, v in past]
        centre = statistics.median(values)
        noise = 1.4826 * statistics.median(abs(v - centre) for v in values)
        floor = centre - max(rule.k * noise, rule.min_relative * centre)
        below = value < floor
        compared.append(PairTrend(
            tonight.cluster, tonight.run_id, step.step_id, step.kind, step.hosts, key[1],
            size, value, centre, noise, floor, len(past), below,
            _changed(tonight, [r for r, _ in past], step.hosts) if below else (),
            now.first.step_id if now.first else None, now.first_gbs))
    compared.sort(key=lambda t: (not t.below, -round(t.drop, 6), t.step_id,
                                 t.op != "all_reduce"))
    return Trends(tuple(compared))


def trend_findings(trends: Trends) -> list[ClusterFinding]:
    """A fault for each step below its own past, with whose it is and what to do: on
    the collective that fell furthest, the other named beside it where it fell too."""
    found = []
    steps: dict[str, list[PairTrend]] = {}
    for t in trends.below:  # the furthest fallen first
        steps.setdefault(t.step_id, []).append(t)
    for t, *also in steps.values():
        whose: Party = "renter" if t.changed else "unsettled"
        what = "the whole cluster" if t.kind == "cluster" else f"Pair {pair_words(t.hosts)}"
        evidence = (f"{t.op} busbw {gbs(t.tonight_gbs)} at {size_words(t.size_bytes)} tonight "
                    f"(step {t.step_id}), {t.drop:.0%} under the median of its "
                    f"{counted(t.nights, 'earlier run')}, {gbs(t.centre_gbs)} (noise "
                    f"{gbs(t.noise_gbs)}); called under {gbs(t.floor_gbs)}")
        if t.first_gbs is not None:
            evidence += (f"; measured again in the same run, the first time "
                         f"{gbs(t.first_gbs)} (step {t.first_step_id})")
        for other in also:
            evidence += f"; {other.op} {other.drop:.0%} under its past too"
        if t.changed:
            evidence += (f"; the run's settings on its nodes changed since: "
                         f"{', '.join(t.changed)}")
            action = ("Set them back, or run `fleet cluster run` without them: if the pair "
                      "then gives its past figure, the change was the cost")
        else:
            action = ("Measure the pair again with its nodes otherwise idle (`fleet cluster "
                      "run`); if it stays under its past, ask the provider to check the "
                      "pair's links and switch ports (their error counters, ibdiagnet)")
        found.append(ClusterFinding(
            t.cluster, "pair-regressed", "fault", whose, t.hosts,
            f"{what[0].upper() + what[1:]}: {t.op} {t.drop:.0%} under its own past runs",
            evidence, action, SOURCE, (t.step_id,)))
    return found
