"""The schema's version: Alembic migrations from `migrations/`, applied through our engine.

In a checkout `fleet/store/migrations` is a link to the repository's `migrations/`; in an
installed wheel it is a copy, so `fleet db upgrade` works the same after `pip install .`.

A database with no tables at all is upgraded on first use; one at an older revision is
left alone until someone runs `fleet db upgrade`, because a team's shared PostgreSQL
should change schema when a person decides to, not when any one laptop's fleet is newer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from fleet.errors import StoreError
from fleet.store import series
from fleet.store.database import WRITES, Location, database_errors, engine_for

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# Any constant will do: it only has to be the same in every fleet process, so two
# processes upgrading one fresh PostgreSQL database take turns instead of colliding.
UPGRADE_LOCK = 0x666C656574  # "fleet"


@dataclass(frozen=True)
class SchemaState:
    """Which revision the database is at, the newest there is, and whether it has tables."""

    revision: str | None  # None: no fleet schema yet
    head: str
    has_tables: bool

    @property
    def current(self) -> bool:
        """Whether the database is at the newest revision."""
        return self.revision == self.head


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for fleet's migrations, on `connection` when given."""
    if not (MIGRATIONS / "env.py").is_file():
        raise StoreError(f"the migrations are missing from {MIGRATIONS}: reinstall fleet")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision of fleet's migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "migrations/versions holds no revision"
    return head


def known_revisions() -> set[str]:
    """Every revision of fleet's migrations."""
    return {script.revision for script in ScriptDirectory.from_config(alembic_config())
            .walk_revisions()}


def inspect_schema(engine: Engine) -> SchemaState:
    """Which revision the database of `engine` is at, and whether it has any tables."""
    with engine.connect() as conn:
        revision = MigrationContext.configure(conn).get_current_revision()
        has_tables = bool(inspect(conn).get_table_names())
    return SchemaState(revision, head_revision(), has_tables)


def _run(engine: Engine, target: str, downgrade: bool = False) -> None:
    with engine.connect().execution_options(**{WRITES: True}) as conn:
        sqlite = conn.dialect.name == "sqlite"
        driver = conn.connection.dbapi_connection
        if sqlite and driver is not None:
            # SQLite's own procedure for a table rebuilt by batch mode: dropping the old
            # table of a referenced one (document, 0007) would otherwise delete-check its
            # children and fail. The pragma is a no-op inside a transaction, hence before
            # it; the references are checked before the commit instead.
            driver.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": UPGRADE_LOCK})
                config = alembic_config(conn)
                if downgrade:
                    command.downgrade(config, target)
                else:
                    command.upgrade(config, target)
                    _derive(conn)
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").first()
                    if broken is not None:
                        raise RuntimeError(f"migrating left {broken[0]} row {broken[1]} "
                                           f"referring to a missing {broken[2]} row")
        finally:
            if sqlite and driver is not None:
                driver.execute("PRAGMA foreign_keys=ON")


def _derive(conn: Connection) -> None:
    """Build what the store derives from its results where a migration left it to be
    built (0010: the results' series), once the schema is at head: with the code of
    the newest revision, whose tables these are."""
    if MigrationContext.configure(conn).get_current_revision() != head_revision():
        return
    if series.missing(conn):
        series.rebuild(conn)


def upgrade(engine: Engine, target: str = "head") -> SchemaState:
    """Bring the schema to `target` in one transaction; safe to run from several processes."""
    _run(engine, target)
    return inspect_schema(engine)


def downgrade(engine: Engine, target: str) -> SchemaState:
    """Migrate the database down to revision `target`; the state it is in after."""
    _run(engine, target, downgrade=True)
    return inspect_schema(engine)


def ensure_schema(engine: Engine, location: Location) -> bool:
    """Make the database usable: upgrade an empty one (True), or refuse a stale one."""
    state = inspect_schema(engine)
    if state.current:
        return False
    if state.revision is None:
        if state.has_tables:
            raise StoreError(
                f"{location} has tables but no fleet schema version: it is not a fleet "
                "database. Give --db (or FLEET_DB) a new or existing fleet database"
            )
        upgrade(engine)
        return True
    if state.revision not in known_revisions():
        raise StoreError(
            f"{location} is at schema revision {state.revision}, which this fleet does not "
            f"know (its newest is {state.head}): a newer fleet wrote it. Upgrade fleet"
        )
    raise StoreError(
        f"{location} is at schema revision {state.revision}, older than this fleet's "
        f"{state.head}. Back it up, then run `fleet db upgrade` with the same database "
        f"(from {location.origin})"
    )


@dataclass(frozen=True)
class Store:
    """An open database at the current schema: where it is, its engine, and whether it is new."""

    location: Location
    engine: Engine
    created: bool  # the database was empty and has just been given the schema


@contextmanager
def open_store(db: str | None) -> Iterator[Store]:
    """The database named by --db / FLEET_DB / the default, at the current schema, with
    driver errors turned into StoreErrors."""
    with engine_for(db) as (location, engine), database_errors(location):
        yield Store(location, engine, ensure_schema(engine, location))
