"""`fleet results --jobs`: the job suite's stored figures as tables, CSV or JSON; and the
same tables for what `fleet bench` just measured.

In the terminal each document is a table of its own under a line naming the host, its
provider and variant and when it was collected; a row is one GPU's figure for one job
(workload and attention backend): tokens a second, then TFLOP/s and MFU (what training
buys) and GB/s and the share of HBM (what decode is bound by). What the rows of a job
share (model, shape, dtype, thermal state) is said once under the table, never as a wide
column, so the table fits 80 columns. CSV and JSON carry every column of
`fleet.Store().jobs()`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleet import repeat
from fleet.cli.listing import show_frame, show_not_measured
from fleet.cli.options import existing_store
from fleet.model.document import AgentDocument
from fleet.sanitize import safe
from fleet.store.job import config_text, job_row, shape_text

if TYPE_CHECKING:
    pass

# A job's label folds past this; the longest, "decode lat efficient", is 20.
JOB_WIDTH = 22
# Decode's points, short enough for the job column; the caption spells them out.
SHORT_POINTS = {"bandwidth": "bw", "latency": "lat"}
NUMBERS = ("tokens/s", "next", "TFLOP/s", "MFU", "GB/s", "HBM", "°C")
CAPTION = ("*: the headline, the fastest attention backend and form (eager, or compiled: "
           "torch.compile) that passed its gate. "
           "decode bw: the bandwidth point (a step the memory system sets), lat: the "
           "latency point (one sequence). "
           "tokens/s: over the timed steps. TFLOP/s: tokens/s x FLOP a token "
           "(torchtitan's count). next: where a repeat run's tokens/s should fall (95%), "
           "from the job's run-to-run spread or the run's own wander. MFU: of the dense "
           "bf16 datasheet peak. GB/s (decode): "
           "weights and KV cache read a step, 10^9 bytes a second; HBM: of the datasheet "
           "bandwidth. °C: under load. Compare a figure only with figures of the same "
           "job, shape and stack.")


@dataclass(frozen=True)
class JobQuery:
    """`fleet results --jobs`' filters, as `Store.jobs` takes them."""

    provider: str | None
    variant: str | None
    host: str | None
    since: dt.datetime | None
    sweep: str | None
    stack: str | None


def show_job_results(query: JobQuery, output: str, limit: int | None, db: str | None) -> None:
    """Print the figures matching `query`, newest first, at most `limit` (None or 0: all),
    as "table", "csv" or "json"."""
    with existing_store(db) as store:
        frame = store.jobs(provider=query.provider, variant=query.variant, host=query.host,
                           since=query.since, sweep=query.sweep, stack=query.stack)
        missed = store.not_measured(provider=query.provider, host=query.host,
                                    since=query.since, sweep=query.sweep)
    show_frame(frame, output, limit, job_tables, "job figures")
    if output == "table":
        show_not_measured(missed)


def document_records(document: AgentDocument) -> list[dict[str, Any]]:
    """A document's job figures as the frame's records, for the same tables: what `fleet
    bench` measured, shown as `fleet results --jobs` shows what was stored."""
    variants = {gpu.index: gpu.variant.label or gpu.name or "?" for gpu in document.gpus}
    records = []
    for result in document.jobs:
        variant = variants.get(result.gpu_index, result.provenance.device_name or "no GPU")
        row = job_row(result, variant)
        interval = repeat.of_job(result.tokens_per_s, variant, row["wander"],
                                 result.workload, result.attention, result.point)
        records.append({
            "repeat_low": interval.low, "repeat_high": interval.high,
            **row, "shape": shape_text(*(row[name] for name in (
                "layers", "width", "heads", "kv_heads", "ffn", "batch", "seq", "context"))),
            "config": config_text(row), "gpu_uuid": result.gpu_uuid, "result_id": 0,
            "run_id": 0, "host": document.host.hostname or "this machine",
            "provider": "this machine", "collected_at": document.collected_at})
    return records


def job_name(row: dict[str, Any]) -> str:
    """What a figure's job is: "train cudnn *", "decode bw flash", "train math
    compiled"; "*" marks the headline (the fastest backend that passed its gate), and a
    decode row names its point (suite 1.1.0) or says it replays a graph (1.0)."""
    point = row.get("point")
    parts = [row["workload"], *([SHORT_POINTS.get(str(point), str(point))]
                                if point and point == point else []), row["attention"]]
    parts += ["compiled"] if row["compiled"] else []
    parts += ["graph"] if row["graph"] and not (point and point == point) else []
    parts += ["*"] if row.get("headline") is True else []
    return " ".join(parts)


def _number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _repeat(row: dict[str, Any]) -> str:
    """"±0.8%": the repeat interval's half-width over the figure."""
    low, high, figure = row.get("repeat_low"), row.get("repeat_high"), row["tokens_per_s"]
    if low is None or high is None or not figure or low != low:
        return "-"
    return f"±{(high - low) / 2 / figure:.1%}"


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    # Decode is bound by memory, not arithmetic: its MFU is small by nature and would read
    # as a fault, so a decode row shows what bounds it (CSV and JSON keep both).
    train = row["workload"] == "train"
    return (str(row["gpu_index"]), job_name(row), _number(row["tokens_per_s"]),
            _repeat(row), _number(row["tflops"] if train else None, 1),
            _share(row["mfu"] if train else None), _number(row["gbs"]),
            _share(row["hbm_share"]), _number(row["temperature_c"]))


