"""`fleet sweep`, `fleet schedule` and `fleet worker`: parse, call the core, print.

The sweep takes the harness's options as `fleet probe` and `fleet bench` spell them
(fleet/cli/options.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click
from rich.console import Console
from rich.text import Text

from fleet.analysis.sweep.history import FAIL_KINDS, Findings
from fleet.cli.cluster import print_outcomes
from fleet.cli.options import (
    HarnessArgs,
    db_option,
    err_console,
    gathered,
    harness_options,
    probe_options,
    reports_errors,
)
from fleet.errors import FleetError
from fleet.probe.run import ProbeOptions
from fleet.sanitize import safe
from fleet.words import counted

if TYPE_CHECKING:
    from fleet.sweep.run import Via
    from fleet.sweep.schedule import Crontab

EXIT_SOME_FAILED = 3
EXIT_FAIL_ON = 6
EXIT_INTERRUPTED = 130


def print_findings(console: Console, findings: Findings, nights: int) -> None:
    """Print the night's findings against the earlier nights, section by section."""
    earlier = ("the first night of this sweep" if nights <= 1 else
               f"against {counted(nights - 1, 'earlier night')} of this sweep")
    console.print(f"{earlier[0].upper()}{earlier[1:]} (run #{findings.run_id}):", markup=False)
    sections = [
        ("regression", [r.describe() + ("" if r.new else " [lasting]")
                        for r in findings.regressions]),
        ("change", [c.describe() for c in findings.changes]),
        ("health", [h.describe() for h in findings.health]),
        ("new mismatch", [m.describe() for m in findings.mismatches]),
        ("host gone", list(findings.gone)),
        ("host new", list(findings.new)),
    ]
    said = False
    for label, lines in sections:
        for line in lines:
            console.print(Text.assemble((f"  {label}: ", "bold"), safe(line)), soft_wrap=True)
            said = True
    if not said:
        console.print("  nothing changed", markup=False)


@dataclass(frozen=True)
class SweepArgs:
    """`fleet sweep`'s options, by their names."""

    inventory_file: Path
    name: str
    resume: bool
    via: str
    broker: str | None
    fail_on: str
    db: str | None
    parallel: int
    fingerprint_only: bool
    accept_new_host_keys: bool
    timeout: float | None
    queue_timeout: float
    visibility_timeout: float | None
    as_json: bool
    report_path: str | None
    no_report: bool
    no_between: bool
    textfile: str | None
    harness: HarnessArgs


@click.command("sweep")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--name", default="nightly", show_default=True,
              help="The sweep's name: its history is the earlier runs of this name.")
@click.option("--resume", is_flag=True,
              help="Continue the newest unfinished run of this name (crashed, killed, "
                   "interrupted): probe only the hosts it has no document for.")
@click.option("--via", type=click.Choice(["local", "celery"]), default="local",
              show_default=True, help="Probe from this machine, or through Celery workers.")
@click.option("--broker", metavar="URL", envvar="FLEET_BROKER",
              help="Celery broker for --via celery: redis://HOST:6379/0 or amqp://... "
                   "Default: $FLEET_BROKER (which keeps a password off the command line).")
@click.option("--fail-on", "fail_on", default="", metavar="KINDS",
              help=f"Exit 6 when tonight shows any of these: {','.join(FAIL_KINDS)} "
                   "(a regression counts the night it begins; health, a verdict changed or "
                   "a health counter rose), or gap, cooling, duplicate, straggler, drift, "
                   "health (a GPU not healthy) in tonight's report.")
@db_option
@probe_options(via_local=" (--via local; under --via celery each `fleet worker` decides)")
@click.option("--queue-timeout", type=click.FloatRange(1, 86400), default=60.0,
              show_default=True, metavar="S",
              help="--via celery: give up on a host whose queue has had no worker for S s.")
@click.option("--visibility-timeout", type=click.FloatRange(1, 7 * 86400), metavar="S",
              help="--via celery on Redis: an unacknowledged task (its worker died) goes "
                   "to another worker after S s, and each task's expiry leaves room for it. "
                   "Default 3600; longer than any host's probe. Redis applies the workers' "
                   "own --visibility-timeout: give every `fleet worker` the same S.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary and findings as JSON on stdout.")
@click.option("--report", "report_path", metavar="PATH",
              help="Where to write the night's report (as `fleet report --sweep NAME`, with "
                   "the sweep's history): .html, .md or .json. Default: fleet-sweep-NAME.html.")
