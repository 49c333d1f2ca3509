"""Store fixtures: every test that takes `store_url` runs on SQLite and on a real PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (user postgres, trust authentication), or the
one FLEET_TEST_POSTGRES names; `.ci/run` starts it. When it cannot be reached the
PostgreSQL tests fail, with the reason, instead of being skipped: CI guarantees it runs,
so a missing server is a broken environment, not an optional feature.

Each test gets a database of its own at the newest schema without migrating it: the
migrations run once per pytest-xdist worker into a template, a SQLite file that each test
copies (`migrated_sqlite`) and a PostgreSQL database that each test's is created from
(`CREATE DATABASE ... TEMPLATE`). Running the 22 migrations took 0.9-1.3 s a test and
emptying a shared PostgreSQL database 0.5-0.75 s; a copy takes milliseconds.
"""

from __future__ import annotations

import atexit
import itertools
import os
import queue
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, func, select

from fleet.store.database import open_engine, resolve
from fleet.store.models import Base
from fleet.store.schema import upgrade

ADMIN_URL = os.environ.get("FLEET_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = ["sqlite", "postgresql"]


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)


class Scratch:
    """Scratch databases of one test session, all dropped by its end.

    A test's database is dropped behind the tests, on a thread of its own: PostgreSQL
    checkpoints on every DROP DATABASE, which took seconds on a busy server with fsync on.
    """

    def __init__(self) -> None:
        self.prefix = f"fleet_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.names: list[str] = []
        self._numbers = itertools.count()
        self._dropping: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._dropper = threading.Thread(target=self._drop_queued, name="drop-databases",
                                         daemon=True)
        self._dropper.start()
        self._failed: list[str] = []

    def create(self, template: str | None = None) -> str:
        """A new database, empty or a copy of the database `template` (a URL of this
        server nothing is connected to)."""
        name = f"{self.prefix}_{next(self._numbers)}"
        copy = "" if template is None else f' TEMPLATE "{template.rsplit("/", 1)[1]}"'
        with _admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        self.names.append(name)
        base = ADMIN_URL.rsplit("/", 1)[0]
        return f"{base}/{name}"

    def drop(self, url: str) -> None:
        """Drop the database at `url` soon, without waiting for it."""
        name = url.rsplit("/", 1)[1]
        self.names.remove(name)
        self._dropping.put(name)

    def _drop_queued(self) -> None:
        while (name := self._dropping.get()) is not None:
            try:
                with _admin() as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:
                self._failed.append(f"{name}: {exc}")

    def drop_all(self) -> None:
        self._dropping.put(None)
        self._dropper.join()
        with _admin() as conn:
            for name in self.names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        assert not self._failed, f"scratch databases left behind: {self._failed}"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Scratch]:
    try:
        with _admin() as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {ADMIN_URL} ({str(exc).strip()}). The store "
            "tests need it: run `.ci/run`, or start it with `pg_ctlcluster "
            "--skip-systemctl-redirect $(ls /etc/postgresql) main start`, or point "
            "FLEET_TEST_POSTGRES at a server where the user may create databases.",
            pytrace=False,
        )
    scratch = Scratch()
    yield scratch
    scratch.drop_all()


@pytest.fixture(scope="session")
def postgres_template(postgres: Scratch) -> str:
    """A database at the newest schema that every test's PostgreSQL database copies; nothing
    stays connected to it, as CREATE DATABASE ... TEMPLATE requires."""
    url = postgres.create()
    engine = open_engine(resolve(url))
    upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture
def postgres_url(postgres: Scratch, postgres_template: str) -> Iterator[str]:
    """An empty PostgreSQL database at the newest schema, the test's own."""
    url = postgres.create(template=postgres_template)
    yield url
    postgres.drop(url)


_template: list[Path] = []


def migrated_sqlite(path: Path) -> str:
    """The URL of `path`, made a fleet database at the newest schema: a copy of a file this
    process migrated once (any test may call it, fixture or not)."""
    if not _template:
        directory = Path(tempfile.mkdtemp(prefix="fleet-test-schema-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        template = directory / "fleet.db"
        engine = open_engine(resolve(f"sqlite:///{template}"))
        upgrade(engine)
        engine.dispose()
        # The last connection closed checkpoints the write-ahead log into the file and
        # removes it: the file alone is the whole database.
        assert not template.with_name(template.name + "-wal").exists()
        _template.append(template)
    shutil.copyfile(_template[0], path)
    return f"sqlite:///{path}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> str:
    """An empty fleet database at the newest schema, on each backend."""
    if backend == "sqlite":
        return migrated_sqlite(tmp_path_factory.mktemp("store") / "fleet.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def empty_url(backend: str, tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> str:
    """A database with nothing in it (for SQLite, a file that does not exist yet)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('empty') / 'fleet.db'}"
    return request.getfixturevalue("postgres").create()  # type: ignore[no-any-return]


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = open_engine(resolve(store_url))
    yield engine
    engine.dispose()


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {table.name: int(conn.execute(select(func.count()).select_from(table))
                                .scalar_one())
                for table in Base.metadata.sorted_tables}


@pytest.fixture
def counts() -> Callable[[Engine], dict[str, int]]:
    return row_counts
