"""Each GPU's results, packed per configuration: what the report reads at scale.

A report reduces every GPU's results under one configuration to medians (the GPU is the
unit of evidence, fleet/analysis/dataset.py). At 10,000 hosts x 8 GPUs x 30 nights that
is 2.4 M result rows, and reading them into Python cost the report 8-12 s before any
analysis: the database drivers build an object per value. A `result_series` row holds
every result of one GPU under one configuration, software stack, variant and correctness
verdict as packed records (`ELEMENT`), so the report reads 80,000 rows and numpy reads
their figures in one copy.

The series are a second copy of figures the results hold, so they are kept exact:
- ingest appends a document's records in the transaction that stores its results
  (`Appender`), as one upsert that concatenates on the database, so two writers of one
  series (two hosts answering with the same GPU) cannot lose each other's records;
- upgrading a store to 0010 builds them from its stored results (schema._derive), and
  `fleet db repair` rebuilds them (`rebuild`) should they ever disagree; `compare` says
  whether they do, and a report refuses a store with results but no series.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import struct
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Select,
    cast,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from fleet.errors import StoreError
from fleet.store.config import CONFIG_COLUMNS, STACK_COLUMNS
from fleet.store.database import WRITES
from fleet.store.models import BenchmarkResult, Gpu, Host, ResultSeries

# What makes results one series besides their GPU, in the key's order.
KEY_COLUMNS = ("variant", "correctness_failed", *CONFIG_COLUMNS, *STACK_COLUMNS)

# The flags a record carries, bit i for FLAG_COLUMNS[i]. The records' format, like
# ELEMENT: a change here is a migration that rebuilds every series.
FLAG_COLUMNS = ("power_capped", "thermal_throttled", "hw_slowdown", "contended",
                "not_steady", "clocks_locked", "not_soaked")

# The figures a record carries, as benchmark_result names them; NaN where NULL.
VALUE_COLUMNS = ("tflops", "sm_clock_mhz_median", "power_w_median", "power_cap_share",
                 "first_20s_tflops", "soak_drop", "temperature_load_c", "repeat_sd")

# One result: when it was collected (microseconds since 1970, UTC), its document, run,
# host, provider and GPU index, its flags, and its figures. Little-endian whatever the
# machine, so a store moved between machines reads the same. A result's own id is not
# kept: ingest would have to ask for every one (RETURNING cost SQLite ingest a third of
# its speed), and results of one GPU collected at one moment are ordered by document.
ELEMENT = np.dtype([("at", "<i8"), ("document_id", "<i4"), ("probe_run_id", "<i4"),
                    ("host_id", "<i4"), ("provider_id", "<i4"), ("gpu_index", "<i2"),
                    ("flags", "<i2"), *((name, "<f8") for name in VALUE_COLUMNS)])
# ELEMENT for the struct module, which packs a few records faster than numpy (ingest).
_RECORD = struct.Struct("<qiiiihh" + "d" * len(VALUE_COLUMNS))
assert _RECORD.size == ELEMENT.itemsize
# The integer fields before the flags, as _result_columns reads them.
_LEADING = 6

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def series_key(row: dict[str, Any] | Sequence[Any]) -> str:
    """The text that, with the GPU, names a result's series: its KEY_COLUMNS as JSON
    (booleans as 0 and 1, as SQLite hands them back)."""
    values = ([row[name] for name in KEY_COLUMNS] if isinstance(row, dict) else list(row))
    values[1] = int(bool(values[1]))
    return orjson.dumps(values).decode()


def epoch_us(when: dt.datetime) -> int:
    """Microseconds since 1970 of an aware time, exact."""
    return (when - _EPOCH) // dt.timedelta(microseconds=1)


def epoch_us_sql(column: Any, dialect: str) -> ColumnElement[int]:
    """`epoch_us` computed by the database: SQLite keeps the time as text ("2026-11-01
    03:00:00.000000", see models.UtcDateTime), PostgreSQL as a timestamp."""
    if dialect == "postgresql":
        return cast(func.extract("epoch", column) * 1_000_000, BigInteger)
    # unixepoch() (SQLite 3.38) took half strftime's time over 2.4 M rows.
    seconds = (func.unixepoch(column) if sqlite3.sqlite_version_info >= (3, 38)
               else cast(func.strftime("%s", column), Integer))
    return seconds * 1_000_000 + cast(func.substr(column, 21, 6), Integer)


def pack(records: Sequence[tuple[Any, ...]]) -> bytes:
    """Records as tuples in ELEMENT's field order (None for a missing figure), packed."""
    nan = float("nan")
    return b"".join(_RECORD.pack(*(nan if v is None else v for v in record))
                    for record in records)


def unpack(data: bytes) -> NDArray[Any]:
    """The records packed in `data`."""
    return np.frombuffer(data, dtype=ELEMENT)


@dataclass(frozen=True)
class Appender:
    """Ingest's append to the series of one document's results."""

    sql: str  # one upsert of a series row, named parameters

    @classmethod
    def for_dialect(cls, dialect: Any, target: Any) -> Appender:
        """The upsert, compiled for `dialect`'s driver by `target` (statements.py)."""
        upsert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        table = ResultSeries.__table__
        stmt = upsert(table)  # type: ignore[arg-type]
        joined: ColumnElement[Any] = table.c.packed.op("||")(stmt.excluded.packed)
        if dialect.name == "sqlite":
            # SQLite's || joins as text; in a UTF-8 database (fleet's: SQLAlchemy's
            # default) the cast back keeps every byte, NULs included.
            joined = cast(joined, table.c.packed.type)
        stmt = stmt.on_conflict_do_update(
            index_elements=["gpu_id", "key"],
            set_={"packed": joined})
        columns = [c.key for c in table.columns if c.key != "id"]
        return cls(stmt.compile(dialect=target, column_keys=columns).string)

    def many(self, cursor: Any, rows: Sequence[dict[str, Any]]) -> None:
        """Append the series rows `rows` (from `Appender.rows`) through the driver's
        cursor, in the open transaction."""
        cursor.executemany(self.sql, rows)

    def rows(self, results: Sequence[dict[str, Any]], at: int) -> list[dict[str, Any]]:
        """The series rows of one document's benchmark_result rows `results` (as ingest
        binds them), collected at `at` (`epoch_us`); sorted, so that two writers take
        the rows' locks in one order."""
        grouped: dict[tuple[int, str], list[tuple[Any, ...]]] = defaultdict(list)
        first: dict[tuple[int, str], dict[str, Any]] = {}
        for row in results:
            key = (row["gpu_id"], series_key(row))
            first.setdefault(key, row)
            grouped[key].append((
                at, row["document_id"], row["probe_run_id"], row["host_id"],
                row["provider_id"], row["gpu_index"],
                sum(1 << i for i, name in enumerate(FLAG_COLUMNS) if row[name]),
                *(row[name] for name in VALUE_COLUMNS)))
        return [{"gpu_id": gpu_id, "key": key,
                 **{name: first[(gpu_id, key)][name] for name in KEY_COLUMNS},
                 "packed": pack(records)}
                for (gpu_id, key), records in sorted(grouped.items())]


def _result_columns(dialect: str) -> list[Any]:
    r = BenchmarkResult
    return [r.gpu_id, *(getattr(r, name) for name in KEY_COLUMNS),
            epoch_us_sql(r.collected_at, dialect).label("at"), r.document_id,
            r.probe_run_id, r.host_id,
            r.provider_id, r.gpu_index, *(getattr(r, name) for name in FLAG_COLUMNS),
            *(getattr(r, name) for name in VALUE_COLUMNS)]


def _series_of(rows: Iterable[Sequence[Any]]) -> Iterator[dict[str, Any]]:
    """Series rows from result rows in `_result_columns`' order (each GPU's in the order
    they were stored), grouped by GPU."""
    keys = len(KEY_COLUMNS)
    grouped: dict[tuple[int, str], list[tuple[Any, ...]]] = defaultdict(list)
    first: dict[tuple[int, str], Sequence[Any]] = {}
    for row in rows:
        named = (row[0], series_key(row[1:1 + keys]))
        first.setdefault(named, row)
        rest = row[1 + keys:]
        flags = sum(1 << i for i, value in enumerate(rest[_LEADING:_LEADING + len(FLAG_COLUMNS)])
                    if value)
        grouped[named].append((*rest[:_LEADING], flags, *rest[_LEADING + len(FLAG_COLUMNS):]))
    for (gpu_id, key), records in sorted(grouped.items()):
        row = first[(gpu_id, key)]
        yield {"gpu_id": gpu_id, "key": key,
               **dict(zip(KEY_COLUMNS, row[1:1 + keys], strict=True)),
               "packed": pack(records)}


# GPUs rebuilt at once: at 30 results a GPU, 60,000 result rows in memory.
GPUS_AT_ONCE = 2000


def rebuild(conn: Connection) -> int:
    """Every series built again from the stored results, in `conn`'s transaction; how
    many series there are."""
    _lock(conn)
    conn.execute(delete(ResultSeries))
    written = 0
    for _, _, built in _built(conn):
        if built:
            conn.execute(insert(ResultSeries), built)
            written += len(built)
    return written


def _built(conn: Connection) -> Iterator[tuple[int, int, list[dict[str, Any]]]]:
    """The series the stored results make, GPUS_AT_ONCE GPUs at a time: (the first and
    last GPU id of the chunk, its series rows)."""
    r = BenchmarkResult
    gpu_ids = [gpu_id for (gpu_id,) in conn.execute(
        select(r.gpu_id).distinct().order_by(r.gpu_id))]
    columns = _result_columns(conn.dialect.name)
    for start in range(0, len(gpu_ids), GPUS_AT_ONCE):
        low, high = gpu_ids[start], gpu_ids[min(start + GPUS_AT_ONCE, len(gpu_ids)) - 1]
        rows = conn.execute(select(*columns).where(r.gpu_id.between(low, high))
                            .order_by(r.gpu_id, r.id))
        yield low, high, list(_series_of(rows))


def missing(conn: Connection) -> bool:
    """Whether results are stored but no series: a store just brought to 0010."""
    return (conn.execute(select(ResultSeries.id).limit(1)).first() is None
            and conn.execute(select(BenchmarkResult.id).limit(1)).first() is not None)


@dataclass(frozen=True)
class Repair:
    """What `repair` found and did."""

    problems: tuple[str, ...]  # where the series disagreed with the results, in words
    rebuilt: int | None  # the series written again; None when nothing was (agreed, or checked)


def repair(engine: Engine, check: bool = False) -> Repair:
    """Compare the series with the stored results and, unless `check`, rebuild them all
    where they disagree, in one transaction (`fleet db repair`).

    A check reads one snapshot (SQLite's read transaction, PostgreSQL's REPEATABLE READ),
    in which every document's results and series were committed together, so an ingest
    landing meanwhile is no disagreement. A repair holds ingest off from its first read
    (SQLite's write lock, a lock on the series on PostgreSQL), so that what it rebuilds
    from is what stays."""
    options: dict[str, Any] = {WRITES: not check}
    if check and engine.dialect.name == "postgresql":
        options["isolation_level"] = "REPEATABLE READ"
    with engine.connect().execution_options(**options) as conn, conn.begin():
        if not check:
            _lock(conn)
        problems = tuple(compare(conn))
        rebuilt = rebuild(conn) if problems and not check else None
    return Repair(problems, rebuilt)


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        # Ingest's appends wait until this transaction commits (reports read on): one
        # landing between two chunks of a rebuild would be lost, or collide with a series
        # it writes. On SQLite the write transaction already keeps other writers out.
        conn.execute(text("LOCK TABLE result_series IN EXCLUSIVE MODE"))


def compare(conn: Connection) -> list[str]:
    """Where the series disagree with the stored results, in words (empty: they agree).
    Reads every result: about a minute for 2.4 M (bench/report_scale.py)."""
    r, s = BenchmarkResult, ResultSeries
    differing: list[tuple[int, str, str]] = []
    for low, high, built in _built(conn):
        expected = {(row["gpu_id"], row["key"]): row["packed"] for row in built}
        found = {(gpu_id, key): packed for gpu_id, key, packed in conn.execute(
            select(s.gpu_id, s.key, s.packed).where(s.gpu_id.between(low, high)))}
        differing += _differences(expected, found)
    strays = conn.execute(select(s.gpu_id, s.key, s.packed).where(
        s.gpu_id.not_in(select(r.gpu_id).distinct())))
    differing += _differences({}, {(gpu_id, key): packed for gpu_id, key, packed in strays})
    names = gpu_names(conn, {gpu_id for gpu_id, _, _ in differing})
    return [f"{names[gpu_id]}, {key_words(key)}: {problem}"
            for gpu_id, key, problem in differing]


def _differences(expected: dict[tuple[int, str], bytes], found: dict[tuple[int, str], bytes]
                 ) -> list[tuple[int, str, str]]:
    """(GPU id, key, what is wrong) of each series that differs."""
    size = ELEMENT.itemsize
    problems = [(gpu_id, key, f"{len(expected[(gpu_id, key)]) // size} results stored, "
                              "no series")
                for gpu_id, key in sorted(expected.keys() - found.keys())]
    problems += [(gpu_id, key, "a series that no stored result has")
                 for gpu_id, key in sorted(found.keys() - expected.keys())]
    for gpu_id, key in sorted(expected.keys() & found.keys()):
        want, have = expected[(gpu_id, key)], found[(gpu_id, key)]
        if len(have) % size:
            problems.append((gpu_id, key, "the series is not whole records (damaged, or "
                                          "written by another fleet)"))
        elif _sorted(unpack(want)).tobytes() != _sorted(unpack(have)).tobytes():
            problems.append((gpu_id, key, f"{len(have) // size} results in the series, "
                                          f"{len(want) // size} stored, or their figures "
                                          "differ"))
    return problems


def gpu_names(conn: Connection, gpu_ids: Iterable[int]) -> dict[int, str]:
    """How a message names each GPU: "GPU-<UUID>", else its host and index."""
    wanted = sorted(set(gpu_ids))
    names = {gpu_id: f"GPU #{gpu_id}" for gpu_id in wanted}
    for start in range(0, len(wanted), 500):
        for gpu_id, uuid, host, index in conn.execute(
                select(Gpu.id, Gpu.uuid, Host.name, Gpu.gpu_index)
                .outerjoin(Host, Host.id == Gpu.host_id)
                .where(Gpu.id.in_(wanted[start:start + 500]))):
            names[gpu_id] = uuid or f"{host} GPU {index}"
    return names


def key_words(key: str) -> str:
    """A series' key in words: "H100 SXM5 80GB, bf16 8192x8192x8192 sustained soaked,
    harness 1.3.0, torch 2.9.0 / CUDA 12.8 / cuBLAS 12.8.4"."""
    try:
        values = dict(zip(KEY_COLUMNS, orjson.loads(key), strict=True))
    except (ValueError, TypeError):
        return key
    text = (f"{values['variant']}, {values['dtype']} {values['m']}x{values['n']}x"
            f"{values['k']} {values['mode']} {values['thermal']}, harness "
            f"{values['harness_version']}, torch {values['torch_version'] or '?'} / CUDA "
            f"{values['cuda_runtime_version'] or '?'} / cuBLAS "
            f"{values['cublas_version'] or '?'}")
    return text + (", failed its check" if values["correctness_failed"] else "")


def _sorted(records: NDArray[Any]) -> NDArray[Any]:
    # Concurrent writers may append in another order than their results were stored.
    return np.sort(records, order=list(ELEMENT.names or ()))


@dataclass(frozen=True)
class Filter:
    """Which results a report reads: times in microseconds since 1970, ids of runs and
    providers (None: any)."""

    since_us: int | None = None
    until_us: int | None = None
    runs: frozenset[int] | None = None
    providers: frozenset[int] | None = None
    # Read only the series of GPUs with results in `runs`, found through the results'
    # index on their run: a probe's own report reads its GPUs, not the whole store's.
    only_gpus_of_runs: bool = False


@dataclass(frozen=True)
class Read:
    """The results a Filter selected: one record per result (`records`), and per record
    the index of its series in `series` (the series' gpu_id and KEY_COLUMNS)."""

    records: NDArray[Any]
    series: NDArray[np.int64]
    keys: list[tuple[Any, ...]]  # (gpu_id, *KEY_COLUMNS) per series


def _fetch(conn: Connection, stmt: Select[Any]) -> list[Any]:
    """The rows of `stmt` (which takes no parameters) as the driver's tuples. PostgreSQL
    sends them in its binary format: as text, every byte of the packed records came as
    two hex digits, and decoding them took 1.3 s of 1.7 at 10,000 hosts."""
    driver = conn.connection.dbapi_connection
    if conn.dialect.name == "postgresql" and driver is not None:
        compiled = stmt.compile(dialect=conn.dialect,
                                compile_kwargs={"render_postcompile": True})
        cursor = driver.cursor(binary=True)
        driver_error = conn.dialect.loaded_dbapi.Error
        try:
            cursor.execute(compiled.string, compiled.params)
            return list(cursor.fetchall())
        except driver_error as exc:
            # As SQLAlchemy would raise it, for the CLI's database_errors to word.
            raise DBAPIError.instance(compiled.string, None, exc, driver_error,
                                      hide_parameters=True, dialect=conn.dialect) from exc
        finally:
            cursor.close()
    result = conn.execute(stmt)
    return list(result.cursor.fetchall()) if result.cursor is not None else []


def read(conn: Connection, where: Filter) -> Read:
    """The records of every series `where` selects, filtered record by record."""
    s, r = ResultSeries, BenchmarkResult
    stmt = select(s.gpu_id, *(getattr(s, name) for name in KEY_COLUMNS), s.packed)
    if where.only_gpus_of_runs and where.runs is not None:
        stmt = stmt.where(s.gpu_id.in_(select(r.gpu_id).distinct()
                                       .where(r.probe_run_id.in_(sorted(where.runs)))))
    keys: list[tuple[Any, ...]] = []
    parts: list[bytes] = []
    counts: list[int] = []
    for row in _fetch(conn, stmt):
        if len(row[-1]) % ELEMENT.itemsize:
            name = gpu_names(conn, [row[0]])[row[0]]
            raise StoreError(f"the results' series of {name} ({row[1]}) is not whole "
                             "records: damaged, or written by another fleet. Run `fleet db "
                             "repair` on this database")
        keys.append(tuple(row[:-1]))
        parts.append(row[-1])
        counts.append(len(row[-1]) // ELEMENT.itemsize)
    if not keys and missing(conn):
        raise StoreError("this database has results but not their per-GPU series, which "
                         "reports read (upgraded by other means than `fleet db upgrade`?). "
                         "Run `fleet db repair` on it")
    records = np.frombuffer(b"".join(parts), dtype=ELEMENT)
    series = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
    keep = np.ones(len(records), dtype=bool)
    if where.since_us is not None:
        keep &= records["at"] >= where.since_us
    if where.until_us is not None:
        keep &= records["at"] <= where.until_us
    if where.runs is not None:
        keep &= np.isin(records["probe_run_id"], list(where.runs))
    if where.providers is not None:
        keep &= np.isin(records["provider_id"], list(where.providers))
    if not keep.all():
        records, series = records[keep], series[keep]
    return Read(records, series, keys)
