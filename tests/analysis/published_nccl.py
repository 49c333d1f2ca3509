"""The published multi-node nccl-tests runs of tests/fixtures/nccl-tests/multinode/: each
file's out-of-place rows and what runs.json says of its system."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "fixtures" / "nccl-tests" / "multinode"


@dataclass(frozen=True)
class Row:
    size_bytes: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float


@dataclass(frozen=True)
class Run:
    name: str
    nodes: int
    gpus_per_node: int
    fabric_gbs: float
    nccl: str
    rows: tuple[Row, ...]

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def row(self, size: int) -> Row | None:
        return next((r for r in self.rows if r.size_bytes == size), None)


def rows(text: str) -> tuple[Row, ...]:
    """nccl-tests' data rows, out of place: size count type redop root time algbw busbw
    ... (the lines that start with a number)."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0].isdigit() and parts[1].isdigit():
            found.append(Row(int(parts[0]), float(parts[5]), float(parts[6]),
                             float(parts[7])))
    return tuple(found)


def runs() -> list[Run]:
    said = json.loads((FOLDER / "runs.json").read_text())
    return [Run(name, int(info["nodes"]), int(info["gpus_per_node"]),
                float(info["fabric_gbs"]), str(info["nccl"]),
                rows((FOLDER / name).read_text()))
            for name, info in sorted(said.items())]
