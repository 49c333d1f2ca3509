"""Ingest's inserts, compiled once per dialect by SQLAlchemy and run on the driver's cursor.

Why not `connection.execute`: on the 2-core development machine SQLAlchemy's per-call
work (coercing parameters, cache keys, result wrapping) cost ~1 ms of a 1.2 ms
single-GPU document, four times what SQLite itself spent (bench/store_ingest.py). The
SQL still comes from SQLAlchemy, so it is right for each dialect and follows the models;
only parameter conversion is done here, and it is the one thing each backend does
differently: SQLite keeps times as text in SQLAlchemy's format, and JSON as text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Dialect, TableClause, bindparam, case, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from fleet.store.models import Base
from fleet.store.series import Appender

# SQLAlchemy's storage format for DateTime on SQLite: what its reads parse and its
# comparisons (text order) rely on.
SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


# Rows per multi-row INSERT: 100 fingerprints are ~3,000 parameters, far below SQLite's
# 32,766 and PostgreSQL's 65,535.
CHUNK = 100


@dataclass(frozen=True)
class Statement:
    """One SQL statement, and whether it returns a value."""

    sql: str
    returns: bool

    def one(self, cursor: Any, params: dict[str, Any]) -> Any:
        """Run with one row of parameters; the first value returned, or None."""
        cursor.execute(self.sql, params)
        row = cursor.fetchone() if self.returns else None
        return None if row is None else row[0]

    def many(self, cursor: Any, rows: Sequence[dict[str, Any]]) -> None:
        """Run with many rows of parameters."""
        cursor.executemany(self.sql, rows)


@dataclass(frozen=True)
class MultiRow:
    """Several rows inserted with RETURNING in one round trip.

    On the development machine a round trip to PostgreSQL on loopback took 0.44 ms, and
    eight GPUs inserted one by one cost more than the rest of the document. PostgreSQL
    gets one short prepared statement run through psycopg's pipelined executemany (a long
    multi-row VALUES was re-parsed by psycopg every time: 2 ms); SQLite, which has no
    round trips but pays per statement in Python, gets one multi-row VALUES.
    """

    one_row: str
    build: Callable[[int], str]
    cache: dict[int, str]
    pipelined: bool

    def rows(self, cursor: Any, rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """Insert `rows`; what each returned, in order."""
        if not rows:
            return []
        if self.pipelined:
            cursor.executemany(self.one_row, rows, returning=True)
            returned = []
            while True:
                returned.append(tuple(cursor.fetchone()))
                if not cursor.nextset():
                    return returned
        returned = []
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start:start + CHUNK]
            sql = self.cache.get(len(chunk))
            if sql is None:
                sql = self.cache[len(chunk)] = self.build(len(chunk))
            cursor.execute(sql, {f"{key}_m{i}": value for i, row in enumerate(chunk)
                                 for key, value in row.items()})
            returned += cursor.fetchall()
        return returned


class Statements:
    """The inserts of one document, for one dialect, with its value conversions."""

    def __init__(self, dialect: Dialect) -> None:
        self.sqlite = dialect.name == "sqlite"
        # Named parameters on both, so rows are plain dicts whatever the driver.
        target = sqlite.pysqlite.dialect(paramstyle="named") if self.sqlite else dialect
        upsert = sqlite.insert if self.sqlite else postgresql.insert
        tables = Base.metadata.tables
        document, gpu = tables["document"], tables["gpu"]
        fingerprint = tables["fingerprint"]

        def columns(table: TableClause) -> list[str]:
            return [c.key for c in table.columns if c.key != "id"]

        def build(stmt: Insert) -> Statement:
            compiled = stmt.compile(dialect=target, column_keys=columns(stmt.table))
            return Statement(compiled.string, bool(stmt._returning))

        def gpus(count: int) -> str:
            stmt = upsert(gpu)
            if count:
                stmt = stmt.values([dict.fromkeys(columns(gpu))] * count)
            excluded = stmt.excluded
            return str(stmt.on_conflict_do_update(index_elements=["identity"], set_={
                # Documents may arrive out of order (collected by hand, ingested later).
                "first_seen": case((excluded.first_seen < gpu.c.first_seen,
                                    excluded.first_seen), else_=gpu.c.first_seen),
                "last_seen": case((excluded.last_seen > gpu.c.last_seen,
                                   excluded.last_seen), else_=gpu.c.last_seen),
            }).returning(gpu.c.identity, gpu.c.id).compile(dialect=target,
                                                            column_keys=columns(gpu)))

        def fingerprints(count: int) -> str:
            stmt = insert(fingerprint)
            if count:
                stmt = stmt.values([dict.fromkeys(columns(fingerprint))] * count)
            return str(stmt.returning(fingerprint.c.gpu_index, fingerprint.c.id)
                       .compile(dialect=target, column_keys=columns(fingerprint)))

        self.document = build(upsert(document)
                              .on_conflict_do_nothing(
                                  index_elements=["content_hash", "host_id"])
                              .returning(document.c.id))
        # count 0: the one-row statement, with plain parameter names.
        self.gpus = MultiRow(gpus(0), gpus, {}, pipelined=not self.sqlite)
        self.fingerprints = MultiRow(fingerprints(0), fingerprints, {},
                                     pipelined=not self.sqlite)
        self.benchmark = build(insert(tables["benchmark_result"]))
        self.series = Appender.for_dialect(dialect, target)
        # A GPU's series under one configuration: its earlier figures, which a soaked
        # result's repeat interval pools with (fleet/repeat.py).
        series = tables["result_series"]
        self.history = Statement(str(
            select(series.c.packed).where(series.c.gpu_id == bindparam("gpu_id"),
                                          series.c.key == bindparam("key"))
            .compile(dialect=target)), True)
        self.error = build(insert(tables["host_error"]))
        self.node = build(insert(tables["node_result"]))
        self.job = build(insert(tables["job_result"]))
        self.setting = build(insert(tables["run_setting"]))
        # A run's host is settled once stored: a later document or failure for it (a
        # task delivered twice) changes nothing, and RETURNING no row says so. Hand
        # ingest ("replace") lets the newest document of a host stand for the run.
        run_host = tables["run_host"]
        row = upsert(run_host)
        new = {c.key: row.excluded[c.key] for c in run_host.columns
               if c.key not in ("id", "probe_run_id", "host_id")}
        self.run_host_once = build(row.on_conflict_do_update(
            index_elements=["probe_run_id", "host_id"], set_=new,
            where=text("run_host.status <> 'stored'")).returning(run_host.c.id))
        self.run_host_replace = build(row.on_conflict_do_update(
            index_elements=["probe_run_id", "host_id"], set_=new).returning(run_host.c.id))

    def time(self, when: dt.datetime) -> Any:
        """A UTC time as the driver should bind it."""
        if self.sqlite:
            return when.astimezone(dt.UTC).strftime(SQLITE_TIME)
        return when


def to_json(value: Any) -> str:
    """JSON as both drivers bind it: text (the agent's values were validated, so orjson
    meets no NaN here)."""
    return orjson.dumps(value).decode("utf-8")
