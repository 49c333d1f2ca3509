"""`fleet schedule`: run a sweep every night from cron or a systemd user timer.

The scheduled command runs the sweep, then the retention policy (`fleet db prune`), both
appending to one log file, so a night nobody watched can be read the next morning. Entries
are found again by a marker comment (cron) or by their unit names (systemd), so `show` and
`remove` touch only fleet's own.

The store is fixed at install time as an absolute URL (from --db, else $FLEET_DB, else
the default file): cron starts the command in $HOME with almost no environment, so a
relative `./fleet.db` or an exported FLEET_DB would otherwise name another store, or
none. A PostgreSQL URL (or a broker's, in --sweep-args) may carry a password, and any
local user can read a running command's arguments (`ps`, /proc/PID/cmdline): so the store
URL and the broker never go on the command line. They go into an environment file only
its owner may read (0600), as FLEET_DB and FLEET_BROKER, which `fleet sweep` and
`fleet db prune` read when --db / --broker are not given: for cron
`$XDG_STATE_HOME/fleet/sweep-NAME.env` (~/.local/state by default), sourced by the
scheduled shell command; for systemd `fleet-sweep-NAME.env` beside the units, loaded
through EnvironmentFile=. Unit files are written 0600 too and what is printed is redacted.

Where the crontab is read and written is injectable: `$FLEET_CRONTAB` names a file to use
instead of the user's crontab (`crontab -l` / `crontab -`), which is how the tests run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fleet.errors import FleetError, InputError
from fleet.store.database import ENV_VAR as DB_ENV
from fleet.store.database import PASSWORD_IN_TEXT, hide_passwords, resolve

CRONTAB_ENV = "FLEET_CRONTAB"
NO_CRONTAB = "no `crontab` command here: install cron, or use --systemd"
MARKER = "# fleet schedule: sweep "
DEFAULT_KEEP_SAMPLES_DAYS = 30
CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?(,\d+(-\d+)?)*)(/\d+)?$")
# (what, lowest, highest) of the five fields; 0 and 7 are both Sunday.
CRON_RANGES = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31),
               ("month", 1, 12), ("day of week", 0, 7))
WEEK = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # systemd's week starts on Monday
SYSTEMD_ENV_ESCAPE = re.compile(r'["\\]')
BROKER_ENV = "FLEET_BROKER"  # `fleet sweep --broker`'s environment variable
# What systemd takes in a unit name without escaping, less the ":" "@" "\\" it gives a
# meaning to: with --systemd the sweep's name is used as it is, never mangled (mangling
# let `a:b`, `a@b` and `a-b` share one set of units).
SYSTEMD_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def default_log(name: str) -> Path:
    """Where sweep `name` logs by default: under $XDG_STATE_HOME/fleet."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fleet" / f"sweep-{name}.log"


def cron_env_file(name: str) -> Path:
    """The environment file (FLEET_DB, FLEET_BROKER) of the crontab entry of sweep `name`."""
    return default_log(name).with_suffix(".env").absolute()


