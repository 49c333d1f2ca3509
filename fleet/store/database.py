"""Where the store is, and opening it.

The database is `--db URL`, else `$FLEET_DB`, else SQLite at
`$XDG_DATA_HOME/fleet/fleet.db` (`~/.local/share/fleet/fleet.db` when XDG_DATA_HOME is
unset). A URL may be `sqlite:///relative.db`, `sqlite:////absolute.db`, a bare file path,
or `postgresql://user:password@host:5432/name` (driven by psycopg 3). A URL is only ever
shown through `redact`, so a password never reaches a terminal, a log or an error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import StaticPool

from fleet.errors import InputError, StoreError

ENV_VAR = "FLEET_DB"
# A writer waits this long for another process's transaction before giving up: ingest
# transactions take milliseconds, so only a stuck process holds the lock this long.
BUSY_TIMEOUT_MS = 60_000
CONNECT_TIMEOUT_S = 10
WAL_CHECKPOINT_PAGES = 10_000
# Execution option marking a transaction that will write: on SQLite it begins with
# BEGIN IMMEDIATE, taking the write lock up front. A deferred transaction that reads and
# then writes fails at once with "database is locked" when another process wrote in
# between, whatever the busy timeout says.
WRITES = "fleet_writes"


def default_sqlite_path() -> Path:
    """Where the store is by default: $XDG_DATA_HOME/fleet/fleet.db."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "fleet" / "fleet.db"


@dataclass(frozen=True)
class Location:
    """A database URL and where it was given, which is where to fix a wrong one."""

    url: URL
    origin: str  # "--db", "FLEET_DB" or "default": says where to fix a wrong URL

    @property
    def is_sqlite(self) -> bool:
        """Whether the database is SQLite."""
        return self.url.get_backend_name() == "sqlite"

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite file, or None for an in-memory database or a server."""
        if not self.is_sqlite or self.url.database in (None, "", ":memory:"):
            return None
        return Path(self.url.database or "")

    def __str__(self) -> str:
        return redact(self.url)


# A URL's password inside any text: a command line, a kombu failover list (";"-separated
# URLs), a URL SQLAlchemy cannot parse.
PASSWORD_IN_TEXT = re.compile(r"(://[^:/@\s;]*:)[^@\s;]+@")


def hide_passwords(text: str) -> str:
    """Every URL's password in `text` replaced by ***."""
    return PASSWORD_IN_TEXT.sub(r"\1***@", text)


def redact(url: URL | str) -> str:
    """The URL with its password (and any password in the query string) hidden."""
    if isinstance(url, str):
        try:
            url = make_url(url)
        except ArgumentError:
            return "(a database URL that could not be parsed)"
    query = {key: ("***" if "password" in key.lower() else value)
             for key, value in url.query.items()}
    return url.set(query=query).render_as_string(hide_password=True)


def _secrets(url: URL) -> list[str]:
    values = [url.password] if url.password else []
    for key, value in url.query.items():
        if "password" in key.lower():
            values += [value] if isinstance(value, str) else list(value)
    return [str(v) for v in values if v]


