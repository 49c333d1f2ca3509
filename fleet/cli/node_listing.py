"""`fleet results --node`: the node suite's stored figures as tables, CSV or JSON.

In the terminal each node's document is a table of its own under a line naming the host,
its provider and variant and when it was collected: what every row of a node shares
stays out of its rows, so a figure, its size, GB/s, spread and datasheet share fit 80
columns. The tables share their column widths and one header, so that the same figure
of several nodes lines up for the eye to compare. CSV and JSON carry every column of
`fleet.Store().node_results()`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleet.analysis.node.figures import size_text
from fleet.analysis.node.nccl import transport_cause
from fleet.cli.listing import frame_rows, show_frame, show_not_measured
from fleet.cli.options import existing_store
from fleet.model.document import AgentDocument
from fleet.sanitize import safe
from fleet.store.node import KINDS, settings_text, transport_text
from fleet.store.settings import read_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

NODE_KINDS = KINDS
# A figure's label folds past this; the longest usual one, "GPU 0→host pageable", is 19.
FIGURE_WIDTH = 24
NUMBERS = ("size", "GB/s", "CV", "datasheet", "share")
CAPTION = ("GB/s: the median of the repeats, 10^9 bytes a second; a memory copy counts "
           "bytes read plus written, both ways both directions summed, an all-reduce its "
           "bus bandwidth (nccl-tests' busbw). CV: of the repeats. share: of the datasheet "
           "figure.")


@dataclass(frozen=True)
class NodeQuery:
    """`fleet results --node`'s filters, as `Store.node_results` takes them."""

    provider: str | None
    variant: str | None
    host: str | None
    since: dt.datetime | None
    sweep: str | None
    stack: str | None
    kinds: tuple[str, ...]


def show_node_results(query: NodeQuery, output: str, limit: int | None,
                      db: str | None) -> None:
    """Print the figures matching `query`, newest first, at most `limit` (None or 0: all),
    as "table", "csv" or "json"."""
    with existing_store(db) as store:
        frame = store.node_results(provider=query.provider, variant=query.variant,
                                   host=query.host, since=query.since, sweep=query.sweep,
                                   stack=query.stack, kind=query.kinds or None)
        missed = store.not_measured(provider=query.provider, host=query.host,
                                    since=query.since, sweep=query.sweep)
        # Each document's settings from every source, as the report reads them: a line
        # of ~/.nccl.conf is named as surely as the environment.
        sourced = documents_settings(store.engine, frame["document_id"].unique().tolist())
    show_frame(frame, output, limit, lambda records: node_tables(records, sourced),
               "node figures")
    if output == "table":
        show_not_measured(missed)


def document_records(document: AgentDocument) -> list[dict[str, Any]]:
    """A document's node figures as the frame's records, for the same tables: what `fleet
    bench` measured, shown as `fleet results --node` shows what was stored."""
    variants = {gpu.index: gpu.variant.label or gpu.name or "?" for gpu in document.gpus}
    first = min(variants) if variants else None
    records = []
    for result in document.node:
        link = result.link
        index = result.gpu_index if result.gpu_index is not None else first
        low, high = result.stats.ci95_gbs or (None, None)
        records.append({
            **result.model_dump(exclude={"stats", "link", "contention", "processes",
                                         "transport", "settings"}),
            # As the store keeps them (fleet/store/ingest.py), so one table serves both.
            "contended": bool(result.contention),
            "contention": "; ".join(result.contention) or None,
            "transport": transport_text(result.transport),
            "nccl_settings": settings_text(result.settings),
            "document_id": 0, "host": document.host.hostname or "this machine",
            "provider": "this machine", "collected_at": document.collected_at,
            "variant": variants.get(index, "no GPU") if index is not None else "no GPU",
            "runs": result.stats.runs, "min_gbs": result.stats.min_gbs,
            "max_gbs": result.stats.max_gbs, "cv": result.stats.cv,
            "ci95_low_gbs": low, "ci95_high_gbs": high,
            **{f"link_{name}": None if link is None else getattr(link, name)
               for name in ("gen", "width", "gen_max", "width_max")}})
    return records


