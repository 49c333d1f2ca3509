"""The `fleet` command: the group every subcommand hangs from. Each command parses, calls
one core function and prints; they live beside each other in this package, by stage."""

from __future__ import annotations

import click

from fleet import __version__
from fleet.cli import cluster, gpu, metrics, probe, report, runtime, store, sweep


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleet")
def main() -> None:
    """Find out what GPUs you actually rented, and how fast they really are."""


for _module in (gpu, store, report, metrics, probe, cluster, sweep, runtime):
    for _command in _module.COMMANDS:
        main.add_command(_command)
