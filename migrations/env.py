"""Alembic environment: runs on the connection fleet hands it, or, from the `alembic`
command line, on FLEET_DB (else fleet's default SQLite file)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from fleet.store.database import WRITES, open_engine, resolve
from fleet.store.models import Base

config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_offline() -> None:
    location = resolve(config.get_main_option("sqlalchemy.url") or None)
    context.configure(url=location.url, target_metadata=Base.metadata, literal_binds=True,
                      render_as_batch=location.is_sqlite)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if isinstance(connection, Connection):
        # fleet.store.schema opened the transaction (and took the upgrade lock) already.
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = open_engine(resolve(config.get_main_option("sqlalchemy.url") or None))
    try:
        with engine.connect().execution_options(**{WRITES: True}) as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
