"""Reading results back: plain rows for the CLI, and the report's main query.

The main query compares providers per variant on per-GPU medians: a thousand results
from one slow box are one slow box (docs/design.md, "Comparing providers honestly"). SQL
filters and fetches one narrow row per result through the copies on benchmark_result
(see models); the medians are taken here, because SQLite has no median aggregate and
one code path keeps both backends' answers identical.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Engine, Select, false, func, literal, select

from fleet.errors import InputError
from fleet.model.document import AgentDocument
from fleet.store.config import CONFIG_COLUMNS, STACK_COLUMNS
from fleet.store.models import (
    BenchmarkResult,
    Document,
    Fingerprint,
    Gpu,
    Host,
    ProbeRun,
    Provider,
    unpack_floats,
)
from fleet.words import normal_label

FLAGS = ("power_capped", "thermal_throttled", "hw_slowdown", "contended", "not_steady",
         "correctness_failed", "clocks_locked", "not_soaked")
UNKNOWN_VERSION = "?"


def software_stack(torch: str | None, cuda_runtime: str | None, cublas: str | None) -> str:
    """The stack a result was measured on, as reports and `fleet results --stack` read it:
    "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2" (cuBLAS picks the GEMM kernels by
    version, so two stacks are two measurements; docs/design.md)."""
    return (f"torch {torch or UNKNOWN_VERSION}, CUDA {cuda_runtime or UNKNOWN_VERSION}, "
            f"cuBLAS {cublas or UNKNOWN_VERSION}")


def _stack_expression() -> ColumnElement[str]:
    """`software_stack` in SQL, so that --stack filters before LIMIT and counts."""
    r = BenchmarkResult

    def version(column: Any) -> Any:
        return func.coalesce(column, UNKNOWN_VERSION)

    label: ColumnElement[str] = (literal("torch ") + version(r.torch_version)
                                 + literal(", CUDA ") + version(r.cuda_runtime_version)
                                 + literal(", cuBLAS ") + version(r.cublas_version))
    return label


def _columns(names: Sequence[str]) -> list[Any]:
    """benchmark_result's columns of these names, in this order."""
    return [getattr(BenchmarkResult, name) for name in names]


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


if TYPE_CHECKING:
    AnySelect = Select[*tuple[Any, ...]]

# Ids per `IN (...)`: SQLite allows 32,766 bound values in a statement, and a report over
# a large fleet's documents would pass that in one list.
IN_CHUNK = 1000


def in_chunks(values: Sequence[int], size: int = IN_CHUNK) -> Iterator[Sequence[int]]:
    """`values` in slices of at most `size`, to keep each IN list under the backends' limits."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


@dataclass(frozen=True)
class ResultFilter:
    """Exact matches (`variants`: any of these labels, see `stored_variants`); `since` is
    inclusive and compared with when the agent collected."""

    provider: str | None = None
    variants: tuple[str, ...] = ()
    host: str | None = None
    since: dt.datetime | None = None
    sweep: str | None = None
    # Part of the software stack's label (`software_stack`), case aside: "cuBLAS 13.0".
    stack: str | None = None


@dataclass(frozen=True)
class ResultRow:
    """One benchmark result as `fleet results` lists it, its fields in the order of the
    listing's columns; between `variant` and `tflops`, config.CONFIG_COLUMNS."""

    id: int
    collected_at: dt.datetime
    provider: str
    host: str
    sweep: str | None
    gpu_index: int
    gpu_uuid: str | None
    variant: str
    harness_version: str
    dtype: str
    m: int
    n: int
    k: int
    mode: str
    cache: str
    thermal: str  # "soaked" or "cool-start"
    concurrency: str
    tflops: float  # soaked results: the soaked level
    median_ms: float
    cv: float
    runs: int
    power_w_median: float | None
    sm_clock_mhz_median: float | None
    temperature_load_c: float | None
    soak_s: float | None
    first_20s_tflops: float | None  # soaked results: the level of the first 20 s of load
    soak_drop: float | None  # 1 - tflops / first_20s_tflops
    # Soaked results stored at 0012 or later: where a repeat run of the card lands, 95%,
    # and which evidence set the width (fleet/repeat.py); None for the rest.
    repeat_low_tflops: float | None
    repeat_high_tflops: float | None
    repeat_basis: str | None
    stack: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class VariantSummary:
    """One provider's GPUs of one variant under one benchmark configuration: between
    `variant` and `stack`, config.CONFIG_COLUMNS."""

    provider: str
    variant: str
    harness_version: str
    dtype: str
    m: int
    n: int
    k: int
    mode: str
    cache: str
    thermal: str
    concurrency: str
    stack: str
    gpus: int
    results: int
    median_tflops: float  # the median of the per-GPU medians
    min_gpu_tflops: float
    max_gpu_tflops: float
    # Soaked results: the median of the per-GPU medians of the first 20 s of load, and of
    # the per-GPU drops from it to the soaked level; None where no result says.
    first_20s_tflops: float | None
    drop: float | None


