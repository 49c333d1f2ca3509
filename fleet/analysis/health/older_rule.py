"""Health verdicts an older agent drew by a rule since withdrawn, judged again by the rule
of now.

The report takes each GPU's health verdict as its agent drew it (fleet/analysis/health/cards.py),
but not one that rests on a rule the agent has since withdrawn. The agent's version does
not tell (it said 0.1.0 before the change and after); the rule each document carries in
words (`Health.rule`) does. One rule has been withdrawn so far:

- **NVLink CRC errors by their count** (issue 36, 2026-11-26). The rule as first written
  called a card degraded for any NVLink CRC error during the run below DCGM's failing rate
  (its words: "NVLink CRC errors during the run below 100 a second (DCGM warns)"). Healthy
  lent H100s log 0.07-0.87 data CRC errors a second on every link under load while their
  pairs copy at full speed (bench/records/2026-11-26-h100x2-health, whose document holds
  that rule's verdicts); the rule of now (agent/health/card.py, NVLINK_CRC_PER_S) judges CRC
  errors only at that rate, 100 a second, failing. It needs each link's rise over the run
  and the run's seconds.

A GPU whose stored verdict gives a reason of that rule ("NVLink: link 3 logged 94 CRC
errors during the run, ...") has its document's body read (the few such GPUs alone,
`stored_bodies`); where the body's rule holds the withdrawn words, the agent's rule of now
(agent/health/card.py `decide`) judges the body's counters, as the agent itself judges
after the load (`update_after_load`), and its verdict, action and reasons take the stored
ones' place in the report's frame, so that its tables and findings read the verdict of
now. Where the body lacks what the rule of now needs, the withdrawn rule's reasons are not
judged again: the GPU is not disputed on them, and they are said apart as not settled
(probing again with this agent settles them), by `OlderVerdict`.

    again = judge_again(engine, data.gpus)  # again.gpus, again.unsettled
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import Engine

from agent.health import card
from fleet.store.query import stored_bodies

# The withdrawn rule as the documents of its day word it (their `Health.rule`), and how
# its reasons begin and go on (card.NVLINK_REASON, then "link N logged K CRC errors").
WITHDRAWN_CRC = "NVLink CRC errors during the run below"
CRC_WORDS = " CRC error"
UNWELL = ("failing", "degraded")
# The stored health columns a verdict judged again replaces.
VERDICT_COLUMNS = ("health", "health_reasons", "health_action")
OLDER = "judged by an older agent's rule"


def crc_reason(reason: object) -> bool:
    """Whether `reason` is an NVLink CRC reason (the withdrawn rule's, or the rule of now's
    failing one at 100 a second, which words it the same)."""
    text = str(reason)
    return text.startswith(card.NVLINK_REASON) and CRC_WORDS in text


def by_withdrawn_rule(health: dict[str, Any]) -> bool:
    """Whether the document's `health` was judged by the withdrawn CRC rule and gives a
    reason of it."""
    return (WITHDRAWN_CRC in str(health.get("rule") or "")
            and any(crc_reason(r) for r in health.get("reasons") or []))


def carries(health: dict[str, Any]) -> bool:
    """Whether `health` carries what the rule of now needs to judge NVLink CRC errors: each
    link's rise over the run, its CRC counts said, and the run's seconds."""
    rises = health.get("nvlink_errors_during_run") or []
    return bool(health.get("run_seconds")) and bool(rises) and all(
        isinstance(r, dict) and (r.get("crc_flit") is not None or r.get("crc_data") is not None)
        for r in rises)


def judged_now(health: dict[str, Any], pcie_gen_max: int | None = None,
               pcie_width_max: int | None = None) -> tuple[str, str | None, list[str]]:
    """(verdict, action, reasons) of `health` (a document's, as stored) by the agent's rule
    of now, as the agent judges after the load: the fewer-NVLink-links reason, the
    fingerprint's reading, is carried; a counter the document lacks judges nothing."""
    counters = {k: v for k, v in health.items()
                if k not in ("verdict", "action", "reasons", "rule")}
    kept = [str(r) for r in health.get("reasons") or []
            if str(r).startswith(card.NVLINK_REASON) and "links active" in str(r)]
    return card.decide(counters, pcie_gen_max, pcie_width_max, carried=kept)


@dataclass(frozen=True)
class OlderVerdict:
    """A GPU called unwell by the withdrawn rule whose document lacks what the rule of now
    needs to judge it again: not disputed on that rule's reasons, not shown well either."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    verdict: str  # the older agent's
    reasons: tuple[str, ...]  # the withdrawn rule's

    @property
    def title(self) -> str:
        """"h GPU 0 (H100-SXM5-80GB) called degraded by an older agent's rule"."""
        return (f"{self.host} GPU {self.gpu_index} ({self.variant}) called {self.verdict} by "
                "an older agent's rule")

    @property
    def evidence(self) -> str:
        """What the older rule said, and why it is not taken."""
        return (f"its agent called it {self.verdict} for NVLink CRC errors during the run "
                "by a rule since withdrawn, which called any count below DCGM's "
                f"{card.NVLINK_CRC_PER_S:g} a second degraded: healthy H100s log 0.07-0.87 a "
                "second on every link under load. The agent now judges them by their rate, "
                "from each link's rise over the run and the run's seconds, which this "
                "document does not carry: probe again with this agent to settle it")

    def finding(self) -> tuple[str, str, str, str, str | None, tuple[str, ...]]:
        """(kind, provider, title, evidence, cause, details), as the report lists one."""
        return ("health", self.provider, self.title, self.evidence, OLDER, self.reasons)


@dataclass(frozen=True, eq=False)  # eq=False: a frame has no single truth value
class JudgedAgain:
    """The fleet as found with its withdrawn-rule verdicts judged again (`gpus`), which
    GPUs were (provider, host, GPU index), and those that could not be (`unsettled`)."""

    gpus: pd.DataFrame
    judged: tuple[tuple[str, str, int], ...] = ()
    unsettled: tuple[OlderVerdict, ...] = ()


def _gives_crc(reasons: object) -> bool:
    return isinstance(reasons, list | tuple) and any(crc_reason(r) for r in reasons)


def _candidates(gpus: pd.DataFrame) -> list[int]:
    """Positions of the GPUs whose stored verdict is unwell for an NVLink CRC reason."""
    if gpus.empty or not {"health", "health_reasons", "document_id"} <= set(gpus.columns):
        return []
    unwell = gpus["health"].astype(object).isin(UNWELL).to_numpy()
    reasons = gpus["health_reasons"].tolist()
    return [i for i in range(len(gpus)) if unwell[i] and _gives_crc(reasons[i])]


def _bodies(engine: Engine, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    with engine.connect() as conn:
        return dict(stored_bodies(conn, sorted(set(ids))))


def judge_again(engine: Engine, gpus: pd.DataFrame) -> JudgedAgain:
    """`gpus` (the fleet as found, `Dataset.gpus`) with each verdict of the withdrawn rule
    judged again by the rule of now from its document's counters, where they carry what it
    needs; the rest said apart (`JudgedAgain.unsettled`)."""
    at = _candidates(gpus)
    if not at:
        return JudgedAgain(gpus)
    documents = gpus["document_id"].tolist()
    bodies = _bodies(engine, [int(documents[i]) for i in at])
    columns = {name: gpus[name].astype(object).tolist() for name in VERDICT_COLUMNS
               if name in gpus.columns}
    judged: list[tuple[str, str, int]] = []
    unsettled: list[OlderVerdict] = []
    for i in at:
        row = gpus.iloc[i]
        body = bodies.get(int(documents[i])) or {}
        cards = {g.get("index"): g for g in body.get("gpus") or [] if isinstance(g, dict)}
        gpu = cards.get(int(row["gpu_index"])) or {}
        health = gpu.get("health")
        if not isinstance(health, dict) or not by_withdrawn_rule(health):
            continue  # judged by a rule that still holds: the agent's verdict stands
        verdict, action, reasons = judged_now(health, gpu.get("pcie_gen_max"),
                                              gpu.get("pcie_width_max"))
        key = (str(row["provider"]), str(row["host"]), int(row["gpu_index"]))
        if not carries(health):
            unsettled.append(OlderVerdict(*key, str(row["variant"]), str(row["health"]),
                                          tuple(str(r) for r in health.get("reasons") or []
                                                if crc_reason(r))))
        judged.append(key)
        for name, value in (("health", verdict), ("health_reasons", list(reasons)),
                            ("health_action", action)):
            if name in columns:
                columns[name][i] = value
    if not judged:
        return JudgedAgain(gpus)
    out = gpus.copy()
    for name, values in columns.items():
        out[name] = pd.Series(values, index=out.index, dtype=object)
    return JudgedAgain(out, tuple(judged), tuple(unsettled))
