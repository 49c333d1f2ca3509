"""The layers of fleet/ and agent/, written once as import contracts and checked here
(docs/layout.md draws them and says why).

Every `import` in the source counts: at module level, inside a function (imported on first
use, as the CLI's commands are) and under `if TYPE_CHECKING:`. An import is an arrow from
the module that writes it to the module it names (`from a.b import c` names a.b.c where
that is a module, else a.b). Three contracts:

- no import circle between modules, every arrow counted;
- no pair of units importing each other, a unit being a package's direct child (a folder
  such as fleet/store/ with everything under it, or a module such as fleet/inventory.py);
- each unit imports only units in layers below its own, or beside it where `SIDEWAYS`
  names the arrow: an arrow back up, or between two units of one layer, that is not
  named fails with the module, line and the fix.

Read from the source with `ast`, not by importing it: torch, pynvml and the store's
drivers need not load, and a function-level import is seen though it never ran.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "fleet")

# Top layer first. A unit may import any unit of a layer below its own. agent/ runs on the
# GPU host and never imports fleet/; fleet/ may import the agent's lower layers (what it
# packs, and the tables the agent and the controller judge figures by).
LAYERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "agent": (
        ("agent.__main__",),
        # The document: open the GPU source, walk the suite table.
        ("agent.collect",),
        # The suite table: each suite's configuration, run and rerun, in the order they run.
        ("agent.suites",),
        # Measuring a short figure again without the run's settings, in a child that runs
        # the suite's own functions: above every suite it reruns.
        ("agent.rerun",),
        # The suites, and what a run and a rerun's child both start from (the GPU source
        # and every GPU's fingerprint). The job and the cluster step use the node's
        # collective and copies.
        ("agent.job", "agent.cluster", "agent.survey", "agent.storage"),
        # The host's limits (issue 58), which storage reads for its folders' mounts: from
        # the GPUs and NICs found below.
        ("agent.host",),
        ("agent.node",),
        ("agent.matmul",),
        # What every measurement shares, and the host's facts.
        ("agent.timing", "agent.network"),
        ("agent.gpu",),
        ("agent.health",),
        ("agent.source",),
        ("agent",),
    ),
    "fleet": (
        ("fleet.__main__",),
        ("fleet.cli",),
        # The library's face (`fleet.Store`) and the metrics that read it.
        ("fleet", "fleet.metrics"),
        ("fleet.api",),
        # A night's sweep writes its report: the report reads the nights' comparison
        # from analysis (fleet/analysis/sweep/), never the sweep that runs them.
        ("fleet.sweep",),
        ("fleet.report",),
        # Reaching hosts: one node's probe, a cluster's step between nodes.
        ("fleet.probe", "fleet.cluster"),
        ("fleet.runtime",),
        ("fleet.payload",),
        ("fleet.transport", "fleet.analysis"),
        ("fleet.store",),
        # One Finding and the registry of kinds, below every judgement that makes one.
        ("fleet.repeat", "fleet.events", "fleet.findings"),
        ("fleet.model", "fleet.inventory"),
        ("fleet.expected", "fleet.frames", "fleet.sanitize", "fleet.words", "fleet.writable",
         "fleet.version"),
        ("fleet.errors",),
    ),
}

# Arrows between two units of one layer, or back up, that the layers allow; each says why.
SIDEWAYS: dict[tuple[str, str], str] = {
}



@dataclass(frozen=True)
class Arrow:
    """One import: from a module to a module, where it is written and how."""

    source: str
    target: str
    path: Path
    line: int
    how: str  # "module", "function" (imported on first use) or "TYPE_CHECKING"

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _named(name: str) -> str | None:
    """The module of ours an imported name lands in; None for another library's."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _inside(tree: ast.Module) -> tuple[set[int], set[int]]:
    """The ids of the nodes under `if TYPE_CHECKING:` and of those inside a function."""
    checking: set[int] = set()
    nested: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name | ast.Attribute) and \
                getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
            checking.update(id(n) for part in node.body for n in ast.walk(part))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    return checking, nested