def stored_bodies(conn: Any, ids: Sequence[int]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The stored bodies of documents `ids` as plain JSON values, not validated: for the
    few facts only a body holds."""
    for chunk in in_chunks(ids):
        for row in conn.execute(select(Document.id, Document.body)
                                .where(Document.id.in_(chunk))):
            body = row.body if isinstance(row.body, dict) else json.loads(row.body)
            yield row.id, body


def no_gpu_reasons(conn: Any, ids: Sequence[int]) -> dict[int, str | None]:
    """Why the agent found no GPU, for the (few) documents that have none."""
    return {document_id: body.get("no_gpu_reason")
            for document_id, body in stored_bodies(conn, ids)}


def stored_variants(engine: Engine, asked: Sequence[str]) -> tuple[str, ...]:
    """The stored variant labels that the user's names stand for, spelled as listings and
    inventories spell them ("H100 SXM5 80GB" for H100-SXM5-80GB: case, spaces, hyphens and
    underscores aside). A name that stands for none is an error that lists what is
    stored: an exact match on a misspelling would only say "no results"."""
    if not asked:
        return ()
    with engine.connect() as conn:
        # A result's variant is its GPU's, or "unknown: <name>" where no GPU matched it.
        labels = sorted(set(conn.execute(select(Fingerprint.variant).distinct()).scalars())
                        | set(conn.execute(select(BenchmarkResult.variant).distinct())
                              .scalars()))
    if not labels:
        raise InputError("--variant: nothing is stored yet; run `fleet probe INVENTORY` "
                         "first")
    found: list[str] = []
    for name in asked:
        matches = [label for label in labels if normal_label(label) == normal_label(name)]
        if not matches:
            raise InputError(f"--variant {name!r}: no GPU of that variant is stored; the "
                             f"stored variants are {', '.join(labels)}")
        found += matches
    return tuple(dict.fromkeys(found))


def _filtered(stmt: AnySelect, where: ResultFilter) -> AnySelect:
    result = BenchmarkResult
    if where.provider is not None:
        stmt = stmt.where(Provider.name == where.provider)
    if where.variants:
        stmt = stmt.where(result.variant.in_(where.variants))
    if where.host is not None:
        stmt = stmt.where(Host.name == where.host)
    if where.since is not None:
        stmt = stmt.where(result.collected_at >= where.since)
    if where.sweep is not None:
        stmt = stmt.where(ProbeRun.sweep == where.sweep)
    if where.stack:
        stmt = stmt.where(_stack_expression().ilike(_like_pattern(where.stack), escape="\\"))
    return stmt


def list_results(engine: Engine, where: ResultFilter, limit: int | None = None
                 ) -> list[ResultRow]:
    """Benchmark results matching `where`, newest first."""
    r = BenchmarkResult
    # ResultRow's fields up to `stack`, in its order; then the stack's columns and flags.
    plain = [r.id, r.collected_at, Provider.name, Host.name, ProbeRun.sweep, r.gpu_index,
             Gpu.uuid, r.variant, *_columns(CONFIG_COLUMNS), r.tflops, r.median_ms, r.cv,
             r.runs, r.power_w_median, r.sm_clock_mhz_median, r.temperature_load_c,
             r.soak_s, r.first_20s_tflops, r.soak_drop, r.repeat_low_tflops,
             r.repeat_high_tflops, r.repeat_basis]
    stmt = _filtered(
        select(*plain, *_columns(STACK_COLUMNS), *_columns(FLAGS))
        .join(Provider, Provider.id == r.provider_id)
        .join(Host, Host.id == r.host_id)
        .join(ProbeRun, ProbeRun.id == r.probe_run_id)
        .join(Gpu, Gpu.id == r.gpu_id), where,
    ).order_by(r.collected_at.desc(), Provider.name, Host.name, r.gpu_index, r.id)
    if limit is not None:
        stmt = stmt.limit(limit)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    stack = len(plain) + len(STACK_COLUMNS)
    return [ResultRow(*row[:len(plain)],  # type: ignore[misc]
                      stack=software_stack(*row[len(plain):stack]),
                      flags=_flag_names(row[stack:])) for row in rows]


def _flag_names(values: Sequence[Any]) -> tuple[str, ...]:
    return tuple(flag for flag, on in zip(FLAGS, values, strict=True) if on)


def count_results(engine: Engine, where: ResultFilter) -> int:
    """How many results `where` selects."""
    r = BenchmarkResult
    stmt = _filtered(select(func.count(r.id)).select_from(r)
                     .join(Provider, Provider.id == r.provider_id)
                     .join(Host, Host.id == r.host_id)
                     .join(ProbeRun, ProbeRun.id == r.probe_run_id), where)
    with engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


def summary_statement(where: ResultFilter) -> AnySelect:
    """The main query's rows: one per result, only columns the summary index holds
    (models.SUMMARY_COLUMNS), so that unfiltered it reads the index alone."""
    r = BenchmarkResult
    stmt: AnySelect = (select(Provider.name, r.variant, *_columns(CONFIG_COLUMNS),
                              *_columns(STACK_COLUMNS), r.gpu_id, r.tflops,
                              r.first_20s_tflops, r.soak_drop)
            .join(Provider, Provider.id == r.provider_id)
            # "= false", not "IS false": PostgreSQL searches an index only with "=".
            .where(r.correctness_failed == false()))
    if where.host is not None:
        stmt = stmt.join(Host, Host.id == r.host_id)
    if where.sweep is not None:
        stmt = stmt.join(ProbeRun, ProbeRun.id == r.probe_run_id)
    return _filtered(stmt, where)


def summarise_variants(engine: Engine, where: ResultFilter) -> list[VariantSummary]:
    """The report's main query: per provider, variant and benchmark configuration, the
    median of per-GPU median TFLOP/s and how many GPUs it rests on.

    Results that failed the correctness gate are left out: their times measure a wrong
    answer. Different harness versions, thermal states (soaked or cool-start) and
    software stacks are different groups, never compared as equals.
    """
    per_gpu: dict[tuple[Any, ...], dict[int, list[tuple[float, float | None, float | None]]]]
    per_gpu = defaultdict(lambda: defaultdict(list))
    # A row: provider, variant, the configuration, the stack's columns, then gpu_id,
    # tflops, first_20s_tflops and soak_drop (summary_statement).
    config = 2 + len(CONFIG_COLUMNS)
    with engine.connect() as conn:
        for row in conn.execute(summary_statement(where)):
            key = (*row[:config], software_stack(*row[config:-4]))
            gpu_id, tflops, first_20s, drop = row[-4:]
            per_gpu[key][gpu_id].append((tflops, first_20s, drop))
    summaries = []
    for key, gpus in per_gpu.items():
        medians = [statistics.median(v[0] for v in values) for values in gpus.values()]
        first = _medians_of_gpus(gpus.values(), 1)
        drops = _medians_of_gpus(gpus.values(), 2)
        summaries.append(VariantSummary(
            provider=key[0], variant=key[1],
            **dict(zip(CONFIG_COLUMNS, key[2:-1], strict=True)), stack=key[-1],
            gpus=len(medians), results=sum(len(v) for v in gpus.values()),
            median_tflops=statistics.median(medians), min_gpu_tflops=min(medians),
            max_gpu_tflops=max(medians),
            first_20s_tflops=statistics.median(first) if first else None,
            drop=statistics.median(drops) if drops else None))
    summaries.sort(key=lambda s: (s.variant, s.dtype, s.m, s.n, s.k, s.mode, s.cache,
                                  s.thermal, s.concurrency, s.harness_version, s.stack,
                                  -s.median_tflops, s.provider))
    return summaries


def _medians_of_gpus(gpus: Iterable[list[tuple[float, float | None, float | None]]],
                     column: int) -> list[float]:
    """Per GPU, the median of one column over its results that have it."""
    found: list[float] = []
    for values in gpus:
        present = [value for value in (v[column] for v in values) if value is not None]
        if present:
            found.append(statistics.median(present))
    return found


def load_samples(engine: Engine, result_id: int) -> list[float]:
    """One result's raw per-run kernel times in milliseconds, as the agent sent them."""
    with engine.connect() as conn:
        data = conn.execute(select(BenchmarkResult.samples_ms)
                            .where(BenchmarkResult.id == result_id)).scalar_one()
    return unpack_floats(data)


def load_document(engine: Engine, document_id: int) -> AgentDocument:
    """A stored document, whole, validated again on the way out."""
    with engine.connect() as conn:
        body = conn.execute(select(Document.body).where(Document.id == document_id)
                            ).scalar_one()
    return AgentDocument.model_validate(body)


def contention_words(engine: Engine, documents: Sequence[int]
                     ) -> dict[tuple[int, int], str | None]:
    """(document id, GPU index) -> the stored words of each contended matmul result of
    those documents (0013; None for results stored before): what the agent saw, for the
    report's contention finding."""
    r = BenchmarkResult
    words: dict[tuple[int, int], str | None] = {}
    with engine.connect() as conn:
        for chunk in in_chunks(sorted(set(documents))):
            stmt = (select(r.document_id, r.gpu_index, r.contention)
                    .where(r.contended, r.document_id.in_(chunk)))
            for document, gpu, text in conn.execute(stmt):
                words[(int(document), int(gpu))] = text
    return words


@dataclass(frozen=True)
class IntegrityRow:
    """One result's bit-for-bit checks under load (0015), as the report reads them."""

    document_id: int
    gpu_index: int
    variant: str
    config: tuple[str, int, int, int]  # dtype, M, N, K
    stack: tuple[str | None, str | None, str | None]  # torch, CUDA runtime, cuBLAS
    checks: int
    mismatches: int
    first_s: float | None
    temperature_c: float | None
    elements: int | None
    digest: str | None
    injected: bool


def integrity_rows(engine: Engine, documents: Sequence[int]) -> list[IntegrityRow]:
    """The matmul results of those documents that checked their product under load (0015;
    results stored before, or measured from a cool start, have none)."""
    r = BenchmarkResult
    rows: list[IntegrityRow] = []
    with engine.connect() as conn:
        for chunk in in_chunks(sorted(set(documents))):
            stmt = (select(r.document_id, r.gpu_index, r.variant, r.dtype, r.m, r.n, r.k,
                           r.torch_version, r.cuda_runtime_version, r.cublas_version,
                           r.integrity_checks, r.integrity_mismatches, r.integrity_first_s,
                           r.integrity_temperature_c, r.integrity_elements,
                           r.integrity_digest, r.integrity_injected)
                    .where(r.integrity_checks.is_not(None), r.document_id.in_(chunk))
                    .order_by(r.document_id, r.gpu_index, r.id))
            for row in conn.execute(stmt):
                rows.append(IntegrityRow(
                    int(row[0]), int(row[1]), str(row[2]), (str(row[3]), int(row[4]),
                                                            int(row[5]), int(row[6])),
                    (row[7], row[8], row[9]), int(row[10]), int(row[11] or 0), row[12],
                    row[13], row[14], row[15], bool(row[16])))
    return rows
