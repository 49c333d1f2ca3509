"""`fleet schedule` against a crontab file and a unit directory (never the user's own), and
`fleet db prune` keeping statistics while emptying old raw samples."""

from __future__ import annotations

import datetime as dt
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from fleet.document import AgentDocument
from fleet.errors import InputError
from fleet.schedule import check_cron, on_calendar
from fleet.store.ingest import Ingest, Origin
from fleet.store.models import BenchmarkResult, Document
from fleet.store.query import load_document
from tests.probe.conftest import Workspace
from tests.store import factory


def as_cron_runs(line: str) -> str:
    """The command of a crontab line as cron hands it to the shell: `\\%` becomes `%`."""
    return line.split(" ", 5)[5].replace("\\%", "%")


def test_schedule_install_show_remove_with_cron_and_systemd(workspace: Workspace) -> None:
    crontab = workspace.root / "crontab"
    crontab.write_text("MAILTO=ops@example.com\n0 1 * * * backup.sh\n")
    workspace.env_extra["FLEET_CRONTAB"] = str(crontab)
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(workspace.servers[0])})
    # Relative, as a user types it: the schedule must not depend on cron's directory.
    db = "./fleet.db"
    # A % in a path: cron would cut the command there unless it is escaped.
    log = workspace.root / "logs%d" / "sweep.log"
    done = workspace.fleet("schedule", "install", "--cron", "0 3 * * *", str(inventory),
                           "--db", db, "--log", str(log), "--keep-samples-days", "14",
                           "--sweep-args", "--fingerprint-only --accept-new-host-keys")
    assert done.returncode == 0, done.stderr
    text = crontab.read_text()
    assert text.startswith("MAILTO=ops@example.com\n0 1 * * * backup.sh\n")
    assert "# fleet schedule: sweep nightly" in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("0 3 * * * ")]
    assert "--keep-samples-days 14" in line
    assert str(log).replace("%", "\\%") in line and "logs%d" not in line
    assert f"--db sqlite:///{workspace.db}" in line and "./fleet.db" not in line
    # Installing again replaces the entry instead of adding a second.
    assert workspace.fleet("schedule", "install", "--cron", "30 2 * * *", str(inventory),
                           "--db", db, "--log", str(log)).returncode == 0
    assert crontab.read_text().count("# fleet schedule: sweep nightly") == 1
    units = workspace.root / "units"
    done = workspace.fleet("schedule", "install", "--systemd", "--cron", "0 3 * * 1-5",
                           str(inventory), "--db", db, "--unit-dir", str(units),
                           "--name", "weekdays")
    assert done.returncode == 0, done.stderr
    timer = (units / "fleet-sweep-weekdays.timer").read_text()
    assert "OnCalendar=Mon..Fri *-*-* 3:0:00" in timer
    assert "fleet.cli sweep" in (units / "fleet-sweep-weekdays.service").read_text()
    assert "loginctl enable-linger $USER" in done.stdout
    assert ("systemctl --user daemon-reload && systemctl --user enable --now "
            "fleet-sweep-weekdays.timer") in done.stdout
    shown = workspace.fleet("schedule", "show", "--unit-dir", str(units))
    assert "cron  nightly: 30 2 * * *" in shown.stdout
    assert "fleet-sweep-weekdays.timer" in shown.stdout

    # The scheduled command itself, as cron would run it: sweep, prune, both logged.
    (command,) = [ln for ln in crontab.read_text().splitlines() if ln.startswith("30 2")]
    assert workspace.fleet("schedule", "install", "--cron", "30 2 * * *", str(inventory),
                           "--db", db, "--log", str(log), "--sweep-args",
                           "--fingerprint-only --accept-new-host-keys").returncode == 0
    (command,) = [ln for ln in crontab.read_text().splitlines() if ln.startswith("30 2")]
    # From another directory, as cron runs it (from $HOME).
    ran = subprocess.run(["/bin/sh", "-c", as_cron_runs(command)], env=workspace.env(),
                         cwd=workspace.home, timeout=180)
    assert ran.returncode == 0, log.read_text()[-3000:]
    logged = log.read_text()
    assert "1 of 1 host stored" in logged and "emptied the raw samples" in logged
    # The night's report lies beside the log.
    report = log.with_suffix(".html")
    assert f"Report: {report}" in logged and "History of sweep nightly" in report.read_text()

    assert workspace.fleet("schedule", "remove", "--unit-dir", str(units)).returncode == 0
    assert "fleet schedule" not in crontab.read_text()
    assert crontab.read_text().startswith("MAILTO=ops@example.com\n")
    removed = workspace.fleet("schedule", "remove", "--name", "weekdays", "--unit-dir",
                              str(units))
    assert removed.returncode == 0
    assert "systemctl --user disable --now fleet-sweep-weekdays.timer" in removed.stdout
    assert not list(units.iterdir())
    missing = workspace.fleet("schedule", "remove", "--name", "nope", "--unit-dir",
                              str(units))
    assert missing.returncode == 2 and "no scheduled sweep named 'nope'" in missing.stderr