@click.option("--no-report", is_flag=True, help="Write no report.")
@click.option("--no-between", is_flag=True,
              help="Skip the steps between a cluster's nodes (run after the nodes' own "
                   "probes, --via local only: `fleet cluster run`).")
@click.option("--textfile", metavar="DIR/NAME.prom",
              help="Also write the sweep's metrics (as `fleet metrics --sweep NAME --format "
                   "text`) there for node_exporter's textfile collector, atomically.")
@harness_options
@reports_errors
@gathered(SweepArgs)
def sweep_command(args: SweepArgs) -> None:
    """Probe every host of INVENTORY as the nightly sweep NAME, and compare with its past.

    Reports, against the sweep's earlier nights: GPUs slower than their own past beyond
    their own noise (regressions), configuration changes (driver, power limit, variant,
    ...), health news (a verdict changed, ECC errors or remapped rows rose), new
    mismatches with the listing, hosts gone and new. Each `cluster:` is measured between
    its nodes after their probes (--via local; --no-between skips it), each step set
    beside the same step of the cluster's earlier runs (a step under its own past is
    said, with whose it is), and tonight's run is in the night's report. One sweep of a
    name into a
    store runs at a time; a killed one, or one whose hosts no Celery worker took, is
    continued with --resume. --via celery needs a PostgreSQL --db. Exit status: 0, 3 some
    hosts failed, 5 another sweep holds the lock, 6 a --fail-on kind was found, 130
    interrupted.

    \b
    Examples:
      fleet sweep inventory.yaml --db ./fleet.db --fail-on regression,mismatch
      fleet sweep inventory.yaml --resume                   # after a crash or reboot
      fleet sweep inventory.yaml --textfile /var/lib/node_exporter/textfile/fleet.prom
      fleet sweep inventory.yaml --via celery --broker redis://10.0.0.5:6379/0 \\
          --db postgresql://fleet@db.internal/fleet
    """
    from fleet.cli.probe_display import ProbeProgress, print_summary
    from fleet.inventory import load_inventory
    from fleet.metrics import check_textfile, write_textfile
    from fleet.sweep.run import SweepOptions, check_fail_on, sweep

    kinds = check_fail_on(args.fail_on, report=not args.no_report)
    if args.textfile is not None:
        check_textfile(args.textfile)  # before a night of probing, not after
    inventory = load_inventory(args.inventory_file)
    probe = ProbeOptions(
        parallel=args.parallel,
        bench=None if args.fingerprint_only else args.harness.bench_options(),
        timeout_s=args.timeout, accept_new_host_keys=args.accept_new_host_keys)
    report_path = args.report_path or f"fleet-sweep-{args.name}.html"
    options = SweepOptions(name=args.name, resume=args.resume, via=cast("Via", args.via),
                           broker=args.broker, probe=probe,
                           queue_timeout_s=args.queue_timeout,
                           visibility_timeout_s=args.visibility_timeout,
                           report=None if args.no_report else report_path,
                           between=not args.no_between)
    with ProbeProgress(err_console, len(inventory.targets)) as progress:
        report = sweep(inventory, options, args.db, progress)
    if args.as_json:
        click.echo(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        console = Console()
        print_summary(console, report.probe)
        if report.clusters:
            print_outcomes(console, report.clusters)
        print_findings(console, report.findings, report.nights)
        if report.report_path is not None:
            console.print(f"Report: {report.report_path}", markup=False)
    if report.report_error is not None:
        err_console.print(f"The report was not written: {report.report_error}. The night "
                          f"is stored; `fleet report --sweep {report.name} --run "
                          f"{report.run_id} --output PATH` writes it.", markup=False)
    metrics_failed = False
    if args.textfile is not None and not report.interrupted:
        try:
            write_textfile(args.db, report.name, args.textfile)
        except FleetError as exc:
            # Not a quiet success: node_exporter would go on serving last night's file.
            metrics_failed = True
            err_console.print(f"The metrics were not written: {exc}. The night is stored; "
                              f"`fleet metrics --sweep {report.name} --format text -o PATH` "
                              "writes them.", markup=False)
    if not report.finished and not report.interrupted:
        err_console.print(f"Run #{report.run_id} stays open: some hosts were not probed by "
                          "any worker; `fleet sweep --resume` probes them into it.",
                          markup=False)
    failing = report.failing(kinds)
    if report.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if failing:
        err_console.print(f"--fail-on: tonight shows {', '.join(failing)}", markup=False)
        sys.exit(EXIT_FAIL_ON)
    if report.probe.failed or metrics_failed:
        sys.exit(EXIT_SOME_FAILED)


@click.command("worker")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--queue", "queues", multiple=True, required=True, metavar="NAME",
              help="Queue to serve (a provider's name, or a host's `queue:`); repeatable.")
