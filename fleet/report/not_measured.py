"""The report's "Not measured": every error the newest documents in scope carry, judged
(fleet/analysis/health/not_measured.py), so that a GPU whose stage failed is said, with whose it
is, and never read as a healthy GPU with fewer figures (issue 54). Those with a party are
findings of kind `not_measured`, each on its side; the rest (no GPU, a rerun that could
not run) are listed as information.

An anonymized report keeps the judgement and withholds what may name the renter's
machines: the agent's words, and each process's name and user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from sqlalchemy import Engine

from fleet.analysis.health.not_measured import (
    OUT_OF_MEMORY,
    PARTY_WORDS,
    NotMeasured,
    judge_failure,
    stored_memory,
)
from fleet.store.errors import StoredError, read_errors

KIND = "not_measured"
WITHHELD = "(withheld in an anonymized report)"
# (kind, provider, title, evidence, cause, details), as the report lists a finding.
FindingTuple = tuple[str, str, str, str, str | None, tuple[str, ...]]


@dataclass(frozen=True)
class NotMeasuredRow:
    """One error of a host's newest document in scope, judged."""

    provider: str
    host: str
    item: NotMeasured

    @property
    def whose(self) -> str:
        return PARTY_WORDS[self.item.party]

    def finding(self) -> FindingTuple:
        item = self.item
        return (KIND, self.provider, f"{self.host} {item.what}: not measured",
                f"{item.action}. Judged by {item.source}",
                item.cause, () if item.message == WITHHELD else (f"the agent: {item.message}",))


@dataclass(frozen=True)
class NotMeasuredSection:
    """Every judged error in scope, the newest document first."""

    rows: tuple[NotMeasuredRow, ...] = ()

    def on(self, party: str) -> list[FindingTuple]:
        """The findings of one side: "provider", "renter" or "unsettled"."""
        return [r.finding() for r in self.rows if r.item.party == party]

    @property
    def gpus(self) -> int:
        """GPUs with a stage not measured, each once."""
        return len({(r.provider, r.host, r.item.gpu_index) for r in self.rows
                    if r.item.gpu_index is not None and r.item.party != "none"})


def _judged(error: StoredError, anonymized: bool) -> NotMeasured:
    memory = stored_memory(error.memory_total_mib, error.memory_used_mib, error.processes)
    if anonymized and memory is not None:
        # A pid, like a name or a user, is the host's: withheld as the rest of the
        # report's (fleet/analysis/node/whose.py PLAIN).
        memory = replace(memory, processes=tuple(replace(p, pid=None, name=None, user=None)
                                                 for p in memory.processes))
    item = judge_failure(error.stage, error.gpu_index, error.message, memory)
    if not anonymized:
        return item
    # The judgement stands. An out-of-memory cause is fleet's own words over pids and
    # sizes; any other cause is the agent's words, which may name a path, host or user.
    cause = item.cause if OUT_OF_MEMORY.search(error.message) \
        else f"the {error.stage} stage failed"
    return replace(item, message=WITHHELD, cause=cause)


def not_measured_section(engine: Engine, hosts: Mapping[int, tuple[str, str]],
                         anonymized: bool = False) -> NotMeasuredSection:
    """The errors of the documents `hosts` names ({document id: (provider, host)}, as
    the report names them), judged."""
    rows = [NotMeasuredRow(*hosts[e.document_id], _judged(e, anonymized))
            for e in read_errors(engine, hosts)]
    return NotMeasuredSection(tuple(rows))
