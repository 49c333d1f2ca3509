"""`fleet probe`, `fleet inventory` and `fleet agent`: reach the inventory's hosts, ship
the agent, store what comes back."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console

from fleet.api import Store
from fleet.cli.cluster_display import clusters_view
from fleet.cli.options import (
    HarnessArgs,
    db_option,
    err_console,
    gathered,
    harness_options,
    probe_options,
    reports_errors,
)
from fleet.cli.probe_display import (
    ProbeProgress,
    inventory_table,
    inventory_warnings,
    print_summary,
)
from fleet.inventory import LoadedInventory, inventory_schema, load_inventory
from fleet.payload import build_payload, write_payload
from fleet.probe.run import ProbeOptions, ProbeReport, plan_targets
from fleet.report.render import FORMATS, write_report
from fleet.words import counted


@dataclass(frozen=True)
class ProbeArgs:
    """`fleet probe`'s options, by their names."""

    inventory_file: Path
    db: str | None
    parallel: int
    fingerprint_only: bool
    accept_new_host_keys: bool
    timeout: float | None
    connect_timeout: float
    connect_retries: int
    sweep: str | None
    as_json: bool
    report_path: str | None
    no_between: bool
    nic_test: bool
    harness: HarnessArgs


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
    suffix = Path(path).suffix.lstrip(".").lower()
    with store:
        built = store.report(runs=report.run_id)
    written = write_report(built, suffix if suffix in FORMATS else "html", path)
    console.print(f"Report of run {report.run_id} written to {written} (findings: "
                  f"{built.findings_line()}); everything stored: fleet report{where}",
                  highlight=False, markup=False, soft_wrap=True)


@click.command("probe")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@db_option
@probe_options()
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
@click.option("--no-between", is_flag=True,
              help="Skip the steps between a cluster's nodes (the collectives across the "
                   "cluster and its node pairs, as `fleet cluster run`).")
@click.option("--nic-test", is_flag=True,
              help="Between a cluster's nodes, also test each pair's RDMA ports one "
                   "against the other with perftest's ib_write_bw (as `fleet cluster run "
                   "--nic-test`; about 10 s a port; needs perftest on the nodes).")
@harness_options
@reports_errors
@gathered(ProbeArgs)
def probe_command(args: ProbeArgs) -> None:
    """Fingerprint and benchmark every host of INVENTORY, and store the results.

    Hosts are probed in parallel over SSH (or `transport: local` for this machine): the
    agent is uploaded once per version, run with the host's python3, and each host's
    document is validated and stored as it arrives. The summary shows what each host
    is, whether it matches its listing, its TFLOP/s, and why any host failed. Two hosts
    that answer with the same GPUs (UUID, else serial) are both stored and flagged "same
    GPUs as ...": one machine listed twice, measured on contended cards; the report keeps
    their results out of its statistics until you remove one from the inventory.

    Hosts with `cluster: NAME` are then measured between each other, once their own
    suites are in: the whole cluster at once, then pairs of nodes, each pair judged
    against its fabric (`fleet cluster run`; --no-between skips it; not with
    --fingerprint-only; --nic-test adds each pair's RDMA ports one by one). Nodes whose
    own probe failed are left out of it.

    Host keys are checked strictly: a new host is refused until you accept it with
    --accept-new-host-keys, and a changed key is always refused. Ctrl-C stops every
    remote agent and keeps what has arrived. Exit status: 0 every host probed, 3 some
    failed (or a cluster step failed or a pair was short), 2 bad input, 130 interrupted.

    \b
    Examples:
      fleet probe inventory/local.yaml --fingerprint-only
      fleet probe inventory.yaml --accept-new-host-keys      # first run on new hosts
      fleet probe inventory.yaml --dtype fp16 --size 4096 --db ./fleet.db
      fleet probe inventory.yaml --report probe.html
    """
    inventory = load_inventory(args.inventory_file)
    options = ProbeOptions(
        parallel=args.parallel,
        bench=None if args.fingerprint_only else args.harness.bench_options(),
        timeout_s=args.timeout, connect_timeout_s=args.connect_timeout,
        connect_retries=args.connect_retries, accept_new_host_keys=args.accept_new_host_keys,
        sweep=args.sweep)
    store = Store(args.db)
    with ProbeProgress(err_console, len(inventory.targets)) as progress:
        report = store.probe(inventory, options, progress)
    if args.as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        console = Console()
        print_summary(console, report)
    between_faulty = False
    if (inventory.clusters and not args.no_between and not args.fingerprint_only
            and not report.interrupted):
        between_faulty = _between(inventory, report, args, err_console if args.as_json
                                  else Console())
    after_probe_report(err_console if args.as_json else Console(), store, report,
                       args.report_path)
    if report.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if report.failed or between_faulty:
        sys.exit(EXIT_SOME_FAILED)


def _between(inventory: LoadedInventory, report: ProbeReport, args: ProbeArgs,
             console: Console) -> bool:
    """Each cluster measured between the nodes whose own probe passed; whether any
    cluster could not be, a step failed or a pair fell short."""
    from fleet.cli.cluster import print_outcomes
    from fleet.cluster.between import BetweenOptions
    from fleet.cluster.measure import Connecting, measure_clusters
    from fleet.sanitize import safe
    from fleet.store.schema import open_store

    cpu = args.harness.cpu
    cancel = threading.Event()

    def observe(what: str, message: str) -> None:
        err_console.print(safe(f"{what}: {message}"[:400]), highlight=False, markup=False,
                          soft_wrap=True)

    with open_store(args.db) as store:
        try:
            outcomes = measure_clusters(
                inventory, {o.target.key for o in report.hosts if o.ok}, store.engine,
                report.payload, BetweenOptions(backend="gloo" if cpu else "auto",
                                               nic_test=args.nic_test),
                Connecting(args.connect_timeout, args.connect_retries,
                           args.accept_new_host_keys, cpu), cancel, observe)
        except KeyboardInterrupt:
            cancel.set()
            err_console.print("Interrupted between nodes: every rank was stopped; the "
                              "nodes' own results are kept, nothing of the cluster was "
                              "stored.", markup=False, highlight=False)
            sys.exit(EXIT_INTERRUPTED)
    return print_outcomes(console, outcomes)


@click.group("inventory")
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
    hosts each host resolves to; then the clusters (hosts with `cluster: NAME`), their
    rendezvous and the rounds their pairs take. Exit status 2, with file:line:column,
    field and fix, when something is wrong.

    \b
    Example:
      fleet inventory check inventory/example.yaml
    """
    inventory = load_inventory(file)
    plans = plan_targets(inventory)
    console = Console()
    console.print(inventory_table(inventory, plans))
    for line in inventory_warnings(inventory, plans):
        console.print(line, highlight=False)
    if inventory.clusters:
        console.print(clusters_view(inventory.clusters), highlight=False)
    providers = len({t.provider for t in inventory.targets})
    clustered = sum(len(c.hosts) for c in inventory.clusters)
    clusters = (f"; {clustered} in {counted(len(inventory.clusters), 'cluster')}"
                if inventory.clusters else "")
    click.echo(f"{file}: valid, {counted(len(inventory.targets), 'host')} from "
               f"{counted(providers, 'provider')}{clusters} (nothing was contacted)")


@inventory_group.command("schema")
def inventory_schema_command() -> None:
    """Print the JSON Schema of inventory files, for editors and CI linters.

    \b
    Example:
      fleet inventory schema > inventory.schema.json
    """
    click.echo(json.dumps(inventory_schema(), indent=2, sort_keys=True))


@click.group("agent")
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



COMMANDS = (probe_command, inventory_group, agent_group)
