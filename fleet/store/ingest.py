"""Storing agent documents: validated first, then one transaction per document.

A document is known by the sha256 of its canonical JSON (the validated model dumped with
sorted keys and no spaces), held unique per host by the database: storing it again for
its host, from this process or from another one at the same moment, stores nothing and
answers "already stored". In a probe or sweep, another inventory host that sends the very
same document (the same machine listed twice) gets its own copy: each host's answer is
its own, and the pair is a finding (fleet/analysis/listing/duplicates.py). Hand ingest still
takes a document given twice, under whatever names, as one. A document that fails
validation never reaches the database, so nothing of it is stored.

Every transaction takes its locks in one order (provider, host, probe run, document,
GPUs sorted by identity), so concurrent ingests into PostgreSQL queue behind each other
and never deadlock.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy import Connection, Engine, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from agent.timing import repeat
from fleet import repeat as fleet_repeat
from fleet.errors import AgentError, InputError
from fleet.events import MAX_LINE, read_events
from fleet.model.document import (
    AgentDocument,
    BenchmarkResult,
    Gpu,
    Health,
    NodeResult,
    parse_document,
)
from fleet.store import models, series
from fleet.store.config import POWER_CAP_REASONS
from fleet.store.database import WRITES
from fleet.store.host_storage import host_storage_rows, store_host_storage
from fleet.store.job import gpu_problem, job_row
from fleet.store.models import SOAK_CURVE_WIDTH, pack_floats, pack_rows
from fleet.store.network import network_rows, store_network
from fleet.store.node import settings_text, transport_text
from fleet.store.series import epoch_us
from fleet.store.settings import rerun_columns, setting_row
from fleet.store.statements import Statements, to_json
from fleet.version import __version__

DEFAULT_PROVIDER = "unknown"
TELEMETRY_WIDTH = 6


class Outcome(StrEnum):
    """Whether a document was stored now or had been already."""

    STORED = "stored"
    ALREADY_STORED = "already stored"


@dataclass(frozen=True)
class Listing:
    """What the inventory said of a host when it was probed (stored on run_host)."""

    expect: dict[str, Any] | None = None
    price_per_gpu_hour: float | None = None
    currency: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Origin:
    """Where a document came from. `host` None means the hostname the agent reported."""

    provider: str = DEFAULT_PROVIDER
    host: str | None = None
    listing: Listing = Listing()


@dataclass(frozen=True)
class RunInfo:
    """The probe run that documents stored through one `Ingest` belong to."""

    kind: str = "ingest"  # "probe", "sweep" or "ingest" (collected by hand)
    sweep: str | None = None
    inventory: str | None = None
    agent_version: str | None = None
    # Continue this run (a resumed sweep) instead of creating one with the first document.
    run_id: int | None = None

    @property
    def one_document_per_host(self) -> bool:
        """A probe or sweep measures each host once; hand ingest may load a host's history
        (several documents) into one run."""
        return self.kind != "ingest"


@dataclass(frozen=True)
class Stored:
    """A stored document: whether it was new, its id and its content hash."""

    outcome: Outcome
    document_id: int
    content_hash: str


@dataclass(frozen=True)
class Prepared:
    """A validated document as the rows its transaction writes, less the ids only the
    database knows: all the CPU work, done before the transaction so that locks are held
    briefly, and plain data, so that other processes can do it (`fleet ingest`'s readers,
    fleet/store/intake.py) and hand it over cheaply (pickling the model would cost more
    than validating the text again)."""

    content_hash: str
    hostname: str | None
    collected_at: dt.datetime
    document_row: dict[str, Any]  # without ids and times
    gpu_uuids: tuple[tuple[int, str | None], ...]  # every GPU fingerprinted or benchmarked
    fingerprints: tuple[dict[str, Any], ...]  # without document_id, gpu_id, run and host
    benchmarks: tuple[dict[str, Any], ...]  # without the ids and collected_at
    errors: tuple[dict[str, Any], ...]  # stage, gpu_index, message
    # The node suite's figures, without the ids and collected_at; none before the suite.
    node_results: tuple[dict[str, Any], ...] = ()
    # The job suite's figures, likewise (fleet/store/job.py); none before the suite.
    job_results: tuple[dict[str, Any], ...] = ()
    # The settings the run measured under (fleet/store/settings.py); none before 0018.
    settings: tuple[dict[str, Any], ...] = ()
    # The node's network (fleet/store/network.py); None before 0021 or without a block.
    network: dict[str, Any] | None = None
    # The host's limits and storage (fleet/store/host_storage.py); None before 0024.
    host_storage: dict[str, Any] | None = None

    @property
    def gpu_count(self) -> int:
        """How many GPUs the document describes."""
        return int(self.document_row["gpu_count"])

    @property
    def benchmark_count(self) -> int:
        """How many benchmark results the document holds."""
        return int(self.document_row["benchmark_count"])


def parse_text(text: str | bytes, origin: str) -> AgentDocument:
    """Validate one bare document from JSON text, or raise AgentError naming the fields.

    pydantic parses and validates JSON text in one pass, twice as fast as json.loads and
    then the model; only a document that fails takes the slower path, through
    `parse_document`, for its messages.
    """
    try:
        return AgentDocument.model_validate_json(text)
    except ValidationError:
        pass
    try:
        # NaN and Infinity are read here so that the model, which refuses them, names the
        # field that held one.
        data = json.loads(text)
    except ValueError as exc:
        raise AgentError(f"{origin}: not a JSON document ({exc})") from None
    return parse_document(data, origin)


def read_document_file(path: str, data: bytes) -> AgentDocument:
    """A file collected by hand: one bare document, or the agent's JSON-lines output."""
    if len(data) > MAX_LINE:
        raise AgentError(f"{path}: over {MAX_LINE // (1024 * 1024)} MiB; an agent document "
                         "is far smaller, so this file is not one")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise AgentError(f"{path}: not UTF-8 text (byte {exc.start}); give the agent's "
                         "output or a document JSON file") from None
    if not text:
        raise AgentError(f"{path}: the file is empty")
    if "\n" not in text or not text.startswith('{"event"'):
        try:
            return AgentDocument.model_validate_json(text)
        except ValidationError:
            pass
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None  # several lines: the agent's event stream
    if isinstance(whole, dict) and "event" not in whole:
        return parse_document(whole, path)
    return read_events(text.splitlines(), path)


