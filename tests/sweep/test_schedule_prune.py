"""`fleet schedule` against a crontab file and a unit directory (never the user's own), and
`fleet db prune` keeping statistics while emptying old raw samples."""

from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from fleet.errors import FleetError, InputError
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin
from fleet.store.models import BenchmarkResult, Document
from fleet.store.query import load_document
from fleet.sweep import schedule as schedule_module
from fleet.sweep.schedule import (
    Crontab,
    Schedule,
    check_cron,
    install_cron,
    on_calendar,
    sh_env,
    systemd_env,
)
from tests.conftest import ROOT, fleet_in_process
from tests.probe.conftest import Workspace
from tests.store import factory


def as_cron_runs(line: str) -> str:
    """The command of a crontab line as cron hands it to the shell: `\\%` becomes `%`."""
    return line.split(" ", 5)[5].replace("\\%", "%")


def sourced(env_file: Path, variable: str) -> str:
    """`variable` as the cron entry's shell gets it from `set -a; . FILE; set +a`."""
    done = subprocess.run(["/bin/sh", "-c", 'set -a; . "$1"; set +a; printenv "$2"', "sh",
                           str(env_file), variable], env={"PATH": os.defpath},
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout[:-1]  # printenv's newline


def systemd_env_value(text: str, variable: str) -> str:
    """`variable` of an EnvironmentFile= as systemd reads a double-quoted value (systemd.exec:
    a backslash before " \\ ` $ keeps that character, before a newline continues the line,
    before anything else is kept with it)."""
    start = text.index(f"\n{variable}=\"") + len(variable) + 3
    value, i = [], start
    while text[i] != '"':
        if text[i] == "\\":
            if text[i + 1] in '"\\`$':
                value.append(text[i + 1])
            elif text[i + 1] != "\n":
                value.append(text[i:i + 2])
            i += 2
        else:
            value.append(text[i])
            i += 1
    return "".join(value)


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def run_fleet(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`fleet` in this process (each of these answers or refuses at once), with the test's
    own HOME, state directory and crontab file, none of the caller's FLEET_* (so never the
    user's own crontab or store)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLEET_", "XDG_"))}
    base.update(HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"),
                FLEET_CRONTAB=str(tmp_path / "crontab"), PYTHONPATH=str(ROOT), COLUMNS="200")
    base.update(env)
    code, out, err = fleet_in_process(args, base, tmp_path)
    return subprocess.CompletedProcess(["fleet", *args], code, out, err)


def test_schedule_install_show_remove_with_cron_and_systemd(workspace: Workspace) -> None:
    crontab = workspace.root / "crontab"
    crontab.write_text("MAILTO=ops@example.com\n0 1 * * * backup.sh\n")
    workspace.env_extra["FLEET_CRONTAB"] = str(crontab)
    state = workspace.root / "state"
    workspace.env_extra["XDG_STATE_HOME"] = str(state)
    env_file = state / "fleet" / "sweep-nightly.env"
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(workspace.servers[0])})
    # Relative, as a user types it: the schedule must not depend on cron's directory.
    db = "./fleet.db"
    # A % in a path: cron would cut the command there unless it is escaped.
    log = workspace.root / "logs%d" / "sweep.log"
    done = workspace.fleet_in_process("schedule", "install", "--cron", "0 3 * * *", str(inventory),
                                      "--db", db, "--log", str(log), "--keep-samples-days", "14",
                                      "--sweep-args", "--fingerprint-only --accept-new-host-keys")
    assert done.returncode == 0, done.stderr
    text = crontab.read_text()
    assert text.startswith("MAILTO=ops@example.com\n0 1 * * * backup.sh\n")
    assert "# fleet schedule: sweep nightly" in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("0 3 * * * ")]
    assert "--keep-samples-days 14" in line
    assert str(log).replace("%", "\\%") in line and "logs%d" not in line
    # The store is in the environment file the line sources, not on the line.
    assert "--db" not in line and "fleet.db" not in line
    assert f"set -a; . {env_file}; set +a; " in line
    assert sourced(env_file, "FLEET_DB") == f"sqlite:///{workspace.db}" and private(env_file)
    # Installing again replaces the entry instead of adding a second.
    assert workspace.fleet_in_process("schedule", "install", "--cron", "30 2 * * *", str(inventory),
                                      "--db", db, "--log", str(log)).returncode == 0
    assert crontab.read_text().count("# fleet schedule: sweep nightly") == 1
    units = workspace.root / "units"
    done = workspace.fleet_in_process("schedule", "install", "--systemd", "--cron", "0 3 * * 1-5",
                                      str(inventory), "--db", db, "--unit-dir", str(units),
                                      "--name", "weekdays")
    assert done.returncode == 0, done.stderr
    timer = (units / "fleet-sweep-weekdays.timer").read_text()
    assert "OnCalendar=Mon..Fri *-*-* 3:0:00" in timer
    service = (units / "fleet-sweep-weekdays.service").read_text()
    assert "fleet.cli sweep" in service and "--db" not in service
    assert f"EnvironmentFile={units / 'fleet-sweep-weekdays.env'}\n" in service
    assert systemd_env_value((units / "fleet-sweep-weekdays.env").read_text(),
                             "FLEET_DB") == f"sqlite:///{workspace.db}"
    assert "loginctl enable-linger $USER" in done.stdout
    assert ("systemctl --user daemon-reload && systemctl --user enable --now "
            "fleet-sweep-weekdays.timer") in done.stdout
    shown = workspace.fleet_in_process("schedule", "show", "--unit-dir", str(units))
    assert "cron  nightly: 30 2 * * *" in shown.stdout
    assert "fleet-sweep-weekdays.timer" in shown.stdout

    # The scheduled command itself, as cron would run it: sweep, prune, both logged.
    (command,) = [ln for ln in crontab.read_text().splitlines() if ln.startswith("30 2")]
    assert workspace.fleet_in_process("schedule", "install", "--cron", "30 2 * * *", str(inventory),
                                      "--db", db, "--log", str(log), "--sweep-args",
                                      "--fingerprint-only --accept-new-host-keys").returncode == 0
    (command,) = [ln for ln in crontab.read_text().splitlines() if ln.startswith("30 2")]
    # From another directory, as cron runs it (from $HOME), with no FLEET_DB of its own:
    # the store comes from the environment file.
    assert "FLEET_DB" not in workspace.env()
    ran = subprocess.run(["/bin/sh", "-c", as_cron_runs(command)], env=workspace.env(),
                         cwd=workspace.home, timeout=180)
    assert ran.returncode == 0, log.read_text()[-3000:]
    logged = log.read_text()
    assert "1 of 1 host stored" in logged and "raw samples" in logged
    # Into the store given at install, not the default one of cron's empty environment.
    assert list(workspace.documents()) == ["lambda/a"]
    assert not list(workspace.home.glob(".local/share/fleet/*.db"))
    # The night's report lies beside the log.
    report = log.with_suffix(".html")
    assert f"Report: {report}" in logged and "History of sweep nightly" in report.read_text()

    assert workspace.fleet_in_process("schedule", "remove", "--unit-dir",
                                      str(units)).returncode == 0
    assert "fleet schedule" not in crontab.read_text()
    assert not env_file.exists()
    assert crontab.read_text().startswith("MAILTO=ops@example.com\n")
    removed = workspace.fleet_in_process("schedule", "remove", "--name", "weekdays", "--unit-dir",
                                         str(units))
    assert removed.returncode == 0
    assert "systemctl --user disable --now fleet-sweep-weekdays.timer" in removed.stdout
    assert not list(units.iterdir())
    missing = workspace.fleet_in_process("schedule", "remove", "--name", "nope", "--unit-dir",
                                         str(units))
    assert missing.returncode == 2 and "no scheduled sweep named 'nope'" in missing.stderr


