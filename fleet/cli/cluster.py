"""`fleet cluster check`: before a cluster's collectives, every node reaches the rendezvous."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.cli.options import err_console, reports_errors
from fleet.cluster.reach import (
    DEFAULT_TIMEOUT_S,
    ReachCheck,
    ReachOptions,
    check_cluster,
    clusters_to_check,
)
from fleet.inventory import load_inventory
from fleet.sanitize import safe
from fleet.words import counted

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
@click.option("--connect-timeout", type=click.FloatRange(0.5, 600), default=10.0,
              show_default=True, metavar="S", help="Give up connecting over SSH after S "
                                                   "seconds.")
@click.option("--connect-retries", type=click.IntRange(0, 10), default=2, show_default=True,
              help="Tries again when connecting over SSH fails (never for a refused key).")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Trust the key of a host seen for the first time and record it in "
                   "fleet's known_hosts (a changed key is still refused).")
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


COMMANDS = (cluster_group,)