def default_unit_dir() -> Path:
    """Where systemd user units go: $XDG_CONFIG_HOME/systemd/user."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user"


@dataclass(frozen=True)
class Schedule:
    """A scheduled sweep: its name, inventory, store, log, and the sweep's arguments."""

    name: str
    inventory: Path
    db: str | None = None
    log: Path | None = None
    keep_samples_days: int = DEFAULT_KEEP_SAMPLES_DAYS
    sweep_args: tuple[str, ...] = ()  # e.g. ("--via", "celery", "--broker", URL)

    def environment(self) -> dict[str, str]:
        """What the scheduled command gets from its environment file, never its arguments:
        the store's URL (FLEET_DB) and the broker's (FLEET_BROKER), which may hold passwords."""
        env = {DB_ENV: store_url(self.db)}
        broker = split_sweep_args(self.sweep_args)[1]
        if broker is not None:
            env[BROKER_ENV] = broker
        return env

    def command(self, env_file: Path | None = None) -> str:
        """The shell command the scheduler runs (before the scheduler's own escaping); it
        sources `env_file` first when given (cron), else its environment is set for it
        (systemd's EnvironmentFile=)."""
        fleet = [sys.executable, "-m", "fleet.cli"]
        args = split_sweep_args(self.sweep_args)[0]
        log_path = self.log or default_log(self.name)
        log = shlex.quote(str(log_path))
        # The night's report beside the log, not in whatever directory the scheduler
        # starts in; each night replaces the last (`fleet report` rebuilds any of them).
        report = [] if {"--report", "--no-report"} & set(args) else [
            "--report", str(log_path.with_suffix(".html"))]
        sweep = shlex.join([*fleet, "sweep", str(self.inventory.resolve()), "--name",
                            self.name, *report, *args])
        prune = shlex.join([*fleet, "db", "prune", "--keep-samples-days",
                            str(self.keep_samples_days)])
        # A missing file stops the shell at `.` (a special built-in): never a sweep or a
        # prune of the default store instead.
        load = (f"set -a; . {shlex.quote(str(env_file))}; set +a; " if env_file is not None
                else "")
        # The prune runs whatever the sweep's exit status, which the line keeps for cron's
        # mail and systemd's unit state.
        return (f"mkdir -p {shlex.quote(str(log_path.parent))}"
                f" && {{ {load}{sweep}; status=$?; {prune}; exit $status; }} >> {log} 2>&1")


def split_sweep_args(args: tuple[str, ...]) -> tuple[list[str], str | None]:
    """--sweep-args without --broker URL, and that URL (it goes to the environment file).
    Refuses --db (the store is install's --db, the prune's too) and any other URL with a
    password, which would be on the command line."""
    kept: list[str] = []
    broker: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--broker":
            if i + 1 == len(args):
                raise InputError("--sweep-args: --broker needs a URL")
            broker, i = args[i + 1], i + 2
            continue
        if arg.startswith("--broker="):
            broker, i = arg.partition("=")[2], i + 1
            continue
        if arg == "--db" or arg.startswith("--db="):
            raise InputError("--sweep-args: give the store as `fleet schedule install --db "
                             "URL` (the prune uses it too), not in --sweep-args")
        if PASSWORD_IN_TEXT.search(arg):
            raise InputError(f"--sweep-args: {redacted(arg)} holds a password, which any "
                             "local user could read on the command line; only --broker's "
                             "URL is kept out of it (in the environment file)")
        kept.append(arg)
        i += 1
    return kept, broker


def sh_env(env: dict[str, str]) -> str:
    """An environment file for `set -a; . FILE; set +a`: each value single-quoted as sh
    reads it (a ' as '\\''), so quotes, spaces, $, ` and backslashes stay as they are."""
    return _env_header() + "".join(f"{key}={shlex.quote(value)}\n"
                                   for key, value in env.items())


def systemd_env(env: dict[str, str]) -> str:
    """An environment file for systemd's EnvironmentFile=: each value double-quoted, with a
    backslash before " and \\ only (sh's '\\'' means nothing to systemd). systemd expands
    nothing in the file, so $ and ` stay bare: older systemd keeps the backslash of \\$."""
    def quoted(value: str) -> str:
        return '"' + SYSTEMD_ENV_ESCAPE.sub(r"\\\g<0>", value) + '"'

    return _env_header() + "".join(f"{key}={quoted(value)}\n" for key, value in env.items())


def _env_header() -> str:
    return ("# Written by `fleet schedule install`: the scheduled sweep's store and broker, "
            "kept off its command line.\n")


def store_url(db: str | None) -> str:
    """The store as an absolute URL, resolved now (--db, else $FLEET_DB, else the default)."""
    location = resolve(db)
    if not location.is_sqlite:
        return location.url.render_as_string(hide_password=False)
    path = location.sqlite_path
    if path is None:
        raise InputError("a scheduled sweep needs a database file or PostgreSQL, not an "
                         "in-memory database: give --db PATH")
    return f"sqlite:///{path.expanduser().resolve()}"


def redacted(line: str) -> str:
    """A scheduled command as it may be printed: any URL's password hidden."""
    return hide_passwords(line)