def figure_name(row: dict[str, Any]) -> str:
    """What a figure is: "GPU 0 memory", "host→GPU 1 pinned", "GPU 0→1 one way",
    "all-reduce 4 GPUs bf16"."""
    kind, gpu, memory = row["kind"], row["gpu_index"], row["memory"]
    cpu = " (CPU path)" if row["backend"] == "cpu" else ""
    if kind == "memory_copy":
        return "RAM copy (CPU path)" if cpu else f"GPU {gpu} memory"
    if kind == "host_to_device":
        return f"host→GPU {gpu} {memory}{cpu}"
    if kind == "device_to_host":
        return f"GPU {gpu}→host {memory}{cpu}"
    if kind == "peer_copy":
        if row["direction"] == "both_ways":
            return f"GPU {gpu}⇄{row['peer_index']} both ways"
        return f"GPU {gpu}→{row['peer_index']} one way"
    ranks = f"{row['gpus_in_run']} {'GPUs' if row['backend'] == 'nccl' else 'ranks'}"
    other = "" if row["backend"] == "nccl" else f" {row['backend']}"
    return " ".join(part for part in ("all-reduce", ranks, row["dtype"] or "") if part) + other


def _gbs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    sheet = row["datasheet_gbs"]
    return (figure_name(row), size_text(row["size_bytes"]), _gbs(row["gbs"]),
            f"{row['cv']:.1%}", _gbs(sheet), f"{row['gbs'] / sheet:.0%}" if sheet else "-")


Sourced = Mapping[int, Sequence[tuple[str, str | None, str]]]


def documents_settings(engine: Engine, documents: Sequence[int]) -> dict[int, list[
        tuple[str, str | None, str]]]:
    """Each document's run settings that applied, (name, value, source) each."""
    found: dict[int, list[tuple[str, str | None, str]]] = {}
    if not documents:
        return found
    frame = read_settings(engine, documents=[int(d) for d in documents])
    for row in frame_rows(frame):
        if row["applies"] is False:
            continue
        found.setdefault(int(row["document_id"]), []).append(
            (str(row["name"]), row["value"], str(row["source"])))
    return found


def _through(row: dict[str, Any], sourced: Sourced) -> str:
    """An all-reduce off NCCL's peer-to-peer path: what the report says of it (the
    transport, the setting that asked for it with its source), and its figure measured
    again without the run's settings where it was."""
    cause = transport_cause(row.get("transport"), row.get("nccl_settings"), None,
                            sourced.get(int(row["document_id"]), ()))
    said = f"{figure_name(row)}: " + (
        cause.words if cause is not None else f"went through {row['transport']}, not P2P")
    again = row.get("rerun_gbs")
    if again is not None:
        without = row.get("rerun_without") or "the run's settings"
        said += f"; {again:,.1f} GB/s measured again in the same run without {without}"
    return said


