"""Sweep runs in the store: creating, finding and finishing them, and what each holds.

A sweep is a probe_run of kind "sweep" named by `sweep`. It is created before any host is
probed (so Celery tasks can carry its id) and finished only when its controller got to
the end: a run with no `finished_at` is one that crashed or was killed, which is what
`fleet sweep --resume` continues.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Text, cast, insert, select, update

from fleet.model.document import AgentDocument, read_stored
from fleet.store.database import WRITES
from fleet.store.ingest import RunInfo
from fleet.store.models import (
    Document,
    Host,
    HostError,
    ProbeRun,
    Provider,
    RunHost,
)
from fleet.store.query import in_chunks
from fleet.version import __version__

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepRun:
    """One run of a named sweep: its id, inventory, start and finish."""

    id: int
    sweep: str
    inventory: str | None
    started_at: dt.datetime
    finished_at: dt.datetime | None


@dataclass(frozen=True)
class SettledHost:
    """How a host ended in a run: stored with its document, or failed and why."""

    status: str  # "stored" or "failed"
    document_id: int | None
    stage: str | None = None  # of the newest failure, when failed
    message: str | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def create_run(engine: Engine, run: RunInfo) -> int:
    """Start a probe run as `run` describes; its id."""
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        return int(conn.execute(insert(ProbeRun).returning(ProbeRun.id), {
            "kind": run.kind, "sweep": run.sweep, "inventory": run.inventory,
            "controller_version": __version__, "agent_version": run.agent_version,
            "started_at": _now(), "finished_at": None, "ended_at": None}).scalar_one())


def finish_run(engine: Engine, run_id: int) -> None:
    """Mark the run finished: it is no longer there for --resume."""
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        now = _now()
        conn.execute(update(ProbeRun).where(ProbeRun.id == run_id)
                     .values(finished_at=now, ended_at=now))


def end_run(engine: Engine, run_id: int) -> None:
    """The controller reached the end, leaving hosts open for --resume."""
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        conn.execute(update(ProbeRun).where(ProbeRun.id == run_id)
                     .values(ended_at=_now()))


def _sweep_run(row: Any) -> SweepRun:
    return SweepRun(row.id, row.sweep, row.inventory, row.started_at, row.finished_at)


def newest_run(engine: Engine, sweep: str, unfinished: bool = False) -> SweepRun | None:
    """The newest run of `sweep` (the newest unfinished one if asked); None when none."""
    stmt = select(ProbeRun).where(ProbeRun.kind == "sweep", ProbeRun.sweep == sweep)
    if unfinished:
        stmt = stmt.where(ProbeRun.finished_at.is_(None))
    with engine.connect() as conn:
        row = conn.execute(stmt.order_by(ProbeRun.id.desc()).limit(1)).first()
    return None if row is None else _sweep_run(row)


def settled_hosts(engine: Engine, run_id: int) -> dict[str, SettledHost]:
    """The run's hosts that ended, by provider/host, with the newest failure's reason."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Provider.name, Host.name, RunHost.status, RunHost.document_id, Host.id)
            .join(Host, RunHost.host_id == Host.id)
            .join(Provider, Host.provider_id == Provider.id)
            .where(RunHost.probe_run_id == run_id)).all()
        errors = {host_id: (stage, message) for host_id, stage, message in conn.execute(
            select(HostError.host_id, HostError.stage, HostError.message)
            .where(HostError.probe_run_id == run_id, HostError.document_id.is_(None))
            .order_by(HostError.id)).all()}
    settled = {}
    for provider, host, status, document_id, host_id in rows:
        stage, message = errors.get(host_id, (None, None)) if status != "stored" else (None,
                                                                                      None)
        settled[f"{provider}/{host}"] = SettledHost(status, document_id, stage, message)
    return settled


def documents_stored(engine: Engine, run_id: int) -> dict[str, int]:
    """How many documents the run holds per provider/host (exactly-once checks)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Provider.name, Host.name, Document.id)
            .join(Host, Document.host_id == Host.id)
            .join(Provider, Host.provider_id == Provider.id)
            .where(Document.probe_run_id == run_id)).all()
    counts: dict[str, int] = defaultdict(int)
    for provider, host, _ in rows:
        counts[f"{provider}/{host}"] += 1
    return dict(counts)


def load_documents(engine: Engine, ids: Collection[int]) -> dict[int, AgentDocument]:
    """The stored documents with `ids`, validated, by id (the hosts a sweep's summary reads
    back from the store). One that no longer validates is left out, with a warning naming
    it: its host still counts as stored, shown without its document's details."""
    documents: dict[int, AgentDocument] = {}
    with engine.connect() as conn:
        for chunk in in_chunks(sorted(ids)):
            # As text: pydantic validates JSON text in one pass, faster than parsed values.
            for document_id, body in conn.execute(
                    select(Document.id, cast(Document.body, Text))
                    .where(Document.id.in_(chunk))).all():
                document = read_stored(int(document_id), body)
                if isinstance(document, str):
                    log.warning("%s", document)
                    continue
                documents[int(document_id)] = document
    return documents
