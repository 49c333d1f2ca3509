"""`fleet cluster check`: before a cluster's collectives, every node reaches the rendezvous."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.analysis.cluster.trend import trend_findings
from fleet.cli.options import db_option, err_console, reports_errors
from fleet.cluster.between import STEP_TIMEOUT_S, BetweenOptions, BetweenRun
from fleet.cluster.measure import ClusterOutcome, Connecting, measure_cluster
from fleet.cluster.reach import (
    DEFAULT_TIMEOUT_S,
    ReachCheck,
    ReachOptions,
    check_cluster,
    clusters_to_check,
)
from fleet.inventory import load_inventory
from fleet.payload import build_payload
from fleet.sanitize import safe
from fleet.store.schema import open_store
from fleet.words import counted

F = TypeVar("F", bound=Callable[..., Any])
EXIT_NO_GO = 3  # as `fleet probe` when a host failed
EXIT_INTERRUPTED = 130


def _reached(row_reached: bool | None, rendezvous: bool) -> Text:
    if row_reached is None:
        return Text("no report", style="red")
    if rendezvous:
        return Text("listening", style="green") if row_reached else Text("no", style="red")
    return Text("yes", style="green") if row_reached else Text("no", style="red")


def reach_table(check: ReachCheck) -> Table:
    """A node a row: whether it reached, and how long its connection took; the reasons
    go in lines under the table, where a sentence reads in 80 columns."""
    table = Table()
    table.add_column("node", overflow="fold")
    table.add_column("role")
    table.add_column("reached")
    table.add_column("connect", justify="right")
    for row in check.nodes:
        took = "-" if row.seconds is None else f"{row.seconds * 1000:.1f} ms"
        table.add_row(Text(safe(row.host)), "rendezvous" if row.rendezvous else "node",
                      _reached(row.reached, row.rendezvous), took)
    return table


def print_check(console: Console, check: ReachCheck) -> None:
    """The rendezvous, the table, then the decision and its reasons, a line each."""
    console.print(Text(_wrapped(f"cluster {check.cluster}: rendezvous {check.rendezvous} "
                                f"({check.rendezvous.why})", console.width)),
                  highlight=False, soft_wrap=True)
    console.print(reach_table(check))
    first, *rest = check.message.splitlines()
    console.print(Text(_wrapped(first, console.width),
                       style="bold green" if check.go else "bold red"),
                  highlight=False, soft_wrap=True)
    for line in rest:
        console.print(Text(_wrapped(line, console.width)), highlight=False, soft_wrap=True)


def _wrapped(line: str, width: int) -> str:
    """A reason folded under its host, so that the host names stand out down the left."""
    lead = len(line) - len(line.lstrip())
    return textwrap.fill(safe(line), width=max(width, 40), subsequent_indent=" " * (lead + 2),
                         break_on_hyphens=False)


def _ssh_options(func: F) -> F:
    """How fleet connects to the nodes over SSH, as `fleet probe` asks it."""
    for option in reversed((
        click.option("--connect-timeout", type=click.FloatRange(0.5, 600), default=10.0,
                     show_default=True, metavar="S",
                     help="Give up connecting over SSH after S seconds."),
        click.option("--connect-retries", type=click.IntRange(0, 10), default=2,
                     show_default=True, help="Tries again when connecting over SSH fails "
                                             "(never for a refused key)."),
        click.option("--accept-new-host-keys", is_flag=True,
                     help="Trust the key of a host seen for the first time and record it "
                          "in fleet's known_hosts (a changed key is still refused)."))):
        func = option(func)
    return func


@click.group("cluster")
def cluster_group() -> None:
    """Check a cluster's nodes before testing between them.

    \b
    Example:
      fleet cluster check inventory.yaml --cluster a100-pod
    """


@cluster_group.command("check")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--cluster", "name", metavar="NAME",
              help="Check this cluster only (default: every cluster of INVENTORY).")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=DEFAULT_TIMEOUT_S,
              show_default=True, metavar="S",
              help="How long each node tries to connect to the rendezvous.")
@_ssh_options
@reports_errors
def check_command(inventory_file: Path, name: str | None, timeout: float,
                  connect_timeout: float, connect_retries: int,
                  accept_new_host_keys: bool) -> None:
    """Check that every node of a cluster reaches its rendezvous, before a probe.

    fleet picks the rendezvous as the probe would (the inventory's rendezvous_host, else
    the first host it reaches), listens there on the cluster's port for a moment with the
    host's own python, and has every other node open a TCP connection to it. Nothing is
    installed on the hosts and nothing is stored; the listener is stopped before the
    command ends, also on failure or Ctrl-C.

    A node that cannot reach it is named with the reason and the fix: open the port in
    the provider's security group or firewall, set clusters.NAME.rendezvous_address to
    the address on the cluster's own network, or pick another rendezvous_port. Exit
    status: 0 every node reaches the rendezvous, 3 one or more cannot (or fleet cannot
    reach a node over SSH), 2 bad input, 130 interrupted.

    \b
    Example:
      fleet cluster check inventory.yaml --cluster a100-pod
      cluster a100-pod: rendezvous a100-1 (10.0.4.21) port 29550 (named in ...)
        node     role        reached     connect
        a100-1   rendezvous  listening         -
        a100-2   node        no                -
      no-go, nothing was started: 1 of 2 nodes cannot reach the rendezvous ...
        a100-2: timed out after 5 s; something drops TCP 29550 on the way: open
        it (and NCCL's own ports) between the cluster's nodes in the firewall or
        security group
    """
    inventory = load_inventory(inventory_file)
    clusters = clusters_to_check(inventory, name)
    options = ReachOptions(timeout_s=timeout, connect_timeout_s=connect_timeout,
                           connect_retries=connect_retries,
                           accept_new_host_keys=accept_new_host_keys)
    console = Console()
    cancel = threading.Event()
    failed: list[str] = []
    for cluster in clusters:
        try:
            check = check_cluster(inventory, cluster, options, cancel)
        except KeyboardInterrupt:
            err_console.print("Interrupted: the rendezvous listener was stopped; nothing "
                              "was stored.", markup=False, highlight=False)
            sys.exit(EXIT_INTERRUPTED)
        print_check(console, check)
        if not check.go:
            failed.append(cluster.name)
    if len(clusters) > 1:
        console.print(Text(f"{len(clusters) - len(failed)} of "
                           f"{counted(len(clusters), 'cluster')} go"
                           + (f"; no-go: {', '.join(failed)}" if failed else "")),
                      highlight=False)
    if failed:
        sys.exit(EXIT_NO_GO)


def _verdict(passed: bool | None) -> Text:
    if passed is None:
        return Text("-")
    return Text("pass", style="green") if passed else Text("short", style="red")


def steps_table(run: BetweenRun) -> Table:
    """A step a row, short cells only: the nodes, NCCL's network, the all-reduce's bus
    bandwidth at its largest size, its share of what the fabric should give, and the
    verdict. Transports' detail, errors and findings go in lines under it."""
    table = Table()
    table.add_column("step", overflow="fold")
    table.add_column("nodes", overflow="fold")
    table.add_column("net")
    table.add_column("busbw", justify="right")
    table.add_column("share", justify="right")
    table.add_column("verdict")
    verdicts = {v.step_id: v for v in run.judgement.pairs} if run.judgement else {}
    for step in run.steps:
        result = step.result()
        reduce = [f for f in result.figures if f.op == "all_reduce"]
        largest = max(reduce, key=lambda f: f.size_bytes) if reduce else None
        nets = sorted({t.network or result.backend for t in result.transports})
        verdict = verdicts.get(result.step_id)
        share = ("-" if verdict is None or verdict.share is None
                 else f"{100 * verdict.share:.0f}%")
        table.add_row(
            Text(safe(result.step_id.split("-", 1)[-1])),
            Text(safe(" ".join(result.hosts) if len(result.hosts) <= 2
                      else f"{len(result.hosts)} nodes")),
            Text(safe(",".join(nets) or "-")),
            "-" if largest is None else f"{largest.busbw_gbs:.2f}",
            share,
            Text("failed", style="red") if result.error else
            _verdict(None if verdict is None else verdict.passed))
    return table


def print_run(console: Console, run: BetweenRun, stored: int) -> None:
    """The reach check's line, the steps, then errors and findings, a line each."""
    if run.reach is not None and not run.reach.go:
        print_check(console, run.reach)
        return
    schedule = run.schedule
    if schedule is not None:
        console.print(Text(_wrapped(
            f"cluster {run.cluster.name}: {counted(len(schedule.nodes), 'node')}, "
            f"{schedule.mode}, {counted(schedule.rounds, 'pair round')} (seed "
            f"{schedule.seed}), run {run.run_id[:8]}"
            + (", through Slurm (srun from each step's first node)"
               if run.cluster.slurm is not None else ""), console.width)), highlight=False)
    console.print(steps_table(run))
    for step in run.steps:
        if step.error:
            console.print(Text(_wrapped(f"{step.spec.step_id.split('-', 1)[-1]} failed: "
                                        f"{step.error}", console.width), style="red"),
                          highlight=False, soft_wrap=True)
    said = list(run.judgement.findings) if run.judgement is not None else []
    if run.trends is not None:
        console.print(Text(_wrapped(f"against its past: {run.trends.summary()}",
                                    console.width)), highlight=False)
        said += trend_findings(run.trends)
    for finding in said:
        whose = f" [{finding.whose}]" if finding.whose else ""
        style = "bold red" if finding.severity == "fault" else "bold"
        console.print(Text(_wrapped(f"{finding.title}{whose}", console.width), style=style),
                      highlight=False, soft_wrap=True)
        for line in (finding.evidence, f"do: {finding.action}"):
            if line:
                console.print(Text(_wrapped(f"  {line}", console.width)),
                              highlight=False, soft_wrap=True)
    if run.error:
        console.print(Text(_wrapped(run.error, console.width), style="red"), highlight=False)
    console.print(Text(f"stored {counted(stored, 'step')}" if stored else "nothing stored"),
                  highlight=False)


def print_outcomes(console: Console, outcomes: Sequence[ClusterOutcome]) -> bool:
    """Each cluster's run, or why it did not run; whether any is a fault."""
    found = False
    for outcome in outcomes:
        if outcome.run is None:
            console.print(Text(_wrapped(f"cluster {outcome.cluster.name}: {outcome.skipped}",
                                        console.width)), highlight=False)
            found = True
            continue
        print_run(console, outcome.run, outcome.stored)
        found = found or faulty(outcome.run)
    return found


def faulty(run: BetweenRun) -> bool:
    """Whether the run failed, a step failed, or a finding is a fault."""
    if run.error or any(s.error for s in run.steps):
        return True
    if run.trends is not None and run.trends.below:
        return True
    return run.judgement is not None and any(
        f.severity == "fault" for f in run.judgement.findings)


@cluster_group.command("run")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--cluster", "name", metavar="NAME",
              help="Run this cluster only (default: every cluster of INVENTORY).")
