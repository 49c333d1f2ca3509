"""The `fleet` command: parse, call one core function, print. Nothing else lives here."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from fleet import __version__
from fleet.display import print_bench, print_fingerprint
from fleet.document import document_schema
from fleet.errors import FleetError, InputError
from fleet.local_agent import BenchOptions
from fleet.local_agent import bench as run_bench
from fleet.local_agent import fingerprint as run_fingerprint

F = TypeVar("F", bound=Callable[..., Any])
err_console = Console(stderr=True)


def reports_errors(func: F) -> F:
    """Turn a FleetError into its message on stderr and its exit status."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FleetError as exc:
            err_console.print(f"[red]Error:[/red] {exc}", markup=True, highlight=False,
                              soft_wrap=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleet")
def main() -> None:
    """Find out what GPUs you actually rented, and how fast they really are."""


@main.command()
@click.argument("source", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list with one object per GPU.")
@click.option("--document", "as_document", is_flag=True,
              help="Print the whole fleet-agent/1 document (host facts included) as JSON.")
@click.option("--verbose", "-v", is_flag=True, help="Show the evidence behind each verdict.")
@click.option("--record", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write what NVML answered to this file (nvml-recording/1).")
@click.option("--probe-writes", is_flag=True,
              help="Write each setting's current value back (a no-op) and record whether the "
                   "driver refused. Needs root; changes no setting, but does call NVML setters.")
@click.option("--no-torch", is_flag=True, help="Skip looking for torch and the CUDA runtime.")
@reports_errors
def fingerprint(
    source: Path | None,
    as_json: bool,
    as_document: bool,
    verbose: bool,
    record: Path | None,
    probe_writes: bool,
    no_torch: bool,
) -> None:
    """Fingerprint the NVIDIA GPUs of this machine, or of SOURCE.

    SOURCE may be an NVML recording (nvml-recording/1 JSON), `nvidia-smi -q` text or
    `nvidia-smi -q -x` XML; multi-GPU files give one entry per GPU. Without SOURCE the
    agent reads this machine's driver (read-only), falls back to `nvidia-smi -q -x` when
    NVML cannot be loaded, and on a machine without an NVIDIA GPU says so and exits 0.

    \b
    Examples:
      fleet fingerprint
      fleet fingerprint --json nvidia-smi-q.xml
      nvidia-smi -q > gpu.txt && fleet fingerprint gpu.txt
      fleet fingerprint --record h100.json     # replay it later: fleet fingerprint h100.json
    """
    console = Console()
    progress = None if (as_json or as_document) else (
        lambda event: err_console.print(f"[dim]{event['message']}[/dim]", highlight=False))
    document = run_fingerprint(source, probe_writes, record, not no_torch, progress)
    if as_document:
        click.echo(document.model_dump_json(indent=2))
    elif as_json:
        click.echo(json.dumps([gpu.model_dump(mode="json") for gpu in document.gpus], indent=2))
        if not document.gpus:
            err_console.print(f"No NVIDIA GPU: {document.no_gpu_reason}", highlight=False)
    else:
        print_fingerprint(console, document, verbose)


def _gpu_list(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give GPU indexes separated by commas, e.g. 0,2") \
            from None


# The harness's options, shared by `fleet bench` (this machine) and `fleet probe` (every
# host), so that both spell a benchmark the same way.
HARNESS_OPTIONS = (
    click.option("--dtype", type=click.Choice(["bf16", "fp16", "tf32", "fp32"]),
                 default="bf16", show_default=True,
                 help="fp32 means CUDA cores; tf32 the tensor cores' TF32 mode."),
    click.option("--size", type=click.IntRange(1, 65536), default=8192, show_default=True,
                 help="M = N = K."),
    click.option("-m", type=click.IntRange(1, 1 << 20), help="M, overriding --size."),
    click.option("-n", type=click.IntRange(1, 1 << 20), help="N, overriding --size."),
    click.option("-k", type=click.IntRange(1, 1 << 20), help="K, overriding --size."),
    click.option("--pause-ms", type=click.FloatRange(0, 10_000),
                 help="Burst mode: pause this long between timed runs (default: sustained, "
                      "back to back, what a training job sees)."),
    click.option("--quick", is_flag=True,
                 help="The cool-start figure: warm up until 1-s windows agree, then measure "
                      "(under 20 s a GPU), as every result before harness 1.3. Reads high on "
                      "a card that heats (the lent H100s' first 20 s of load were 0.4-1.8% "
                      "above their soaked level). Labelled "
                      "\"cool-start\" and compared apart from soaked results."),
    click.option("--soak-cap-s", type=click.FloatRange(10, 3600), metavar="S",
                 help="Stop waiting for throughput and temperature to stop moving after S "
                      "seconds of load, measure anyway and flag the result not_soaked "
                      "(harness default 180)."),
    click.option("--warm-l2", is_flag=True, help="Do not flush the L2 cache before each run."),
    click.option("--sequential", is_flag=True,
                 help="One GPU at a time (default: all at once, the node under full load)."),
    click.option("--gpus", callback=_gpu_list, help="Only these GPU indexes, e.g. 0,2."),
    click.option("--flush-always", is_flag=True,
                 help="Flush the L2 before every run even where the matrices together "
                      "outsize the flush buffer (default: only where they are smaller, or "
                      "in burst mode; larger ones evict it themselves, and the flush only "
                      "changes the card's power pattern). Results say \"flushed\" L2 and "
                      "are compared apart."),
    # Harness 1.1's opt-in, the default since 1.2: still accepted so that installed
    # schedules and scripts keep working.
    click.option("--flush-auto", is_flag=True, hidden=True),
    # The harness's own defaults (agent/harness.py, measured in bench/RESULTS.md) apply
    # unless these are given, so the agent alone and fleet measure alike.
    click.option("--measure-s", type=click.FloatRange(0.1, 600),
                 help="Measure this long once soaked (harness default 20 s); with --quick, "
                      "at least this long after warm-up (default 6 s)."),
    click.option("--max-warmup-s", type=click.FloatRange(0.1, 600),
                 help="--quick: give up waiting for steady state after this long, flagging "
                      "the result not_steady (harness default 10.5 s)."),
    click.option("--max-total-s", type=click.FloatRange(0.1, 3600),
                 help="--quick: stop extending a measurement whose sub-windows disagree once "
                      "the run on a GPU has lasted this long (harness default 18 s)."),
    click.option("--lock-clocks", type=click.IntRange(1, 10_000), metavar="MHZ",
                 help="Lock the SM clock for the run (changes a GPU setting, needs root; "
                      "reset afterwards, and results are marked locked)."),
    click.option("--cpu", is_flag=True, help="Run the harness on the CPU (a smoke test)."),
)


def harness_options(func: F) -> F:
    """Decorate a command with the benchmark harness's options (HARNESS_OPTIONS)."""
    for option in reversed(HARNESS_OPTIONS):
        func = option(func)
    return func


def bench_options(
    *, dtype: str, size: int, m: int | None, n: int | None, k: int | None,
    pause_ms: float | None, quick: bool, soak_cap_s: float | None, warm_l2: bool,
    sequential: bool, gpus: tuple[int, ...] | None,
    flush_always: bool, flush_auto: bool, measure_s: float | None,
    max_warmup_s: float | None, max_total_s: float | None, lock_clocks: int | None, cpu: bool,
) -> BenchOptions:
    """BenchOptions from the values of HARNESS_OPTIONS."""
    given = [flag for flag, on in (("--warm-l2", warm_l2), ("--flush-always", flush_always),
                                   ("--flush-auto", flush_auto)) if on]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} contradict each other: --warm-l2 never "
                         "flushes the L2, --flush-always flushes it before every run, and "
                         "--flush-auto (the default) flushes it only for problems smaller "
                         "than the flush buffer; give one")
    return BenchOptions(
        dtype=dtype, m=m or size, n=n or size, k=k or size, pause_ms=pause_ms,
        quick=quick, soak_cap_s=soak_cap_s, warm_l2=warm_l2, flush_always=flush_always,
        sequential=sequential, gpus=gpus,
        measure_s=measure_s, max_warmup_s=max_warmup_s, max_total_s=max_total_s,
        lock_clocks_mhz=lock_clocks, cpu=cpu)


@main.command()
@harness_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole document as JSON.")
@reports_errors
def bench(as_json: bool, **harness: Any) -> None:
    """Run the standard matmul harness on this machine's GPUs.

    Checks the product against float64 on every GPU, then loads them all at once,
    continuously, until throughput and temperature have stopped moving over 30 s (the
    soak: the lent H100s, heating under their power cap, lost 0.4-1.8% from their
    first 20 s of load; flagged not_soaked at the cap, 180 s), then times 20 s of
    back-to-back runs with CUDA events, sampling clocks, power and temperature
    throughout. Prints the soaked
    TFLOP/s (over the 10%-trimmed mean run time, with its 95% interval), the level of
    the first 20 s of load beside it and the drop between them, the temperature under
    load, the conditions (power-capped, thermal, contended, not soaked) and the share of
    the datasheet peak. About 1-2 minutes a node (62-122 s on the lent cards).

    \b
    Examples:
      fleet bench                         # 8192^3 bf16, every GPU at once, soaked
      fleet bench --quick                 # the cool-start figure, under 20 s a GPU
      fleet bench --sequential --gpus 0   # one GPU alone
      fleet bench --pause-ms 50           # burst figure, beside the sustained one
      fleet bench --dtype fp32 --size 4096
    """
    options = bench_options(**harness)
    progress = None if as_json else (
        lambda event: err_console.print(f"[dim]{event['message']}[/dim]", highlight=False))
    document = run_bench(options, progress)
    if as_json:
        click.echo(document.model_dump_json(indent=2))
    else:
        print_bench(Console(), document)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the agent document (fleet-agent/1).

    \b
    Example:
      fleet schema > fleet-agent-1.schema.json
    """
    click.echo(json.dumps(document_schema(), indent=2, sort_keys=True))


# The store's commands (fleet db, fleet ingest, fleet results) live beside the store.
from fleet.store.commands import COMMANDS as STORE_COMMANDS  # noqa: E402

for _command in STORE_COMMANDS:
    main.add_command(_command)

from fleet.report.command import report_command  # noqa: E402

main.add_command(report_command)


# --- fleet probe, fleet inventory, fleet agent -------------------------------------------

from fleet.api import Store  # noqa: E402
from fleet.inventory import inventory_schema, load_inventory  # noqa: E402
from fleet.payload import build_payload, write_payload  # noqa: E402
from fleet.probe import DEFAULT_PARALLEL, ProbeOptions, ProbeReport, plan_targets  # noqa: E402
from fleet.probe_display import ProbeProgress, inventory_table, print_summary  # noqa: E402
from fleet.store.commands import db_option  # noqa: E402
from fleet.words import counted  # noqa: E402

EXIT_SOME_FAILED = 3
EXIT_INTERRUPTED = 130


def after_probe_report(console: Console, store: Store, report: ProbeReport,
                       path: str | None) -> None:
    """Write this run's report when asked (--report), else say how to get one."""
    where = "" if report.store.origin == "default" else f" --db '{report.store}'"
    if path is None or report.run_id is None:
        this_run = "" if report.run_id is None else f" --run {report.run_id}"
        console.print(f"Read them back with: fleet results{where}; this run's report: "
                      f"fleet report{this_run}{where}", highlight=False, markup=False,
                      soft_wrap=True)
        return
    from fleet.report.command import write_report
    from fleet.report.render import FORMATS

    suffix = Path(path).suffix.lstrip(".").lower()
    with store:
        built = store.report(runs=report.run_id)
    written = write_report(built, suffix if suffix in FORMATS else "html", path)
    console.print(f"Report of run {report.run_id} written to {written} (findings: "
                  f"{built.findings_line()}); everything stored: fleet report{where}",
                  highlight=False, markup=False, soft_wrap=True)


@main.command("probe")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@db_option
@click.option("--parallel", type=click.IntRange(1, 1024), default=DEFAULT_PARALLEL,
              show_default=True, help="How many hosts to probe at once.")
@click.option("--fingerprint-only", is_flag=True,
              help="Only fingerprint; do not run the benchmark.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust the key of a host seen for the first time and record it in "
                   "fleet's known_hosts (a changed key is still refused).")
@click.option("--timeout", type=click.FloatRange(1, 7 * 86400), metavar="S",
              help="Stop a host's agent after S seconds. Default: 300 s to fingerprint, "
                   "plus 120 s per GPU (from `expect: gpu_count`, else 8) to benchmark.")
@click.option("--connect-timeout", type=click.FloatRange(0.5, 600), default=10.0,
              show_default=True, metavar="S", help="Give up connecting after S seconds.")
@click.option("--connect-retries", type=click.IntRange(0, 10), default=2, show_default=True,
              help="Tries again when connecting fails (never for a refused key).")
@click.option("--sweep", help="Name this run, to find its results later "
                              "(fleet results --sweep NAME).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON on stdout; progress stays on stderr.")
@click.option("--report", "report_path", metavar="PATH",
              help="Also write this run's procurement report (as `fleet report` does) to "
                   "PATH: .html, .md or .json.")
@harness_options
@reports_errors
def probe_command(inventory_file: Path, db: str | None, parallel: int,
                  fingerprint_only: bool, accept_new_host_keys: bool, timeout: float | None,
                  connect_timeout: float, connect_retries: int, sweep: str | None,
                  as_json: bool, report_path: str | None, **harness: Any) -> None:
    """Fingerprint and benchmark every host of INVENTORY, and store the results.

    Hosts are probed in parallel over SSH (or `transport: local` for this machine): the
    agent is uploaded once per version, run with the host's python3, and each host's
    document is validated and stored as it arrives. The summary shows what each host
    is, whether it matches its listing, its TFLOP/s, and why any host failed. Two hosts
    that answer with the same GPUs (UUID, else serial) are both stored and flagged "same
    GPUs as ...": one machine listed twice, measured on contended cards; the report keeps
    their results out of its statistics until you remove one from the inventory.

    Host keys are checked strictly: a new host is refused until you accept it with
    --accept-new-host-keys, and a changed key is always refused. Ctrl-C stops every
    remote agent and keeps what has arrived. Exit status: 0 every host probed, 3 some
    failed, 2 bad input, 130 interrupted.

    \b
    Examples:
      fleet probe inventory/local.yaml --fingerprint-only
      fleet probe inventory.yaml --accept-new-host-keys      # first run on new hosts
      fleet probe inventory.yaml --dtype fp16 --size 4096 --db ./fleet.db
      fleet probe inventory.yaml --report probe.html
    """
    inventory = load_inventory(inventory_file)
    options = ProbeOptions(
        parallel=parallel, bench=None if fingerprint_only else bench_options(**harness),
        timeout_s=timeout, connect_timeout_s=connect_timeout,
        connect_retries=connect_retries, accept_new_host_keys=accept_new_host_keys,
        sweep=sweep)
    store = Store(db)
    with ProbeProgress(err_console, len(inventory.targets)) as progress:
        report = store.probe(inventory, options, progress)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console = Console()
        print_summary(console, report)
    after_probe_report(err_console if as_json else Console(), store, report, report_path)
    if report.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if report.failed:
        sys.exit(EXIT_SOME_FAILED)


@main.group("inventory")
def inventory_group() -> None:
    """Check an inventory file, or print its JSON Schema.

    \b
    Examples:
      fleet inventory check inventory/example.yaml
      fleet inventory schema > inventory.schema.json
    """


@inventory_group.command("check")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@reports_errors
def inventory_check(file: Path) -> None:
    """Validate FILE and show how each host would be reached, without connecting.

    Reads ssh_config as `ssh` would, so the table shows the address, port, user and jump
    hosts each host resolves to. Exit status 2, with file:line:column, field and fix,
    when something is wrong.

    \b
    Example:
      fleet inventory check inventory/example.yaml
    """
    inventory = load_inventory(file)
    plans = plan_targets(inventory)
    Console().print(inventory_table(inventory, plans))
    providers = len({t.provider for t in inventory.targets})
    click.echo(f"{file}: valid, {counted(len(inventory.targets), 'host')} from "
               f"{counted(providers, 'provider')} (nothing was contacted)")


@inventory_group.command("schema")
def inventory_schema_command() -> None:
    """Print the JSON Schema of inventory files, for editors and CI linters.

    \b
    Example:
      fleet inventory schema > inventory.schema.json
    """
    click.echo(json.dumps(inventory_schema(), indent=2, sort_keys=True))


@main.group("agent")
def agent_group() -> None:
    """The agent that fleet runs on each host, packed as one file.

    \b
    Example:
      fleet agent build --out dist/
    """


@agent_group.command("build")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("."),
              show_default=True, help="Directory to write agent-<hash>.pyz into.")
@reports_errors
def agent_build(out: Path) -> None:
    """Write the agent zipapp, for hosts fleet cannot reach itself.

    The file needs only Python 3.8+ on the host (pynvml is inside). Copy it there, run
    it, bring its output back and store it with `fleet ingest`.

    \b
    Example:
      fleet agent build --out dist/
      scp dist/agent-*.pyz gpu-07: && ssh gpu-07 'python3 agent-*.pyz fingerprint' > gpu-07.jsonl
      fleet ingest --provider lambda --host gpu-07 gpu-07.jsonl
    """
    payload = build_payload()
    path = write_payload(payload, out)
    click.echo(f"{path}  ({len(payload.data) // 1024} KB, sha256 {payload.sha256})")
    click.echo(f"On the host:  python3 {payload.filename} fingerprint > HOST.jsonl   "
               f"(or `bench` to benchmark too)")
    click.echo("Back here:    fleet ingest --provider PROVIDER --host HOST HOST.jsonl")


# fleet sweep, fleet schedule, fleet worker (fleet/sweep_cli.py).
from fleet.sweep_cli import add_commands as add_sweep_commands  # noqa: E402

add_sweep_commands(main, harness_options, bench_options)

from fleet.runtime.commands import runtime_group  # noqa: E402

main.add_command(runtime_group)


if __name__ == "__main__":
    main()