def _bad_strings(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, str):
        if "\x00" in value:
            yield f"{path}: holds a NUL character"
        elif any("\ud800" <= ch <= "\udfff" for ch in value):
            yield f"{path}: holds an unpaired UTF-16 surrogate"
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            yield from _bad_strings(key, where)
            yield from _bad_strings(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _bad_strings(item, f"{path}.{i}")


def _reject(origin: str, problem: str) -> AgentError:
    return AgentError(f"{origin}: invalid agent document: {problem}")


def _canonical(data: dict[str, Any], origin: str) -> bytes:
    try:
        text = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a lone surrogate, which UTF-8 cannot hold
        text = b""
    # NUL and lone surrogates pass JSON and pydantic but PostgreSQL refuses them; reject
    # them on SQLite too, so a document is valid or not whatever the backend. The test on
    # the bytes only finds candidates (a literal backslash-u0000 is fine); the walk
    # decides and names the field.
    if not text or b"\\u0000" in text:
        problems = list(_bad_strings(data, ""))
        if problems:
            raise _reject(origin, problems[0])
    return text


def _collected_at(document: AgentDocument, origin: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(document.collected_at)
    except ValueError:
        raise _reject(origin, f"collected_at: {document.collected_at[:40]!r} is not an "
                              "ISO 8601 time such as 2026-11-22T21:00:00+00:00") from None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def prepare(document: AgentDocument, origin: str) -> Prepared:
    """Check what the model cannot (consistency across fields, text both databases can
    hold), serialize and build the rows; raises AgentError naming the field."""
    text = _canonical(document.model_dump(mode="json"), origin)
    collected_at = _collected_at(document, origin)
    gpus: dict[int, Gpu] = {}
    uuids: dict[str, int] = {}
    for i, gpu in enumerate(document.gpus):
        if gpu.index in gpus:
            raise _reject(origin, f"gpus.{i}.index: GPU {gpu.index} appears twice")
        if gpu.uuid is not None:
            if gpu.uuid in uuids:
                raise _reject(origin, f"gpus.{i}.uuid: {gpu.uuid!r} is also GPU "
                                      f"{uuids[gpu.uuid]}'s")
            uuids[gpu.uuid] = gpu.index
        gpus[gpu.index] = gpu
    for i, result in enumerate(document.benchmarks):
        if result.gpu_uuid is None:
            continue
        known = gpus.get(result.gpu_index)
        if known is not None and known.uuid is not None and known.uuid != result.gpu_uuid:
            raise _reject(origin, f"benchmarks.{i}.gpu_uuid: {result.gpu_uuid!r} is not the "
                                  f"UUID of GPU {result.gpu_index} ({known.uuid!r})")
        if uuids.get(result.gpu_uuid, result.gpu_index) != result.gpu_index:
            raise _reject(origin, f"benchmarks.{i}.gpu_index: {result.gpu_uuid!r} is GPU "
                                  f"{uuids[result.gpu_uuid]}, not {result.gpu_index}")
    found: dict[int, str | None] = {index: gpu.uuid for index, gpu in gpus.items()}
    for result in document.benchmarks:
        found.setdefault(result.gpu_index, result.gpu_uuid)
    if document.node:
        _check_node(document, gpus, uuids, found, origin)
    problem = gpu_problem(document, gpus, uuids, found)
    if problem is not None:
        raise _reject(origin, problem)
    content_hash = hashlib.sha256(text).hexdigest()
    return Prepared(
        content_hash=content_hash,
        hostname=document.host.hostname,
        collected_at=collected_at,
        document_row={
            "content_hash": content_hash,
            "format": document.format, "agent_version": document.agent_version,
            "hostname": document.host.hostname, "platform": document.host.platform,
            "source_kind": document.source.kind, "gpu_count": len(document.gpus),
            "benchmark_count": len(document.benchmarks),
            "error_count": len(document.errors), "body": text.decode("utf-8")},
        gpu_uuids=tuple(found.items()),
        fingerprints=tuple(_fingerprint_row(gpu) for gpu in gpus.values()),
        benchmarks=tuple(_benchmark_row(result, gpus.get(result.gpu_index))
                         for result in document.benchmarks),
        errors=tuple({"stage": error.stage, "gpu_index": error.gpu, "message": error.message}
                     for error in document.errors),
        node_results=tuple(_node_row(result, gpus) for result in document.node),
        job_results=tuple(job_row(result, _job_variant(gpus.get(result.gpu_index),
                                                       result.provenance.device_name))
                          for result in document.jobs),
        settings=tuple(setting_row(s) for s in document.settings or ()),
        network=network_rows(document.network),
        host_storage=host_storage_rows(document.host_limits, document.storage))


def variant_of(gpu: Gpu) -> str:
    """What reports group GPUs by: the catalog's label, else what is known of the card."""
    variant = gpu.variant
    if variant.label:
        return variant.label
    if variant.form_factor != "unknown" and variant.family:
        return f"{variant.family} {variant.form_factor}"
    return f"unknown: {gpu.name or variant.pci_device_id or 'no name'}"


def _job_variant(gpu: Gpu | None, device_name: str | None) -> str:
    # As a benchmark result's: a GPU the document did not fingerprint is named by torch.
    return variant_of(gpu) if gpu is not None else \
        f"unknown: {device_name or 'not fingerprinted'}"


def _check_name(value: str, what: str, limit: int) -> str:
    value = value.strip()
    if not value or len(value) > limit or "\x00" in value:
        raise InputError(f"{what} {value[:40]!r}: give a name of 1 to {limit} characters")
    return value


def _names(origin: Origin, hostname: str | None) -> tuple[str, str]:
    provider = _check_name(origin.provider, "provider", 128)
    host = origin.host if origin.host is not None else hostname
    if not host:
        raise InputError("the document does not say its hostname: give --host NAME")
    return provider, _check_name(host, "host", 255)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class _Lookups:
    """The rare statements (new provider, host or run; a document already stored)."""

    def __init__(self, dialect: str) -> None:
        # Both dialects spell ON CONFLICT the same way, through different Insert classes.
        upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        tables = models.Base.metadata.tables
        provider, host, document = tables["provider"], tables["host"], tables["document"]
        run, run_host = tables["probe_run"], tables["run_host"]
        self.provider = upsert(provider).on_conflict_do_nothing(index_elements=["name"])
        self.provider_id = select(provider.c.id).where(provider.c.name == bindparam("name"))
        self.host = upsert(host).on_conflict_do_nothing(index_elements=["provider_id", "name"])
        self.host_id = select(host.c.id).where(host.c.provider_id == bindparam("provider_id"),
                                               host.c.name == bindparam("name"))
        self.run = insert(run).returning(run.c.id)
        self.finish = (update(run).where(run.c.id == bindparam("run_id"))
                       .values(finished_at=bindparam("finished_at"),
                               ended_at=bindparam("finished_at")))
        self.document_id = select(document.c.id).where(
            document.c.content_hash == bindparam("hash"),
            document.c.host_id == bindparam("host_id"))
        self.document_by_hash = select(document.c.id).where(
            document.c.content_hash == bindparam("hash")).order_by(document.c.id).limit(1)
        self.run_host_document = select(run_host.c.document_id).where(
            run_host.c.probe_run_id == bindparam("run_id"),
            run_host.c.host_id == bindparam("host_id"))


class Ingest:
    """Stores documents into one database as one probe run (created with its first
    document, so a run that stored nothing leaves no row).

        with Ingest(engine, RunInfo(sweep="nightly")) as ingest:
            ingest.store(document, Origin(provider="lambda", host="gpu-01"))
    """

    def __init__(self, engine: Engine, run: RunInfo | None = None) -> None:
        self.engine = engine
        self.run = run or RunInfo()
        self.run_id: int | None = None
        self._hosts: dict[tuple[str, str], tuple[int, int]] = {}
        self._conn: Connection | None = None
        self._sql = _Lookups(engine.dialect.name)
        self._fast = Statements(engine.dialect)

    def __enter__(self) -> Ingest:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def conn(self) -> Connection:
        """The connection the run writes through, opened on first use."""
        if self._conn is None:
            self._conn = self.engine.connect().execution_options(**{WRITES: True})
        return self._conn

    def close(self) -> None:
        """Close the connection, first finishing the run if this process started it."""
        if self._conn is None:
            return
        try:
            # A continued run (a resumed sweep, a Celery worker storing one host of the
            # controller's run) is finished by whoever started it, so an unfinished run
            # keeps meaning "this sweep did not get to its end" (`fleet sweep --resume`).
            if self.run_id is not None and self.run.run_id is None:
                with self._conn.begin():
                    self._conn.execute(self._sql.finish,
                                       {"run_id": self.run_id, "finished_at": _now()})
        finally:
            self._conn.close()
            self._conn = None

    def store(self, document: AgentDocument, origin: Origin, source: str = "document") -> Stored:
        """Store one validated document; `source` names it in error messages."""
        return self.store_prepared(prepare(document, source), origin)

    def store_prepared(self, prepared: Prepared, origin: Origin) -> Stored:
        """Store `prepared` under `origin` in one transaction; stored now, or already."""
        conn = self.conn
        names = _names(origin, prepared.hostname)
        transaction = conn.begin()
        try:
            # By hand, the same file given under two names is one collection given twice;
            # a probe's hosts each answered, so only the same host's copy is "already".
            existing = None if self.run.one_document_per_host else self._existing(prepared)
            if existing is not None:
                transaction.rollback()
                return Stored(Outcome.ALREADY_STORED, existing, prepared.content_hash)
            provider_id, host_id = self._host_ids(names)
            run_id = self._run_id()
            document_id = self._write(prepared, run_id, provider_id, host_id)
            if document_id is None:
                transaction.rollback()
                with conn.begin():
                    existing = conn.execute(self._sql.document_id, {
                        "hash": prepared.content_hash, "host_id": host_id}).scalar_one()
                return Stored(Outcome.ALREADY_STORED, existing, prepared.content_hash)
            if not self._settle_host(run_id, host_id, "stored", document_id, origin.listing,
                                     prepared.collected_at):
                transaction.rollback()
                with conn.begin():
                    existing = conn.execute(self._sql.run_host_document,
                                            {"run_id": run_id, "host_id": host_id}
                                            ).scalar_one()
                return Stored(Outcome.ALREADY_STORED, existing, prepared.content_hash)
            transaction.commit()
        except BaseException:
            if transaction.is_active:
                transaction.rollback()
            raise
        # Only what was committed may be remembered: a rolled-back run or host is gone.
        self.run_id = run_id
        self._hosts[names] = (provider_id, host_id)
        return Stored(Outcome.STORED, document_id, prepared.content_hash)

    def store_batch(self, items: Sequence[tuple[Prepared, Origin]]) -> list[Stored]:
        """Store several documents of hand ingest in one transaction: all of them or, on
        any error, none (rolled back, the error raised; store them one by one then, with
        `store_prepared`, to learn which one failed and keep the others).

        Why: SQLite writes every page a transaction touched to the WAL at its commit, and
        the documents of a batch share their index pages, so one commit for 100 documents
        writes far less than 100 commits (bench/store_ingest.py). Only for hand ingest,
        where a host's newer document replaces its older one in the run: a probe or sweep
        settles each host once, and a refused second document must roll back alone.
        """
        if self.run.one_document_per_host:
            raise ValueError("store_batch is for hand ingest; a probe stores one by one")
        conn = self.conn
        names = [_names(origin, prepared.hostname) for prepared, origin in items]
        hosts = dict(self._hosts)
        stored: list[Stored] = []
        run_id: int | None = None  # created with the first document written, as ever
        transaction = conn.begin()
        try:
            for (prepared, origin), name in zip(items, names, strict=True):
                # A document stored before under another provider or host name is already
                # stored (hand ingest, see `store_prepared`), and must not leave that name
                # behind as a host without documents, as a rolled-back single store would
                # not. Per host, the database would store it again, so ask every time.
                existing = self._existing(prepared)
                document_id = None
                if existing is None:
                    if name not in hosts:
                        hosts[name] = self._host_ids(name)
                    provider_id, host_id = hosts[name]
                    if run_id is None:
                        run_id = self._run_id()
                    document_id = self._write(prepared, run_id, provider_id, host_id)
                if document_id is None:
                    if existing is None:  # stored meanwhile by another process
                        existing = int(conn.execute(self._sql.document_id, {
                            "hash": prepared.content_hash, "host_id": host_id}
                        ).scalar_one())
                    stored.append(Stored(Outcome.ALREADY_STORED, existing,
                                         prepared.content_hash))
                    continue
                assert run_id is not None  # set just before the document was written
                self._settle_host(run_id, host_id, "stored", document_id, origin.listing,
                                  prepared.collected_at)
                stored.append(Stored(Outcome.STORED, document_id, prepared.content_hash))
            transaction.commit()
        except BaseException:
            if transaction.is_active:
                transaction.rollback()
            raise
        # Only what was committed may be remembered, as in `store_prepared`.
        if run_id is not None:
            self.run_id = run_id
        self._hosts = hosts
        return stored

    def record_error(self, origin: Origin, stage: str, message: str) -> None:
        """A host that sent no document (unreachable, timed out, agent crashed)."""
        conn = self.conn
        names = _names(origin, None)
        with conn.begin():
            provider_id, host_id = self._host_ids(names)
            run_id = self._run_id()
            if self._settle_host(run_id, host_id, "failed", None, origin.listing):
                conn.execute(insert(models.HostError), [{
                    "probe_run_id": run_id, "host_id": host_id, "document_id": None,
                    "stage": stage[:128], "gpu_index": None, "message": message,
                    "occurred_at": _now()}])
        self.run_id = run_id
        self._hosts[names] = (provider_id, host_id)

    def _existing(self, prepared: Prepared) -> int | None:
        found = self.conn.execute(self._sql.document_by_hash,
                                  {"hash": prepared.content_hash}).scalar_one_or_none()
        return None if found is None else int(found)

    def _write(self, prepared: Prepared, run_id: int, provider_id: int,
               host_id: int) -> int | None:
        """The document's rows, in the open transaction; None when it is already stored."""
        fast = self._fast
        collected_at = fast.time(prepared.collected_at)
        with self._cursor() as cursor:
            document_id = fast.document.one(cursor, dict(
                prepared.document_row, probe_run_id=run_id, host_id=host_id,
                collected_at=collected_at, stored_at=fast.time(_now()),
                samples_pruned_at=None))
            if document_id is None:
                return None
            document_id = int(document_id)
            gpu_ids = self._upsert_gpus(cursor, prepared, host_id, collected_at)
            fingerprint_ids = {int(index): int(fp_id) for index, fp_id in fast.fingerprints.rows(
                cursor, [dict(row, document_id=document_id, gpu_id=gpu_ids[row["gpu_index"]],
                              probe_run_id=run_id, host_id=host_id)
                         for row in prepared.fingerprints])}
            if prepared.benchmarks:
                results = [dict(
                    row, document_id=document_id, provider_id=provider_id, host_id=host_id,
                    probe_run_id=run_id, collected_at=collected_at,
                    gpu_id=gpu_ids[row["gpu_index"]],
                    fingerprint_id=fingerprint_ids.get(row["gpu_index"]))
                    for row in prepared.benchmarks]
                self._with_history(cursor, results)
                fast.benchmark.many(cursor, results)
                fast.series.many(cursor, fast.series.rows(results,
                                                          epoch_us(prepared.collected_at)))
            if prepared.node_results:
                fast.node.many(cursor, [dict(
                    row, document_id=document_id, provider_id=provider_id, host_id=host_id,
                    probe_run_id=run_id, collected_at=collected_at,
                    gpu_id=None if row["gpu_index"] is None else gpu_ids[row["gpu_index"]],
                    peer_gpu_id=None if row["peer_index"] is None
                    else gpu_ids[row["peer_index"]])
                    for row in prepared.node_results])
            if prepared.job_results:
                fast.job.many(cursor, [dict(
                    row, document_id=document_id, provider_id=provider_id, host_id=host_id,
                    probe_run_id=run_id, collected_at=collected_at,
                    gpu_id=gpu_ids[row["gpu_index"]]) for row in prepared.job_results])
            if prepared.settings:
                fast.setting.many(cursor, [dict(row, document_id=document_id)
                                           for row in prepared.settings])
            if prepared.network is not None:
                store_network(self.conn, document_id, prepared.network)
            if prepared.host_storage is not None:
                store_host_storage(self.conn, document_id, prepared.host_storage)
            if prepared.errors:
                fast.error.many(cursor, [dict(
                    row, probe_run_id=run_id, host_id=host_id, document_id=document_id,
                    occurred_at=collected_at) for row in prepared.errors])
        return document_id

    def _with_history(self, cursor: Any, results: list[dict[str, Any]]) -> None:
        """Each soaked result's repeat interval again, now with its GPU's earlier figures
        under the same configuration (its series), where it has at least two. On the
        driver's cursor, as the inserts are: through SQLAlchemy the read doubled a
        soaked document's cost to the writer (bench/store_ingest.py --soaked)."""
        contended = 1 << series.FLAG_COLUMNS.index("contended")
        for row in results:
            if row["wander"] is None:
                continue
            packed = self._fast.history.one(
                cursor, {"gpu_id": row["gpu_id"], "key": series.series_key(row)})
            history = fleet_repeat.history_of(series.unpack(bytes(packed)), contended) \
                if packed else []
            if len(history) >= 2:
                row.update(_repeat_columns(row["tflops"], row["variant"], row["wander"],
                                           history))

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        """The driver's own cursor (statements.py says why), with its errors raised as
        SQLAlchemy's, as `connection.execute` would: the CLI's `database_errors` turns
        those into a message, and a bare driver error would reach the user as a trace.
        No statement or parameters go into the error: they can be a whole document."""
        cursor = self.conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        driver_error = self.engine.dialect.loaded_dbapi.Error
        try:
            yield cursor
        except driver_error as exc:
            raise DBAPIError.instance(None, None, exc, driver_error,
                                      hide_parameters=True,
                                      dialect=self.engine.dialect) from exc
        finally:
            cursor.close()

    def _settle_host(self, run_id: int, host_id: int, status: str, document_id: int | None,
                     listing: Listing, collected_at: dt.datetime | None = None) -> bool:
        """Record the host's end in this run; False when the run already stored it."""
        fast = self._fast
        statement = (fast.run_host_replace if status == "stored"
                     and not self.run.one_document_per_host else fast.run_host_once)
        with self._cursor() as cursor:
            settled = statement.one(cursor, {
                "probe_run_id": run_id, "host_id": host_id, "status": status,
                "document_id": document_id,
                "expect": None if listing.expect is None else to_json(listing.expect),
                "price_per_gpu_hour": listing.price_per_gpu_hour,
                "currency": listing.currency, "tags": to_json(list(listing.tags)),
                "updated_at": fast.time(_now()),
                "collected_at": None if collected_at is None else fast.time(collected_at)})
        return settled is not None

    def _host_ids(self, names: tuple[str, str]) -> tuple[int, int]:
        cached = self._hosts.get(names)
        if cached is not None:
            return cached
        provider, host = names
        conn, sql = self.conn, self._sql
        conn.execute(sql.provider, {"name": provider})
        provider_id = int(conn.execute(sql.provider_id, {"name": provider}).scalar_one())
        conn.execute(sql.host, {"provider_id": provider_id, "name": host})
        host_id = int(conn.execute(sql.host_id, {"provider_id": provider_id, "name": host}
                                   ).scalar_one())
        return provider_id, host_id

    def _run_id(self) -> int:
        if self.run_id is not None:
            return self.run_id
        if self.run.run_id is not None:
            return self.run.run_id
        run = self.run
        return int(self.conn.execute(self._sql.run, {
            "kind": run.kind, "sweep": run.sweep, "inventory": run.inventory,
            "controller_version": __version__, "agent_version": run.agent_version,
            "started_at": _now(), "finished_at": None, "ended_at": None}).scalar_one())

    def _upsert_gpus(self, cursor: Any, prepared: Prepared, host_id: int,
                     seen: Any) -> dict[int, int]:
        """GPU id by NVML index, for every GPU the document fingerprinted or benchmarked."""
        # A GPU without a UUID cannot be told apart from another card at the same index
        # elsewhere, so it is followed only on its host.
        identity = {index: f"uuid:{uuid}" if uuid else f"host:{host_id}:{index}"
                    for index, uuid in prepared.gpu_uuids}
        rows = [{"identity": identity[index], "uuid": uuid,
                 "host_id": None if uuid else host_id, "gpu_index": None if uuid else index,
                 "first_seen": seen, "last_seen": seen}
                for index, uuid in sorted(prepared.gpu_uuids,
                                          key=lambda item: identity[item[0]])]
        ids = dict(self._fast.gpus.rows(cursor, rows))
        return {index: int(ids[key]) for index, key in identity.items()}


def _fingerprint_row(gpu: Gpu) -> dict[str, Any]:
    variant = gpu.variant
    return {
        "gpu_index": gpu.index,
        "name": gpu.name, "serial": gpu.serial, "pci_device_id": gpu.pci_device_id,
        "variant": variant_of(gpu), "variant_label": variant.label,
        "variant_matched_by": variant.matched_by, "family": variant.family,
        "form_factor": variant.form_factor, "memory_gb": variant.memory_gb,
        "memory_total_mib": gpu.memory_total_mib, "architecture": gpu.architecture,
        "driver_version": gpu.driver_version, "cuda_driver_version": gpu.cuda_driver_version,
        "vbios_version": gpu.vbios_version, "power_limit_w": gpu.power_limit_w,
        "power_limit_default_w": gpu.power_limit_default_w,
        "max_sm_clock_mhz": gpu.max_sm_clock_mhz, "max_mem_clock_mhz": gpu.max_mem_clock_mhz,
        "virtualization_mode": gpu.virtualization_mode, "mig_enabled": gpu.mig_enabled,
        "ecc_enabled": gpu.ecc_enabled, "persistence_mode": gpu.persistence_mode,
        "pcie_gen_max": gpu.pcie_gen_max, "pcie_width_max": gpu.pcie_width_max,
        "nvlink_links_active": gpu.nvlink_links_active,
        "power_limit_enforced_w": gpu.power_limit_enforced_w,
        "power_limit_min_w": gpu.power_limit_min_w, "power_limit_max_w": gpu.power_limit_max_w,
        "app_sm_clock_target_mhz": gpu.app_sm_clock_target_mhz,
        "pcie_gen_current": gpu.pcie_gen_current, "pcie_width_current": gpu.pcie_width_current,
        "nvlink_links_total": gpu.nvlink_links_total,
        "mig_devices": to_json([m.profile or m.name or "?" for m in gpu.mig_devices]),
        "vgpu_profile": None if variant.vgpu_profile is None else variant.vgpu_profile.profile,
        "capabilities": to_json({name: cap.verdict for name, cap in gpu.capabilities}),
        **_health_columns(gpu.health),
        "memory_used_mib": gpu.memory_used_mib,
        "processes": to_json([[p.pid, p.used_memory_mib, p.visible, p.name, p.user]
                              for p in gpu.processes]),
    }


def _health_columns(health: Health | None) -> dict[str, Any]:
    """The verdict, its reasons and its counters; NULL for an agent that read none."""
    if health is None:
        return {"health": None, "health_reasons": None, "health_counters": None,
                "health_action": None}
    return {"health": health.verdict, "health_reasons": to_json(list(health.reasons)),
            "health_counters": to_json(health_counters(health)),
            "health_action": health.action}


def health_counters(health: Health) -> dict[str, int | bool]:
    """The counters a sweep compares night to night (fleet/analysis/sweep/history.py), flat and
    named as stored: those the driver did not give are left out, and so are the Xid
    lines, which are text for a reader and would make every row a few KiB."""
    counters: dict[str, int | bool | None] = {"pcie_replays": health.pcie_replays,
                                              "energy_mj": health.energy_mj}
    ecc = health.ecc
    if ecc is not None:
        counters.update(ecc_corrected_volatile=ecc.corrected_volatile,
                        ecc_uncorrected_volatile=ecc.uncorrected_volatile,
                        ecc_corrected_aggregate=ecc.corrected_aggregate,
                        ecc_uncorrected_aggregate=ecc.uncorrected_aggregate)
    rows = health.remapped_rows
    if rows is not None:
        counters.update(remapped_correctable=rows.correctable,
                        remapped_uncorrectable=rows.uncorrectable,
                        remapped_pending=rows.pending, remapped_failure=rows.failure)
    pages = health.retired_pages
    if pages is not None:
        counters.update(retired_single_bit=pages.single_bit,
                        retired_double_bit=pages.double_bit, retired_pending=pages.pending)
    counters.update({f"throttle_{reason}_ns": ns for reason, ns in health.throttle_ns.items()})
    return {name: value for name, value in counters.items() if value is not None}


def _benchmark_row(result: BenchmarkResult, gpu: Gpu | None) -> dict[str, Any]:
    stats, flags, telemetry = result.stats, result.flags, result.telemetry
    lock = result.clock_lock
    variant = (variant_of(gpu) if gpu is not None else
               f"unknown: {result.provenance.device_name or 'not fingerprinted'}")
    return {
        "variant": variant,
        "gpu_index": result.gpu_index, "harness_version": result.harness_version,
        "timing_method": result.timing_method, "mode": result.mode,
        "pause_ms": result.pause_ms, "cache": result.cache,
        # Before harness 1.3 every result was measured from a cool start.
        "thermal": result.thermal or "cool-start",
        "concurrency": result.concurrency, "gpus_in_run": result.gpus_in_run,
        "dtype": result.dtype, "m": result.m, "n": result.n, "k": result.k,
        "tflops": result.tflops,
        "runs": stats.runs, "median_ms": stats.median_ms,
        "trimmed_mean_ms": stats.trimmed_mean_ms, "mean_ms": stats.mean_ms,
        "min_ms": stats.min_ms, "max_ms": stats.max_ms, "stdev_ms": stats.stdev_ms,
        "cv": stats.cv, "ci95_low_ms": stats.ci95_low_ms, "ci95_high_ms": stats.ci95_high_ms,
        "warmup_steady": result.warmup.steady, "warmup_s": result.warmup.seconds,
        "correctness_passed": result.correctness.passed,
        "max_rel_error": result.correctness.max_rel_error,
        "power_capped": flags.power_capped, "thermal_throttled": flags.thermal_throttled,
        "hw_slowdown": flags.hw_slowdown, "contended": flags.contended,
        "contention": "; ".join(result.contention)[:1024] or None,
        "not_steady": flags.not_steady, "correctness_failed": flags.correctness_failed,
        "clocks_locked": flags.clocks_locked, "not_soaked": flags.not_soaked,
        "clock_lock_mhz": lock.requested_mhz if lock is not None and lock.applied else None,
        "telemetry_samples": telemetry.samples,
        "sm_clock_mhz_median": telemetry.sm_clock_mhz_median,
        "mem_clock_mhz_median": telemetry.mem_clock_mhz_median,
        "power_w_median": telemetry.power_w_median,
        "temperature_c_max": telemetry.temperature_c_max,
        "reason_shares": to_json(telemetry.reason_shares),
        "power_cap_share": sum(telemetry.reason_shares.get(name) or 0.0
                               for name in POWER_CAP_REASONS),
        **_soak_columns(result),
        **_integrity_columns(result),
        **_repeat_columns(result.tflops, variant, fleet_repeat.wander_of(result), ()),
        "torch_version": result.provenance.torch_version,
        "cuda_runtime_version": result.provenance.cuda_runtime_version,
        "cublas_version": result.provenance.cublas_version,
        "wall_s": result.wall_s,
        "samples_ms": pack_floats(result.samples_ms),
        "telemetry_series": pack_rows(result.telemetry_series, TELEMETRY_WIDTH),
        **_matmul_rerun_columns(result),
    }


def _matmul_rerun_columns(result: BenchmarkResult) -> dict[str, Any]:
    rerun = result.rerun
    if rerun is None:
        return dict.fromkeys(("rerun_tflops", "rerun_with_tflops", "rerun_without",
                              "rerun_floor_tflops", "rerun_contended"))
    return {"rerun_tflops": rerun.tflops, "rerun_with_tflops": rerun.with_tflops,
            "rerun_without": " ".join(rerun.without)[:1024],
            "rerun_floor_tflops": rerun.floor_tflops, "rerun_contended": rerun.contended}


def _repeat_columns(tflops: float, variant: str, wander: float | None,
                    history: Sequence[float]) -> dict[str, Any]:
    """The repeat interval's columns (NULL for a cool-start result, which has none)."""
    if wander is None:
        return {"repeat_low_tflops": None, "repeat_high_tflops": None, "repeat_sd": None,
                "repeat_basis": None, "wander": None}
    found = repeat.interval(tflops, variant, wander, list(history)[-fleet_repeat.HISTORY:])
    return {"repeat_low_tflops": found.low, "repeat_high_tflops": found.high,
            "repeat_sd": found.sd, "repeat_basis": found.basis, "wander": wander}


def _soak_columns(result: BenchmarkResult) -> dict[str, Any]:
    soak = result.soak
    load = soak.temperature_c if soak is not None else None
    return {
        "temperature_load_c": load if load is not None else result.telemetry.temperature_c_max,
        "soak_s": None if soak is None else soak.seconds,
        "first_20s_tflops": None if soak is None else soak.first_20s_tflops,
        "soak_drop": None if soak is None else soak.drop,
        "soak_curve": pack_rows(soak.curve if soak is not None else [], SOAK_CURVE_WIDTH),
    }


def _integrity_columns(result: BenchmarkResult) -> dict[str, Any]:
    checked = result.integrity
    if checked is None:
        return {"integrity_checks": None, "integrity_mismatches": None,
                "integrity_first_s": None, "integrity_temperature_c": None,
                "integrity_elements": None, "integrity_digest": None,
                "integrity_injected": None}
    return {"integrity_checks": checked.checks, "integrity_mismatches": checked.mismatches,
            "integrity_first_s": checked.first_mismatch_s,
            "integrity_temperature_c": checked.first_mismatch_temperature_c,
            "integrity_elements": checked.first_mismatch_elements,
            "integrity_digest": checked.digest, "integrity_injected": checked.injected}


def _check_node(document: AgentDocument, gpus: dict[int, Gpu], uuids: dict[str, int],
                found: dict[int, str | None], origin: str) -> None:
    """The node results' GPUs agree with the document's, as its benchmarks' must; each
    GPU they name gets an identity (`found`), so that its figures follow the card as its
    results do."""
    for i, result in enumerate(document.node):
        for at, index, uuid in (("gpu", result.gpu_index, result.gpu_uuid),
                                ("peer", result.peer_index, result.peer_uuid)):
            if index is None or uuid is None:
                continue
            known = gpus.get(index)
            if known is not None and known.uuid is not None and known.uuid != uuid:
                raise _reject(origin, f"node.{i}.{at}_uuid: {uuid!r} is not the UUID of "
                                      f"GPU {index} ({known.uuid!r})")
            if uuids.get(uuid, index) != index:
                raise _reject(origin, f"node.{i}.{at}_index: {uuid!r} is GPU "
                                      f"{uuids[uuid]}, not {index}")
        for index, uuid in ((result.gpu_index, result.gpu_uuid),
                            (result.peer_index, result.peer_uuid)):
            if index is not None:
                found.setdefault(index, uuid)


def _node_row(result: NodeResult, gpus: dict[int, Gpu]) -> dict[str, Any]:
    # The all-reduce is the node's: it goes with the node's first GPU's variant.
    gpu = (gpus.get(result.gpu_index) if result.gpu_index is not None
           else gpus[min(gpus)] if gpus else None)
    stats, link = result.stats, result.link
    low, high = stats.ci95_gbs if stats.ci95_gbs is not None else (None, None)
    return {
        "variant": "unknown: not fingerprinted" if gpu is None else variant_of(gpu),
        "gpu_index": result.gpu_index, "peer_index": result.peer_index,
        "suite_version": result.suite_version, "kind": result.kind,
        "direction": result.direction, "memory": result.memory,
        "size_bytes": result.size_bytes, "gpus_in_run": result.gpus_in_run,
        "backend": result.backend, "dtype": result.dtype,
        "gbs": result.gbs, "algbw_gbs": result.algbw_gbs,
        "runs": stats.runs, "min_gbs": stats.min_gbs, "max_gbs": stats.max_gbs,
        "cv": stats.cv, "ci95_low_gbs": low, "ci95_high_gbs": high,
        "peer_access": result.peer_access, "topology": result.topology,
        "link_gen": None if link is None else link.gen,
        "link_width": None if link is None else link.width,
        "link_gen_max": None if link is None else link.gen_max,
        "link_width_max": None if link is None else link.width_max,
        "datasheet_gbs": result.datasheet_gbs, "datasheet_source": result.datasheet_source,
        "torch_version": result.torch_version,
        "cuda_runtime_version": result.cuda_runtime_version,
        "nccl_version": result.nccl_version, "wall_s": result.wall_s,
        "contended": bool(result.contention),
        "contention": "; ".join(result.contention)[:1024] or None,
        "numa_node": result.numa_node,
        "transport": transport_text(result.transport),
        "nccl_settings": settings_text(result.settings),
        "nvlink_links": result.nvlink_links, "nvlink_fabric": result.nvlink_fabric,
        **rerun_columns(result.rerun),
    }

