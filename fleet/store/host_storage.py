"""The host's limits and storage in the store (tables `host_limits`, `storage` and
`storage_target`, revision 0024): the rows ingest writes from a validated document, and
the blocks read back.

    limits = read_host_limits(engine, documents=[12, 13])  # {document id: HostLimits}
    storage = read_storage(engine, documents=[12, 13])     # {document id: Storage}

Each block is read back from its `body` and validated again by the model it was
validated by on the way in (fleet/model/host_limits.py, fleet/model/storage.py), so the
analysis reads the same shape whether it came from an agent or from the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, insert, select

from fleet.model.host_limits import HostLimits
from fleet.model.storage import Storage
from fleet.store import models
from fleet.store.query import in_chunks

TARGET_COLUMNS = ("path", "role", "fs_type", "refused", "direct", "write_gbps", "read_gbps",
                  "small_read_per_s", "checkpoint_write_gbps", "checkpoint_read_gbps")


def _governor(limits: HostLimits) -> str | None:
    """The governor most CPUs run, "performance" or "powersave"; "mixed" where no one
    governor holds them all."""
    if not limits.governors:
        return None
    if len(limits.governors) > 1:
        return "mixed"
    return next(iter(limits.governors))


def host_storage_rows(limits: HostLimits | None, storage: Storage | None
                      ) -> dict[str, Any] | None:
    """The rows of one document's limits and storage, without its document id; None
    for a document with neither."""
    if limits is None and storage is None:
        return None
    rows: dict[str, Any] = {"limits": None, "storage": None, "targets": []}
    if limits is not None:
        software = limits.software
        rows["limits"] = {
            "format": limits.format, "cpus_available": limits.cpus_available(),
            "memory_available_mib": limits.memory_available_mib(),
            "shm_bytes": limits.shm_bytes,
            "memlock_bytes": None if limits.memlock_unlimited else limits.memlock_soft_bytes,
            "governor": _governor(limits), "import_torch_s": limits.import_torch_s,
            "container_toolkit": software.container_toolkit.version if software else None,
            "fabric_manager": software.fabric_manager.version if software else None,
            "body": limits.model_dump(mode="json")}
    if storage is not None:
        rows["storage"] = {"format": storage.format, "seconds": storage.seconds,
                           "body": storage.model_dump(mode="json")}
        rows["targets"] = [dict({c: getattr(t, c) for c in TARGET_COLUMNS}, position=i)
                           for i, t in enumerate(storage.targets)]
    return rows


def store_host_storage(conn: Connection, document_id: int, rows: dict[str, Any]) -> None:
    """Write `host_storage_rows`' rows for `document_id`, in the open transaction."""
    if rows["limits"] is not None:
        conn.execute(insert(models.HostLimitsRow), [dict(rows["limits"],
                                                         document_id=document_id)])
    if rows["storage"] is not None:
        conn.execute(insert(models.StorageRow), [dict(rows["storage"],
                                                      document_id=document_id)])
    if rows["targets"]:
        conn.execute(insert(models.StorageTargetRow),
                     [dict(row, document_id=document_id) for row in rows["targets"]])


def _bodies(engine_or_conn: Engine | Connection, table: Any,
            documents: Sequence[int]) -> dict[int, Any]:
    wanted = sorted(set(documents))
    found: dict[int, Any] = {}

    def fetch(conn: Connection) -> None:
        for chunk in in_chunks(wanted):
            for row in conn.execute(select(table.document_id, table.body)
                                    .where(table.document_id.in_(chunk))):
                found[int(row.document_id)] = row.body

    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            fetch(conn)
    else:
        fetch(engine_or_conn)
    return found


def read_host_limits(engine_or_conn: Engine | Connection, *,
                     documents: Sequence[int]) -> dict[int, HostLimits]:
    """The limits of each of `documents` that has them, by document id."""
    return {d: HostLimits.model_validate(body) for d, body in
            _bodies(engine_or_conn, models.HostLimitsRow, documents).items()}


def read_storage(engine_or_conn: Engine | Connection, *,
                 documents: Sequence[int]) -> dict[int, Storage]:
    """The storage suite of each of `documents` that ran it, by document id."""
    return {d: Storage.model_validate(body) for d, body in
            _bodies(engine_or_conn, models.StorageRow, documents).items()}
