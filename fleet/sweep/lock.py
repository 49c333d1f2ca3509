"""One sweep of a name at a time per store, so two sweeps never benchmark the same fleet
over each other (each would measure the other's load) nor write into the same night.

The lock is keyed on the sweep's name, as its runs are (`--resume` continues the newest
run of that name): two inventory files, or one file reached by two paths, of the same
sweep are still one sweep.

SQLite: an fcntl lock on a file beside the database; the kernel drops it when the process
dies, however it dies, so a killed sweep never leaves a stale lock behind. PostgreSQL: a
session advisory lock (`pg_try_advisory_lock`) held by a connection kept open for the
sweep; the server drops it when that connection goes, which is also when its process dies.
Either way a second sweep fails at once, naming the holder (pid, host, since).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import socket
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from fleet.errors import FleetError, InputError
from fleet.store.database import CONNECT_TIMEOUT_S, Location

# pg_stat_activity.application_name holds at most 63 bytes.
APP_NAME_LIMIT = 63
# The lock's connection sits idle for the whole sweep (hours). Client keepalives stop a
# NAT or firewall from dropping it as idle, which would end the session and silently
# release the lock mid-sweep; the server-side ones (a session setting) make the server
# notice a controller that vanished without closing (power loss, partition) within about
# a minute, instead of the kernel's default of two hours and more, during which every
# next sweep of the name would be refused. Both are ignored over a Unix socket.
KEEPALIVE_IDLE_S = 30
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_COUNT = 3
KEEPALIVES = {"keepalives": 1, "keepalives_idle": KEEPALIVE_IDLE_S,
              "keepalives_interval": KEEPALIVE_INTERVAL_S, "keepalives_count": KEEPALIVE_COUNT}


class SweepLocked(FleetError):
    """Another sweep of the same name into the same store is running."""

    exit_code = 5


def lock_key(sweep: str) -> int:
    """A signed 64-bit advisory-lock key for the sweep named `sweep`."""
    digest = hashlib.sha256(f"fleet-sweep:{sweep}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _holder() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def _refusal(sweep: str, where: str, holder: str) -> SweepLocked:
    return SweepLocked(f"another sweep named {sweep!r} into {where} is running ({holder}). "
                       "Wait for it to end (if that process is gone the lock went with it, "
                       "so try again), or give this sweep another --name")


class SweepLock:
    """Held for the length of a sweep: `with SweepLock(location, name): ...`."""

    def __init__(self, location: Location, sweep: str) -> None:
        self.location = location
        self.sweep = sweep
        self._file: IO[str] | None = None
        self._conn: Connection | None = None
        self._engine: Engine | None = None

    @property
    def path(self) -> Path:
        """The lock file beside an SQLite database."""
        db = self.location.sqlite_path
        if db is None:
            raise InputError("fleet sweep needs a database file or PostgreSQL, not an "
                             "in-memory database: give --db ./fleet.db")
        tag = f"{lock_key(self.sweep) & 0xFFFFFFFF:08x}"
        return db.with_name(f"{db.name}.sweep-{tag}.lock")

    def __enter__(self) -> SweepLock:
        if self.location.is_sqlite:
            self._lock_file()
        else:
            self._lock_postgres()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the lock
            self._file = None
        if self._conn is not None:
            # The pool would keep the connection, and a session lock with it.
            self._conn.invalidate()
            self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def _lock_file(self) -> None:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            said = handle.read()
            handle.close()
            try:
                who = json.loads(said)
                holder = f"pid {who['pid']} on {who['host']}, since {who['since']}"
            except (ValueError, KeyError, TypeError):
                holder = f"lock file {path}"
            raise _refusal(self.sweep, str(self.location), holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({**_holder(), "sweep": self.sweep}))
        handle.flush()
        self._file = handle

    def _lock_postgres(self) -> None:
        who = _holder()
        name = f"fleet sweep pid={who['pid']} host={who['host']}"[:APP_NAME_LIMIT]
        # A connection of its own, outside the store's pool, with keepalives (see above).
        self._engine = create_engine(self.location.url, poolclass=NullPool, connect_args={
            "connect_timeout": CONNECT_TIMEOUT_S, **KEEPALIVES})
        conn = self._engine.connect()
        try:
            conn.execute(text("SELECT set_config('application_name', :name, false)"),
                         {"name": name})
            for setting, value in (("tcp_keepalives_idle", KEEPALIVE_IDLE_S),
                                   ("tcp_keepalives_interval", KEEPALIVE_INTERVAL_S),
                                   ("tcp_keepalives_count", KEEPALIVE_COUNT)):
                conn.execute(text("SELECT set_config(:setting, :value, false)"),
                             {"setting": setting, "value": str(value)})
            key = lock_key(self.sweep)
            got = conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}
                               ).scalar_one()
            conn.commit()
            if not got:
                # A bigint key is split into classid (high half) and objid (low half).
                # Advisory locks are a database's own: a sweep of the same name into
                # another database of the server holds one too, and is not the holder.
                row = conn.execute(text(
                    "SELECT a.application_name, a.backend_start, a.client_addr "
                    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                    "AND l.classid = :high AND l.objid = :low AND l.database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())"),
                    {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF}).first()
                conn.rollback()
                holder = ("the holder has just released it" if row is None else
                          f"{row.application_name or 'a session'} from "
                          f"{row.client_addr or 'a local socket'}, since "
                          f"{row.backend_start:%Y-%m-%dT%H:%M:%S%z}")
                raise _refusal(self.sweep, str(self.location), holder)
        except BaseException:
            conn.close()
            self._engine.dispose()
            self._engine = None
            raise
        self._conn = conn
