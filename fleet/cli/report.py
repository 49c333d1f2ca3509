"""`fleet report`: parse, build, write, pick the exit status."""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from fleet.cli.options import db_option, err_console, existing_store, gathered, reports_errors
from fleet.errors import InputError
from fleet.findings.kinds import FINDING_KINDS
from fleet.report.build import Report
from fleet.report.render import FORMATS, write_report
from fleet.words import counted

EXIT_FINDINGS = 1
TIME_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"]


def _utc(value: dt.datetime | None, end_of_day: bool = False) -> dt.datetime | None:
    if value is None:
        return None
    if end_of_day and value.time() == dt.time(0) and value.tzinfo is None:
        # --until 2026-11-22 means the whole of that day.
        value = value + dt.timedelta(days=1) - dt.timedelta(microseconds=1)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def parse_fail_on(text: str | None) -> tuple[str, ...]:
    """The finding kinds of --fail-on; InputError naming any unknown one."""
    if not text:
        return ()
    kinds = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [k for k in kinds if k not in FINDING_KINDS]
    if unknown:
        raise InputError(f"--fail-on {text!r}: {', '.join(unknown)} is not a kind of finding; "
                         f"use a comma-separated list of {', '.join(FINDING_KINDS)}")
    return kinds


def failing(report: Report, kinds: tuple[str, ...]) -> dict[str, int]:
    """The findings that `--fail-on kinds` turns into exit status 1."""
    counts = report.counts()
    return {kind: counts[kind] for kind in kinds if counts[kind]}


def _format_for(fmt: str | None, output: str | None) -> str:
    if fmt is not None:
        return fmt
    suffix = Path(output).suffix.lower() if output and output != "-" else ""
    return {".md": "md", ".markdown": "md", ".json": "json"}.get(suffix, "html")


@dataclass(frozen=True)
class ReportArgs:
    """`fleet report`'s options, by their names."""

    db: str | None
    output: str | None
    fmt: str | None
    sweep: str | None
    since: dt.datetime | None
    until: dt.datetime | None
    runs: tuple[int, ...]
    providers: tuple[str, ...]
    variants: tuple[str, ...]
    anonymize: bool
    gap_threshold: float
    straggler_threshold: float
    across_stacks: bool
    fail_on: str | None


@click.command("report")
@db_option
@click.option("--output", "-o", metavar="PATH",
              help="Where to write it; - for standard output. Default: fleet-report.html "
                   "(or .md, .json) in the current directory.")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="html (one self-contained file), md or json. Default: from --output's "
                   "extension, else html.")
@click.option("--sweep", help="Only runs stored under this sweep name.")
@click.option("--since", type=click.DateTime(TIME_FORMATS),
              help="Only what was collected at or after this date or time (UTC unless given).")
@click.option("--until", type=click.DateTime(TIME_FORMATS),
              help="Only what was collected up to this date (the whole day) or time.")
@click.option("--run", "runs", multiple=True, type=click.IntRange(min=1), metavar="N",
              help="Only this probe run (the number `fleet probe` and `fleet sweep` print); "
                   "repeat for several.")
@click.option("--provider", "providers", multiple=True, metavar="NAME",
              help="Only this provider; repeat for several.")
@click.option("--variant", "variants", multiple=True, metavar="LABEL",
              help='Only this variant, e.g. "H100 SXM5 80GB" or H100-SXM5-80GB (case, '
                   "spaces, hyphens and underscores aside); repeat for several.")
@click.option("--anonymize", is_flag=True,
              help="Replace provider and host names by letters (Provider A, A-1...), dealt "
                   "at random for each report, and leave out serials, UUIDs, tags and "
                   "failure messages, to share outside the company.")
@click.option("--gap-threshold", type=click.FloatRange(0, 1), default=0.02, show_default=True,
              metavar="FRACTION", help="Smallest provider gap called systematic.")
@click.option("--straggler-threshold", type=click.FloatRange(0, 1), default=0.03,
              show_default=True, metavar="FRACTION",
              help="Smallest shortfall against a node's other GPUs called a straggler.")
@click.option("--across-stacks", is_flag=True,
              help="Compare results measured on different software stacks (torch, CUDA "
                   "runtime, cuBLAS) as one configuration, listing each side's stack among "
                   "what differs, instead of comparing each stack apart.")
@click.option("--fail-on", metavar="KINDS",
              help="Exit with status 1 when findings of these kinds exist: a comma-separated "
                   f"list of {', '.join(FINDING_KINDS)}.")
@reports_errors
@gathered(ReportArgs)
def report_command(args: ReportArgs) -> None:
    """Write the procurement report from everything stored (or the part you filter).

    It finds hosts that differ from their listing (the inventory's `expect`), listings
    that hide several variants, settings that drift within a variant, systematic gaps
    between providers (per-GPU medians, a bootstrap interval on the ratio and a rank
    test), providers whose GPUs run hotter and lose more from their first 20 s of load to
    the soaked level at the same power cap (cooling), stragglers within a node, and what
    an effective PFLOP-hour costs at each provider (with `price_per_gpu_hour` in the
    inventory). Every flag states the evidence it rests on. Soaked and cool-start
    results, harness versions and software stacks are compared apart (--across-stacks
    compares stacks as one).

    Two hosts that answered with the same GPUs (UUID, else serial) in one probe or sweep
    are a duplicate: one machine listed twice, or one node sold as two listings, and
    measured on contended cards. Their results of that run are left out of every
    comparison, cost and chart until you choose one: remove the other from the
    inventory, and the next run probes the machine once.

    Exit status: 0, or 1 when --fail-on names a kind of finding that was found (for
    scripts and schedulers), 2 for bad input.

    \b
    Examples:
      fleet report                                   # fleet-report.html
      fleet report --sweep nightly --since 2026-11-01 -o nightly.html
      fleet report --sweep nightly --run 42 -o night-42.html   # one night, as sweeps write it
      fleet report --format json -o - | jq .findings
      fleet report --anonymize --format md -o for-the-vendor.md
      fleet report --across-stacks --provider lambda --provider aws -o stacks.html
      fleet report --fail-on mismatch,gap,cooling -o /dev/null || echo "dispute something"
    """
    kinds = parse_fail_on(args.fail_on)
    fmt = _format_for(args.fmt, args.output)
    output = args.output or f"fleet-report.{fmt}"
    since, until = _utc(args.since), _utc(args.until, end_of_day=True)
    if since and until and since > until:
        raise InputError("--since is after --until: nothing can be in between")
    with existing_store(args.db) as store:
        report = store.report(sweep=args.sweep, since=since, until=until, runs=args.runs,
                              providers=args.providers, variants=args.variants,
                              anonymize=args.anonymize, gap_threshold=args.gap_threshold,
                              straggler_threshold=args.straggler_threshold,
                              across_stacks=args.across_stacks)
    where = write_report(report, fmt, output)
    err_console.print(f"Report ({fmt}) written to {where}: {counted(report.hosts, 'host')}, "
                      f"{counted(report.gpus_measured, 'GPU')} measured; findings: "
                      f"{report.findings_line()}.",
                      markup=False)
    if report.hosts == 0 and report.gpus_measured == 0:
        err_console.print("Nothing stored matches: run `fleet probe INVENTORY` first, or "
                          "widen the filters.", markup=False)
    failed = failing(report, kinds)
    if failed:
        err_console.print("--fail-on: " + ", ".join(f"{n} {kind}" for kind, n in failed.items())
                          + " found", markup=False)
        sys.exit(EXIT_FINDINGS)


COMMANDS = (report_command,)
