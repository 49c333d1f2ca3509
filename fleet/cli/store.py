"""`fleet db`, `fleet ingest` and `fleet results`: parse, call the store, print."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.analysis.health.not_measured import judge_rows
from fleet.api import Store
from fleet.cli.job_listing import JobQuery, show_job_results
from fleet.cli.listing import show_not_measured
from fleet.cli.node_listing import NODE_KINDS, NodeQuery, show_node_results
from fleet.cli.options import (
    db_option,
    err_console,
    existing_store,
    note_created,
    reports_errors,
)
from fleet.cli.terminal import Legend, fitted, hanging, natural_width, short_variants
from fleet.errors import InputError
from fleet.store.ingest import Outcome, Prepared
from fleet.store.intake import (
    MAX_DEFAULT_JOBS,
    PARALLEL_FROM,
    Item,
    default_jobs,
)
from fleet.store.query import ResultRow, VariantSummary
from fleet.words import counted

TABLE_LIMIT = 100
PROBLEMS_SHOWN = 10  # of `fleet db repair`: the first few say what went wrong


@click.group()
def db() -> None:
    """Create, upgrade and inspect the database that fleet stores results in.

    \b
    Examples:
      fleet db current
      fleet db upgrade --db postgresql://fleet@db.internal:5432/fleet
    """


@db.command("upgrade")
@db_option
@reports_errors
def db_upgrade(db: str | None) -> None:
    """Bring the database's schema up to this fleet's newest revision.

    An empty database gets the whole schema; this also happens by itself the first time
    any command stores into or reads from a new database. Back up a shared database
    first: the upgrade runs in one transaction, but cannot be undone by fleet. On a store
    of millions of results it takes minutes (0009 rewrote 2.4 M results in 338 s; 0010
    packed them into their GPUs' series in 42 s).

    \b
    Examples:
      fleet db upgrade
      FLEET_DB=postgresql://fleet@db.internal:5432/fleet fleet db upgrade
    """
    store = Store(db)
    state = store.schema()
    if state.revision is not None and not state.current:
        # Revisions rewrite tables: 0009 took 338 s on a store of 2.4 M results
        # (bench/records/2026-11-25-report-scale-0009.md), silent otherwise.
        err_console.print(f"Upgrading {store.location} from revision {state.revision} to "
                          f"{state.head}: on a store of millions of results this takes "
                          "minutes; an interrupted upgrade is rolled back whole.",
                          markup=False, soft_wrap=True)
    before, after = store.upgrade()
    if before.revision == after.revision:
        click.echo(f"{store.location} is already at revision {after.revision} (newest)")
    else:
        click.echo(f"{store.location}: upgraded from {before.revision or 'empty'} to "
                   f"revision {after.revision} (newest)")


@db.command("prune")
@click.option("--keep-samples-days", type=click.IntRange(0), required=True, metavar="N",
              help="Keep raw samples of results collected in the last N days.")
@db_option
@reports_errors
def db_prune(keep_samples_days: int, db: str | None) -> None:
    """Empty the raw samples (per-run times, telemetry series) of old results.

    Their statistics (median, interval, CV, clocks, flags) stay, so reports and sweep
    history are unchanged; only looking into an old night's individual runs is lost.
    `fleet schedule install` runs this after every sweep.

    \b
    Example:
      fleet db prune --keep-samples-days 30 --db ./fleet.db
    """

    with existing_store(db) as store:
        pruned = store.prune_samples(keep_samples_days)
    before = f"collected before {pruned.cutoff:%Y-%m-%d %H:%M} UTC"
    # Only the counts that are not zero (issue 56): a young store has nothing to empty.
    emptied = [counted(n, what) for n, what in ((pruned.results, "result"),
                                                (pruned.documents, "document")) if n]
    if not emptied:
        click.echo(f"{store.location}: no raw samples {before} to empty")
        return
    click.echo(f"{store.location}: emptied the raw samples of {' and '.join(emptied)} "
               f"{before} ({pruned.bytes_freed / 1024:.1f} KiB)")


@db.command("repair")
@click.option("--check", is_flag=True,
              help="Only say whether they agree; exit 1 where they do not.")
@db_option
@reports_errors
def db_repair(check: bool, db: str | None) -> None:
    """Check the per-GPU series the report reads against the stored results, and
    rebuild them where they disagree.

    Every result is kept twice: in its own row, and packed into its GPU's series, which
    `fleet report` reads (millions of result rows are too many to read each time).
    Ingest writes both in one transaction, so they agree unless the database was
    changed by other means (rows deleted or restored by hand, a partial restore). This
    reads every result: about a minute for 2.4 million.

    \b
    Examples:
      fleet db repair --check
      fleet db repair --db postgresql://fleet@db.internal:5432/fleet
    """
    with existing_store(db) as store:
        done = store.repair(check=check)
    for problem in done.problems[:PROBLEMS_SHOWN]:
        click.echo(problem)
    if len(done.problems) > PROBLEMS_SHOWN:
        click.echo(f"... and {len(done.problems) - PROBLEMS_SHOWN} more")
    if not done.problems:
        click.echo(f"{store.location}: the series agree with the stored results")
    elif done.rebuilt is None:
        click.echo(f"{store.location}: {len(done.problems)} series "
                   "disagree with the stored results; `fleet db repair` rebuilds them")
        sys.exit(1)
    else:
        click.echo(f"{store.location}: {len(done.problems)} series "
                   f"disagreed; rebuilt all {done.rebuilt} from the stored results")


@db.command("current")
@db_option
@reports_errors
def db_current(db: str | None) -> None:
    """Show which database fleet uses, and its schema revision. Creates nothing.

    \b
    Examples:
      fleet db current
      fleet db current --db ./team.db
    """
    store = Store(db)
    click.echo(f"database: {store.location} (from {store.location.origin})")
    if not store.exists():
        click.echo("revision: none, the file does not exist yet; the first "
                   "`fleet ingest` or `fleet db upgrade` creates it")
        return
    state = store.schema()
    if state.revision is None:
        detail = ("tables that are not fleet's" if state.has_tables
                  else "empty; `fleet db upgrade` or the first `fleet ingest` creates the schema")
        click.echo(f"revision: none ({detail})")
    elif state.current:
        click.echo(f"revision: {state.revision} (newest)")
    else:
        click.echo(f"revision: {state.revision}; this fleet's newest is {state.head}: "
                   "run `fleet db upgrade`")


@click.command()
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, allow_dash=True, path_type=Path))
@click.option("--provider", default="unknown", show_default=True,
              help="The provider the hosts were rented from.")
@click.option("--host", help="The host's name, instead of the hostname in the document.")
@click.option("--sweep", help="Name these documents' run, to filter on it later.")
@click.option("--readers", type=click.IntRange(min=1), default=default_jobs,
              show_default=f"the CPU count, at most {MAX_DEFAULT_JOBS}",
              help=f"Reader processes: they read and validate the files while this one "
                   f"stores them, from {PARALLEL_FROM} files on; 1 does it all in this one.")
# `fleet results --jobs` is the job suite's figures: ingest's old name for --readers.
@click.option("--jobs", "old_readers", type=click.IntRange(min=1), hidden=True)
@db_option
@reports_errors
def ingest(files: Sequence[Path], provider: str, host: str | None, sweep: str | None,
           readers: int, old_readers: int | None, db: str | None) -> None:
    """Store agent documents collected by hand.

    Each FILE is the agent's JSON-lines output (`python3 -m agent bench > FILE`) or one
    document as JSON (`fleet fingerprint --document > FILE`); a directory stands for its
    *.json and *.jsonl files, in name order; `-` reads standard input. All of them go
    into one run. A document is stored once, however often it is given. A file that
    fails validation is rejected whole, with the reason, and the others are still
    stored; the exit status is then 2. Into SQLite, documents are committed 100 at a
    time, and each file's line is printed once its batch is; if the database itself
    fails, every file printed as stored is.

    \b
    Examples:
      fleet ingest --provider lambda --sweep 2026-11-22 gpu-01.jsonl gpu-02.jsonl
      fleet ingest --provider aws collected/
      ssh gpu-03 python3 -m agent bench | fleet ingest --provider coreweave -
      fleet ingest --readers 1 --provider aws collected/   # read in this process
    """
    readers = _readers(readers, old_readers)
    names = _expand(files)
    with Store(db) as store:
        note_created(store.created, store.location)
        counts: Counter[str] = Counter()
        try:
            store.ingest(names, provider=provider, host=host, sweep=sweep, jobs=readers,
                         on_item=_echo, counts=counts)
        except KeyboardInterrupt:
            # The batch in flight was rolled back; every line printed is stored.
            err_console.print(f"Interrupted: {_summary(counts)} in {store.location}; the "
                              "same command again stores the rest (stored documents are "
                              "skipped)", markup=False)
            sys.exit(130)
    err_console.print(f"{_summary(counts)} in {store.location}", markup=False)
    if counts["rejected"]:
        sys.exit(InputError.exit_code)


def _readers(readers: int, old_readers: int | None) -> int:
    """--readers, or the deprecated --jobs with a note to use --readers."""
    if old_readers is None:
        return readers
    given = click.get_current_context().get_parameter_source("readers")
    if given is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--jobs is the old name of --readers: give --readers alone")
    err_console.print(f"Note: `fleet ingest --jobs` is deprecated; use --readers "
                      f"{old_readers}", markup=False)
    return old_readers


def _summary(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[what]} {what}" for what in
                     ("stored", "already stored", "rejected") if counts[what]) or "nothing"


DOCUMENT_SUFFIXES = (".json", ".jsonl")


def _expand(paths: Sequence[Path]) -> list[str]:
    names: list[str] = []
    for path in paths:
        if str(path) != "-" and path.is_dir():
            found = sorted(str(child) for child in path.iterdir()
                           if child.suffix in DOCUMENT_SUFFIXES and child.is_file())
            if not found:
                raise InputError(f"{path}: a directory without *.json or *.jsonl files; "
                                 "give the documents' files or their directory")
            names += found
        else:
            names.append(str(path))
    return names


def _echo(item: Item) -> None:
    if item.stored is None:
        click.echo(f"rejected        {item.rejected}")
    elif item.stored.outcome is Outcome.STORED and item.prepared is not None:
        click.echo(f"stored          {item.name}: document {item.stored.document_id}, "
                   f"{stored_line(item.prepared)}")
    else:
        click.echo(f"already stored  {item.name}: document {item.stored.document_id}")


def stored_line(prepared: Prepared) -> str:
    """What a stored document holds, by suite (those that stored nothing unsaid), and what
    it could not measure with whose that is: "2 GPUs, 2 matmul results, 3 job figures;
    not measured: GPU 1 job: out of memory: pid 4242 (python, user bob) held 78,000 MiB of
    its 81,559 MiB when the run began (yours to fix)"."""
    # Counts that are not zero only: a fingerprint alone is "1 GPU", not "1 GPU, 0 matmul
    # results, 0 node figures" (issue 56).
    held = [(what, n) for what, n in (
        ("matmul result", prepared.benchmark_count), ("node figure", len(prepared.node_results)),
        ("job figure", len(prepared.job_results))) if n]
    said = [counted(prepared.gpu_count, "GPU"), *(counted(n, what) for what, n in held)]
    missed = [n.line() for n in judge_rows(prepared.errors, prepared.fingerprints)]
    return ", ".join(said) + (f"; not measured: {'; '.join(missed)}" if missed else "")


def _since(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


SHORT_FLAGS = {"power_capped": "power-cap", "thermal_throttled": "thermal",
               "hw_slowdown": "hw-slowdown", "contended": "contended",
               "not_steady": "unsteady", "correctness_failed": "WRONG-RESULT",
               "clocks_locked": "clocks-locked", "not_soaked": "not-soaked"}
# A flag in a letter, where the words do not fit the terminal; the legend spells out those
# a table used. A wrong result stays a word: it is the one flag that voids the figure.
FLAG_LETTERS = {"power_capped": "P", "thermal_throttled": "T", "hw_slowdown": "H",
                "contended": "C", "not_steady": "U", "correctness_failed": "WRONG",
                "clocks_locked": "L", "not_soaked": "N"}


def _flags(flags: Sequence[str], legend: Legend | None = None) -> str:
    """The flags in words, or in letters noted in `legend` where it is given."""
    if not flags:
        return "-"
    if legend is None:
        return " ".join(SHORT_FLAGS.get(flag, flag) for flag in flags)
    said = []
    for flag in flags:
        letter = FLAG_LETTERS.get(flag, flag)
        if letter != flag and letter != "WRONG":
            legend.names[letter] = SHORT_FLAGS[flag]
        said.append(letter)
    return " ".join(said)


def _config(row: ResultRow | VariantSummary) -> str:
    """bf16 8192³, then only what differs from the harness's defaults (soaked from 1.3 on;
    every older result is a cool start)."""
    size = f"{row.m}³" if row.m == row.n == row.k else f"{row.m}x{row.n}x{row.k}"
    extra = [word for word, default in ((row.mode, "sustained"), (row.thermal, "soaked"),
                                        (f"{row.cache}-L2", "cold-L2"),
                                        (row.concurrency, "concurrent")) if word != default]
    return " ".join([row.dtype, size, *extra])


def _benchmarks(rows: Sequence[ResultRow | VariantSummary]
                ) -> tuple[list[str], str, Legend]:
    """Each row's benchmark as the table writes it, what the title says of them all, and
    the legend: one benchmark and stack is said once in the title; several get a letter
    each ("A"), spelled out under the table (a stack's label alone is ~45 characters,
    more than 80 columns have to spare)."""
    stacks = sorted({row.stack for row in rows})
    if len(stacks) == 1:
        said = [_config(row) for row in rows]
        title = f"; {stacks[0]}"
    else:
        said = [f"{_config(row)}, {row.stack}" for row in rows]
        title = ""
    keys = {text: _letter(i) for i, text in enumerate(dict.fromkeys(said))}
    legend = Legend("bench")
    if len(keys) == 1:
        return said, title, legend
    legend.names = {key: text for text, key in keys.items()}
    return [keys[text] for text in said], title, legend


def _number(value: float | None, digits: int = 0) -> str:
    """"-" where there is none: a cool-start result has no first 20 s of its own."""
    return "-" if value is None else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else str(i + 1)


def _mhz_watts(row: ResultRow) -> str:
    """SM clock and power drawn in one column, as `fleet bench` shows them."""
    return f"{_number(row.sm_clock_mhz_median)} {_number(row.power_w_median)}"


def _shared(columns: str, rows: Sequence[Sequence[str]], hoisted: Sequence[str],
            whole: Mapping[str, Mapping[str, str]] | None = None
            ) -> tuple[str, str, list[Sequence[str]]]:
    """Columns in `hoisted` whose every row says the same move into the title, as
    `fleet bench` does: a filtered listing keeps its numbers in 80 columns. `whole`: per
    column, the whole name of a shortened cell, which the title says instead."""
    names = columns.split("|")
    shared = [i for i, name in enumerate(names) if name in hoisted and rows
              and len({row[i] for row in rows}) == 1]
    said = ", ".join((whole or {}).get(names[i], {}).get(rows[0][i], rows[0][i])
                     for i in shared)
    keep = [i for i in range(len(names)) if i not in shared]
    return ("|".join(names[i] for i in keep), said,
            [[row[i] for i in keep] for row in rows])


def _when(rows: Sequence[ResultRow]) -> tuple[str, str]:
    """How the collected column writes a time, and what the title says of it: the year
    once where every row shares it ("11-28 23:59"), else whole dates."""
    years = {row.collected_at.year for row in rows}
    if len(years) == 1:
        return "%m-%d %H:%M", f"{years.pop()}, times UTC"
    return "%Y-%m-%d %H:%M", "times UTC"


def _legends(*legends: Legend) -> list[str]:
    return [line for legend in legends if (line := legend.line()) is not None]


def _results_table(rows: Sequence[ResultRow], width: int
                   ) -> tuple[str, Table, list[str]]:
    """The results in `width` columns: the title (what every row shares, the year once),
    the table and the legend of what it shortened. Variants and flags are shortened only
    where their whole words would not fit."""
    benches, stack, bench_legend = _benchmarks(rows)
    stamp, when = _when(rows)
    title = ""
    for short in (False, True):
        variants = (short_variants(row.variant for row in rows) if short
                    else {row.variant: row.variant for row in rows})
        flags = Legend("flags")
        columns, said, cells = _shared(
            "collected|provider|host|>GPU|variant|bench|>TFLOP/s ±repeat|>drop|>MHz W|>°C|"
            "flags",
            [(row.collected_at.strftime(stamp), row.provider, row.host,
              str(row.gpu_index), variants[row.variant], bench,
              _next_run(row), _share(row.soak_drop), _mhz_watts(row),
              _number(row.temperature_load_c), _flags(row.flags, flags if short else None))
             for row, bench in zip(rows, benches, strict=True)],
            ("provider", "variant", "bench"),
            {"variant": {short: whole for whole, short in variants.items()}})
        title = (f"Benchmark results{': ' + said if said else ''} (newest first; {when})"
                 f"{stack}")
        if natural_width(columns.split("|"), cells) <= width:
            break
    legend = Legend("variants")
    if "variant" in columns.split("|"):
        legend.add(variants)
    return (title, fitted(columns.split("|"), cells, width),
            _legends(legend, bench_legend, flags))


def _next_run(row: ResultRow) -> str:
    """The figure and where a repeat run lands (95%), as ± the figure: "672.0 ±0.6%", one
    cell for 80 columns, and the width is the point (CSV and JSON carry both ends)."""
    if row.repeat_low_tflops is None or row.repeat_high_tflops is None:
        return f"{row.tflops:.1f}"
    half = (row.repeat_high_tflops - row.repeat_low_tflops) / 2 / row.tflops
    return f"{row.tflops:.1f} ±{half:.1%}"


def _summary_table(rows: Sequence[VariantSummary], width: int
                   ) -> tuple[str, Table, list[str]]:
    """`fleet results --summary` in `width` columns: title, table, legend; variants
    shortened only where whole they would not fit."""
    benches, stack, bench_legend = _benchmarks(rows)
    title = ""
    for short in (False, True):
        variants = (short_variants(row.variant for row in rows) if short
                    else {row.variant: row.variant for row in rows})
        columns, said, cells = _shared(
            "variant|bench|harness|provider|>GPUs|>results|>TFLOP/s|>20 s|>drop|>GPU range",
            [(variants[row.variant], bench,
              row.harness_version, row.provider, str(row.gpus), str(row.results),
              f"{row.median_tflops:.1f}", _number(row.first_20s_tflops, 1),
              _share(row.drop), f"{row.min_gpu_tflops:.1f}-{row.max_gpu_tflops:.1f}")
             for row, bench in zip(rows, benches, strict=True)],
            ("variant", "bench", "harness"),
            {"variant": {short: whole for whole, short in variants.items()}})
        title = ("Per provider and variant: median of per-GPU median TFLOP/s"
                 + (f": {said}" if said else "") + stack)
        if natural_width(columns.split("|"), cells) <= width:
            break
    legend = Legend("variants")
    if "variant" in columns.split("|"):
        legend.add(variants)
    return title, fitted(columns.split("|"), cells, width), _legends(legend, bench_legend)


def _plain(row: ResultRow | VariantSummary) -> dict[str, Any]:
    data = dataclasses.asdict(row)
    for key, value in data.items():
        if isinstance(value, dt.datetime):
            data[key] = value.isoformat()
        elif isinstance(value, tuple):
            data[key] = list(value)
    return data


def _write_csv(rows: Sequence[ResultRow | VariantSummary], kind: type[Any]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([f.name for f in dataclasses.fields(kind)])
    for row in rows:
        writer.writerow([";".join(v) if isinstance(v, list) else ("" if v is None else v)
                         for v in _plain(row).values()])


@click.command()
@click.option("--provider", help="Only this provider (exact name).")
@click.option("--variant", help='Only this variant, e.g. "H100 SXM5 80GB" or H100-SXM5-80GB '
                                '(case, spaces, hyphens and underscores aside).')
@click.option("--host", help="Only this host (exact name).")
@click.option("--since", type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S",
                                              "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"]),
              help="Only results collected at or after this date or time (UTC unless given).")
@click.option("--sweep", help="Only results stored under this sweep name.")
@click.option("--stack", metavar="TEXT",
              help='Only results measured on a software stack whose label holds TEXT, case '
                   'aside; labels read "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2", so '
                   '--stack "cuBLAS 13.0" or --stack "torch 2.13".')
@click.option("--summary", is_flag=True,
              help="Per provider and variant: median of per-GPU medians, GPU count and range.")
@click.option("--node", is_flag=True,
              help="The node suite's figures instead of the matmul: each GPU's memory and "
                   "host link, each pair's copies, the node's all-reduce, in GB/s beside "
                   "the datasheet.")
@click.option("--kind", type=click.Choice(NODE_KINDS), multiple=True,
              help="With --node: only figures of this kind (repeat for several).")
@click.option("--jobs", is_flag=True,
              help="The job suite's figures instead of the matmul: per GPU, a transformer's "
                   "training and decode steps as tokens/s, TFLOP/s and MFU, decode's GB/s "
                   "and share of HBM.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option("--limit", type=click.IntRange(min=0),
              help=f"Show at most this many results, newest first (0: all). Default: "
                   f"{TABLE_LIMIT} in the table, all in CSV and JSON.")
@db_option
@reports_errors
def results(provider: str | None, variant: str | None, host: str | None,
            since: dt.datetime | None, sweep: str | None, stack: str | None, summary: bool,
            node: bool, kind: tuple[str, ...], jobs: bool, as_csv: bool,
            as_json: bool, limit: int | None, db: str | None) -> None:
    """Show stored benchmark results, filtered, as a table, CSV or JSON.

    A soaked result (harness 1.3 and later) shows its soaked TFLOP/s, where a repeat run
    of the card lands (repeat, ± the figure, 95%: from the variant's measured run-to-run spread, the
    GPU's earlier figures and the run's own wander; stored with results from fleet 0012
    on), the drop from the level of its first 20 s of load, and its temperature under
    load; a cool-start one (--quick, burst, or any older harness) only its figure. CSV
    and JSON carry that first-20-s level, the interval's ends and basis, and the
    within-run CV too. The summary
    keeps thermal states, harness versions and software stacks apart.

    With --node, the node suite's figures, a table per node: a GPU's memory copy (bytes read
    plus written), its host link each way from pinned and pageable memory, each pair's
    copy one way and both ways at once, and the node's all-reduce as bus bandwidth
    (nccl-tests' busbw); each beside its datasheet figure and the share of it reached.
    CSV and JSON carry every column of `fleet.Store().node_results()`.

    With --jobs, the job suite's figures, a table per document: each GPU's training step
    (tokens/s, TFLOP/s, MFU) and decode step (tokens/s, GB/s read, share of HBM) under
    each attention backend; what the jobs ran (model, shape, dtype) under each table.
    CSV and JSON carry every column of `fleet.Store().jobs()`, `config` among them: a
    figure compares only with figures of the same config.

    \b
    Examples:
      fleet results --provider lambda --since 2026-11-01
      fleet results --variant "H100 SXM5 80GB" --summary
      fleet results --stack "cuBLAS 13.0" --summary
      fleet results --sweep nightly --csv > nightly.csv
      fleet results --node --host gpu-01 --kind peer_copy --kind allreduce
      fleet results --jobs --variant "H100 SXM5 80GB" --since 2026-11-01
    """
    if as_csv and as_json:
        raise click.UsageError("give --csv or --json, not both")
    if kind and not node:
        raise click.UsageError("--kind chooses among the node suite's figures: give --node "
                               "too")
    if jobs:
        if node or summary or kind:
            raise click.UsageError("--jobs lists the job suite's figures alone: leave out "
                                   "--node, --kind and --summary (fleet.Store().jobs() to "
                                   "group them)")
        show_job_results(
            JobQuery(provider, variant, host, _since(since), sweep, stack),
            "csv" if as_csv else "json" if as_json else "table",
            TABLE_LIMIT if limit is None and not (as_csv or as_json) else limit, db)
        return
    if node:
        if summary:
            raise click.UsageError("--summary is for the matmul's results; --node lists "
                                   "each figure (fleet.Store().node_results() to group them)")
        show_node_results(
            NodeQuery(provider, variant, host, _since(since), sweep, stack, kind),
            "csv" if as_csv else "json" if as_json else "table",
            TABLE_LIMIT if limit is None and not (as_csv or as_json) else limit, db)
        return
    machine = as_csv or as_json
    if limit is None and not machine:
        limit = TABLE_LIMIT
    with existing_store(db) as store:
        where = store.result_filter(provider=provider, variant=variant, host=host,
                                    since=_since(since), sweep=sweep, stack=stack)
        rows: Sequence[ResultRow | VariantSummary]
        if summary:
            rows = store.summary_rows(where)
            total = len(rows)
        else:
            rows = store.result_rows(where, limit or None)
            total = store.count_results(where) if limit and len(rows) == limit \
                else len(rows)
        missed = store.not_measured(provider=provider, host=host, since=_since(since),
                                    sweep=sweep)
    if as_json:
        click.echo(json.dumps([_plain(row) for row in rows], indent=2))
    elif as_csv:
        _write_csv(rows, VariantSummary if summary else ResultRow)
    elif not rows:
        err_console.print("No results match.", markup=False)
    else:
        console = Console()
        title, table, legends = (
            _summary_table(cast("Sequence[VariantSummary]", rows), console.width) if summary
            else _results_table(cast("Sequence[ResultRow]", rows), console.width))
        # The title as lines of its own, wrapped between words: a table's title is cut at
        # the table's width.
        console.print(Text("\n".join(hanging(title, console.width, rest="")), style="bold"))
        console.print(table)
        for line in legends:
            console.print(Text("\n".join(hanging(line, console.width)), style="dim"))
    if total > len(rows):
        err_console.print(f"Showing the newest {len(rows)} of {total} results; "
                          "--limit 0 shows all.", markup=False)
    if not machine:
        show_not_measured(missed)


COMMANDS = (db, ingest, results)