@click.option("--broker", required=True, metavar="URL",
              help="The sweep's broker: redis://HOST:6379/0 or amqp://...")
@db_option
@click.option("--concurrency", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Hosts probed at once by this worker.")
@click.option("--visibility-timeout", type=click.FloatRange(1, 7 * 86400), metavar="S",
              help="Redis: give the tasks of a dead worker to this one after S s. "
                   "Default 3600; give the sweep's --visibility-timeout, which its tasks' "
                   "expiry counts on (a longer one is logged).")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust the key of a host this worker sees for the first time (the "
                   "worker's own decision: a task never carries it).")
@click.option("--name", help="Worker name shown in progress (default fleet-QUEUES-PID@HOST).")
@reports_errors
def worker_command(inventory_file: Path, queues: tuple[str, ...], broker: str,
                   db: str | None, concurrency: int, visibility_timeout: float | None,
                   accept_new_host_keys: bool, name: str | None) -> None:
    """Probe the hosts of QUEUE for `fleet sweep --via celery`, storing into --db.

    Run it where the queue's hosts can be reached (inside a provider's network), with the
    sweep's PostgreSQL --db. Host addresses, keys and host-key trust come from this
    machine's INVENTORY and flags; the broker carries only host names. Stop it with
    SIGTERM or Ctrl-C (running hosts finish first).

    \b
    Example:
      fleet worker --queue lambda --broker redis://10.0.0.5:6379/0 \\
          inventory.yaml --db postgresql://fleet@db.internal/fleet
    """
    from fleet.sweep.distributed import WorkerOptions, run_worker

    options = WorkerOptions(queues, broker, concurrency, visibility_timeout, name,
                            accept_new_host_keys)
    run_worker(inventory_file, options, db)


@click.group("schedule")
def schedule_group() -> None:
    """Run a sweep every night from cron or a systemd user timer.

    \b
    Examples:
      fleet schedule install --cron "0 3 * * *" inventory.yaml --db ./fleet.db
      fleet schedule show
      fleet schedule remove --name nightly
    """


def _crontab(crontab_file: Path | None) -> Crontab:
    from fleet.sweep.schedule import Crontab

    return Crontab(crontab_file)


CRONTAB_FILE = click.option(
    "--crontab-file", type=click.Path(path_type=Path, dir_okay=False),
    help="Edit this file instead of your crontab (default: $FLEET_CRONTAB, else "
         "`crontab -l` / `crontab -`).")
UNIT_DIR = click.option(
    "--unit-dir", type=click.Path(path_type=Path, file_okay=False),
    help="Where systemd units go (default ~/.config/systemd/user).")


@schedule_group.command("install")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--cron", "cron", default="0 3 * * *", show_default=True,
              help="When, as five cron fields.")
@click.option("--systemd", is_flag=True, help="Write a systemd user service + timer instead.")
@click.option("--on-calendar", help="systemd OnCalendar= (default: from --cron).")
@click.option("--name", default="nightly", show_default=True, help="The sweep's name.")
@db_option
@click.option("--log", type=click.Path(path_type=Path, dir_okay=False),
              help="Log file (default ~/.local/state/fleet/sweep-NAME.log).")
@click.option("--keep-samples-days", type=click.IntRange(0), default=30, show_default=True,
              help="Retention: after each sweep, empty raw samples older than this.")
@click.option("--sweep-args", default="", metavar="ARGS",
              help='More `fleet sweep` options, e.g. "--fail-on regression --fingerprint-only"; '
                   "a --broker URL goes to the environment file (FLEET_BROKER).")
