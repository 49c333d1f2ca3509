"""Figures measured beside someone else's work: the renter's to fix, never the provider's.

A GPU that another process was using while fleet measured it reads slow for a reason the
provider does not answer for (issue 38: a probe beside a matmul on GPU 3 called GPU 3 a
straggler and its pairs slow, and put its 312 TFLOP/s into the provider's median). Such
a figure is:

- **seen**: the agent looks at each GPU's processes and utilization before and after each
  figure (the matmul since harness 1.0, the node suite since 1.1.0, the job suite's
  training and decode steps since its 1.0.0; agent/timing/contention.py) and says whose process
  it saw: the agent's own user (a forgotten job of the renter's) or another (a shared
  machine, a provider's agent);
- **or shown by its own repeats**: a node figure whose repeats spread far beyond their
  kind's normal. Healthy lent nodes' repeats spread at most 0.31% (memory copy), 0.4%
  (pair one way), 0.6% (all-reduce at its largest size) over the records of
  bench/records/2026-11-26-*-node-* (both ways, suite 1.1.0: 0.36%); memory copies
  beside another process spread 57-59% on a lent 2x H100
  (bench/records/2026-11-26-h100x2-node-faults), as in the issue. `SPREAD_CV` = 5% sits
  above every healthy figure judged and far below that (`python
  bench/contention_flags.py`).
  Host copies are left out: the host moves them (a healthy lent H100's pinned copy
  spread 10% in one of six runs, pageable ones 25%), and the agent's process check
  covers them. Figures of suite 1.0.0 are not judged by their spread (`spread_judged`).

Each such figure is flagged, named, and left out of every median, straggler, gap, the
synchronous figure, "what to buy" and cost (fleet/analysis/dataset.py leaves contended
matmul results out as it does a shared host's; the report's node rules read figures
without them; fleet/analysis/job/figures.py leaves contended job results out of the job's
medians, shortfalls, stragglers, gaps and cost). One finding per node says what was seen,
whichever figure showed it (matmul, node figures and job results together), and what to
do: measure again with the GPU free.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleet.analysis.dataset import CONTENDED_REASON, Excluded

# A figure's repeats with a coefficient of variation above this were disturbed.
SPREAD_CV = 0.05
# Kinds whose repeats are judged by their spread (pageable copies are not: see above).
SPREAD_JUDGED = ("memory_copy", "peer_copy", "allreduce")
# A job result's unit, by its workload: one per GPU and workload, whatever attention
# backend it ran ("GPU 3 training step").
JOB_UNITS = {"train": "training step", "decode": "decode"}
UNSEEN = "another process or a busy GPU"  # a contended figure that stored no words
# A job result not flagged itself, left out with its GPU's results of the same run that
# were (fleet/analysis/job/figures.py, `_reasons`); said with its unit, as a spread is.
JOINED = "left out with its GPU's results of the same run measured beside other work"
# A figure with no check of its own, left out with the GPU its run saw shared
# (fleet/analysis/node/taint.py): its reason begins so, and the figures of one reason are said
# on one line ("pair 0-3, pair 1-3, the all-reduce: measured in a run where ...").
TAINTED = "measured in a run where "
# A matmul whose runs the run's own settings cut short, shown by the agent's pair
# (agent/rerun/matmul.py): the line fleet/report/node.py adds to its words.
PAIRED = "measured again quick without "
WHAT_TO_DO = ("measure again with the GPU free: the figure is the renter's contention, "
              "left out of every comparison with the provider")


def spread_judged(suite_version: str) -> bool:
    """Whether a figure of this suite version is judged by its spread: from 1.1.0. Suite
    1.0.0's both-ways pair copies could carry a first repeat that ran the two directions
    one after the other (half the rest: bench/records/2026-11-26-h200x4-node-suite), a
    spread of 17% that is the agent's, not the node's."""
    parts = []
    for part in str(suite_version).split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts) >= (1, 1)


def spread_reason(cv: float) -> str:
    """The contention line of a figure whose repeats spread too far."""
    return (f"its repeats spread {cv:.0%} (CV), where a healthy node's spread under "
            f"{SPREAD_CV:.0%}")


def mark(figures: pd.DataFrame) -> pd.DataFrame:
    """`figures` (fleet.analysis.node.figures.prepare's frame) with `contended` also set where the
    repeats spread beyond SPREAD_CV, and `contention` saying so."""
    if figures.empty:
        return figures
    spread = (figures["kind"].isin(SPREAD_JUDGED) & (figures["cv"] > SPREAD_CV)
              & figures["suite_version"].map(spread_judged))
    if not spread.any():
        return figures
    out = figures.copy()
    said = [spread_reason(cv) if wide else None
            for wide, cv in zip(spread.tolist(), out["cv"].tolist(), strict=True)]
    out["contention"] = pd.Series([
        "; ".join(t for t in (seen, extra) if t) or None
        for seen, extra in zip(out["contention"].tolist(), said, strict=True)],
        index=out.index, dtype=object)
    out["contended"] = out["contended"] | spread
    return out


def _unit(kind: str, gpu: object, peer: object) -> str:
    if kind == "allreduce":
        return "the all-reduce"
    if kind == "peer_copy":
        return f"pair {gpu}-{peer}"
    return f"GPU {gpu}"


@dataclass(frozen=True)
class Contention:
    """A node whose figures were measured beside someone else's work (or on a GPU that
    was busy): which figures, what was seen, and what to do."""

    provider: str
    host: str
    # "GPU 3", "pair 0-3", "the all-reduce", "GPU 3 matmul", "GPU 3 training step"
    units: tuple[str, ...]
    seen: tuple[str, ...]  # what the agent saw, each distinct line once
    own: bool | None  # all processes the renter's own (True), some another's (False)

    @property
    def title(self) -> str:
        """The finding in a line: where, and that it is left out."""
        shown = ", ".join(self.units[:4])
        if len(self.units) > 4:
            shown += f" and {len(self.units) - 4} more"
        return f"{self.host}: {shown} measured beside other work, left out"

    @property
    def cause(self) -> str:
        """Whose work it was, as far as the host showed."""
        if self.own is True:
            return "a process of the renter's own user"
        if self.own is False:
            return "a process of another user"
        if any("repeats spread" in s for s in self.seen):
            return "disturbed repeats"
        if any(s.startswith(PAIRED) for s in self.seen) and all(
                "interrupted run" in s or s.startswith(PAIRED) for s in self.seen):
            return "settings of the run's environment, measured again without them"
        # The harness names runs it left out as interrupted (1.5x the median or more,
        # the card itself not slowed): something outside the card, no process seen.
        if self.seen and all("interrupted run" in s for s in self.seen):
            return "runs interrupted by something outside the card"
        return "another process or a busy GPU"

    @property
    def evidence(self) -> str:
        """What to do; what was seen is `seen`, a line each."""
        return "What to do: " + WHAT_TO_DO


def _owner(text: str) -> bool | None:
    if "not the agent's user" in text:
        return False
    if "the agent's own user" in text:
        return True
    return None


def _lines(seen: list[str], unit: str, text: str, whole: str | None = None) -> None:
    """Add what one figure carried to a node's lines: a process once, the busiest
    utilization once, a spread with the figure it belongs to, a taint with every unit
    (`whole`: "pair 0-3", where `unit` names the figure too) of the same reason."""
    for line in (t for t in text.split("; ") if t):
        if line.startswith(TAINTED):
            name = whole or unit
            held = next((i for i, s in enumerate(seen) if s.endswith(f": {line}")), None)
            if held is None:
                seen.append(f"{name}: {line}")
                continue
            named = seen[held].removesuffix(f": {line}")
            if name not in named.split(", "):
                seen[held] = f"{named}, {name}: {line}"
            continue
        if line.startswith("GPU utilization "):
            busy = [s for s in seen if s.startswith("GPU utilization ")]
            if busy and int(busy[0].split()[2].rstrip("%")) >= int(line.split()[2].rstrip("%")):
                continue
            for old in busy:
                seen.remove(old)
        elif line.startswith("its repeats spread"):
            line = f"{unit}: {line.removeprefix('its ')}"
        elif line == JOINED:
            line = f"{unit}: {line}"
        if line not in seen:
            seen.append(line)


def _job_words(jobs: pd.DataFrame) -> list[tuple[str, str, str, list[str]]]:
    """(provider, host, unit, words) of each GPU and workload among the contended job
    results `jobs`: the words of its newest results (each attention backend's), GPU by
    GPU, training before decode."""
    newest: dict[tuple[str, str, int, str], tuple[Any, list[str]]] = {}
    for provider, host, gpu, workload, at, text in zip(
            *(jobs[c].tolist() for c in ("provider", "host", "gpu_index", "workload",
                                         "collected_at", "contention")), strict=True):
        key = (str(provider), str(host), int(gpu), str(workload))
        words = text if isinstance(text, str) and text else UNSEEN
        held = newest.get(key)
        if held is None or at > held[0]:
            newest[key] = (at, [words])
        elif at == held[0]:
            held[1].append(words)
    order = list(JOB_UNITS)

    def rank(key: tuple[str, str, int, str]) -> tuple[str, str, int, int, str]:
        provider, host, gpu, workload = key
        return (provider, host, gpu,
                order.index(workload) if workload in order else len(order), workload)
    return [(key[0], key[1], f"GPU {key[2]} {JOB_UNITS.get(key[3], key[3])}",
             newest[key][1]) for key in sorted(newest, key=rank)]


def find_contention(figures: pd.DataFrame, matmul: list[tuple[Excluded, str | None]],
                    jobs: pd.DataFrame | None = None) -> list[Contention]:
    """One finding per node with contended figures (`figures` after `mark`), matmul
    results left out as contended (`matmul`: each Excluded entry with the stored
    contention words of its newest contended result) or contended job results (`jobs`:
    the job frame's rows fleet.analysis.job.figures.contended_results leaves out as contended,
    named as `matmul` names hosts)."""
    units: dict[tuple[str, str], list[str]] = defaultdict(list)
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for excluded, words in matmul:
        if excluded.reason != CONTENDED_REASON:
            continue
        key = (excluded.provider, excluded.host)
        unit = f"GPU {excluded.gpu_index} matmul"
        units[key].append(unit)
        _lines(seen[key], unit, words or UNSEEN)
    if not figures.empty:
        busy = figures[figures["contended"]]
        for provider, host, kind, gpu, peer, text, figure in zip(
                *(busy[c].tolist() for c in ("provider", "host", "kind", "gpu_index",
                                             "peer_index", "contention")),
                [c.figure for c in busy["config"].tolist()], strict=True):
            key = (str(provider), str(host))
            unit = _unit(str(kind), gpu, peer)
            if kind == "peer_copy" and f"pair {peer}-{gpu}" in units[key]:
                unit = f"pair {peer}-{gpu}"
            if unit not in units[key]:
                units[key].append(unit)
            label = (figure if kind == "allreduce"
                     else f"{unit} {figure.removeprefix('GPU pairs, ')}")
            _lines(seen[key], label, str(text or ""), unit)
    if jobs is not None and not jobs.empty:
        for provider, host, unit, said in _job_words(jobs):
            key = (provider, host)
            units[key].append(unit)
            for words in said:
                _lines(seen[key], unit, words)
    found = []
    for (provider, host), named in sorted(units.items()):
        owners = {_owner(s) for s in seen[(provider, host)]} - {None}
        own = None if not owners else False not in owners
        found.append(Contention(provider, host, tuple(named), tuple(seen[(provider, host)]),
                                own))
    return found
