"""What a healthy node of each variant gives, measured on lent nodes and cited: the
catalog a single node is judged against (docs/design.md, "Judging one node").

Each entry is one figure of one configuration of one variant (the variant label as
agent/gpu/variants.py spells it), with the median a healthy node gave, how much that spreads
and the bench/records/ folders it came from. `python bench/expected_catalog.py` recomputes
every entry from those folders and prints them as they stand here; `--check` says where
this file differs from what the records give.

How an entry is made (`summarise`): a record is one device call, one machine, whatever it
holds (the 4x H200 node suite: five runs of four GPUs); each record counts once. Two of the
4x H100 records are more than one call (jobs-warm: two on one warm machine; job-backends:
three, its run-4 and run-5 on a second machine, other GPUs) and still count once each. Its
figure is the median of its figures (every GPU or pair of every run); the entry's
`gbs` is the median of its records' figures; `spread` is the standard deviation of the
records' figures relative to that (None from one record: one machine says nothing of the
next), and `within` the standard deviation of one figure about its record's mean, pooled
over records (GPUs, pairs and runs of one machine). `sd` joins the two: how far one
healthy GPU, pair or node may land from the expected figure.

What an entry applies to (`lookup`): the same variant, kind, direction, host memory, size,
GPU count, data type and backend; host copies the same PCIe generation and width under
load (a link trained down is fleet/analysis/node/hostlink.py's, never compared with a full
one); pairs and the all-reduce the same NVLink fabric where both are known ("switch":
through NVSwitch, every pair joined by all of a GPU's links; "direct": links split among
the peers, a third of them a pair on a 4-GPU HGX), and no more NVLink links than the
records' (fewer is what a lost link looks like, so it is judged, never excused). Where
several entries apply (the row did not say its fabric), the lowest stands: a row is
judged against the least a healthy node of its kind gives. The suite version and the
software stack are not part of the key: the entry names the stacks it was measured on,
and a finding says when the node's differs.

The soaked matmul (`MatmulExpected`) is made the same way from the soaked results of the
agent's harness (1.3.0 and 1.4.0; their headlines differ by at most 0.22%, bench/RESULTS.md
"Repeat intervals"), one figure a GPU and run: `within` is then how far one run of one
healthy GPU lands from its machine's others (cards and repeats), `spread` how far machines
differ.

No pandas here: the report imports the catalog and the bench scripts build it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MiB = 1 << 20
GiB = 1 << 30

# The records the catalog below was made from (bench/records/), each one device call
# (the two 4x H100 records: several calls; the module docstring says which).
H200X4_SUITE = "2026-11-26-h200x4-node-suite"
H200X4_PROBE = "2026-11-26-h200x4-node-probe"
H200X4_CROSSCHECK = "2026-11-26-h200x4-node-crosscheck"
H200X2_SUITE = "2026-11-26-h200x2-node-suite"
H200_REPEAT = "2026-11-26-h200-repeat-1653724033734"
H200_SOAK = "2026-11-25-h200-soak-1653724065387"
H100_HEALTH = "2026-11-26-h100-node-health"
H100X2_PROBE = "2026-11-26-h100x2-probe-reference"
H100X2_HEALTHY = "2026-11-26-h100x2-node-healthy"
H100_PROBE_BENCH = "2026-11-26-h100-probe-bench-1753124019022"
H100_REPEAT = "2026-11-26-h100-repeat-1752824029521"
H100_SOAK = "2026-11-25-h100-soak-1752624020993"
H100_PROBE = "2026-11-25-h100-probe-1753024036079"
H100X4_JOB_BACKENDS = "2026-11-27-h100x4-job-backends"
H100X4_JOBS_WARM = "2026-11-27-h100x4-jobs-warm"


@dataclass(frozen=True)
class FigureKey:
    """The configuration an expected node figure is of (fleet/analysis/node/figures.py's
    NodeConfig, less the suite and stack, plus the links the figure crossed)."""

    variant: str
    kind: str  # memory_copy, host_to_device, device_to_host, peer_copy, allreduce
    direction: str = ""  # peer_copy: "one_way" or "both_ways"
    memory: str = ""  # host copies: "pinned" or "pageable"
    size_bytes: int = 0
    gpus_in_run: int = 1  # the all-reduce's ranks
    dtype: str = ""  # the all-reduce's
    backend: str = "cuda"  # "nccl" for the all-reduce
    link_gen: int | None = None  # host copies: the PCIe link under load
    link_width: int | None = None
    nvlink_fabric: str | None = None  # pairs and all-reduce: "switch" or "direct"
    nvlink_links: int | None = None  # the links joining a pair (all-reduce: its pairs)

    @property
    def base(self) -> tuple[str, str, str, str, int, int, str, str]:
        """What must be equal for an entry to apply; the links are matched apart."""
        return (self.variant, self.kind, self.direction, self.memory, self.size_bytes,
                self.gpus_in_run, self.dtype, self.backend)


@dataclass(frozen=True)
class Expected:
    """What a healthy node gives for one figure: the median of its records' figures
    (GB/s), their spread, and where it was measured."""

    key: FigureKey
    gbs: float
    spread: float | None  # relative sd between the records' figures; None from one record
    within: float | None  # relative sd of one figure within a record; None: one figure
    n: int  # records
    figures: int  # figures counted, over every record's GPUs or pairs and runs
    records: tuple[str, ...]  # bench/records/ folders
    stacks: tuple[str, ...] = ()  # the software stacks they were measured on

    @property
    def sd(self) -> float:
        """How far one healthy figure may land from `gbs`, relative: the spread between
        records and the spread within one joined."""
        return math.hypot(self.spread or 0.0, self.within or 0.0)


@dataclass(frozen=True)
class MatmulKey:
    """The matmul configuration an expected soaked figure is of (fleet.analysis.dataset's
    Config, less the harness version, concurrency and stack)."""

    variant: str
    dtype: str = "bf16"
    m: int = 8192
    n: int = 8192
    k: int = 8192
    mode: str = "sustained"
    cache: str = "cold"
    thermal: str = "soaked"


@dataclass(frozen=True)
class MatmulExpected:
    """What a healthy GPU of a variant gives soaked: the median of its records' figures
    (TFLOP/s, every soaked run of every GPU), their spread, and where measured."""

    key: MatmulKey
    tflops: float
    spread: float | None
    within: float | None
    n: int  # records
    figures: int  # soaked runs counted, over every GPU of every record
    records: tuple[str, ...]
    harness_versions: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()

    @property
    def sd(self) -> float:
        """How far one healthy GPU's soaked figure may land from `tflops`, relative."""
        return math.hypot(self.spread or 0.0, self.within or 0.0)


