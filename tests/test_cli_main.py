"""The `fleet` group: every command is listed with its help, and a command's module is
imported only when that command runs."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
from click.testing import CliRunner

from fleet.cli import main
from fleet.cli.main import COMMAND_MODULES
from tests.conftest import ROOT

MODULES = sorted(set(COMMAND_MODULES.values()))


def test_every_command_is_named_with_its_module() -> None:
    defined = {command.name: name for name in MODULES
               for command in importlib.import_module(f"fleet.cli.{name}").COMMANDS}
    assert defined == COMMAND_MODULES


def test_help_lists_every_command_with_its_help() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands:\n", 1)[1].splitlines()
    expected = []
    for name in sorted(COMMAND_MODULES):
        command = main.get_command(click.Context(main), name)
        assert command is not None
        expected.append((name, command.get_short_help_str(limit=200)))
    assert [tuple(line.split(maxsplit=1)) for line in listed] == expected
    assert all(help_text for _name, help_text in expected), "every command has help"


def test_a_command_imports_only_its_own_module() -> None:
    code = ("import json, sys\nfrom fleet.cli import main\n"
            "main(['inventory', 'schema'], standalone_mode=False)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('fleet.cli.') "
            "or m == 'celery')), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["title"], "the inventory's schema was printed"
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    commands = {f"fleet.cli.{name}" for name in MODULES}
    assert loaded & commands == {"fleet.cli.probe"}
    assert not loaded & {"fleet.cli.cluster", "celery"}