@CRONTAB_FILE
@UNIT_DIR
@reports_errors
def schedule_install(inventory_file: Path, cron: str, systemd: bool, on_calendar: str | None,
                     name: str, db: str | None, log: Path | None, keep_samples_days: int,
                     sweep_args: str, crontab_file: Path | None, unit_dir: Path | None
                     ) -> None:
    """Schedule `fleet sweep INVENTORY`, logging to a file, then `fleet db prune`.

    The store's URL and any --broker in --sweep-args go into a file only you can read
    (FLEET_DB, FLEET_BROKER), not on the command line, where a password would show in `ps`:
    ~/.local/state/fleet/sweep-NAME.env for cron, fleet-sweep-NAME.env beside the units for
    --systemd. With --systemd, NAME is letters, digits and . _ - only.

    \b
    Examples:
      fleet schedule install --cron "0 3 * * *" inventory.yaml --db ./fleet.db
      fleet schedule install --systemd --cron "30 2 * * 1-5" inventory.yaml
    """
    import shlex

    from fleet.sweep.run import check_name
    from fleet.sweep.schedule import (
        Schedule,
        check_systemd_name,
        default_unit_dir,
        install_cron,
        install_systemd,
        redacted,
        store_url,
    )
    from fleet.sweep.schedule import on_calendar as calendar_of

    check_name(name)
    if systemd:
        check_systemd_name(name)
    schedule = Schedule(name, inventory_file, db, log, keep_samples_days,
                        tuple(shlex.split(sweep_args)))
    # The store as fixed now (--db, else $FLEET_DB, else the default), password hidden.
    store = f"store: {redacted(store_url(db))}"
    if systemd:
        paths = install_systemd(schedule, on_calendar or calendar_of(cron),
                                unit_dir or default_unit_dir())
        for path in paths:
            click.echo(f"wrote {path}")
        click.echo(store)
        click.echo(f"Enable it: systemctl --user daemon-reload && systemctl --user enable "
                   f"--now {paths[1].name}")
        click.echo("A user's timers run only while they are logged in unless lingering is "
                   "on: loginctl enable-linger $USER")
    else:
        line, env_file = install_cron(schedule, cron, _crontab(crontab_file))
        click.echo(f"wrote {env_file}")
        click.echo(store)
        click.echo(f"crontab: {redacted(line)}")


@schedule_group.command("show")
@CRONTAB_FILE
@UNIT_DIR
@reports_errors
def schedule_show(crontab_file: Path | None, unit_dir: Path | None) -> None:
    """Show fleet's scheduled sweeps (crontab entries and systemd units).

    \b
    Example:
      fleet schedule show
    """
    from fleet.sweep.schedule import (
        cron_entries,
        cron_env_file,
        default_unit_dir,
        env_settings,
        redacted,
        systemd_units,
    )

    entries = cron_entries(_crontab(crontab_file))
    units = systemd_units(unit_dir or default_unit_dir())
    for name, line in entries:
        click.echo(f"cron  {name}: {redacted(line)}")
        click.echo(f"      {env_settings(cron_env_file(name))}")
    for path in units:
        click.echo(f"systemd  {path}")
        if path.suffix == ".service":
            click.echo(f"      {env_settings(path.with_suffix('.env'))}")
    if not entries and not units:
        click.echo("No fleet sweep is scheduled.")


@schedule_group.command("remove")
@click.option("--name", default="nightly", show_default=True, help="The sweep's name.")
@CRONTAB_FILE
@UNIT_DIR
@reports_errors
def schedule_remove(name: str, crontab_file: Path | None, unit_dir: Path | None) -> None:
    """Remove the scheduled sweep NAME (its crontab entry, systemd units, environment files).

    \b
    Example:
      fleet schedule remove --name nightly
    """
    from fleet.errors import InputError
    from fleet.sweep.schedule import (
        default_unit_dir,
        removal_note,
        remove_cron,
        remove_cron_env,
        remove_systemd,
        stop_timer,
    )

    if unit_dir is None:
        # Only in systemd's own unit directory is the timer one it has loaded: stop and
        # disable it there before its files go, or it stays loaded until a daemon-reload.
        said = stop_timer(name, default_unit_dir())
        if said:
            click.echo(said)
    removed = remove_systemd(name, unit_dir or default_unit_dir())
    for path in removed:
        click.echo(f"removed {path}")
    note = removal_note(removed) if unit_dir is not None else None
    if note:
        click.echo(note)
    in_cron = remove_cron(name, _crontab(crontab_file))
    if in_cron:
        click.echo(f"removed the crontab entry of sweep {name}")
    env_file = remove_cron_env(name)
    if env_file is not None:
        click.echo(f"removed {env_file}")
    if not (in_cron or removed or env_file):
        raise InputError(f"no scheduled sweep named {name!r}; `fleet schedule show` lists "
                         "them")


COMMANDS = (sweep_command, schedule_group, worker_command)