@dataclass(frozen=True)
class Summary:
    """`summarise`'s answer: the expected value and its spreads."""

    value: float
    spread: float | None
    within: float | None
    n: int
    figures: int


def summarise(by_record: Mapping[str, Sequence[float]]) -> Summary:
    """The module docstring's statistics of figures grouped by record: each record's
    median, the median of those, their relative sd, and the pooled relative sd of one
    figure about its record's mean."""
    figures = {record: list(values) for record, values in by_record.items() if values}
    if not figures:
        raise ValueError("no figures to summarise")
    medians = [statistics.median(values) for values in figures.values()]
    value = statistics.median(medians)
    spread = statistics.stdev(medians) / value if len(medians) >= 2 else None
    squares, dof = 0.0, 0
    for values in figures.values():
        mean = math.fsum(values) / len(values)
        squares += math.fsum((v / mean - 1.0) ** 2 for v in values)
        dof += len(values) - 1
    within = math.sqrt(squares / dof) if dof else None
    return Summary(value, spread, within, len(medians),
                   sum(len(values) for values in figures.values()))


@dataclass(frozen=True)
class Observation:
    """One healthy figure of a record, as the catalog is built from: a GPU's, a pair's
    or a node's node-suite figure (GB/s), or a card's soaked matmul (TFLOP/s)."""

    record: str
    key: FigureKey | MatmulKey
    value: float
    stack: str = ""
    harness_version: str = ""


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def build(observations: Iterable[Observation]) -> tuple[list[Expected], list[MatmulExpected]]:
    """The catalog's entries from healthy observations, one per configuration, node
    figures in the order `sort_key` gives."""
    grouped: dict[FigureKey | MatmulKey, dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    stacks: dict[FigureKey | MatmulKey, set[str]] = defaultdict(set)
    versions: dict[FigureKey | MatmulKey, set[str]] = defaultdict(set)
    for seen in observations:
        grouped[seen.key][seen.record].append(seen.value)
        if seen.stack:
            stacks[seen.key].add(seen.stack)
        if seen.harness_version:
            versions[seen.key].add(seen.harness_version)
    figures: list[Expected] = []
    matmul: list[MatmulExpected] = []
    for key, by_record in grouped.items():
        found = summarise(by_record)
        records = tuple(sorted(by_record))
        if isinstance(key, FigureKey):
            figures.append(Expected(
                key, round(found.value, 1), _round(found.spread, 4), _round(found.within, 4),
                found.n, found.figures, records, tuple(sorted(stacks[key]))))
        else:
            matmul.append(MatmulExpected(
                key, round(found.value, 1), _round(found.spread, 4), _round(found.within, 4),
                found.n, found.figures, records, tuple(sorted(versions[key])),
                tuple(sorted(stacks[key]))))
    figures.sort(key=lambda e: sort_key(e.key))
    matmul.sort(key=lambda e: (e.key.variant, e.key.dtype, e.key.m, e.key.n, e.key.k))
    return figures, matmul


KIND_ORDER = ("memory_copy", "host_to_device", "device_to_host", "peer_copy", "allreduce")


def sort_key(key: FigureKey) -> tuple[object, ...]:
    """Entries by variant, then as a node's figures are listed."""
    kind = KIND_ORDER.index(key.kind) if key.kind in KIND_ORDER else len(KIND_ORDER)
    return (key.variant, kind, key.direction, key.memory, key.gpus_in_run, key.size_bytes,
            key.dtype, key.link_gen or 0, key.link_width or 0, key.nvlink_fabric or "",
            key.nvlink_links or 0)


def _applies(entry: FigureKey, row: FigureKey) -> bool:
    if entry.kind in ("host_to_device", "device_to_host"):
        # A host copy is compared only at the link it ran at, and only where it was read.
        return (row.link_gen is not None and row.link_width is not None
                and (row.link_gen, row.link_width) == (entry.link_gen, entry.link_width))
    if (entry.nvlink_fabric is not None and row.nvlink_fabric is not None
            and entry.nvlink_fabric != row.nvlink_fabric):
        return False
    return (entry.nvlink_links is None or row.nvlink_links is None
            or row.nvlink_links <= entry.nvlink_links)


class Catalog:
    """The entries, indexed for lookup."""

    def __init__(self, figures: Iterable[Expected] = (),
                 matmul: Iterable[MatmulExpected] = ()) -> None:
        self.figures = tuple(figures)
        self.matmul = tuple(matmul)
        self._by_base: dict[tuple[object, ...], list[Expected]] = defaultdict(list)
        for entry in self.figures:
            self._by_base[entry.key.base].append(entry)
        self._matmul = {entry.key: entry for entry in self.matmul}

    def lookup(self, row: FigureKey) -> Expected | None:
        """The entry `row`'s figure is judged against (the module docstring's rules);
        None where the catalog has none for its configuration."""
        fitting = [entry for entry in self._by_base.get(row.base, ())
                   if _applies(entry.key, row)]
        if not fitting:
            return None
        exact = [entry for entry in fitting
                 if (entry.key.nvlink_fabric, entry.key.nvlink_links)
                 == (row.nvlink_fabric, row.nvlink_links)]
        return min(exact or fitting, key=lambda entry: entry.gbs)

    def lookup_matmul(self, key: MatmulKey) -> MatmulExpected | None:
        """The soaked matmul entry of `key`'s configuration, None without one."""
        return self._matmul.get(key)

    def variants(self) -> tuple[str, ...]:
        """The variants with at least one entry."""
        return tuple(sorted({e.key.variant for e in self.figures}
                            | {e.key.variant for e in self.matmul}))


# The catalog, as `python bench/expected_catalog.py` prints it from the records named.
FIGURES: tuple[Expected, ...] = (
    Expected(
        FigureKey("H100-SXM5-80GB", "memory_copy", size_bytes=GiB),
        gbs=3003.8, spread=0.0006, within=0.0005, n=7, figures=32,
        records=(H100_HEALTH, H100_PROBE_BENCH, H100_REPEAT, H100X2_HEALTHY, H100X2_PROBE,
                 H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "host_to_device", memory="pinned", size_bytes=256 * MiB,
                  link_gen=5, link_width=16),
        gbs=55.1, spread=0.0042, within=0.0126, n=7, figures=32,
        records=(H100_HEALTH, H100_PROBE_BENCH, H100_REPEAT, H100X2_HEALTHY, H100X2_PROBE,
                 H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "device_to_host", memory="pinned", size_bytes=256 * MiB,
                  link_gen=5, link_width=16),
        gbs=55.1, spread=0.001, within=0.0226, n=7, figures=32,
        records=(H100_HEALTH, H100_PROBE_BENCH, H100_REPEAT, H100X2_HEALTHY, H100X2_PROBE,
                 H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "peer_copy", direction="both_ways", size_bytes=512 * MiB,
                  nvlink_fabric="switch", nvlink_links=18),
        gbs=777.6, spread=0.0015, within=0.0019, n=4, figures=22,
        records=(H100X2_HEALTHY, H100X2_PROBE, H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "peer_copy", direction="one_way", size_bytes=512 * MiB,
                  nvlink_fabric="switch", nvlink_links=18),
        gbs=396.4, spread=0.0011, within=0.0025, n=4, figures=22,
        records=(H100X2_HEALTHY, H100X2_PROBE, H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=16 * MiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=211.9, spread=0.019, within=0.0079, n=2, figures=4,
        records=(H100X2_HEALTHY, H100X2_PROBE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=64 * MiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=267.1, spread=0.0036, within=0.002, n=2, figures=4,
        records=(H100X2_HEALTHY, H100X2_PROBE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=256 * MiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=300.9, spread=0.0026, within=0.0009, n=2, figures=4,
        records=(H100X2_HEALTHY, H100X2_PROBE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=GiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=332.0, spread=0.0035, within=0.004, n=2, figures=4,
        records=(H100X2_HEALTHY, H100X2_PROBE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=16 * MiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=253.4, spread=0.0121, within=0.0052, n=2, figures=3,
        records=(H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=64 * MiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=305.1, spread=0.0045, within=0.0044, n=2, figures=3,
        records=(H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=256 * MiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=338.9, spread=0.0005, within=0.0015, n=2, figures=3,
        records=(H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H100-SXM5-80GB", "allreduce", size_bytes=GiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=356.3, spread=0.0011, within=0.0014, n=2, figures=3,
        records=(H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "memory_copy", size_bytes=GiB),
        gbs=4220.9, spread=0.0039, within=0.0005, n=4, figures=33,
        records=(H200_REPEAT, H200X2_SUITE, H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H200-SXM-141GB", "host_to_device", memory="pinned", size_bytes=256 * MiB,
                  link_gen=5, link_width=16),
        gbs=55.5, spread=0.0015, within=0.0025, n=4, figures=33,
        records=(H200_REPEAT, H200X2_SUITE, H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H200-SXM-141GB", "device_to_host", memory="pinned", size_bytes=256 * MiB,
                  link_gen=5, link_width=16),
        gbs=55.3, spread=0.0009, within=0.0007, n=4, figures=33,
        records=(H200_REPEAT, H200X2_SUITE, H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H200-SXM-141GB", "peer_copy", direction="both_ways", size_bytes=512 * MiB,
                  nvlink_fabric="switch", nvlink_links=18),
        gbs=775.4, spread=0.0009, within=0.0015, n=3, figures=38,
        records=(H200X2_SUITE, H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H200-SXM-141GB", "peer_copy", direction="one_way", size_bytes=512 * MiB,
                  nvlink_fabric="switch", nvlink_links=18),
        gbs=393.8, spread=0.0013, within=0.0019, n=3, figures=38,
        records=(H200X2_SUITE, H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=16 * MiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=214.7, spread=None, within=0.0036, n=1, figures=2, records=(H200X2_SUITE,),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=64 * MiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=267.2, spread=None, within=0.0023, n=1, figures=2, records=(H200X2_SUITE,),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=256 * MiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=299.1, spread=None, within=0.0017, n=1, figures=2, records=(H200X2_SUITE,),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=GiB, gpus_in_run=2, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=330.9, spread=None, within=0.0037, n=1, figures=2, records=(H200X2_SUITE,),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=16 * MiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=258.2, spread=0.003, within=0.003, n=2, figures=6, records=(H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=64 * MiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=309.1, spread=0.0017, within=0.0026, n=2, figures=6,
        records=(H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=256 * MiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=338.6, spread=0.0028, within=0.0006, n=2, figures=6,
        records=(H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
    Expected(
        FigureKey("H200-SXM-141GB", "allreduce", size_bytes=GiB, gpus_in_run=4, dtype="bf16",
                  backend="nccl", nvlink_fabric="switch", nvlink_links=18),
        gbs=353.7, spread=0.0043, within=0.0013, n=2, figures=6,
        records=(H200X4_PROBE, H200X4_SUITE),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, NCCL 2.28.9",)),
)
MATMUL: tuple[MatmulExpected, ...] = (
    MatmulExpected(
        MatmulKey("H100-SXM5-80GB"), tflops=678.0, spread=0.0091, within=0.0062, n=8, figures=27,
        records=(H100_PROBE, H100_SOAK, H100_HEALTH, H100_PROBE_BENCH, H100_REPEAT, H100X2_PROBE,
                 H100X4_JOB_BACKENDS, H100X4_JOBS_WARM),
        harness_versions=("1.3.0", "1.4.0"),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, cuBLAS 13.1.0",)),
    MatmulExpected(
        MatmulKey("H200-SXM-141GB"), tflops=669.4, spread=0.0103, within=0.0048, n=3, figures=18,
        records=(H200_SOAK, H200_REPEAT, H200X4_PROBE), harness_versions=("1.3.0", "1.4.0"),
        stacks=("torch 2.11.0+cu130, CUDA 13.0, cuBLAS 13.1.0",)),
)

CATALOG = Catalog(FIGURES, MATMUL)