@db_option
@click.option("--ranks-per-node", type=click.IntRange(1, 64), metavar="G",
              help="Ranks (GPUs) each node runs. Default: the fewest GPUs among the nodes' "
                   "latest stored documents, else 1.")
@click.option("--sizes", metavar="LIST",
              help="Sizes for each collective, as 16M,256M,1G. Default: the agent's "
                   "(16M,256M,1G through NCCL; smaller through gloo on the CPU).")
@click.option("--seed", type=click.IntRange(0), help="Replay a run's halves-against-halves "
                                                      "shuffle (printed with every run).")
@click.option("--step-timeout", type=click.FloatRange(5, 3600), default=STEP_TIMEOUT_S,
              show_default=True, metavar="S",
              help="The agent's timeout for a step: joining the rendezvous, and each "
                   "collective. A node that does not arrive fails the step after it; a "
                   "peer that dies, once the ranks have said nothing for it and 30 s "
                   "more.")
@click.option("--cpu", is_flag=True,
              help="The nodes have no GPU: gloo on the CPU, one rank a node (a rehearsal "
                   "of the orchestration; its figures are not the fabric's).")
@click.option("--no-suspects", is_flag=True,
              help="Stop after the pair rounds, without testing suspects again.")
@click.option("--nic-test", is_flag=True,
              help="After each pair's collectives, test its RDMA ports one against the "
                   "other's of the same rank with perftest's ib_write_bw (GPUDirect where "
                   "the node's build has it), naming a port under 90% of its rate. About "
                   "10 s a port; needs `perftest` on the nodes (apt-get install perftest).")
