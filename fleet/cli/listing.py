"""What `fleet results --node` and `--jobs` share: a frame's rows as plain records, and
those records printed as the terminal's tables, CSV or JSON."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import click
from rich.console import Console, RenderableType
from rich.text import Text

from fleet.cli.options import err_console
from fleet.cli.terminal import hanging

if TYPE_CHECKING:
    import pandas as pd


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as plain values, None where missing."""
    return cast(list[dict[str, Any]], frame.astype(object).where(frame.notna(), None)
                .to_dict("records"))


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as plain values: None where missing, times as ISO 8601 text."""
    records = frame_rows(frame)
    for record in records:
        record["collected_at"] = record["collected_at"].isoformat()
    return records


def show_frame(frame: pd.DataFrame, output: str, limit: int | None,
               tables: Callable[[Sequence[dict[str, Any]]], RenderableType],
               what: str) -> None:
    """Print the frame's newest `limit` rows (None or 0: all) as "table", "csv" or "json";
    `what` names the figures ("node figures") where none match or some are left out."""
    total = len(frame)
    records = frame_records(frame.head(limit) if limit else frame)
    if output == "json":
        click.echo(json.dumps(records, indent=2))
    elif output == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(frame.columns)
        writer.writerows([["" if v is None else v for v in r.values()] for r in records])
    elif not records:
        err_console.print(f"No {what} match.", markup=False)
    else:
        Console().print(tables(records))
    if total > len(records):
        err_console.print(f"Showing the newest {len(records)} of {total} figures; "
                          "--limit 0 shows all.", markup=False)


PARTY = {"provider": "the provider's to explain", "renter": "yours to fix",
         "unsettled": "not settled", "none": "information"}


def show_not_measured(missed: pd.DataFrame) -> None:
    """Under a table: what each host's newest document could not measure, whose that is,
    and what to do (`fleet.Store().not_measured()`), so that a GPU whose stage failed
    is never read as a GPU with fewer figures. Whole words wrap at the terminal's width."""
    if missed.empty:
        return
    console = Console()
    console.print(Text("Not measured (each host's newest document):"))
    for row in frame_records(missed):
        gpu = row["gpu_index"]
        what = row["stage"] if gpu is None else f"GPU {gpu} {row['stage']}"
        said = (f"{row['provider']}/{row['host']} {what}: {row['cause']} "
                f"({PARTY[str(row['party'])]}); {row['action']}")
        console.print(Text("\n".join(hanging(said, console.width, indent="  "))))