def test_the_store_and_percent_signs_are_fixed_at_install(workspace: Workspace) -> None:
    """$FLEET_DB is baked in when --db is absent; a PostgreSQL password reaches the units
    (0600) and the crontab but is never printed; % survives systemd as %%."""
    crontab = workspace.root / "crontab"
    workspace.env_extra["FLEET_CRONTAB"] = str(crontab)
    url = "postgresql://fleet:pa%25ss@db.internal:5432/fleet"
    workspace.env_extra["FLEET_DB"] = url
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(workspace.servers[0])})
    done = workspace.fleet("schedule", "install", str(inventory))
    assert done.returncode == 0, done.stderr
    line = crontab.read_text().splitlines()[-1]
    assert "--db postgresql+psycopg://fleet:pa\\%25ss@db.internal:5432/fleet" in line
    assert "pa%25ss" not in done.stdout and "fleet:***@db.internal" in done.stdout
    assert stat.S_IMODE(crontab.stat().st_mode) == 0o600
    shown = workspace.fleet("schedule", "show", "--unit-dir", str(workspace.root / "none"))
    assert "pa%25ss" not in shown.stdout and "fleet:***@db.internal" in shown.stdout

    units = workspace.root / "units"
    done = workspace.fleet("schedule", "install", "--systemd", str(inventory),
                           "--unit-dir", str(units))
    assert done.returncode == 0, done.stderr
    service = units / "fleet-sweep-nightly.service"
    for path in (service, units / "fleet-sweep-nightly.timer"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    exec_start = next(ln for ln in service.read_text().splitlines()
                      if ln.startswith("ExecStart="))
    assert "fleet:pa%%25ss@db.internal" in exec_start
    assert "status=$$?" in exec_start and "$?" not in exec_start.replace("$$?", "")
    if shutil.which("systemd-analyze"):
        checked = subprocess.run(["systemd-analyze", "verify", str(service)],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(("cron", "calendar"), [
    ("0 3 * * *", "*-*-* 3:0:00"),
    ("15 2,14 * * 0", "Sun *-*-* 2,14:15:00"),
    ("15 2,14 * * 7", "Sun *-*-* 2,14:15:00"),
    ("0 3 * * 1-5", "Mon..Fri *-*-* 3:0:00"),
    ("0 3 * * 0-6", "*-*-* 3:0:00"),  # every day: Sun..Sat is no systemd range
    ("0 3 * * 5-7", "Fri..Sun *-*-* 3:0:00"),
    ("0 3 * * 0,6", "Sat..Sun *-*-* 3:0:00"),
    ("0 3 * * 0-2", "Mon..Tue,Sun *-*-* 3:0:00"),
    ("30 1 15 * *", "*-*-15 1:30:00"),
    ("0 2-5 * 1-3 *", "*-1..3-* 2..5:0:00"),
])
def test_on_calendar_of_cron(cron: str, calendar: str) -> None:
    assert on_calendar(cron) == calendar
    if shutil.which("systemd-analyze"):
        checked = subprocess.run(["systemd-analyze", "calendar", calendar],
                                 capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stderr


def test_on_calendar_refuses_what_systemd_cannot_say() -> None:
    # cron: the 1st OR any Sunday; systemd would read it as a Sunday that is the 1st.
    with pytest.raises(InputError, match="--on-calendar"):
        on_calendar("15 2 1 * 0")
    with pytest.raises(InputError, match="--on-calendar"):
        on_calendar("*/15 * * * *")


@pytest.mark.parametrize("cron", ["61 25 * * *", "0 24 * * *", "0 3 0 * *", "0 3 * 13 *",
                                  "0 3 * * 8", "0 3 * * 5-1", "*/0 * * * *", "0 3 * *"])
def test_check_cron_refuses_out_of_range(cron: str) -> None:
    with pytest.raises(InputError, match="--cron"):
        check_cron(cron)


def _samples(engine: Engine) -> list[tuple[dt.datetime, int, int, float, float]]:
    with engine.connect() as conn:
        rows = conn.execute(select(BenchmarkResult.collected_at,
                                   BenchmarkResult.samples_ms, BenchmarkResult.telemetry_series,
                                   BenchmarkResult.median_ms, BenchmarkResult.tflops)
                            .order_by(BenchmarkResult.id)).all()
    return [(w, len(s), len(t), m, f) for w, s, t, m, f in rows]


def test_prune_empties_old_samples_and_keeps_statistics(engine: Engine, store_url: str,
                                                       tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    with Ingest(engine) as ingest:
        for age, host in ((40, "old"), (2, "new")):
            document = factory.document(host=host, gpus=2,
                                        collected_at=now - dt.timedelta(days=age))
            ingest.store(AgentDocument.model_validate(document), Origin("lambda", host))
    before = _samples(engine)
    done = subprocess.run([sys.executable, "-m", "fleet.cli", "db", "prune", "--keep-samples-days",
                           "30", "--db", store_url], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "emptied the raw samples of 2 results" in done.stdout
    after = _samples(engine)
    assert [(s, t) for _, s, t, _, _ in after] == [(0, 0), (0, 0), (400, 480), (400, 480)]
    assert [(m, f) for *_, m, f in after] == [(m, f) for *_, m, f in before]
    # The document kept whole loses its copy of the samples too, and says so; the new one
    # keeps everything, and an old document still loads and validates.
    assert "and 1 documents" in done.stdout
    with engine.connect() as conn:
        rows = conn.execute(select(Document.id, Document.hostname, Document.samples_pruned_at)
                            .order_by(Document.id)).all()
    (old_id, old_host, old_pruned), (new_id, new_host, new_pruned) = rows
    assert (old_host, new_host) == ("old", "new")
    assert old_pruned is not None and new_pruned is None
    old_doc, new_doc = load_document(engine, old_id), load_document(engine, new_id)
    assert {len(b.samples_ms) for b in old_doc.benchmarks} == {0}
    assert {len(b.telemetry_series) for b in old_doc.benchmarks} == {0}
    assert len(old_doc.benchmarks) == 2 and len(new_doc.benchmarks[0].samples_ms) == 50
    again = subprocess.run([sys.executable, "-m", "fleet.cli", "db", "prune",
                            "--keep-samples-days", "30", "--db", store_url],
                           capture_output=True, text=True, timeout=120)
    assert "of 0 results and 0 documents" in again.stdout
