"""Each GPU, pair and node figure beside what a healthy one of its variant gives (issue
56, "Charts where a person would rather look"): the data the report's charts draw.

    units = matmul_units(data.measures) + node.units + job_units(job.gpus, points)

A `Unit` is one figure of one GPU (matmul, memory copy, training, decode), pair (copies one
way and both ways) or node (all-reduce), with the expected figure and the floor it is
judged by where fleet has them, from the same rules the findings use: the catalog of
healthy nodes (fleet/expected.py) and its margins for the matmul
(fleet/analysis/node/shortfall.py `matmul_expected`) and the node's figures (`judged_rows`), the
records of healthy lent cards for the job (agent/job/records.py `RECORDS_BY_SUITE`, 5%
under them called). So a point drawn under its band is a figure the report calls short,
and one within it is one it does not.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from agent.job.records import RECORDS_BY_SUITE, RECORDS_MARGIN, record
from fleet.analysis.dataset import GpuMeasure
from fleet.analysis.job.figures import JobGpu
from fleet.analysis.node.shortfall import (
    RECORDS,
    MatmulShortfallOptions,
    ShortfallOptions,
    judged_rows,
    matmul_expected,
)

# The metrics a unit is of, in the order a buyer reads them; their unit and what a unit is.
METRICS = {
    "matmul": ("Matmul", "TFLOP/s", "GPU"),
    "training": ("Training step", "tokens/s", "GPU"),
    "decode": ("Decode", "tokens/s", "GPU"),
    "memory": ("Memory copy", "GB/s", "GPU"),
    "pairs one way": ("GPU pairs, one way", "GB/s", "pair"),
    "pairs both ways": ("GPU pairs, both ways", "GB/s", "pair"),
    "all-reduce": ("All-reduce busbw", "GB/s", "node"),
}
# The matmul drawn: the default benchmark, as the cost table's headline is.
DEFAULT_MATMUL = ("bf16", 8192, 8192, 8192, "sustained", "cold", "soaked")


@dataclass(frozen=True)
class Unit:
    """One figure of one GPU, pair or node, and what it is judged by."""

    provider: str
    host: str
    variant: str
    metric: str  # a key of METRICS
    name: str  # "GPU 0", "pair 0-1", "4 GPUs"
    value: float
    # Where figures of different configurations meet in one chart, what sets this one
    # apart ("sequential", "suite 1.3"); "" where nothing does.
    config: str = ""
    expected: float | None = None  # what a healthy one gives
    floor: float | None = None  # under it the figure is called short
    basis: str = ""  # what `expected` rests on, in words
    detail: str = ""  # what else the tooltip says (a matmul's soak and repeat sd)

    @property
    def unit(self) -> str:
        """TFLOP/s, tokens/s or GB/s."""
        return METRICS[self.metric][1]

    @property
    def share(self) -> float | None:
        """The figure over the expected one."""
        return None if not self.expected else self.value / self.expected

    @property
    def band(self) -> tuple[float, float] | None:
        """Where a healthy one lands: from the floor to as far above the expected figure,
        the margin fleet allows either way."""
        if self.expected is None or self.floor is None:
            return None
        return self.floor, 2 * self.expected - self.floor

    @property
    def short(self) -> bool:
        """Under its floor: a figure the report calls short."""
        return self.floor is not None and self.value < self.floor

    @property
    def label(self) -> str:
        """The unit and its figure, as a chart's tooltip says it."""
        text = f"{self.host} {self.name}: {_figure(self.value)} {self.unit}"
        if self.expected is not None:
            text += f", {self.value / self.expected:.1%} of the {_figure(self.expected)} " \
                    f"a healthy one gives ({self.basis})"
        return text + self.detail + (f"; {self.config}" if self.config else "")


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:,.1f}"


def matmul_units(measures: Iterable[GpuMeasure],
                 options: MatmulShortfallOptions | None = None) -> list[Unit]:
    """Each GPU's soaked matmul at the default benchmark (where a GPU ran it under
    several configurations, the one with the most results), beside the catalog."""
    chosen: dict[tuple[str, str, int], GpuMeasure] = {}
    for m in measures:
        c = m.config
        if (c.dtype, c.m, c.n, c.k, c.mode, c.cache, c.thermal) != DEFAULT_MATMUL:
            continue
        key = (m.provider, m.host, m.gpu_index)
        if key not in chosen or m.results > chosen[key].results:
            chosen[key] = m
    usual = Counter(m.config.concurrency for m in chosen.values()).most_common(1)
    units = []
    for m in chosen.values():
        judged = matmul_expected(m, options)
        apart = "" if usual and m.config.concurrency == usual[0][0] else m.config.concurrency
        detail = _repeat_note(m) + _soak_note(m)
        if judged is None:
            units.append(Unit(m.provider, m.host, m.variant, "matmul", f"GPU {m.gpu_index}",
                              m.tflops, apart, detail=detail))
            continue
        entry, margin = judged
        units.append(Unit(m.provider, m.host, m.variant, "matmul", f"GPU {m.gpu_index}",
                          m.tflops, apart, entry.tflops, entry.tflops * (1.0 - margin),
                          _records(entry.n), detail))
    return sorted(units, key=_order)


