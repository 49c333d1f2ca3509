"""Shortfalls: a node's figure well below what a healthy node of its variant gives, judged
on the node alone (docs/findings.md, "One node, judged on its own").

A buyer often probes one node, and every rule that compares a node with its own GPUs or
with the variant's other nodes needs a crowd: a 4-GPU node whose NCCL could not use
NVLink (all-reduce 23.9 GB/s where a healthy one gives 354) passed them all. So each
figure is judged against the catalog of fleet/expected.py, made from lent nodes' records,
and where the catalog has no entry for its variant and configuration, against its
datasheet figure.

**Against the records.** A figure (each GPU's memory copy and pinned host copies, each
pair's copy one way and both ways, the node's all-reduce, at the largest size the suite
measured) is called when it is below the expected figure by more than its margin: the
larger of a floor and four times the entry's `sd` (how far one healthy figure landed from
the expected one: machines apart, and GPUs, pairs and runs within a machine). The records
spread 0.05-0.4% for memory and pairs and 0.5% for the all-reduce, so four of them stay
under 2% and the floors decide:

- memory copy, 5%: it moves with the HBM clock alone (3,003-3,008 GB/s on every H100
  SXM5 lent, 4,220-4,249 on every H200), and a GPU 8% slow stands 2 points past it; the
  floor the node-outlier rule uses for the same figure;
- pairs, 4%: one NVLink 4 link of 18 lost costs a pair 5.6%. At 5% (the node-outlier
  rule's floor, where a node's own pairs are the reference) a lost link was caught on
  every record but kept up to 94.6% of the expected figure, 0.4 points from a miss; at
  4% it has 1.6 points, while healthy pairs of every lent node sit within 0.5% of the
  expected figure (4 x their sd is 0.9%);
- pinned host copies, 10%: they move with the platform (root complex, PCIe switch) and
  with the NUMA node the host buffer sits on, a few percent from host to host (one H100
  run of five read 4% low); the node-outlier rule's floor. A copy that
  fleet/analysis/node/hostlink.py calls (its link below its maximum, or under 70% of what the
  link carries) is left to it, and a copy is compared only with entries of the link it
  ran at;
- all-reduce, 10%: NCCL's version and settings move it by more than copies move, and the
  records hold one NCCL (2.28.9); the peer rule's threshold for a node apart from its
  crowd.

Measured (bench/shortfall_flags.py, each record judged against a catalog made without
it, every run a node alone): no healthy run called (memory 0 of 26 nodes, host link 0 of
26, pairs 0 of 8, all-reduce 0 of 6; the lowest healthy shares 99.6, 96.1, 99.5 and 99.4%
of expected); called on every constructed fault: the all-reduce at 7% (6 of 6), one NVLink
link lost on a pair (8 of 8, the faulty pair at most 94.6% of expected), two lost (8 of
8), GPU 0's memory copy 8% slow (26 of 26, at most 92.7%). Few records, one provider's
lent machines: other platforms may sit a little apart, which the floors are wide for
(bench/RESULTS.md, "One node against the catalog").

**Against the datasheet.** A variant and configuration without records is judged on its
share of the datasheet figure, with thresholds well under what healthy nodes give: memory
copy 70% (healthy 88.5-89.7% of HBM on H100 and H200 SXM: `memory_share`); a pair over an
NVLink path 70% (86-88% of its links: `pair_share`; a pair over PCIe is not judged this
way, since peer copies through a root complex or across sockets vary too widely, and
fleet/analysis/node/peers.py calls an NVLink node whose pairs lack NVLink); the all-reduce 40%
(73-79% of one-way NVLink at 1 GiB on 2 and 4 GPUs: `allreduce_share`; through the host it
gives 5-10%). Host copies have their datasheet rule in fleet/analysis/node/hostlink.py. These
catch what is gross (an all-reduce through the host, a memory clock capped to a fraction)
and miss what the records catch (a lost link, a memory copy 8% slow).

Measured the same way, as a variant without records would be: no healthy run called
(the lowest shares 87.6% memory, 85.8% pairs, 73.4% all-reduce); the all-reduce at 7%
called on all 9 runs, a lost link (one or two) and a memory 8% slow on none.

Per node, one finding per kind of figure (a GPU's memory, its host link, the pairs, the
all-reduce) and basis, naming the GPUs or pairs. Rows measured beside another process
(`contended`) are skipped: those are the renter's contention, reported as such. The
finding's `cause` is left for the report to fill (the transport NCCL used, the links a
pair really has).

**The soaked matmul** (`find_matmul_shortfalls`): a GPU is called when its soaked figure
is below the catalog's for its variant and configuration by more than the larger of 3%
(the straggler rule's threshold) and 1.96 x sqrt(repeat_sd^2 / results + sd^2): its own
run-to-run sd (its results' repeat interval, else its variant's spread, agent/timing/repeat.py)
over its results, joined with how far healthy GPUs of the records land (machines apart
1.0%, GPUs and runs within one 0.4-0.5%). That is 2.3-2.5% for one result on the lent
H100s and H200s, so the floor decides. Measured: no healthy soaked run called (0 of 33 GPU
runs; the nearest, an H100 soaked at 77 °C, at 97.4% of expected), every run 5% slow
called (33 of 33). One finding per node and configuration, naming its GPUs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import SupportsFloat, SupportsInt, cast

import pandas as pd

from fleet.analysis.compare import Z975
from fleet.analysis.dataset import Config, GpuMeasure
from fleet.analysis.matmul.stragglers import repeat_sd
from fleet.analysis.node.figures import (
    HOST_LINK_KINDS,
    NodeConfig,
    host_link_datasheet,
    optional_int,
)
from fleet.analysis.node.hostlink import HostLinkOptions
from fleet.expected import CATALOG, Catalog, Expected, FigureKey, MatmulExpected, MatmulKey

# The kind of figure a finding is of, by the node suite's kinds.
FIGURES = {"memory_copy": "memory", "host_to_device": "host link",
           "device_to_host": "host link", "peer_copy": "pairs", "allreduce": "all-reduce"}
RECORDS, DATASHEET = "records", "datasheet"
# Where the agent's datasheet figure comes from, where the frame does not carry the row's
# own source (prepare's frame leaves it out).
DATASHEET_SOURCES = {
    "memory_copy": "the variant's memory bandwidth (agent/gpu/variants.py)",
    "peer_copy": "the pair's NVLink links at their rate each way (agent/gpu/links.py)",
    "allreduce": "the GPUs' one-way NVLink, else their slowest host link (agent/gpu/links.py)"}


@dataclass(frozen=True)
class ShortfallOptions:
    """How far below the expected figure a node's figure must be to be called: against
    the records, the larger of the figure's floor and `sigmas` x the entry's sd; against
    the datasheet, the share under which it is called."""

    memory_floor: float = 0.05
    pair_floor: float = 0.04
    host_link_floor: float = 0.10
    allreduce_floor: float = 0.10
    sigmas: float = 4.0
    memory_share: float = 0.70
    pair_share: float = 0.70
    allreduce_share: float = 0.40
    # What fleet/analysis/node/hostlink.py calls, left to it.
    host_link: HostLinkOptions = field(default_factory=HostLinkOptions)

    def floor(self, kind: str) -> float:
        """The records' floor for a figure of `kind`."""
        return {"memory": self.memory_floor, "host link": self.host_link_floor,
                "pairs": self.pair_floor, "all-reduce": self.allreduce_floor}[FIGURES[kind]]

    def margin(self, kind: str, entry: Expected) -> float:
        """How far below `entry` a figure of `kind` may be before it is called."""
        return max(self.floor(kind), self.sigmas * entry.sd)

    def datasheet_share(self, kind: str) -> float | None:
        """The share of its datasheet figure a figure is called under; None for host
        copies, whose rule is fleet/analysis/node/hostlink.py's."""
        return {"memory_copy": self.memory_share, "peer_copy": self.pair_share,
                "allreduce": self.allreduce_share}.get(kind)