def env_settings(env_file: Path) -> str:
    """What a schedule's environment file sets (its store, its broker), passwords hidden:
    for `fleet schedule show`, now that they are off the command line."""
    try:
        text = env_file.read_text(encoding="utf-8")
    except OSError as exc:
        return f"{env_file}: cannot read it ({exc.strerror}); `fleet schedule install` again"
    settings = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if line.startswith("#") or not sep:
            continue
        # Both files' quoting (sh's single quotes, systemd's double quotes with \" and \\)
        # is what shlex reads.
        words = shlex.split(value)
        settings.append(f"{key}={redacted(words[0] if words else '')}")
    return ", ".join(settings) or f"{env_file}: empty"


def check_cron(spec: str) -> str:
    """`spec` when it is five cron fields; InputError showing the form otherwise."""
    fields = spec.split()
    if len(fields) != 5 or not all(CRON_FIELD.match(f) for f in fields):
        raise InputError(f"--cron {spec!r}: give five fields, minute hour day month weekday, "
                         'e.g. "0 3 * * *" for 03:00 every night')
    for field, (what, low, high) in zip(fields, CRON_RANGES, strict=True):
        values, _, step = field.partition("/")
        if step and int(step) == 0:
            raise InputError(f"--cron {spec!r}: the {what}'s step /{step} must be 1 or more")
        for part in values.split(","):
            if part == "*":
                continue
            first, _, last = part.partition("-")
            for value in (first, last or first):
                if not low <= int(value) <= high:
                    raise InputError(f"--cron {spec!r}: {what} {value} is out of range; "
                                     f"give {low} to {high}")
            if int(first) > int(last or first):
                raise InputError(f"--cron {spec!r}: the {what} range {part} runs backwards; "
                                 f"give it low-high, within {low} to {high}")
    return " ".join(fields)


# --- cron ---------------------------------------------------------------------------------

class Crontab:
    """The user's crontab through `crontab`, or the file `$FLEET_CRONTAB` names."""

    def __init__(self, file: Path | None = None) -> None:
        env = os.environ.get(CRONTAB_ENV)
        self.file = file or (Path(env) if env else None)

    def read(self) -> str:
        """The crontab's text; empty when there is none (or no cron on this machine)."""
        if self.file is not None:
            return self.file.read_text() if self.file.exists() else ""
        if shutil.which("crontab") is None:
            return ""  # no cron here: no entries (only writing needs the command)
        done = self._crontab("-l")
        if done.returncode != 0:
            if "no crontab" in done.stderr.lower():
                return ""
            raise FleetError(f"crontab -l failed: {done.stderr.strip()}")
        return done.stdout

    def check_writable(self) -> None:
        """Raise the clear error now, before anything else is written, if write would."""
        if self.file is None and shutil.which("crontab") is None:
            raise FleetError(NO_CRONTAB)

    def write(self, text: str) -> None:
        """Replace the crontab with `text`."""
        if self.file is not None:
            _write_private(self.file, text)
            return
        done = self._crontab("-", text)
        if done.returncode != 0:
            raise FleetError(f"crontab - failed: {done.stderr.strip()}")

    @staticmethod
    def _crontab(arg: str, text: str | None = None) -> subprocess.CompletedProcess[str]:
        if shutil.which("crontab") is None:
            raise FleetError(NO_CRONTAB)
        return subprocess.run(["crontab", arg], input=text, capture_output=True, text=True,
                              check=False)


def _without(text: str, name: str | None) -> tuple[list[str], list[tuple[str, str]]]:
    """The crontab's lines without fleet's entry for `name` (all of fleet's for None), and
    the (name, line) entries found."""
    kept: list[str] = []
    found: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(MARKER) and i + 1 < len(lines):
            entry = line[len(MARKER):].strip()
            if name is None or entry == name:
                found.append((entry, lines[i + 1]))
                i += 2
                continue
        kept.append(line)
        i += 1
    return kept, found


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read: it may hold the store's password."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)  # an existing file keeps its mode otherwise
        handle.write(text)


def cron_command(command: str) -> str:
    """`command` with each % escaped, which cron would turn into a newline."""
    # cron turns an unescaped % into a newline (the rest becomes the command's stdin).
    return command.replace("%", "\\%")


