"""Every `fleet ...` command that fleet's own words tell a user to run exists, with every
option it names: the report's templates, the messages of the controller and the agent, and
the docs. A report once told a user without a GPU to run `fleet probe --bench`, an option
that never existed (issue 54).

Read from the sources as written: a command in backquotes or in <code>, its words up to
the first option or placeholder naming the command, each `--option` after them one of
that command's own (or a group's option, for a group). Each command found is also asked
for its `--help`, as a user would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fleet.cli.main import main
from tests.conftest import ROOT

SOURCES = ("fleet/**/*.py", "agent/**/*.py", "reports/*.j2", "docs/*.md", "README.md")
# `fleet ...` in backquotes (Markdown, messages) or in <code> (the HTML report).
SUGGESTED = re.compile(r"`(fleet [^`\n]+)`|<code>(fleet [^<\n]+)</code>")
# Words that stand for something else: placeholders, elisions, shell.
PLACEHOLDER = re.compile(r"^([A-Z][A-Z_]*|\.\.\.|\{.*\}|[|<>&;]+)$")


def suggestions() -> Iterator[tuple[str, str]]:
    """(where, command line) of every command fleet's sources suggest."""
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            for match in SUGGESTED.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                yield f"{path.relative_to(ROOT)}:{line}", match.group(1) or match.group(2)


def resolve(line: str) -> tuple[list[click.Command], list[str]]:
    """The commands `line` walks through (the group first) and the options it names."""
    words = line.split()[1:]
    chain: list[click.Command] = [main]
    options: list[str] = []
    for word in words:
        if word.startswith("-"):
            # `--csv/--json`: either; `--fail-on=x`: the option's name.
            options += [part.split("=")[0] for part in word.split("/") if part.startswith("-")]
            continue
        group = chain[-1]
        if isinstance(group, click.Group) and not options:
            # `show|remove`: each must be a subcommand; the first stands for the walk.
            # get_command, not .commands: fleet's group imports its commands on first use,
            # so .commands holds only those some earlier test happened to load.
            ctx = click.Context(group)
            found = [group.get_command(ctx, name) for name in word.split("|")]
            if all(found) and found[0] is not None:
                chain.append(found[0])
                continue
            if not PLACEHOLDER.match(word) and word.islower() and word.isalpha():
                raise AssertionError(f"{group.name} has no command {word!r}")
    return chain, options


def known_options(chain: list[click.Command]) -> set[str]:
    found = {"--help", "-h"}
    for command in chain:
        for param in command.params:
            if isinstance(param, click.Option):
                found.update(param.opts)
                found.update(param.secondary_opts)
    return found


CASES = sorted(set(suggestions()))


def test_the_sources_suggest_commands_at_all() -> None:
    # The pattern must keep finding them: an empty list would pass every case below.
    assert len(CASES) > 100
    assert any("fleet report --fail-on" in line for _, line in CASES)


@pytest.mark.parametrize(("where", "line"), CASES, ids=[f"{w} {c}" for w, c in CASES])
def test_a_suggested_command_and_its_options_exist(where: str, line: str) -> None:
    try:
        chain, options = resolve(line)
    except AssertionError as exc:
        raise AssertionError(f"{where}: `{line}`: {exc}") from None
    unknown = [o for o in options if o not in known_options(chain)]
    assert not unknown, (f"{where}: `{line}` names {', '.join(unknown)}, which "
                         f"`{' '.join(c.name or 'fleet' for c in chain)}` does not take")


def test_every_suggested_command_answers_help() -> None:
    commands = {tuple(c.name for c in resolve(line)[0][1:]) for _, line in CASES}
    runner = CliRunner()
    for path in sorted(commands):
        done = runner.invoke(main, [*path, "--help"], catch_exceptions=False)
        assert done.exit_code == 0, (path, done.output)
        assert "Usage: " in done.output, path


def test_a_command_that_does_not_exist_is_caught() -> None:
    # The checks above must be able to fail: the report's old advice is refused.
    with pytest.raises(AssertionError, match=r"does not take|no command"):
        test_a_suggested_command_and_its_options_exist("old", "fleet probe --bench")
    with pytest.raises(AssertionError, match="no command 'benchmark'"):
        resolve("fleet benchmark --db x")


def test_a_read_only_command_refuses_a_store_that_is_not_there(tmp_path: Path) -> None:
    # Opening it would create an empty store, read as a fleet with nothing wrong.
    missing = tmp_path / "no-such-dir" / "fleet.db"
    runner = CliRunner()
    for args in (["results"], ["results", "--summary"], ["results", "--node"],
                 ["results", "--jobs"], ["report", "-o", str(tmp_path / "r.html")],
                 ["metrics"], ["db", "repair"], ["db", "prune", "--keep-samples-days", "1"]):
        done = runner.invoke(main, [*args, "--db", str(missing)], catch_exceptions=False)
        assert done.exit_code == 2, (args, done.output)
        assert f"no fleet database at sqlite:///{missing}" in done.output, (args, done.output)
        assert "fleet db current" in done.output
    assert not missing.parent.exists()