def short_name(variant: str) -> str:
    """"H200 SXM" for "H200-SXM-141GB": the family and form factor of a catalog label."""
    parts = variant.split("-")
    return " ".join(parts[:2]) if len(parts) >= 3 else variant


def _gbs(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


@dataclass(frozen=True)
class ShortUnit:
    """One GPU's, pair's or node's figure that fell short, against what it was judged by."""

    config: NodeConfig
    gpu_index: int | None  # a pair's source; None for the all-reduce
    peer_index: int | None
    gbs: float
    expected_gbs: float
    nvlink_links: int | None = None  # a pair's links, where the row says
    topology: str | None = None  # a pair's path, as NVML gave it

    @property
    def share(self) -> float:
        """The figure as a share of what it was judged by."""
        return self.gbs / self.expected_gbs

    @property
    def name(self) -> str:
        """"GPU 3", "pair 0-1", "node"."""
        if self.peer_index is not None:
            return f"pair {self.gpu_index}-{self.peer_index}"
        return "node" if self.gpu_index is None else f"GPU {self.gpu_index}"

    @property
    def what(self) -> str:
        """The figure in a few words: "memory copy", "one way", "host to device (pinned)"."""
        if self.config.kind == "peer_copy":
            return "both ways" if self.config.direction == "both_ways" else "one way"
        if self.config.kind == "allreduce":
            return "all-reduce"
        return self.config.figure

    @property
    def text(self) -> str:
        """"pair 2-6 one way 371.6 GB/s (94.4%)", "all-reduce 23.9 GB/s (6.8%)"."""
        name = "" if self.gpu_index is None else f"{self.name} "
        return f"{name}{self.what} {self.gbs:,.1f} GB/s ({self.share:.1%})"


@dataclass(frozen=True)
class Shortfall:
    """A node's figures of one kind below what a healthy node of its variant gives (or,
    without records, below their datasheet share)."""

    provider: str
    host: str
    variant: str
    figure: str  # "memory", "host link", "pairs" or "all-reduce"
    config: NodeConfig  # the furthest-off unit's configuration
    units: tuple[ShortUnit, ...]  # furthest off first
    gbs: float  # the furthest-off unit's figure
    expected_gbs: float  # what it was judged by: the records' median, or the datasheet
    basis: str  # "records" or "datasheet"
    sources: tuple[str, ...]  # the bench/records/ folders, or the datasheet's source
    threshold: float  # the share of expected_gbs under which a figure is called
    entry: Expected | None  # the catalog entry (basis "records")
    floor: float | None = None  # the records' floor, and the sigmas over the entry's sd
    sigmas: float | None = None
    cause: str | None = None  # filled by the report where the agent saw one

    @property
    def share(self) -> float:
        """The furthest-off figure as a share of what it was judged by."""
        return self.gbs / self.expected_gbs

    @property
    def indexes(self) -> tuple[tuple[int, ...], ...]:
        """The units: (GPU,) or (GPU, peer) per unit; () for the node's all-reduce."""
        return tuple(tuple(i for i in (u.gpu_index, u.peer_index) if i is not None)
                     for u in self.units)

    @property
    def whom(self) -> str:
        """Who gives the expected figure: "4-GPU H200 SXM node", "H100 SXM5 pair"."""
        name = short_name(self.variant)
        if self.figure == "all-reduce":
            return f"{self.config.gpus_in_run}-GPU {name} node"
        if self.figure == "pairs":
            over = {"switch": " over NVSwitch", "direct": " over direct NVLink"}.get(
                (self.entry.key.nvlink_fabric or "") if self.entry else "", "")
            return f"{name} pair{over}"
        if self.figure == "host link" and self.entry and self.entry.key.link_gen:
            return f"{name} GPU at Gen{self.entry.key.link_gen} x{self.entry.key.link_width}"
        return f"{name} GPU"

    @property
    def subject(self) -> str:
        """The units and the figure: "GPU 3 memory copy", "pairs 2-6, 3-7 one way"."""
        worst = self.units[0]
        if self.figure == "all-reduce":
            return "all-reduce"
        names = [u.name for u in self.units]
        unique = list(dict.fromkeys(names))
        if len(unique) == 1:
            return f"{unique[0]} {worst.what}"
        plural = {"GPU": "GPUs", "pair": "pairs"}
        head = unique[0].split(" ")[0]
        listed = ", ".join(n.split(" ", 1)[1] for n in unique[:6])
        if len(unique) > 6:
            listed += f" and {len(unique) - 6} more"
        return f"{plural.get(head, head)} {listed} {self.figure}"

    @property
    def title(self) -> str:
        """The finding in a line: what, where, how far off, against what."""
        worst = self.units[0]
        value = f"{_gbs(self.gbs)} GB/s"
        if len(self.units) > 1:
            value = f"down to {value} ({worst.name} {worst.what})"
        if self.basis == RECORDS:
            return (f"{self.host}: {self.subject} {value}, {self.share:.0%} of the "
                    f"{_gbs(self.expected_gbs)} a healthy {self.whom} gives "
                    f"(records: {', '.join(self.sources)})")
        return (f"{self.host}: {self.subject} {value}, {self.share:.0%} of its datasheet's "
                f"{_gbs(self.expected_gbs)} (no records of a healthy {self.variant} at "
                "this configuration)")

    @property
    def evidence(self) -> str:
        """The figures, what they were judged by (records named, their spread, the
        margin) and what differs between the node and the records."""
        shown = "; ".join(u.text for u in self.units[:8])
        if len(self.units) > 8:
            shown += f"; and {len(self.units) - 8} more"
        if self.basis == DATASHEET:
            return (f"{self.config.label}: {shown} of the datasheet figure "
                    f"({'; '.join(self.sources)}); called under "
                    f"{self.threshold:.0%} of it, where healthy nodes of the variants "
                    "measured give 73-90% (fleet/analysis/node/shortfall.py); no records of a "
                    f"healthy {self.variant} node at this configuration")
        entry = self.entry
        assert entry is not None
        spread = ("one record: how far machines differ is not measured"
                  if entry.spread is None else f"{entry.spread:.2%} between records")
        within = ("" if entry.within is None else
                  f", {entry.within:.2%} within one (GPUs, pairs and runs of one machine)")
        text = (f"{self.config.label}: {shown} of the {entry.gbs:,.1f} GB/s a healthy "
                f"{self.whom} gives, the median of {entry.n} record"
                f"{'s' if entry.n != 1 else ''} ({', '.join(entry.records)}; "
                f"{entry.figures} figure{'s' if entry.figures != 1 else ''}); {spread}"
                f"{within}; called under {self.threshold:.1%} of it: the larger of the "
                f"{self.floor or 0:.0%} floor and {self.sigmas or 0:g} x {entry.sd:.2%}")
        notes = []
        if entry.stacks and self.config.stack not in entry.stacks:
            notes.append(f"the records ran {' or '.join(entry.stacks)}; this node "
                         f"{self.config.stack}")
        fewer = sorted({(u.name, u.nvlink_links) for u in self.units
                        if u.nvlink_links is not None and entry.key.nvlink_links is not None
                        and u.nvlink_links < entry.key.nvlink_links})
        if fewer:
            notes.append(", ".join(f"{name}: {links} NVLink links" for name, links in fewer)
                         + f" where the records' pairs had {entry.key.nvlink_links}")
        paths = sorted({str(u.topology) for u in self.units
                        if u.topology and not str(u.topology).upper().startswith("NV")})
        if paths:
            notes.append(f"NVML's path between them: {', '.join(paths)}, not NVLink")
        return text + "".join(f"; {note}" for note in notes)


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    """An optional column as Python values, None where missing or absent."""
    if name not in rows:
        return pd.Series([None] * len(rows), index=rows.index, dtype=object)
    column = rows[name]
    return column.astype(object).where(column.notna(), None)


def _nvlink_path(topology: pd.Series) -> pd.Series:
    return topology.map(lambda t: t is not None and str(t).upper().startswith("NV"))


def _key(row: tuple[object, ...]) -> FigureKey:
    (variant, kind, direction, memory, size, gpus, dtype, backend, link_gen, link_width,
     fabric, links) = row
    return FigureKey(
        variant=str(variant), kind=str(kind), direction=str(direction), memory=str(memory),
        size_bytes=int(cast("SupportsInt", size)), gpus_in_run=int(cast("SupportsInt", gpus)),
        dtype=str(dtype), backend=str(backend), link_gen=optional_int(link_gen),
        link_width=optional_int(link_width),
        nvlink_fabric=None if fabric is None or fabric != fabric else str(fabric),
        nvlink_links=optional_int(links))


_KEY_COLUMNS = ("variant", "kind", "direction", "memory", "size_bytes", "gpus_in_run", "dtype",
                "backend", "key_gen", "key_width", "key_fabric", "key_links")


def judged_rows(figures: pd.DataFrame, options: ShortfallOptions | None = None,
                catalog: Catalog | None = None) -> pd.DataFrame:
    """The rows of `figures` (fleet.analysis.node.figures.prepare's frame) that are judged, each
    with what it is judged by: `expected_gbs`, `threshold` (the share under which it is
    called), `basis`, `entry` (the catalog entry, or None) and `called`. Contended rows,
    pageable host copies, host copies fleet/analysis/node/hostlink.py calls and rows with
    nothing to be judged by are left out."""
    options = options or ShortfallOptions()
    catalog = catalog or CATALOG
    rows = figures[figures["kind"].isin(list(FIGURES))]
    rows = rows[~rows["kind"].isin(HOST_LINK_KINDS) | (rows["memory"] == "pinned")]
    if "contended" in rows:
        rows = rows[~rows["contended"].astype("boolean").fillna(False).astype(bool)]
    if rows.empty:
        return rows.assign(expected_gbs=pd.Series(dtype=float),
                           threshold=pd.Series(dtype=float), basis=pd.Series(dtype=object),
                           entry=pd.Series(dtype=object), called=pd.Series(dtype=bool))
    host_copy = rows["kind"].isin(HOST_LINK_KINDS)
    linked = rows["kind"].isin(("peer_copy", "allreduce"))
    none = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    keyed = rows.assign(
        key_gen=_column(rows, "link_gen").where(host_copy, none),
        key_width=_column(rows, "link_width").where(host_copy, none),
        key_fabric=_column(rows, "nvlink_fabric").where(linked, none),
        key_links=_column(rows, "nvlink_links").where(linked, none))
    groups = keyed.groupby(list(_KEY_COLUMNS), dropna=False, sort=False)
    codes = groups.ngroup()
    firsts = keyed.loc[groups.head(1).index, list(_KEY_COLUMNS)]
    entries: dict[int, Expected | None] = {
        int(code): catalog.lookup(_key(tuple(values)))
        for code, values in zip(codes[firsts.index].tolist(),
                                firsts.itertuples(index=False, name=None), strict=True)}
    entry = [entries[int(code)] for code in codes.tolist()]
    has_entry = pd.Series([e is not None for e in entry], index=rows.index, dtype=bool)
    by_records = pd.Series([e.gbs if e is not None else math.nan for e in entry],
                           index=rows.index, dtype=float)
    margin = pd.Series([options.margin(k, e) if e is not None else math.nan
                        for k, e in zip(rows["kind"].tolist(), entry, strict=True)],
                       index=rows.index, dtype=float)
    share = rows["kind"].map(lambda k: options.datasheet_share(str(k)))
    sheet_judged = (~has_entry & share.notna() & rows["datasheet_gbs"].notna()
                    & ((rows["kind"] != "peer_copy") | _nvlink_path(_column(rows, "topology"))))
    judged = rows.assign(
        expected_gbs=by_records.where(has_entry, rows["datasheet_gbs"].astype(float)),
        threshold=(1.0 - margin).where(has_entry, share.astype(float)),
        basis=pd.Series(RECORDS, index=rows.index, dtype=object).where(has_entry, DATASHEET),
        entry=pd.Series(entry, index=rows.index, dtype=object))
    judged = judged[has_entry | sheet_judged]
    # What fleet/analysis/node/hostlink.py calls stays its finding.
    copies = judged["kind"].isin(HOST_LINK_KINDS)
    gen, width, gen_max, width_max = (_column(judged, c).astype(float) for c in (
        "link_gen", "link_width", "link_gen_max", "link_width_max"))
    below_max = (gen < gen_max) | (width < width_max)
    carries = host_link_datasheet(judged) if "link_gbs" in judged else judged["datasheet_gbs"]
    slow_for_link = judged["gbs"] < options.host_link.min_share * carries.astype(float)
    judged = judged[~(copies & (below_max | slow_for_link))]
    return judged.assign(called=judged["gbs"] < judged["threshold"] * judged["expected_gbs"])


def _unit(row: dict[str, object], entry: Expected | None) -> ShortUnit:
    return ShortUnit(
        config=cast("NodeConfig", row["config"]), gpu_index=optional_int(row.get("gpu_index")),
        peer_index=optional_int(row.get("peer_index")),
        gbs=float(cast("SupportsFloat", row["gbs"])),
        expected_gbs=float(cast("SupportsFloat", row["expected_gbs"])),
        nvlink_links=optional_int(row.get("nvlink_links")) if entry is not None else None,
        topology=None if row.get("topology") is None else str(row.get("topology")))


def find_shortfalls(figures: pd.DataFrame, options: ShortfallOptions | None = None,
                    catalog: Catalog | None = None) -> list[Shortfall]:
    """Every node of `figures` (fleet.analysis.node.figures.prepare's frame; `contended`,
    `nvlink_links` and `nvlink_fabric` read where present) whose figures fall short of
    what a healthy node of its variant gives (`catalog`, fleet.expected.CATALOG by
    default) or, without an entry, of their datasheet share: one finding per node, kind
    of figure and basis, by provider and host."""
    options = options or ShortfallOptions()
    judged = judged_rows(figures, options, catalog)
    called = judged[judged["called"]]
    if called.empty:
        return []
    groups: dict[tuple[int, str, str], list[dict[str, object]]] = defaultdict(list)
    for record in called.to_dict("records"):
        row = {str(name): value for name, value in record.items()}
        groups[(int(cast("SupportsInt", row["document_id"])), FIGURES[str(row["kind"])],
                str(row["basis"]))].append(row)
    found = []
    for (_, figure, basis), rows in groups.items():
        rows.sort(key=lambda r: (float(cast("SupportsFloat", r["gbs"]))
                                 / float(cast("SupportsFloat", r["expected_gbs"]))))
        worst = rows[0]
        entry = cast("Expected | None", worst["entry"]) if basis == RECORDS else None
        kind = str(worst["kind"])
        if entry is not None:
            sources = entry.records
        else:
            source = worst.get("datasheet_source")
            sources = ((str(source),) if source is not None and source == source
                       else (DATASHEET_SOURCES[kind],))
        units = tuple(_unit(r, entry) for r in rows)
        found.append(Shortfall(
            provider=str(worst["provider"]), host=str(worst["host"]),
            variant=str(worst["variant"]), figure=figure,
            config=cast("NodeConfig", worst["config"]), units=units,
            gbs=units[0].gbs, expected_gbs=units[0].expected_gbs, basis=basis,
            sources=sources, threshold=float(cast("SupportsFloat", worst["threshold"])),
            entry=entry, floor=options.floor(kind) if entry is not None else None,
            sigmas=options.sigmas if entry is not None else None))
    order = list(dict.fromkeys(FIGURES.values()))
    found.sort(key=lambda s: (s.provider, s.host, order.index(s.figure), s.basis))
    return found


@dataclass(frozen=True)
class MatmulShortfallOptions:
    """How far below a healthy GPU's soaked figure a GPU must be: the larger of `floor`
    and `z` x the GPU's repeat sd (over its results) and the catalog's sd joined."""

    floor: float = 0.03
    z: float = Z975


@dataclass(frozen=True)
class MatmulUnit:
    """One GPU's soaked figure against the expected one, with its own margin."""

    gpu_index: int
    tflops: float
    expected_tflops: float
    margin: float  # relative: called below expected x (1 - margin)
    repeat_sd: float  # the GPU's relative run-to-run sd (its results', else its variant's)
    results: int

    @property
    def share(self) -> float:
        """The GPU's figure as a share of the expected one."""
        return self.tflops / self.expected_tflops


@dataclass(frozen=True)
class MatmulShortfall:
    """GPUs of one node whose soaked matmul is below what a healthy GPU of their variant
    gives, beyond what repeat runs and the records' spread could make of it."""

    provider: str
    host: str
    variant: str
    config: Config
    gpus: tuple[MatmulUnit, ...]  # furthest off first
    tflops: float  # the furthest-off GPU's
    expected_tflops: float
    entry: MatmulExpected
    floor: float
    cause: str | None = None

    @property
    def share(self) -> float:
        """The furthest-off GPU's figure as a share of the expected one."""
        return self.tflops / self.expected_tflops

    @property
    def indexes(self) -> tuple[int, ...]:
        """The GPUs called, furthest off first."""
        return tuple(g.gpu_index for g in self.gpus)

    @property
    def title(self) -> str:
        """The finding in a line."""
        worst = self.gpus[0]
        name = short_name(self.variant)
        if len(self.gpus) == 1:
            subject = f"GPU {worst.gpu_index} matmul {self.tflops:.1f} TFLOP/s"
        else:
            listed = ", ".join(str(i) for i in sorted(self.indexes))
            subject = (f"GPUs {listed} matmul down to {self.tflops:.1f} TFLOP/s "
                       f"(GPU {worst.gpu_index})")
        return (f"{self.host}: {subject} {self.config.thermal}, {self.share:.0%} of the "
                f"{self.expected_tflops:.0f} a healthy {name} GPU gives (records: "
                f"{', '.join(self.entry.records)})")

    @property
    def evidence(self) -> str:
        """The GPUs, the records, their spread and each GPU's margin."""
        entry = self.entry
        shown = "; ".join(
            f"GPU {g.gpu_index} {g.tflops:.1f} TFLOP/s ({g.share:.1%}; called under "
            f"{1 - g.margin:.1%}: repeat sd {g.repeat_sd:.2%} over {g.results} "
            f"result{'s' if g.results != 1 else ''})" for g in self.gpus)
        spread = ("one record" if entry.spread is None
                  else f"{entry.spread:.2%} between records")
        text = (f"{self.config.label}: {shown}; a healthy {short_name(self.variant)} GPU "
                f"gives {entry.tflops:.1f} TFLOP/s soaked, the median of {entry.n} records "
                f"({', '.join(entry.records)}; {entry.figures} runs, harness "
                f"{', '.join(entry.harness_versions)}), {spread}"
                + ("" if entry.within is None else f", {entry.within:.2%} within one")
                + f"; each GPU called below the larger of the {self.floor:.0%} floor and "
                f"1.96 x its repeat sd and the records' {entry.sd:.2%} joined")
        if entry.stacks and self.config.stack not in entry.stacks:
            text += f"; the records ran {' or '.join(entry.stacks)}, this GPU {self.config.stack}"
        return text


def matmul_expected(gpu: GpuMeasure, options: MatmulShortfallOptions | None = None,
                    catalog: Catalog | None = None) -> tuple[MatmulExpected, float] | None:
    """What a healthy GPU of `gpu`'s variant gives soaked in its configuration, and the
    margin (relative) under which `gpu` is called: the larger of the floor and z x
    sqrt(repeat_sd^2 / results + the entry's sd^2); None where the catalog has no entry."""
    options = options or MatmulShortfallOptions()
    c = gpu.config
    entry = (catalog or CATALOG).lookup_matmul(MatmulKey(gpu.variant, c.dtype, c.m, c.n,
                                                         c.k, c.mode, c.cache, c.thermal))
    if entry is None:
        return None
    sd, results = repeat_sd(gpu), max(1, gpu.results)
    return entry, max(options.floor, options.z * math.sqrt(sd ** 2 / results + entry.sd ** 2))


def find_matmul_shortfalls(measures: Iterable[GpuMeasure],
                           options: MatmulShortfallOptions | None = None,
                           catalog: Catalog | None = None) -> list[MatmulShortfall]:
    """Every node's GPUs (`measures`: the report's GpuMeasures) whose soaked matmul is
    below the catalog's figure for their variant and configuration by more than the
    larger of the floor and z x sqrt(repeat_sd^2 / results + the entry's sd^2): one
    finding per node and configuration. Configurations without an entry (cool-start,
    other shapes, variants not measured) are not judged."""
    options = options or MatmulShortfallOptions()
    catalog = catalog or CATALOG
    nodes: dict[tuple[str, str, str, Config], list[MatmulUnit]] = defaultdict(list)
    entries: dict[tuple[str, str, str, Config], MatmulExpected] = {}
    for gpu in measures:
        judged = matmul_expected(gpu, options, catalog)
        if judged is None:
            continue
        entry, margin = judged
        c = gpu.config
        sd, results = repeat_sd(gpu), max(1, gpu.results)
        if gpu.tflops >= entry.tflops * (1.0 - margin):
            continue
        key = (gpu.provider, gpu.host, gpu.variant, c)
        entries[key] = entry
        nodes[key].append(MatmulUnit(gpu.gpu_index, gpu.tflops, entry.tflops, margin, sd,
                                     results))
    found = []
    for key, gpus in nodes.items():
        gpus.sort(key=lambda g: (g.share, g.gpu_index))
        provider, host, variant, config = key
        found.append(MatmulShortfall(provider, host, variant, config, tuple(gpus),
                                     gpus[0].tflops, gpus[0].expected_tflops, entries[key],
                                     options.floor))
    found.sort(key=lambda s: (s.provider, s.host, s.config))
    return found
