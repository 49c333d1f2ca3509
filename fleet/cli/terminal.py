"""Tables and lines that fit the terminal (issue 56: every `fleet results` view read at
80 columns).

A column is never narrower than its longest word, header included, so a narrow terminal
wraps a cell between whole words and never splits one ("varia"/"nt", "power-c"/"p");
names too long for a column are shortened (`short_variants`), and each short name is
spelled out once in a legend under the table (`Legend`). Sentences under a table wrap
between words with the rest of an item set in (`hanging`).

    table = fitted(["host", ">TFLOP/s"], rows, console.width)
    legend = Legend("variants")
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.table import Table
from rich.text import Text

from fleet.sanitize import safe

# What splits a variant label into its parts: "H100-SXM5-80GB", "H100 SXM5 80GB".
_PARTS = re.compile(r"[\s_\-]+")


def longest_word(text: str) -> int:
    """The width of `text`'s longest word (0 for none): what a column may not go under."""
    return max((len(word) for word in text.split()), default=0)


def natural_width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """How wide `fitted`'s table is with no cell wrapped."""
    return sum(max(len(column.lstrip(">")), *(len(row[i]) for row in rows))
               for i, column in enumerate(columns)) + len(columns) - 1


def fitted(columns: Sequence[str], rows: Sequence[Sequence[str]],
           width: int | None = None) -> Table:
    """A table that fits `width` columns where its words allow: each column as wide as
    its widest cell, the widest shrunk first, never under its longest word (header
    included), so cells wrap between words. A column named with a leading ">" is a
    number, right-aligned. Cells are Text with control characters made visible: a host's
    strings are never read as rich markup nor move the cursor."""
    names = [column.lstrip(">") for column in columns]
    widths = [max(len(name), *(len(row[i]) for row in rows)) for i, name in enumerate(names)]
    least = [max(longest_word(name), *(longest_word(row[i]) for row in rows))
             for i, name in enumerate(names)]
    if width is not None:
        over = sum(widths) + len(widths) - 1 - width
        while over > 0:
            slack = [w - m for w, m in zip(widths, least, strict=True)]
            widest = max(range(len(widths)), key=lambda i: (slack[i] > 0, widths[i]))
            if slack[widest] <= 0:
                break  # every column at its longest word: the terminal is too narrow
            widths[widest] -= 1
            over -= 1
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0),
                  collapse_padding=True)
    for column, name, wide in zip(columns, names, widths, strict=True):
        table.add_column(name, justify="right" if column.startswith(">") else "left",
                         overflow="fold", width=wide)
    for row in rows:
        table.add_row(*(Text(safe(cell)) for cell in row))
    return table


def short_variants(variants: Iterable[str]) -> dict[str, str]:
    """Each variant label by the fewest of its leading parts that still tell it from the
    others: "H200" for "H200-SXM-141GB" beside "H100-SXM5-80GB", "H100-SXM5" beside
    "H100-PCIe-80GB"; a label that would not get shorter stays whole."""
    labels = sorted(set(variants))
    parts = {label: [p for p in _PARTS.split(label) if p] for label in labels}
    short = {}
    for label in labels:
        mine = parts[label]
        for n in range(1, len(mine) + 1):
            head = mine[:n]
            if not any(other != label and parts[other][:n] == head for other in labels):
                candidate = "-".join(head)
                short[label] = candidate if len(candidate) < len(label) else label
                break
        else:
            short[label] = label
    return short


@dataclass
class Legend:
    """Short names a table used, each spelled out once under it: "variants: H200 =
    H200-SXM-141GB; H100 = H100-SXM5-80GB"."""

    what: str
    names: dict[str, str] = field(default_factory=dict)  # short -> whole

    def add(self, names: Mapping[str, str]) -> None:
        """Take whole -> short names; only those that are shorter need saying."""
        for whole, short in names.items():
            if short != whole:
                self.names[short] = whole

    def line(self) -> str | None:
        """The legend in a line, None where nothing was shortened."""
        if not self.names:
            return None
        return f"{self.what}: " + "; ".join(f"{short} = {whole}"
                                             for short, whole in self.names.items())


def hanging(text: str, width: int, indent: str = "", rest: str = "    ") -> list[str]:
    """`text` wrapped between words at `width`, its first line set in by `indent` and the
    rest by `rest`, so an item's second line reads as its own; a word longer than a line
    keeps its line whole rather than being cut."""
    return textwrap.wrap(safe(text), width=max(width, 20), initial_indent=indent,
                         subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False) or [indent]
