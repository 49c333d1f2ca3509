"""What `fleet probe` shows: a live line per host while it runs, a summary table at the end.

Everything a host sent (labels, messages, stderr) is rendered as plain Text, never as
markup, with control characters shown escaped: rich passes ESC through, so a hostile host
could otherwise move the cursor, retitle the terminal or paint a fake summary.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from fleet.analysis.health.not_measured import gpus_not_measured, judge
from fleet.analysis.listing.duplicates import SharedGpus, same_gpus_note
from fleet.inventory import Expect, LoadedInventory, Target
from fleet.model.document import AgentDocument
from fleet.probe.run import HostOutcome, ProbeReport, headline_tflops, variants_found
from fleet.sanitize import safe
from fleet.transport.ssh import SshPlan, preflight
from fleet.words import counted

MAX_MESSAGE = 100
FINAL_STAGES = ("done", "failed")


@dataclass
class _Row:
    target: Target
    stage: str
    message: str
    started: float


class ProbeProgress:
    """Observer for `probe()`: on a terminal, a live table of the hosts still running with
    finished hosts scrolling above it; elsewhere (CI, a pipe), one line per finished host."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self._rows: dict[str, _Row] = {}
        self._finished = 0
        self._failed = 0
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> ProbeProgress:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=8, transient=True,
                              get_renderable=self._render)
            self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()

    def __call__(self, target: Target, stage: str, message: str) -> None:
        line: Text | None = None
        with self._lock:
            row = self._rows.get(target.key)
            if row is None:
                row = self._rows[target.key] = _Row(target, stage, message, time.monotonic())
            row.stage, row.message = stage, message
            if stage in FINAL_STAGES:
                self._finished += 1
                self._failed += stage == "failed"
                elapsed = time.monotonic() - row.started
                mark, style = ("ok  ", "green") if stage == "done" else ("FAIL", "red")
                line = Text.assemble((mark, style), f" {target.key} ({elapsed:.1f} s): ",
                                     safe(message[:400]))
                del self._rows[target.key]
        if line is not None:
            self.console.print(line, highlight=False, soft_wrap=True)

    def _render(self) -> RenderableType:
        with self._lock:
            rows = sorted(self._rows.values(), key=lambda r: r.started)
            head = Text(f"{self._finished}/{self.total} hosts done"
                        + (f", {self._failed} failed" if self._failed else ""), style="bold")
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        limit = max(3, self.console.size.height - 4)
        for row in rows[:limit]:
            table.add_row(Text(row.target.key, style="cyan"), Text(row.stage),
                          Text(f"{now - row.started:5.1f} s", style="dim"),
                          Text(safe(row.message[:MAX_MESSAGE]), overflow="ellipsis",
                               no_wrap=True))
        if len(rows) > limit:
            table.add_row(Text(f"... and {len(rows) - limit} more running", style="dim"))
        return Group(head, table)


def _listed(expect: Expect | None) -> str:
    if expect is None:
        return "-"
    parts = [expect.variant or expect.family or "",
             expect.form_factor if expect.form_factor and not expect.variant else "",
             f"x{expect.gpu_count}" if expect.gpu_count else "",
             f"{expect.memory_gb} GB" if expect.memory_gb and not expect.variant else "",
             f">={expect.min_power_limit_w:g} W" if expect.min_power_limit_w else ""]
    return " ".join(p for p in parts if p) or "-"


def _tflops(outcome: HostOutcome) -> str:
    return tflops_cell(outcome.document)


def tflops_cell(document: AgentDocument | None) -> str:
    """The matmul's median and how many GPUs it rests on, of the GPUs the run measured."""
    headline = headline_tflops(document)
    if headline is None or document is None:
        return "-"
    value, gpus = headline
    # A GPU the matmul could not measure is counted, not dropped from the median's note;
    # a GPU the run was not asked to measure (--gpus) is neither.
    cards = len({r.gpu_index for r in document.benchmarks}
                | {e.gpu for e in document.errors if e.stage == "benchmark" and e.gpu is not None})
    if gpus < cards:
        return f"{value:.1f} ({gpus} of {cards} GPUs)"
    return f"{value:.1f}" + (f" ({gpus} GPUs)" if gpus > 1 else "")


def _reason(outcome: HostOutcome) -> str:
    """The failure reason without the host's name in front (the row already names it)."""
    reason = outcome.reason or ""
    return reason.removeprefix(f"{outcome.target.key}: ")


def _short_reason(outcome: HostOutcome) -> str:
    """The reason's first sentence, for the table; the whole of it follows the table."""
    first = _reason(outcome).split(". ")[0]
    return first if len(first) <= 90 else first[:87] + "..."


MAX_MISSED = 3


def _notes(outcome: HostOutcome, shared: list[SharedGpus]) -> Text:
    if not outcome.ok:
        return Text(safe(_short_reason(outcome)), style="red")
    key = outcome.target.key
    notes = [same_gpus_note(pair, key) for pair in shared if key in (pair.first, pair.second)]
    if outcome.expectation is not None and not outcome.expectation.matches:
        notes += outcome.expectation.problems
    elif outcome.expectation is not None and outcome.expectation.unchecked:
        notes += outcome.expectation.unchecked
    if outcome.document is not None:
        # Every stage that failed, judged: what was not measured, and whose it is.
        missed = ["not measured: " + n.line() if n.finding else n.line()
                  for n in judge(outcome.document)]
        # A node failing on every GPU says the first few; `fleet results` lists them all.
        notes += missed[:MAX_MISSED] + ([f"and {len(missed) - MAX_MISSED} more not measured "
                                         "(fleet results lists them)"]
                                        if len(missed) > MAX_MISSED else [])
    if outcome.already_stored:
        notes.append("this document was already stored")
    return Text(safe("; ".join(notes)))


