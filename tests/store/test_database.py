"""Where the database is, opening it, and never showing its password."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from fleet.errors import InputError, StoreError
from fleet.store.database import (
    database_failure,
    default_sqlite_path,
    hide_passwords,
    open_engine,
    redact,
    resolve,
)
from fleet.store.schema import open_store


def test_default_is_sqlite_under_xdg_data_home(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.delenv("FLEET_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    location = resolve(None)
    assert location.origin == "default"
    assert location.sqlite_path == tmp_path / "fleet" / "fleet.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_sqlite_path() == tmp_path / ".local" / "share" / "fleet" / "fleet.db"


def test_option_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_DB", "sqlite:////from/env.db")
    assert resolve(None).origin == "FLEET_DB"
    assert resolve(None).sqlite_path == Path("/from/env.db")
    location = resolve("sqlite:////from/option.db")
    assert (location.origin, location.sqlite_path) == ("--db", Path("/from/option.db"))


@pytest.mark.parametrize(("given", "driver"), [
    ("postgresql://u:p@h:5432/d", "postgresql+psycopg"),
    ("postgres://u@h/d", "postgresql+psycopg"),
    ("postgresql+psycopg://u@h/d", "postgresql+psycopg"),
    ("sqlite:///rel.db", "sqlite"),
    ("results.db", "sqlite"),
])
def test_urls(given: str, driver: str) -> None:
    assert resolve(given).url.drivername == driver


@pytest.mark.parametrize(("given", "message"), [
    ("mysql://u:secret@h/d", "SQLite"),
    ("postgresql+psycopg2://u:secret@h/d", "psycopg 3"),
    ("post gres://u:secret@h/d", "not a database URL"),
])
def test_unsupported_urls_are_refused_without_their_password(given: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        resolve(given)
    assert "secret" not in str(caught.value)


def test_redact_hides_passwords_everywhere() -> None:
    shown = redact("postgresql://fleet:s3cr%40t@db:5432/fleet?password=other&sslmode=require")
    assert "s3cr" not in shown and "other" not in shown
    assert "fleet:***@db:5432/fleet" in shown and "sslmode=require" in shown


@pytest.mark.parametrize(("text", "shown"), [
    ("fleet sweep --broker redis://:s3cret@cache:6379/0 inv.yaml",
     "fleet sweep --broker redis://:***@cache:6379/0 inv.yaml"),
    # A kombu failover list: each URL's own password, the separator kept.
    ("amqp://u:s3cret@a:5672//;amqp://v:other@b:5672//",
     "amqp://u:***@a:5672//;amqp://v:***@b:5672//"),
    ("postgresql://fleet@db/fleet and http://db:8080/x", None),  # no password: unchanged
])
def test_hide_passwords_in_text(text: str, shown: str | None) -> None:
    assert hide_passwords(text) == (shown or text)


def test_sqlite_pragmas_and_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "fleet.db"
    engine = open_engine(resolve(f"sqlite:///{path}"))
    try:
        with engine.connect() as conn:
            pragmas = {name: conn.execute(text(f"PRAGMA {name}")).scalar_one()
                       for name in ("journal_mode", "foreign_keys", "busy_timeout")}
    finally:
        engine.dispose()
    assert path.parent.is_dir()
    assert pragmas == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 60_000}


def test_an_sqlite_directory_that_cannot_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot create the directory"):
        open_engine(resolve(f"sqlite:///{blocker}/sub/fleet.db"))


def test_an_unreachable_server_says_what_to_check(postgres_url: str) -> None:
    url = "postgresql://fleet:s3cret@127.0.0.1:1/fleet"
    with pytest.raises(StoreError) as caught, open_store(url):
        pass
    message = str(caught.value)
    assert "s3cret" not in message
    assert "postgresql+psycopg://fleet:***@127.0.0.1:1/fleet" in message
    assert "server is running" in message


def test_driver_messages_are_scrubbed() -> None:
    location = resolve("postgresql://fleet:s3cret@db/fleet")
    failure = database_failure(location, DBAPIError("SELECT 1", {}, Exception(
        'password "s3cret" rejected for user fleet')))
    assert "s3cret" not in str(failure) and "***" in str(failure)
