"""The errors stored documents carry (`host_error` rows with a document), read back with
what their GPU's fingerprint said of its memory when the run began (revision 0023), for
fleet/analysis/health/not_measured.py to judge. Errors of hosts that sent no document are the
report's failures (fleet/analysis/dataset.py), not these.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, func, select

from fleet.store.models import Document, Fingerprint, Host, HostError, ProbeRun, Provider
from fleet.store.query import in_chunks


@dataclass(frozen=True)
class StoredError:
    """One error of a stored document, with its GPU's memory as fingerprinted (None where
    the error is the host's, the GPU was not fingerprinted, or the document predates 0023)."""

    document_id: int
    run_id: int
    provider: str
    host: str
    collected_at: dt.datetime
    stage: str
    gpu_index: int | None
    message: str
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    # [pid, MiB, visible, name, user] each; None before 0023.
    processes: tuple[tuple[Any, ...], ...] | None = None


def newest_documents(engine: Engine, *, provider: str | None = None, host: str | None = None,
                     since: dt.datetime | None = None, until: dt.datetime | None = None,
                     sweep: str | None = None, run: int | None = None) -> list[int]:
    """Each host's newest document among those the filters select (exact, combined)."""
    d = Document
    stmt = (select(d.host_id, func.max(d.collected_at).label("newest"))
            .join(Host, Host.id == d.host_id).join(Provider, Provider.id == Host.provider_id)
            .join(ProbeRun, ProbeRun.id == d.probe_run_id))
    for column, value in ((Provider.name, provider), (Host.name, host),
                          (ProbeRun.sweep, sweep), (d.probe_run_id, run)):
        if value is not None:
            stmt = stmt.where(column == value)
    if since is not None:
        stmt = stmt.where(d.collected_at >= since)
    if until is not None:
        stmt = stmt.where(d.collected_at <= until)
    newest = stmt.group_by(d.host_id).subquery()
    ids = (select(d.id).join(newest, and_(d.host_id == newest.c.host_id,
                                          d.collected_at == newest.c.newest)))
    with engine.connect() as conn:
        return sorted(int(i) for i in conn.execute(ids).scalars())


def read_errors(engine: Engine, documents: Collection[int]) -> list[StoredError]:
    """The errors of `documents`, by collection time (newest first), host and order."""
    e, d, f = HostError, Document, Fingerprint
    stmt = (select(e.document_id, e.probe_run_id, Provider.name, Host.name, d.collected_at,
                   e.stage, e.gpu_index, e.message, f.memory_total_mib, f.memory_used_mib,
                   f.processes)
            .select_from(e).join(d, d.id == e.document_id)
            .join(Host, Host.id == e.host_id).join(Provider, Provider.id == Host.provider_id)
            .outerjoin(f, and_(f.document_id == e.document_id, f.gpu_index == e.gpu_index)))
    found: list[StoredError] = []
    with engine.connect() as conn:
        for chunk in in_chunks(sorted(set(documents))):
            for row in conn.execute(stmt.where(e.document_id.in_(chunk))
                                    .order_by(d.collected_at.desc(), Host.name, e.id)):
                processes = (None if row[10] is None
                             else tuple(tuple(p) for p in row[10]))
                found.append(StoredError(int(row[0] or 0), int(row[1]), str(row[2]), str(row[3]),
                                         row[4], str(row[5]),
                                         None if row[6] is None else int(row[6]),
                                         str(row[7]), row[8], row[9], processes))
    found.sort(key=lambda s: (-s.collected_at.timestamp(), s.provider, s.host))
    return found
