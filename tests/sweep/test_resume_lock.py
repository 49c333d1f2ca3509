"""A sweep killed halfway and resumed stores every host exactly once; a second sweep of the
same name into the same store is refused, naming the holder, whatever inventory it reads;
--resume continues only the newest run of its name, with the inventory it began with."""

from __future__ import annotations

import os
import signal

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from fleet.store.database import resolve
from fleet.store.ingest import RunInfo
from fleet.store.models import ProbeRun
from fleet.store.schema import open_store
from fleet.store.sweeps import (
    create_run,
    documents_stored,
    finish_run,
    newest_run,
    settled_hosts,
)
from fleet.sweep.lock import KEEPALIVE_IDLE_S, SweepLock, SweepLocked, lock_key
from tests.probe.conftest import Workspace
from tests.store.conftest import Scratch
from tests.sweep.conftest import engine_of, fleet_process, hang_once, kill_marked, wait_for

CASES = ["provider-b-a100-sxm4", "provider-a-a100-pcie", "h100-sxm5-passthrough",
         "h200-sxm-x2-passthrough"]


def test_a_killed_sweep_resumed_stores_every_host_once(workspace: Workspace) -> None:
    script = hang_once(workspace.root)
    marks = [workspace.root / f"mark-{i}" for i in range(2)]
    hosts = {}
    for i, (server, case) in enumerate(zip(workspace.servers, CASES, strict=True)):
        spec = workspace.ssh_host(server, case)
        if i >= 2:  # the last two hang until the sweep is killed
            spec["python"] = str(script)
            spec["env"]["FLEET_TEST_MARK"] = str(marks[i - 2])
        hosts[f"p{i % 2}/h{i}"] = spec
    inventory = workspace.inventory(hosts)
    url = f"sqlite:///{workspace.db}"
    sweep = fleet_process(workspace, "sweep", str(inventory), "--fingerprint-only",
                          "--accept-new-host-keys", "--db", str(workspace.db),
                          log=workspace.root / "sweep.log")
    try:
        def halfway() -> bool:
            if not workspace.db.exists() or not all(m.exists() for m in marks):
                return False
            engine = engine_of(url)
            try:
                run = newest_run(engine, "nightly")
                return run is not None and len(settled_hosts(engine, run.id)) == 2
            finally:
                engine.dispose()

        wait_for(halfway, 120, "two hosts stored and two hanging")
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait(10)
    finally:
        if sweep.poll() is None:
            sweep.kill()
        kill_marked(*marks)

    engine = engine_of(url)
    run = newest_run(engine, "nightly", unfinished=True)
    assert run is not None
    assert sorted(settled_hosts(engine, run.id)) == ["p0/h0", "p1/h1"]
    resumed = workspace.fleet("sweep", str(inventory), "--resume", "--fingerprint-only",
                              "--json", "--db", str(workspace.db))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = resumed.report
    assert report["run_id"] == run.id and report["resumed"]
    assert report["probed"] == ["p0/h2", "p1/h3"]
    assert [h["ok"] for h in report["hosts"]] == [True] * 4
    assert documents_stored(engine, run.id) == {key: 1 for key in hosts}
    assert {s.status for s in settled_hosts(engine, run.id).values()} == {"stored"}
    with engine.connect() as conn:
        runs = conn.execute(select(ProbeRun.id, ProbeRun.finished_at)).all()
    assert [r.id for r in runs] == [run.id] and runs[0].finished_at is not None
    engine.dispose()

    again = workspace.fleet_in_process("sweep", str(inventory), "--resume", "--db",
                                       str(workspace.db))
    assert again.returncode == 2 and "no unfinished sweep named 'nightly'" in again.stderr


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_second_sweep_is_refused_naming_the_holder(
        workspace: Workspace, backend: str, request: pytest.FixtureRequest) -> None:
    inventory = workspace.inventory(
        {"lambda/a": workspace.ssh_host(workspace.servers[0], "provider-b-a100-sxm4")})
    db = str(workspace.db) if backend == "sqlite" else request.getfixturevalue("postgres_url")
    with open_store(db) as store, SweepLock(store.location, "nightly"):
        refused = workspace.fleet("sweep", str(inventory), "--fingerprint-only",
                                  "--accept-new-host-keys", "--db", db, timeout=60)
        assert refused.returncode == 5, refused.stderr
        assert "another sweep named 'nightly'" in refused.stderr
        assert f"pid={os.getpid()}" in refused.stderr.replace("pid ", "pid=")
        # The same sweep through another inventory file is still the same sweep (its runs
        # are keyed on the name): refused.
        other = workspace.inventory(
            {"lambda/a": workspace.ssh_host(workspace.servers[0], "provider-b-a100-sxm4")},
            "other.yaml")
        copy = workspace.fleet("sweep", str(other), "--fingerprint-only",
                               "--accept-new-host-keys", "--db", db, timeout=60)
        assert copy.returncode == 5, copy.stderr[-2000:]
        # Another name is another sweep: not refused.
        allowed = workspace.fleet("sweep", str(inventory), "--name", "weekly",
                                  "--fingerprint-only", "--accept-new-host-keys", "--db", db,
                                  timeout=60)
        assert allowed.returncode == 0, allowed.stderr[-2000:]
    # Released with its holder.
    done = workspace.fleet("sweep", str(inventory), "--fingerprint-only", "--db", db,
                           timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert resolve(db).is_sqlite == (backend == "sqlite")



def test_resume_refuses_another_inventory_and_a_run_that_a_newer_one_followed(
        workspace: Workspace) -> None:
    inventory = workspace.inventory(
        {"lambda/a": workspace.ssh_host(workspace.servers[0], "provider-b-a100-sxm4")})
    other = workspace.inventory(
        {"lambda/a": workspace.ssh_host(workspace.servers[0], "provider-b-a100-sxm4")},
        "other.yaml")
    url = f"sqlite:///{workspace.db}"
    with open_store(url) as store:
        killed = create_run(store.engine, RunInfo(kind="sweep", sweep="nightly",
                                                  inventory=str(inventory)))
    elsewhere = workspace.fleet("sweep", str(other), "--resume", "--fingerprint-only",
                                "--db", str(workspace.db))
    assert elsewhere.returncode == 2, elsewhere.stderr
    assert f"run #{killed} of sweep 'nightly' probes {inventory}" in elsewhere.stderr
    assert "resume it with that inventory" in elsewhere.stderr
    with open_store(url) as store:
        newer = create_run(store.engine, RunInfo(kind="sweep", sweep="nightly",
                                                 inventory=str(inventory)))
        # The newer one finished: the killed one is the newest unfinished run, but its
        # night is over.
        finish_run(store.engine, newer)
    late = workspace.fleet("sweep", str(inventory), "--resume", "--fingerprint-only",
                           "--db", str(workspace.db))
    assert late.returncode == 2, late.stderr
    assert f"run #{killed} of sweep 'nightly' is unfinished, but run #{newer} began " \
        "after it" in late.stderr


def test_the_postgresql_lock_connection_keeps_alive(postgres_url: str) -> None:
    with open_store(postgres_url) as store, SweepLock(store.location, "nightly") as lock:
        assert lock._conn is not None
        raw = lock._conn.connection.dbapi_connection
        assert raw is not None
        client = raw.info.get_parameters()  # type: ignore[attr-defined]
        assert client.get("keepalives") == "1"
        assert client.get("keepalives_idle") == str(KEEPALIVE_IDLE_S)
        server = lock._conn.exec_driver_sql("SHOW tcp_keepalives_idle").scalar_one()
        assert server == f"{KEEPALIVE_IDLE_S}s" or server == str(KEEPALIVE_IDLE_S)


def test_the_holder_named_is_the_one_in_the_same_database(postgres: Scratch) -> None:
    # Two stores on one server, a sweep named "nightly" holding each: the refusal in the
    # second names the second's holder, never the first's (CI's stores share a server).
    first, second = postgres.create(), postgres.create()
    key = lock_key("nightly")
    holders = []
    try:
        for url, name in ((first, "someone else"), (second, "the right holder")):
            engine = create_engine(resolve(url).url, poolclass=NullPool)
            conn = engine.connect()
            conn.execute(text("SELECT set_config('application_name', :n, false)"), {"n": name})
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            conn.commit()
            holders.append((engine, conn))
        with pytest.raises(SweepLocked) as refused, SweepLock(resolve(second), "nightly"):
            pass
        assert "the right holder" in str(refused.value)
        assert "someone else" not in str(refused.value)
    finally:
        for engine, conn in holders:
            conn.close()
            engine.dispose()