def scrub(text: str, url: URL) -> str:
    """Driver messages can echo connection parameters; take the password out of them."""
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def resolve(db: str | None) -> Location:
    """The database to use: `db` (from --db), else $FLEET_DB, else the default SQLite file."""
    if db:
        text, origin = db, "--db"
    elif os.environ.get(ENV_VAR):
        text, origin = os.environ[ENV_VAR], ENV_VAR
    else:
        return Location(URL.create("sqlite", database=str(default_sqlite_path())), "default")
    if "://" not in text:
        # A bare path is an SQLite file: `--db results.db`.
        return Location(URL.create("sqlite", database=text), origin)
    try:
        url = make_url(text)
    except ArgumentError:
        raise InputError(
            f"{origin}: {redact(text)} is not a database URL. Use sqlite:///path/to/fleet.db "
            "or postgresql://user@host:5432/name"
        ) from None
    # Read the name, not the dialect: SQLAlchemy cannot load "postgres" (Heroku's spelling).
    backend, _, driver = url.drivername.partition("+")
    if backend in ("postgresql", "postgres"):
        if driver not in ("psycopg", ""):
            raise InputError(
                f"{origin}: {redact(url)} asks for the {driver} driver; fleet talks to "
                "PostgreSQL through psycopg 3. Write postgresql://... or postgresql+psycopg://..."
            )
        return Location(url.set(drivername="postgresql+psycopg"), origin)
    if backend == "sqlite":
        if driver not in ("pysqlite", ""):
            raise InputError(f"{origin}: {redact(url)}: use sqlite:///path/to/fleet.db")
        return Location(url.set(drivername="sqlite"), origin)
    raise InputError(
        f"{origin}: {redact(url)} is a {backend} database; fleet stores in SQLite "
        "(sqlite:///path/to/fleet.db) or PostgreSQL (postgresql://user@host:5432/name)"
    )


def _to_json(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def _prepare_sqlite_file(location: Location) -> None:
    path = location.sqlite_path
    if path is None:
        return
    directory = path.expanduser().resolve().parent
    if directory.is_dir():
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"{location.origin}: cannot create the directory {directory} for the SQLite "
            f"database {path} ({exc.strerror}). Create it, or give --db another path"
        ) from None


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's BEGIN (below) open transactions, not the driver's implicit ones,
    # so DDL in a migration is transactional and a write can take its lock up front.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # WAL: readers never block the writer, nor it them. NORMAL sync is durable across
        # a process crash and loses at most the last commits on power loss, which for
        # re-ingestable agent documents is the right trade for ~10x fewer fsyncs.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # Checkpoint (copy the WAL into the database, with an fsync) every ~40 MB instead
        # of SQLite's 4 MB: an 8-GPU document writes ~100 KB, and storing one took 2.7 ms
        # instead of 3.6 ms (development machine).
        cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITES)
                         else "BEGIN")


def open_engine(location: Location) -> Engine:
    """An engine for the location (no connection is made yet; see `connect_error`)."""
    options: dict[str, Any] = {"json_serializer": _to_json}
    if location.is_sqlite:
        _prepare_sqlite_file(location)
        if location.sqlite_path is None:
            # An in-memory database lives and dies with its one connection.
            options.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
        engine = create_engine(location.url, **options)
        event.listen(engine, "connect", _on_sqlite_connect)
        event.listen(engine, "begin", _on_sqlite_begin)
        return engine
    return create_engine(
        location.url,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S,
                      "application_name": "fleet"},
        pool_pre_ping=True,
        **options,
    )


def database_failure(location: Location, exc: DBAPIError) -> StoreError:
    """A StoreError for a database that failed, saying what to check, password hidden.

    Only the driver's first line is kept: SQLAlchemy's own text would add the statement
    and its parameters, which can be a whole document.
    """
    detail = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
    if location.is_sqlite:
        hint = "check that the file is an SQLite database that you may read and write"
    else:
        hint = ("check that the server is running and reachable at that host and port, that "
                "the database exists, and the user name and password")
    return StoreError(f"cannot use the database {location} (from {location.origin}): "
                      f"{scrub(detail, location.url)}. {hint.capitalize()}")


@contextmanager
def database_errors(location: Location) -> Iterator[None]:
    """Turn the driver's errors into a StoreError a user can act on."""
    try:
        yield
    except DBAPIError as exc:
        raise database_failure(location, exc) from None


@contextmanager
def engine_for(db: str | None) -> Iterator[tuple[Location, Engine]]:
    """Resolve the URL and yield an engine, disposed of afterwards."""
    location = resolve(db)
    engine = open_engine(location)
    try:
        yield location, engine
    finally:
        engine.dispose()