@_ssh_options
@reports_errors
def run_command(inventory_file: Path, name: str | None, db: str | None,
                ranks_per_node: int | None, sizes: str | None, seed: int | None,
                step_timeout: float, cpu: bool, no_suspects: bool, nic_test: bool,
                connect_timeout: float, connect_retries: int,
                accept_new_host_keys: bool) -> None:
    """Measure a cluster between its nodes: its collectives through NCCL, whole and in pairs.

    Every node first reaches the rendezvous (as `fleet cluster check`); then the whole
    cluster runs at once (NCCL chooses its algorithm, as a job's would), then pairs of
    nodes in rounds with the ring forced (every pair up to 16 nodes, else halves against
    halves), then each suspect against a known-good node. Each pair is judged against
    what its fabric should give: the lesser node's Active fabric ports x rate, passing at
    90% (NVIDIA's multinode test), with the cause named where the fingerprint or NCCL's
    log shows it (socket fallback, GPUDirect RDMA off, a port below rate, a far NIC).
    The whole cluster is disputed under 75% of its fabric from 4 GiB (published healthy
    clusters read 80-98% under NCCL's defaults) and said between 75% and 90%.

    Run `fleet probe` first: the nodes' stored documents give their GPU count and their
    network fingerprint, which the pairs are judged by. The ranks run with fleet's
    runtime (torch) on each node. A step is all or nothing: a node that cannot join or
    dies mid-collective fails the step with its reason and the others are stopped. The
    run is stored once every step has run, in one transaction; Ctrl-C stores nothing.
    Each step is set beside the same step of the cluster's earlier runs (up to seven):
    more than 10% and 4 x their spread under their median, it is measured again, and
    below its past if the second measurement is too, said with whose it is. Exit
    status: 0 every pair passed, 3 a step failed, a
    pair was short or below its past, or a node could not reach the rendezvous, 2 bad
    input, 130 interrupted.

    \b
    Example:
      fleet probe inventory.yaml
      fleet cluster run inventory.yaml --cluster a100-pod
      fleet cluster run inventory.yaml --cluster a100-pod --nic-test
    """
    inventory = load_inventory(inventory_file)
    clusters = clusters_to_check(inventory, name)
    options = BetweenOptions(step_timeout_s=step_timeout, ranks_per_node=ranks_per_node,
                             sizes=sizes, seed=seed, suspects=not no_suspects,
                             backend="gloo" if cpu else "auto", nic_test=nic_test)
    connecting = Connecting(connect_timeout, connect_retries, accept_new_host_keys, cpu)
    console = Console()
    cancel = threading.Event()
    payload = build_payload()
    found = False

    def observe(what: str, message: str) -> None:
        err_console.print(Text(f"{safe(what)}: {safe(message)}"[:400]), highlight=False,
                          soft_wrap=True)

    with open_store(db) as store:
        for cluster in clusters:
            try:
                run, stored = measure_cluster(inventory, cluster, store.engine, payload,
                                              options, connecting, cancel, observe)
            except KeyboardInterrupt:
                cancel.set()
                err_console.print("Interrupted: every node's ranks were stopped; nothing "
                                  "was stored.", markup=False, highlight=False)
                sys.exit(EXIT_INTERRUPTED)
            print_run(console, run, stored)
            found = found or faulty(run)
    if found:
        sys.exit(EXIT_NO_GO)


COMMANDS = (cluster_group,)
