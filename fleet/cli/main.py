"""The `fleet` command: the group every subcommand hangs from. Each command parses, calls
one core function and prints; they live beside each other in this package, by stage.

A command's module is imported when that command runs (or when `fleet --help` lists them
all): importing every one took ~1.8 s of CPU (pandas, SQLAlchemy, Alembic, paramiko, the
analysis) before `fleet` did anything, for each command a schedule or a test starts.
"""

from __future__ import annotations

import importlib

import click

from fleet.version import __version__

# Each command's name and the module of fleet.cli that defines it (in its COMMANDS);
# tests/test_cli_main.py checks that the two agree.
COMMAND_MODULES: dict[str, str] = {
    "fingerprint": "gpu", "bench": "gpu", "schema": "gpu",
    "db": "store", "ingest": "store", "results": "store",
    "report": "report",
    "metrics": "metrics",
    "probe": "probe", "inventory": "probe", "agent": "probe",
    "cluster": "cluster",
    "sweep": "sweep", "schedule": "sweep", "worker": "sweep",
    "runtime": "runtime",
}


class LazyGroup(click.Group):
    """A group whose commands are imported from their modules on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMAND_MODULES, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            module = importlib.import_module(f"fleet.cli.{COMMAND_MODULES[cmd_name]}")
            for command in module.COMMANDS:
                self.add_command(command)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleet")
def main() -> None:
    """Find out what GPUs you actually rented, and how fast they really are."""