def summary_table(report: ProbeReport) -> Table:
    """One row per host of the probe: result, variant, listing and TFLOP/s; its notes go
    under the table (`summary_notes`): a sentence folded into a column of 80 reads a word
    a line."""
    table = Table(title=f"fleet probe {report.inventory}", title_justify="left")
    table.add_column("host", no_wrap=True)
    for column in ("result", "variant", "listing", "TFLOP/s"):
        table.add_column(column, overflow="fold")
    for outcome in report.hosts:
        verdict = outcome.expectation
        if not outcome.ok:
            result = Text(f"failed: {outcome.stage}", style="red")
            match = Text("-")
        else:
            result = Text("ok", style="green")
            match = (Text("-") if verdict is None else
                     Text("match", style="green") if verdict.matches else
                     Text("MISMATCH", style="bold red"))
        table.add_row(Text(outcome.target.key), result,
                      Text(safe(variants_found(outcome.document)) or "-"), match,
                      _tflops(outcome))
    return table


def summary_notes(report: ProbeReport) -> list[Text]:
    """Each host's notes, a line a host under the summary table."""
    found = []
    for outcome in report.hosts:
        notes = _notes(outcome, report.shared)
        if notes.plain:
            found.append(Text.assemble(f"{outcome.target.key}: ", notes))
    return found


def print_summary(console: Console, report: ProbeReport) -> None:
    """Print the summary table, the totals, then mismatches, shared GPUs and failures."""
    console.print(summary_table(report))
    for line in summary_notes(report):
        console.print(line, highlight=False, soft_wrap=True)
    stored = sum(1 for h in report.hosts if h.ok)
    if report.store_created:
        console.print(Text(f"Created the fleet database at {report.store}"))
    missed = sum(len(gpus_not_measured(n for n in judge(h.document) if n.finding))
                 for h in report.hosts if h.ok and h.document is not None)
    console.print(Text(
        f"{stored} of {counted(len(report.hosts), 'host')} stored in {report.store} "
        f"({report.wall_s:.1f} s; agent {report.payload.filename}, "
        f"{len(report.payload.data) // 1024} KB)"
        + (f"; {counted(missed, 'GPU')} with a stage not measured (notes above)"
           if missed else "")), highlight=False)
    if report.mismatched:
        verb = "differs" if len(report.mismatched) == 1 else "differ"
        console.print(Text(f"{counted(len(report.mismatched), 'host')} {verb} from the listing: "
                           + ", ".join(h.target.key for h in report.mismatched),
                           style="bold red"), highlight=False)
    for pair in report.shared:
        # Said after the count: both hosts are stored, and each answer is its own, but the
        # two may be one machine, and figures measured on both at once were contended.
        console.print(Text(
            safe(f"{pair.first} and {pair.second} answered with the same GPUs "
                 f"({', '.join(pair.identities)}): one machine listed twice? Their "
                 "figures were measured at the same time on the same cards; remove one of "
                 "the two from the inventory."), style="bold yellow"),
            highlight=False, soft_wrap=True)
    if report.failed:
        console.print(Text(f"{counted(len(report.failed), 'host')} failed:", style="bold red"))
        for outcome in report.failed:
            console.print(Text.assemble(f"  {outcome.target.key} ({outcome.stage}): ",
                                        (safe(_reason(outcome)), "red")),
                          highlight=False, soft_wrap=True)
    if report.interrupted:
        console.print(Text("Interrupted: remote agents were stopped; what had arrived is "
                           "stored.", style="yellow"))


def inventory_table(inventory: LoadedInventory, plans: dict[str, SshPlan]) -> Table:
    """`fleet inventory check`: each host and how it would be reached."""
    table = Table(title=str(inventory.path), title_justify="left")
    for column in ("host", "reached as", "python", "listed", "$/GPU-h", "tags", "line"):
        table.add_column(column, overflow="fold")
    for target in inventory.targets:
        plan = plans.get(target.key)
        how = "this machine (local)" if plan is None else str(plan)
        price = ("-" if target.price_per_gpu_hour is None else
                 f"{target.price_per_gpu_hour:g} {target.currency or ''}".strip())
        table.add_row(Text(target.key), Text(how), Text(target.python),
                      Text(_listed(target.expect)), price, Text(", ".join(target.tags) or "-"),
                      target.where.rpartition(":")[2])
    return table


def inventory_warnings(inventory: LoadedInventory, plans: dict[str, SshPlan]) -> list[Text]:
    """What would stop a host being reached, a line a host under the table: a sentence
    folded into a column of 80 reads a word a line."""
    return [Text(f"{target.key}: " + "; ".join(warnings), style="yellow")
            for target in inventory.targets
            if target.key in plans and (warnings := preflight(target))]