def test_the_store_and_percent_signs_are_fixed_at_install(workspace: Workspace) -> None:
    """$FLEET_DB is baked in when --db is absent; a PostgreSQL password reaches only the
    environment files (0600), never a command line (`ps` shows those to every user), and is
    never printed; % survives systemd's EnvironmentFile= path as %%."""
    crontab = workspace.root / "crontab"
    workspace.env_extra["FLEET_CRONTAB"] = str(crontab)
    workspace.env_extra["XDG_STATE_HOME"] = str(workspace.root / "state")
    env_file = workspace.root / "state" / "fleet" / "sweep-nightly.env"
    url = "postgresql://fleet:pa%25ss@db.internal:5432/fleet"
    workspace.env_extra["FLEET_DB"] = url
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(workspace.servers[0])})
    done = workspace.fleet_in_process("schedule", "install", str(inventory))
    assert done.returncode == 0, done.stderr
    line = crontab.read_text().splitlines()[-1]
    assert "25ss" not in line and "db.internal" not in line and "--db" not in line
    assert sourced(env_file, "FLEET_DB") == (
        "postgresql+psycopg://fleet:pa%25ss@db.internal:5432/fleet")
    assert private(env_file)
    assert "pa%25ss" not in done.stdout and "fleet:***@db.internal" in done.stdout
    assert stat.S_IMODE(crontab.stat().st_mode) == 0o600
    shown = workspace.fleet_in_process("schedule", "show", "--unit-dir",
                                       str(workspace.root / "none"))
    assert "cron  nightly" in shown.stdout and "25ss" not in shown.stdout
    # Which store it sweeps into, read back from the environment file, password hidden.
    assert "FLEET_DB=postgresql+psycopg://fleet:***@db.internal:5432/fleet" in shown.stdout

    units = workspace.root / "units%i"
    done = workspace.fleet_in_process("schedule", "install", "--systemd", str(inventory),
                                      "--unit-dir", str(units))
    assert done.returncode == 0, done.stderr
    assert "pa%25ss" not in done.stdout
    service = units / "fleet-sweep-nightly.service"
    unit_env = units / "fleet-sweep-nightly.env"
    for path in (service, units / "fleet-sweep-nightly.timer", unit_env):
        assert private(path)
    assert "25ss" not in service.read_text() and "db.internal" not in service.read_text()
    assert systemd_env_value(unit_env.read_text(), "FLEET_DB") == (
        "postgresql+psycopg://fleet:pa%25ss@db.internal:5432/fleet")
    shown = workspace.fleet_in_process("schedule", "show", "--unit-dir", str(units))
    assert "FLEET_DB=postgresql+psycopg://fleet:***@db.internal:5432/fleet" in (
        shown.stdout.split("systemd", 1)[1]) and "25ss" not in shown.stdout
    assert f"EnvironmentFile={workspace.root}/units%%i/fleet-sweep-nightly.env\n" in (
        service.read_text())
    exec_start = next(ln for ln in service.read_text().splitlines()
                      if ln.startswith("ExecStart="))
    assert "status=$$?" in exec_start and "$?" not in exec_start.replace("$$?", "")
    if shutil.which("systemd-analyze"):
        checked = subprocess.run(["systemd-analyze", "verify", str(service)],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr


# Quotes, spaces, $, `, backslashes (one last), %, a tab and a newline: a password may hold
# any of them, and each environment file must give it back exactly.
AWKWARD = ["p'a\"s s$HOME`id`\\n\\\\x %d\ty\nz", "end\\", "'", '"', "$", "\\$x", ""]


@pytest.mark.parametrize("password", AWKWARD)
def test_environment_files_keep_any_password(tmp_path: Path, password: str) -> None:
    url = f"postgresql+psycopg://fleet:{password}@db.internal:5432/fleet"
    env = {"FLEET_DB": url, "FLEET_BROKER": f"redis://:{password}@10.0.0.5:6379/0"}
    cron_file = tmp_path / "cron.env"
    cron_file.write_text(sh_env(env))
    unit_file = systemd_env(env)
    for variable, value in env.items():
        assert sourced(cron_file, variable) == value
        assert systemd_env_value(unit_file, variable) == value


def test_systemd_environment_file_escapes_only_quotes_and_backslashes() -> None:
    # Double quotes, a backslash before " and \ only: $ and ` stay bare, which every systemd
    # reads as they are (some older ones keep the backslash of \$ and \`).
    assert systemd_env({"A": "a\"b\\c`d$e'f g%h"}).endswith(
        '\nA="a\\"b\\\\c`d$e\'f g%h"\n')


def _inventory(tmp_path: Path) -> Path:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("providers:\n  p:\n    hosts:\n      h: {address: 127.0.0.1}\n")
    return inventory


def test_a_broker_password_stays_off_the_command_line(tmp_path: Path) -> None:
    inventory, crontab, units = _inventory(tmp_path), tmp_path / "crontab", tmp_path / "units"
    broker = "redis://:s3cr'et $x@10.0.0.5:6379/0"
    sweep_args = f"--via celery --broker {shlex.quote(broker)} --fingerprint-only"
    for extra in ([], ["--systemd", "--unit-dir", str(units)]):
        done = run_fleet(tmp_path, "schedule", "install", str(inventory), "--db",
                         str(tmp_path / "fleet.db"), "--sweep-args", sweep_args, *extra)
        assert done.returncode == 0, done.stderr
        assert "s3cr" not in done.stdout
    line = crontab.read_text().splitlines()[-1]
    assert "s3cr" not in line and "--broker" not in line
    assert "--via celery --fingerprint-only" in line
    assert sourced(tmp_path / "state" / "fleet" / "sweep-nightly.env", "FLEET_BROKER") == broker
    service = (units / "fleet-sweep-nightly.service").read_text()
    assert "s3cr" not in service and "--broker" not in service
    assert systemd_env_value((units / "fleet-sweep-nightly.env").read_text(),
                             "FLEET_BROKER") == broker
    # `fleet sweep` takes the broker from $FLEET_BROKER: it gets past the broker check to
    # the store check (no broker is contacted), and says so in --help.
    sweep = ("sweep", str(inventory), "--via", "celery", "--db", str(tmp_path / "fleet.db"))
    without = run_fleet(tmp_path, *sweep)
    assert without.returncode == 2 and "needs --broker URL" in without.stderr
    with_env = run_fleet(tmp_path, *sweep, FLEET_BROKER="redis://127.0.0.1:9/0")
    assert with_env.returncode == 2 and "needs the shared PostgreSQL" in with_env.stderr
    assert "$FLEET_BROKER" in run_fleet(tmp_path, "sweep", "--help").stdout


@pytest.mark.parametrize("sweep_args", ["--db postgresql://u:pw@h/fleet", "--db=x.db",
                                        "--report https://u:pw@h/x.html", "--broker"])
def test_sweep_args_may_not_carry_another_store_or_password(tmp_path: Path,
                                                            sweep_args: str) -> None:
    done = run_fleet(tmp_path, "schedule", "install", str(_inventory(tmp_path)),
                     "--sweep-args", sweep_args)
    assert done.returncode == 2 and "--sweep-args" in done.stderr
    assert "u:pw" not in done.stderr
    assert not (tmp_path / "crontab").exists()
    assert not (tmp_path / "state" / "fleet" / "sweep-nightly.env").exists()


def test_crontab_without_the_command_reads_as_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_CRONTAB", raising=False)
    monkeypatch.setattr(schedule_module.shutil, "which", lambda name: None)
    crontab = Crontab()
    assert crontab.read() == ""
    with pytest.raises(FleetError, match="no `crontab` command here"):
        crontab.write("0 3 * * * true\n")


def test_show_and_remove_need_no_crontab_command(tmp_path: Path) -> None:
    """A machine with systemd and no cron: only writing a crontab needs `crontab`."""
    no_cron = {"PATH": str(tmp_path / "empty-bin"), "FLEET_CRONTAB": ""}
    (tmp_path / "empty-bin").mkdir()
    inventory, units = _inventory(tmp_path), tmp_path / "units"
    db = str(tmp_path / "fleet.db")
    done = run_fleet(tmp_path, "schedule", "install", "--systemd", str(inventory), "--db", db,
                     "--unit-dir", str(units), **no_cron)
    assert done.returncode == 0, done.stderr
    shown = run_fleet(tmp_path, "schedule", "show", "--unit-dir", str(units), **no_cron)
    assert shown.returncode == 0, shown.stderr
    assert "fleet-sweep-nightly.timer" in shown.stdout
    removed = run_fleet(tmp_path, "schedule", "remove", "--unit-dir", str(units), **no_cron)
    assert removed.returncode == 0, removed.stderr
    assert not list(units.iterdir())
    cron = run_fleet(tmp_path, "schedule", "install", str(inventory), "--db", db, **no_cron)
    assert cron.returncode == 1 and "no `crontab` command here" in cron.stderr
    assert not (tmp_path / "state" / "fleet" / "sweep-nightly.env").exists()


@pytest.mark.parametrize("name", ["a+b", "a:b", "a@b"])
def test_systemd_refuses_names_it_cannot_take_as_they_are(tmp_path: Path, name: str) -> None:
    units = tmp_path / "units"
    done = run_fleet(tmp_path, "schedule", "install", "--systemd", "--name", name,
                     str(_inventory(tmp_path)), "--unit-dir", str(units))
    assert done.returncode == 2
    assert f"--name {name!r}" in done.stderr and "letters, digits and . _ -" in done.stderr
    assert not units.exists()


def test_sweep_names_never_share_units(tmp_path: Path) -> None:
    inventory, units = _inventory(tmp_path), tmp_path / "units"
    for name in ("a-b", "a.b", "a_b"):
        done = run_fleet(tmp_path, "schedule", "install", "--systemd", "--name", name,
                         str(inventory), "--unit-dir", str(units))
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in units.glob("*.timer")) == [
        "fleet-sweep-a-b.timer", "fleet-sweep-a.b.timer", "fleet-sweep-a_b.timer"]
    # cron takes any sweep name; removing a:b touches neither a-b's units nor another's.
    assert run_fleet(tmp_path, "schedule", "install", "--name", "a:b",
                     str(inventory)).returncode == 0
    assert (tmp_path / "state" / "fleet" / "sweep-a:b.env").exists()
    removed = run_fleet(tmp_path, "schedule", "remove", "--name", "a:b", "--unit-dir",
                        str(units))
    assert removed.returncode == 0, removed.stderr
    assert "fleet-sweep" not in removed.stdout and len(list(units.iterdir())) == 9
    assert not (tmp_path / "state" / "fleet" / "sweep-a:b.env").exists()
    missing = run_fleet(tmp_path, "schedule", "remove", "--name", "a@b", "--unit-dir",
                        str(units))
    assert missing.returncode == 2 and "no scheduled sweep named 'a@b'" in missing.stderr


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
    assert "and 1 document collected" in done.stdout
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
    assert "no raw samples collected before" in again.stdout and " 0 " not in again.stdout


class _RefusingCrontab(Crontab):
    """`crontab -` failing (a full disk, a cron that refuses the user): only writing."""

    def write(self, text: str) -> None:
        raise FleetError("crontab - failed: refused by test")


def test_a_failed_reinstall_leaves_the_old_entry_its_old_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inventory = _inventory(tmp_path)
    crontab = Crontab(tmp_path / "crontab")
    old = Schedule("nightly", inventory, db="postgresql://fleet:old@db/fleet")
    _, env_file = install_cron(old, "0 3 * * *", crontab)
    before = env_file.read_text()
    assert "old@db" in before
    new = Schedule("nightly", inventory, db="postgresql://fleet:new@db/fleet")
    with pytest.raises(FleetError, match="refused by test"):
        install_cron(new, "0 4 * * *", _RefusingCrontab(tmp_path / "crontab"))
    assert env_file.read_text() == before
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert "0 3 * * *" in crontab.read()