def install_cron(schedule: Schedule, cron: str, crontab: Crontab) -> tuple[str, Path]:
    """Add (or replace) the sweep's crontab entry and its environment file; returns the
    entry's line and the file."""
    env_file = cron_env_file(schedule.name)
    _check_log(schedule, env_file)
    line = f"{check_cron(cron)} {cron_command(schedule.command(env_file))}"
    env = sh_env(schedule.environment())
    kept, _ = _without(crontab.read(), schedule.name)
    crontab.check_writable()
    # A reinstall whose crontab write fails leaves the old entry in place: it must keep
    # reading the old settings, not the new file's.
    before = env_file.read_text(encoding="utf-8") if env_file.exists() else None
    env_file.parent.mkdir(parents=True, exist_ok=True)
    _write_private(env_file, env)
    try:
        crontab.write("\n".join([*kept, f"{MARKER}{schedule.name}", line]) + "\n")
    except BaseException:
        if before is None:
            env_file.unlink(missing_ok=True)
        else:
            _write_private(env_file, before)
        raise
    return line, env_file


def _check_log(schedule: Schedule, env_file: Path) -> None:
    log = schedule.log or default_log(schedule.name)
    if log.absolute() == env_file.absolute():
        raise InputError(f"--log {log}: that is the schedule's environment file; give "
                         "another path")


def cron_entries(crontab: Crontab) -> list[tuple[str, str]]:
    """The crontab's fleet sweeps, as (name, line)."""
    return _without(crontab.read(), None)[1]


def remove_cron(name: str, crontab: Crontab) -> bool:
    """Remove sweep `name` from the crontab; whether it was there."""
    kept, found = _without(crontab.read(), name)
    if found:
        crontab.write("\n".join(kept) + ("\n" if kept else ""))
    return bool(found)


def remove_cron_env(name: str) -> Path | None:
    """Delete the environment file of sweep `name`'s crontab entry; the file, if there was
    one."""
    path = cron_env_file(name)
    if not path.exists():
        return None
    path.unlink()
    return path


# --- systemd ------------------------------------------------------------------------------

def _weekdays(field: str) -> str:
    """A cron day-of-week field (0-7, Sunday 0 and 7) as systemd's Monday-first days:
    "" for every day, else runs of consecutive days, "Mon..Fri" or "Sat..Sun"."""
    if field == "*":
        return ""
    days: set[int] = set()
    for part in field.split(","):
        first, _, last = part.partition("-")
        # cron's Sunday (0 or 7) is systemd's last day, Monday (1) its first.
        days.update((d + 6) % 7 for d in range(int(first), int(last or first) + 1))
    if len(days) == 7:
        return ""
    runs: list[list[int]] = []
    for day in sorted(days):
        if runs and runs[-1][-1] == day - 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    return ",".join(WEEK[r[0]] + (f"..{WEEK[r[-1]]}" if len(r) > 1 else "")
                    for r in runs) + " "


def on_calendar(cron: str) -> str:
    """A systemd OnCalendar= for the simple cron forms (numbers, lists, ranges, *)."""
    minute, hour, day, month, weekday = check_cron(cron).split()
    if any("/" in f for f in (minute, hour, day, month, weekday)):
        raise InputError(f"--cron {cron!r}: steps (*/N) have no direct OnCalendar form; "
                         "give --on-calendar for --systemd")
    if day != "*" and weekday != "*":
        raise InputError(f"--cron {cron!r}: cron runs when the day of month OR the day of "
                         "week matches, systemd only when both do; give --on-calendar for "
                         '--systemd, e.g. --on-calendar "Sun *-*-1,15 03:00:00" for both, '
                         "or two schedules for either")

    def part(field: str) -> str:
        return field.replace("-", "..")

    return f"{_weekdays(weekday)}*-{part(month)}-{part(day)} {part(hour)}:{part(minute)}:00"