def _arrows(name: str, path: Path) -> Iterator[Arrow]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    checking, nested = _inside(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        how = ("TYPE_CHECKING" if id(node) in checking
               else "function" if id(node) in nested else "module")
        for imported in names:
            target = _named(imported)
            if target is not None and target != name:
                yield Arrow(name, target, path, node.lineno, how)


ARROWS = [arrow for name, path in MODULES.items() for arrow in _arrows(name, path)]


def unit(module: str) -> str:
    """The package's direct child the module belongs to: fleet.store.ingest is in
    fleet.store, fleet.inventory is its own, fleet (its __init__) is fleet."""
    return ".".join(module.split(".")[:2])


def circles(arrows: list[Arrow]) -> list[list[str]]:
    """The import circles among modules (strongly connected sets of two or more)."""
    graph: dict[str, set[str]] = {}
    for arrow in arrows:
        graph.setdefault(arrow.source, set()).add(arrow.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    # Tarjan's, iterative: the graph is deeper than Python's recursion wants to go.
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
    return found


def _explain(arrows: list[Arrow], members: list[str]) -> str:
    inner = [a for a in arrows if a.source in members and a.target in members]
    return "\n".join(f"  {a.source} -> {a.target} ({a.where()}, {a.how})" for a in inner)


def test_no_import_circle() -> None:
    found = circles(ARROWS)
    assert not found, "import circles (break each: move what both need below them):\n" + \
        "\n\n".join(_explain(ARROWS, members) for members in found)


def test_no_two_units_import_each_other() -> None:
    between: dict[tuple[str, str], Arrow] = {}
    for arrow in ARROWS:
        pair = (unit(arrow.source), unit(arrow.target))
        if pair[0] != pair[1]:
            between.setdefault(pair, arrow)
    pairs = sorted(f"{a} <-> {b}: {between[a, b].where()} and {between[b, a].where()}"
                   for a, b in between if a < b and (b, a) in between)
    assert not pairs, "units importing each other:\n" + "\n".join(pairs)


def _layer_of() -> dict[str, tuple[str, int]]:
    placed: dict[str, tuple[str, int]] = {}
    for package, layers in LAYERS.items():
        for depth, layer in enumerate(layers):
            for name in layer:
                assert name not in placed, f"{name} is in two layers of LAYERS"
                placed[name] = (package, depth)
    return placed


def test_every_unit_has_a_layer() -> None:
    placed = _layer_of()
    missing = sorted({unit(m) for m in MODULES} - set(placed))
    assert not missing, (f"{', '.join(missing)}: in no layer. Add each to LAYERS in "
                         f"{Path(__file__).name}, under everything that imports it and "
                         "above everything it imports, and to docs/layout.md")
    gone = sorted(set(placed) - {unit(m) for m in MODULES})
    assert not gone, f"LAYERS names units that are not in the source: {', '.join(gone)}"


def test_no_arrow_back_up() -> None:
    placed = _layer_of()
    wrong: list[str] = []
    for arrow in ARROWS:
        source, target = unit(arrow.source), unit(arrow.target)
        if source == target or (source, target) in SIDEWAYS:
            continue
        (home, depth), (there, other) = placed[source], placed[target]
        if home == "agent" and there == "fleet":
            wrong.append(f"{arrow.where()}: {arrow.source} imports {arrow.target}; the "
                         "agent runs on the GPU host without fleet/ installed")
        elif home == there and other <= depth:
            side = "beside it" if other == depth else "above it"
            wrong.append(f"{arrow.where()}: {arrow.source} imports {arrow.target} "
                         f"({arrow.how}), {side} in LAYERS: move what it needs down, or "
                         "name the arrow in SIDEWAYS with why")
    assert not wrong, "arrows the layers do not allow:\n" + "\n".join(sorted(wrong))


def test_the_contracts_find_what_they_forbid() -> None:
    """The checks above read real arrows: a circle, a pair and an arrow up that this file
    makes up are each found."""
    made = [Arrow("agent.node.suite", "agent.collect", Path(__file__), 1, "function"),
            Arrow("agent.collect", "agent.node.suite", Path(__file__), 2, "module")]
    assert circles(made) == [["agent.collect", "agent.node.suite"]]
    assert any(arrow.how == "function" for arrow in ARROWS)
    assert any(arrow.how == "TYPE_CHECKING" for arrow in ARROWS)
    placed = _layer_of()
    assert placed["agent.node"][1] > placed["agent.collect"][1]