def _records(n: int) -> str:
    """What an expected figure of the catalog rests on, in a tooltip: the records are
    named in the findings and in fleet/expected.py, not on every mark."""
    return f"the median of {n} record{'s' if n != 1 else ''} of healthy lent nodes"


def _repeat_note(m: GpuMeasure) -> str:
    """The run-to-run sd one result of the GPU rests on (the median of its results'): the
    width each stored repeat interval was built from (agent/timing/repeat.py)."""
    if m.repeat_sd is None:
        return ""
    return f"; run-to-run sd {m.repeat_sd:.2%}"


def _soak_note(m: GpuMeasure) -> str:
    """A soaked GPU's evidence in its tooltip: its first 20 s, its drop, its heat."""
    if m.first_20s_tflops is None or m.drop is None:
        return ""
    heat = "" if m.temperature_c is None else f", {m.temperature_c:.0f} °C under load"
    return f"; first 20 s {m.first_20s_tflops:.1f}, drop {m.drop:.2%}{heat}"


def node_units(figures: pd.DataFrame, options: ShortfallOptions | None = None) -> list[Unit]:
    """Each GPU's memory copy, each pair's copies and each node's all-reduce at their
    largest size (fleet.analysis.node.figures.prepare's frame, measured alone), beside what a
    healthy node gives (the catalog, else the datasheet's share), as the shortfall rule
    judges them."""
    units = []
    judged = judged_rows(figures, options)
    for row in judged.to_dict("records"):
        kind = str(row["kind"])
        if kind == "memory_copy":
            metric, name = "memory", f"GPU {int(row['gpu_index'])}"
        elif kind == "peer_copy":
            metric = "pairs both ways" if row["direction"] == "both_ways" else "pairs one way"
            low, high = sorted((int(row["gpu_index"]), int(row["peer_index"])))
            name = f"pair {low}-{high}"
        elif kind == "allreduce":
            metric, name = "all-reduce", f"{int(row['gpus_in_run'])} GPUs"
        else:
            continue  # host copies: the host link's own finding
        expected = float(row["expected_gbs"])
        entry = row["entry"]
        basis = (_records(entry.n) if row["basis"] == RECORDS and entry is not None
                 else "no records: the datasheet's share")
        units.append(Unit(str(row["provider"]), str(row["host"]), str(row["variant"]),
                          metric, name, float(row["gbs"]),
                          f"{int(row['gpus_in_run'])} GPUs" if metric == "all-reduce" else "",
                          expected, float(row["threshold"]) * expected, basis))
    # One pair a figure: the suite measures each pair from its lower GPU.
    seen: set[tuple[str, str, str, str]] = set()
    kept = []
    for unit in units:
        key = (unit.provider, unit.host, unit.metric, unit.name)
        if key not in seen:
            seen.add(key)
            kept.append(unit)
    return sorted(kept, key=_order)


def _records_figure(gpu: JobGpu, point: str | None) -> float | None:
    """What healthy lent cards of the GPU's variant gave on its job and backend (a
    compiled step's own where held), by the rule the job's findings use
    (agent/rerun/job.py `record`), so a mark under its band is a figure called short."""
    # The configuration names its suite by major.minor ("1.3"), the records in whole.
    for suite in RECORDS_BY_SUITE:
        if gpu.config.suite_version in (suite, suite.rsplit(".", 1)[0]):
            found = record({"suite_version": suite, "workload": gpu.config.workload,
                            "point": point, "attention": gpu.config.attention,
                            "compiled": gpu.config.compiled}, gpu.variant)
            if found is not None:
                return found
    return None


def job_units(gpus: Iterable[JobGpu], points: Mapping[str, str | None]) -> list[Unit]:
    """Each GPU's headline training step, and its headline decode at the bandwidth point
    (`points`: each configuration key's decode point), beside the records of healthy lent
    cards of its variant and backend."""
    units = []
    chosen = [g for g in gpus if g.config.headline and (
        g.config.train or points.get(g.config.key) == "bandwidth")]
    usual = Counter(_job_apart(g) for g in chosen).most_common(1)
    for g in chosen:
        point = None if g.config.train else "bandwidth"
        expected = _records_figure(g, point)
        apart = _job_apart(g)
        units.append(Unit(
            g.provider, g.host, g.variant, "training" if g.config.train else "decode",
            f"GPU {g.gpu_index}", g.tokens_per_s,
            "" if usual and apart == usual[0][0] else apart, expected,
            None if expected is None else expected * (1.0 - RECORDS_MARGIN),
            "" if expected is None else
            f"records of healthy lent cards, {g.config.attention}, suite "
            f"{g.config.suite_version}"))
    return sorted(units, key=_order)


def _job_apart(g: JobGpu) -> str:
    c = g.config
    gpus = "alone" if c.gpus_in_run == 1 else f"{c.gpus_in_run} GPUs at once"
    return f"{c.attention}, {gpus}, suite {c.suite_version}"


def _order(unit: Unit) -> tuple[str, str, str, tuple[int, ...], str]:
    return (unit.provider, unit.variant, unit.host,
            tuple(int(n) for n in re.findall(r"\d+", unit.name)), unit.name)