def check_systemd_name(name: str) -> str:
    """`name` when it can be part of a unit's name; InputError saying which characters can."""
    if not SYSTEMD_NAME.match(name):
        raise InputError(f"--name {name!r}: with --systemd, use only letters, digits and "
                         ". _ - (the name is part of the unit names, fleet-sweep-NAME.timer)")
    return name


def unit_name(name: str) -> str:
    """The systemd units' name for sweep `name`, without the suffix."""
    return f"fleet-sweep-{check_systemd_name(name)}"


def systemd_text(text: str) -> str:
    """`text` escaped for a unit file's value: backslashes, % and $ doubled."""
    # systemd unescapes C escapes in a unit's values, expands %-specifiers, and
    # substitutes $VARIABLES in ExecStart= even inside quotes; double each to keep it.
    return text.replace("\\", "\\\\").replace("%", "%%").replace("$", "$$")


def install_systemd(schedule: Schedule, calendar: str, unit_dir: Path) -> list[Path]:
    """Write the sweep's service, timer and environment file; returns them in that order."""
    base = unit_name(schedule.name)
    unit_dir = unit_dir.absolute()
    service = unit_dir / f"{base}.service"
    timer = unit_dir / f"{base}.timer"
    env_file = unit_dir / f"{base}.env"
    _check_log(schedule, env_file)
    command = systemd_text(f"/bin/sh -c {shlex.quote(schedule.command())}")
    env = systemd_env(schedule.environment())
    inventory = systemd_text(str(schedule.inventory.resolve()))
    unit_dir.mkdir(parents=True, exist_ok=True)
    _write_private(env_file, env)
    # EnvironmentFile= expands %-specifiers in its path, nothing else.
    _write_private(service, f"""\
[Unit]
Description=fleet sweep {schedule.name} of {inventory}

[Service]
Type=oneshot
EnvironmentFile={str(env_file).replace("%", "%%")}
ExecStart={command}
""")
    _write_private(timer, f"""\
[Unit]
Description=Run fleet sweep {schedule.name} on schedule

[Timer]
OnCalendar={calendar}
Persistent=true

[Install]
WantedBy=timers.target
""")
    return [service, timer, env_file]


def systemd_units(unit_dir: Path) -> list[Path]:
    """The fleet sweep units in `unit_dir`: services, then timers."""
    return sorted(unit_dir.glob("fleet-sweep-*.service")) + sorted(
        unit_dir.glob("fleet-sweep-*.timer")) if unit_dir.is_dir() else []


def remove_systemd(name: str, unit_dir: Path) -> list[Path]:
    """Delete sweep `name`'s unit and environment files; the ones deleted."""
    removed: list[Path] = []
    if not SYSTEMD_NAME.match(name):
        return removed  # no units can have this name
    for suffix in (".service", ".timer", ".env"):
        path = unit_dir / f"{unit_name(name)}{suffix}"
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed


def stop_timer(name: str, unit_dir: Path) -> str | None:
    """`systemctl --user disable --now` the sweep's timer in systemd's own unit directory,
    before its files are deleted (after, disable no longer finds them); what happened, or
    None when there is no such timer or no systemd here."""
    if not SYSTEMD_NAME.match(name):
        return None
    timer = unit_dir / f"{unit_name(name)}.timer"
    if not timer.exists() or shutil.which("systemctl") is None:
        return None
    command = ["systemctl", "--user", "disable", "--now", timer.name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=30)
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess(command, 1, "", "no answer in 30 s")
    if done.returncode != 0:
        return (f"could not stop {timer.name} ({done.stderr.strip() or done.returncode}); "
                f"if it still runs: `{shlex.join(command)}` while its files exist, or "
                "`systemctl --user stop` it and `systemctl --user daemon-reload`")
    return f"stopped and disabled {timer.name}"


def removal_note(removed: list[Path]) -> str | None:
    """What to run about timers removed from a unit directory fleet did not manage through
    systemctl (--unit-dir): systemd may still hold them."""
    timers = [p.name for p in removed if p.suffix == ".timer"]
    if not timers:
        return None
    return ("If systemd had loaded " + ", ".join(timers) + ": systemctl --user disable --now "
            + " ".join(timers) + " (before removing its files) and systemctl --user "
            "daemon-reload")
