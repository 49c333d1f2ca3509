"""`fleet runtime show|remove`: thin click commands over fleet.runtime.manage."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.errors import FleetError
from fleet.inventory import load_inventory
from fleet.runtime.manage import HostContents, remove_from_hosts, show_hosts
from fleet.runtime.pin import CUDA_BUILDS, TORCH_VERSION
from fleet.sanitize import safe

EXIT_SOME_FAILED = 3
BUILDS = ", ".join(b.tag for b in CUDA_BUILDS)


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count < 1e9 else f"{count / 1e9:.2f} GB"


def _table(title: str, hosts: list[HostContents], verb: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("host", "kind", "path", "size", "state"):
        table.add_column(column, overflow="fold")
    for host in hosts:
        if host.error:
            table.add_row(Text(host.target.key), Text("-"), Text("-"), "-",
                          Text(safe(host.error), style="red"))
            continue
        if not host.items:
            table.add_row(Text(host.target.key), Text("-"), Text(host.target.cache_dir), "-",
                          Text("nothing of fleet's"))
        for item in host.items:
            state = str(item.get("state", ""))
            if item.get("installer"):  # an environment: which installer built it
                state = f"{state}, built with {safe(str(item['installer']))}"
            table.add_row(Text(host.target.key), Text(str(item["kind"])),
                          Text(safe(str(item["path"]))), _size(int(item.get("bytes", 0))),
                          Text(verb if host.removed else state))
    return table


def _finish(hosts: list[HostContents], as_json: bool, title: str, verb: str) -> None:
    if as_json:
        click.echo(json.dumps([h.as_dict() for h in hosts], indent=2))
    else:
        console = Console()
        console.print(_table(title, hosts, verb))
        total = sum(h.total_bytes for h in hosts if not h.error)
        console.print(Text(f"{_size(total)} {verb} on {len(hosts)} host(s)"), highlight=False)
    if any(h.error for h in hosts):
        sys.exit(EXIT_SOME_FAILED)


GROUP_HELP = f"""fleet's pinned runtime on the hosts: see and remove what fleet installed.

A benchmark installs torch {TORCH_VERSION} (the newest of its builds {BUILDS} that the host's
driver supports, or the CPU build on a host without a GPU) once per host into
`cache_dir/runtime`, and reuses it; `runtime: {{use: host}}` in the inventory uses the
host's own Python and torch instead.

\b
Examples:
  fleet runtime show inventory.yaml
  fleet runtime remove inventory.yaml --host gpu-01
"""


@click.group("runtime", help=GROUP_HELP)
def runtime_group() -> None:
    """The `fleet runtime` commands."""
    pass


@runtime_group.command("show")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--host", "hosts", multiple=True, metavar="NAME",
              help="Only this host (name or provider/name); repeat for more.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON, one object per host.")
def show_command(inventory_file: Path, hosts: tuple[str, ...], as_json: bool) -> None:
    """Show what fleet keeps on each host of INVENTORY: agent payloads, runtime
    environments (ready, broken or a partial build, and whether uv or pip built them),
    uploaded wheels and the uv binary fleet installs with, with sizes.

    \b
    Example:
      fleet runtime show inventory.yaml --host lambda/gpu-01
    """
    try:
        found = show_hosts(load_inventory(inventory_file), hosts)
    except FleetError as exc:
        _fail(exc)
    _finish(found, as_json, f"fleet's files on the hosts of {inventory_file}", "kept")


@runtime_group.command("remove")
@click.argument("inventory_file", metavar="INVENTORY",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--host", "hosts", multiple=True, metavar="NAME",
              help="Only this host (name or provider/name); repeat for more.")
@click.option("--wait", type=click.FloatRange(0, 3600), default=0.0, metavar="S",
              help="Wait up to S seconds for an install running on a host to finish.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON, one object per host.")
def remove_command(inventory_file: Path, hosts: tuple[str, ...], wait: float,
                   as_json: bool) -> None:
    """Remove everything fleet put on each host of INVENTORY (agent payloads, runtime
    environments, uploaded wheels and uv; other files in cache_dir stay). The next probe
    uploads and installs again what it needs. A host with an install running is left alone.

    \b
    Examples:
      fleet runtime remove inventory.yaml --host gpu-01   # before handing the host back
      fleet runtime remove inventory.yaml                 # every host
    """
    try:
        removed = remove_from_hosts(load_inventory(inventory_file), hosts, wait)
    except FleetError as exc:
        _fail(exc)
    _finish(removed, as_json, f"removed from the hosts of {inventory_file}", "removed")


def _fail(exc: FleetError) -> NoReturn:
    Console(stderr=True).print(f"[red]Error:[/red] {exc}", highlight=False, soft_wrap=True)
    sys.exit(exc.exit_code)


COMMANDS = (runtime_group,)