def _notes(rows: Sequence[dict[str, Any]], sourced: Sourced) -> list[str]:
    """What went wrong with a link, each once with the GPUs or pairs it concerns: a host
    link that ran below what the card supports, pairs without peer access; figures
    measured beside other work; an all-reduce NCCL sent off its peer-to-peer path, in
    the report's words."""
    slow: dict[str, dict[str, None]] = {}
    apart: dict[str, dict[str, None]] = {}
    for row in rows:
        ran = (row["link_gen"], row["link_width"])
        most = (row["link_gen_max"], row["link_width_max"])
        if (row["kind"] == "host_to_device" and None not in (*ran, *most)
                and tuple(ran) < tuple(most)):
            said = (f"PCIe Gen{ran[0]} x{ran[1]} under load where the card supports "
                    f"Gen{most[0]} x{most[1]}")
            slow.setdefault(said, {})[str(row["gpu_index"])] = None
        if row["kind"] == "peer_copy" and row["peer_access"] is False:
            path = f" (path {row['topology']})" if row["topology"] else ""
            apart.setdefault(f"No peer access{path}", {})[
                f"{row['gpu_index']}-{row['peer_index']}"] = None
    busy: dict[str, dict[str, None]] = {}
    through: list[str] = []
    for row in rows:
        if row.get("contended"):
            busy.setdefault(str(row.get("contention") or "other work"), {})[
                figure_name(row)] = None
        transport = row.get("transport")
        if row["kind"] == "allreduce" and transport and "P2P" not in transport:
            said = _through(row, sourced)
            if said not in through:
                through.append(said)
    return ([f"{said}: GPU {', '.join(gpus)}" for said, gpus in slow.items()]
            + [f"{said}: GPUs {', '.join(pairs)}" for said, pairs in apart.items()]
            + [f"Measured beside other work, left out of comparisons "
               f"({', '.join(figures)}): {said}" for said, figures in busy.items()]
            + through)


def _base(row: dict[str, Any]) -> str:
    return f"torch {row['torch_version'] or '?'}, CUDA {row['cuda_runtime_version'] or '?'}"


def _stacks(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The torch and CUDA stacks, and the NCCL versions, of `rows`."""
    return (sorted({_base(row) for row in rows}),
            sorted({f"NCCL {row['nccl_version']}" for row in rows if row["nccl_version"]}))


def _node_title(rows: Sequence[dict[str, Any]], shown: tuple[bool, bool]) -> str:
    """Host, provider, variant and time; and the stack where the heading could not say
    it, being several over the listing."""
    first = rows[0]
    variants = sorted({row["variant"] for row in rows})
    when = dt.datetime.fromisoformat(first["collected_at"]).strftime("%Y-%m-%d %H:%M")
    title = f"{first['host']} ({first['provider']}, {' + '.join(variants)}), {when}"
    bases, nccl = _stacks(rows)
    extra = [*([] if shown[0] else bases), *([] if shown[1] else nccl)]
    return title + "".join(f"; {part}" for part in extra)


def node_tables(records: Sequence[dict[str, Any]], sourced: Sourced | None = None) -> Group:
    """One table per document (records newest first), sharing column widths and one
    header, then what the figures count; `sourced`: each document's run settings, (name,
    value, source) each, which name what sent an all-reduce off its peer path."""
    cells = [_cells(row) for row in records]
    widths = [min(max(len(c[0]) for c in cells), FIGURE_WIDTH),
              *(max(len(name), *(len(c[i + 1]) for c in cells))
                for i, name in enumerate(NUMBERS))]
    bases, nccl = _stacks(records)
    # One stack over the whole listing is said once, above it.
    shown = (len(bases) == 1, len(nccl) <= 1)
    said = ([bases[0]] if shown[0] else []) + (nccl if shown[1] else [])
    heading = "Node figures (newest first; times UTC)" + "".join(f"; {p}" for p in said)
    parts: list[Table | Text] = [Text(safe(heading), style="bold")]
    by_document = groupby(zip(records, cells, strict=True), key=lambda pair: pair[0][
        "document_id"])
    for number, (_, pairs) in enumerate(by_document):
        rows, texts = zip(*pairs, strict=True)
        # The title as a line of its own: a table's title wraps at the table's width.
        parts += [*([Text("")] if number else []), Text(safe(_node_title(rows, shown)))]
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                      show_header=number == 0, show_edge=False)
        table.add_column("figure", width=widths[0], overflow="fold")
        for name, width in zip(NUMBERS, widths[1:], strict=True):
            table.add_column(name, width=width, justify="right", no_wrap=True)
        for text in texts:
            table.add_row(*(Text(safe(cell)) for cell in text))
        parts += [table, *(Text(safe(note), style="yellow")
                           for note in _notes(rows, sourced or {}))]
    parts.append(Text(CAPTION, style="dim"))
    return Group(*parts)