def _what(row: dict[str, Any]) -> str:
    """What every row of a workload in one document shares: "train: llama3-8b 4x4096
    h32/8 ffn14336 b2 s4096, bf16, soaked, concurrent on 4 GPUs"."""
    gpus = ("one GPU at a time" if row["concurrency"] == "sequential" else "alone"
            if row["gpus_in_run"] == 1 else f"{row['gpus_in_run']} GPUs at once")
    point = row.get("point")
    named = f" {SHORT_POINTS.get(str(point), str(point))}" if isinstance(point, str) else ""
    return (f"{row['workload']}{named}: {row['model']} {row['shape']}, {row['dtype']}, "
            f"{row['thermal']}, {gpus}")


def _notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What makes a figure unrepresentative, each once, with the jobs it concerns and on
    which GPUs: "Measured beside other work: ... (train flash on GPU 0, 1)"."""
    said: dict[str, dict[str, dict[str, None]]] = {}
    for row in rows:
        for what, raised in (
                ("Failed its check against float32: its time is no speed",
                 not row["correctness_passed"]),
                ("The soak cap came before throughput and temperature settled",
                 row["not_soaked"]),
                (f"Measured beside other work: "
                 f"{row['contention'] or 'seen'}", row["contended"])):
            if raised:
                said.setdefault(what, {}).setdefault(job_name(row), {})[
                    str(row["gpu_index"])] = None
    return [f"{what} ({'; '.join(_on(job, gpus) for job, gpus in jobs.items())})"
            for what, jobs in said.items()]


def _compiles(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What each compiled job's compile took, stored apart from its figure: "train cudnn
    compiled: torch.compile took 11.2-12.9 s (GPU 0, 1)"."""
    taken: dict[str, list[tuple[float, str]]] = {}
    for row in rows:
        seconds = row.get("compile_s")
        if row["compiled"] and seconds is not None and seconds == seconds:
            name = job_name(row).removesuffix(" *")
            taken.setdefault(name, []).append((float(seconds), str(row["gpu_index"])))
    lines = []
    for name, pairs in taken.items():
        low, high = min(p[0] for p in pairs), max(p[0] for p in pairs)
        span = f"{low:.1f} s" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f} s"
        lines.append(f"{name}: torch.compile took {span} "
                     f"(GPU {', '.join(p[1] for p in pairs)})")
    return lines


def _on(job: str, gpus: dict[str, None]) -> str:
    return f"{job} on GPU {', '.join(gpus)}"


def _stack(row: dict[str, Any]) -> str:
    return (f"torch {row['torch_version'] or '?'}, CUDA {row['cuda_runtime_version'] or '?'}"
            f", cuDNN {row['cudnn_version'] or '?'}")


def _title(rows: Sequence[dict[str, Any]], stack_said: bool) -> list[str]:
    """Host, provider, variant and time; under it the stack, where the heading could not
    say it, being several over the listing (a line of its own: both do not fit 80)."""
    first = rows[0]
    variants = sorted({str(row["variant"]) for row in rows})
    when = dt.datetime.fromisoformat(first["collected_at"]).strftime("%Y-%m-%d %H:%M")
    title = f"{first['host']} ({first['provider']}, {' + '.join(variants)}), {when}"
    return [title, *([] if stack_said else sorted({_stack(row) for row in rows}))]


def _document(row: dict[str, Any]) -> tuple[Any, ...]:
    # The frame has no document id: a run holds one document per host and time.
    return (row["provider"], row["host"], row["run_id"], row["collected_at"])


def job_tables(records: Sequence[dict[str, Any]]) -> Group:
    """One table per document (records newest first), sharing column widths and one
    header; under each, what its jobs ran and what to be wary of; then what the figures
    count."""
    cells = [_cells(row) for row in records]
    headers = ("GPU", "job", *NUMBERS)
    widths = [max(len(headers[i]), *(len(c[i]) for c in cells)) for i in range(len(headers))]
    widths[1] = min(widths[1], JOB_WIDTH)
    stacks = sorted({_stack(row) for row in records})
    # One stack over the whole listing is said once, on a line of its own under the
    # heading (it is too long to share one at 80 columns).
    parts: list[Table | Text] = [Text("Job figures (newest first; times UTC)", style="bold"),
                                 *([Text(safe(stacks[0]))] if len(stacks) == 1 else [])]
    for number, (_, pairs) in enumerate(groupby(zip(records, cells, strict=True),
                                                key=lambda pair: _document(pair[0]))):
        rows, texts = zip(*pairs, strict=True)
        # The title as a line of its own: a table's title wraps at the table's width.
        parts += [*([Text("")] if number else []),
                  *(Text(safe(line)) for line in _title(rows, len(stacks) == 1))]
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                      show_header=number == 0, show_edge=False)
        for i, (name, width) in enumerate(zip(headers, widths, strict=True)):
            if i == 1:
                table.add_column(name, width=width, overflow="fold")
            else:
                table.add_column(name, width=width, justify="right", no_wrap=True)
        for text in texts:
            table.add_row(*(Text(safe(cell)) for cell in text))
        shared = list(dict.fromkeys(_what(row) for row in rows)) + _compiles(rows)
        parts += [table, *(Text(safe(line), style="dim") for line in shared),
                  *(Text(safe(note), style="yellow") for note in _notes(rows))]
    parts.append(Text(CAPTION, style="dim"))
    return Group(*parts)
