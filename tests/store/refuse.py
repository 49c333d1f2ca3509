"""A real database error on demand: a trigger that refuses inserts into one table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text


@contextmanager
def refusing(engine: Engine, table: str, when: str = "1 = 1") -> Iterator[None]:
    """While inside, an insert into `table` whose row satisfies `when` (SQL over NEW)
    fails with 'refused by test', on SQLite and on PostgreSQL alike."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.begin() as conn:
        if sqlite:
            conn.execute(text(f"CREATE TRIGGER refuse BEFORE INSERT ON {table} WHEN {when} "
                              "BEGIN SELECT RAISE(ABORT, 'refused by test'); END"))
        else:
            conn.execute(text("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                              f"$$ BEGIN IF {when} THEN RAISE EXCEPTION 'refused by test'; "
                              "END IF; RETURN NEW; END $$"))
            conn.execute(text(f"CREATE TRIGGER refuse BEFORE INSERT ON {table} "
                              "FOR EACH ROW EXECUTE FUNCTION refuse()"))
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER refuse" if sqlite
                              else f"DROP TRIGGER refuse ON {table}"))
            if not sqlite:
                conn.execute(text("DROP FUNCTION refuse()"))
