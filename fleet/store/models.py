"""The store's schema: SQLAlchemy 2 typed declarative models.

    provider 1─* host 1─* document *─1 probe_run
                           │  1
                           ├─* fingerprint *─1 gpu        (one row per GPU per document)
                           ├─* benchmark_result *─1 gpu 1─* result_series
                           ├─* node_result, job_result (the node and job suites)
                           ├─1 network, ─* network_device (the node's network)
                           ├─1 host_limits, ─1 storage ─* storage_target (issue 58)
                           └─* host_error

A document is immutable once stored, so the few facts the report filters on (provider,
host, probe run, collection time, variant) are copied onto each benchmark result: the
report's main query then reads one table through one index instead of joining five, and
the copies cannot drift because nothing is ever updated. `result_series` packs each GPU's
results per configuration for the report (fleet/store/series.py).

A GPU is followed by its NVML UUID, across probes, hosts and providers (a resold card
keeps its UUID). A GPU whose UUID is hidden (some vGPU guests) cannot be followed past
its host, so it is keyed by (host, index) instead: `gpu.identity` holds `uuid:<UUID>` or
`host:<host id>:<index>`, one unique column that both SQLite and PostgreSQL can upsert on.
"""

from __future__ import annotations

import datetime as dt
import struct
import sys
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from fleet.store.config import CONFIG_COLUMNS, STACK_COLUMNS

# Named constraints, so a migration written on SQLite names them as PostgreSQL does and
# Alembic can drop or alter them by name on both.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The whole document, and other free-form JSON: binary JSONB on PostgreSQL (smaller,
# queryable with operators), text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A point in time, always stored and returned in UTC.

    SQLite keeps a datetime as text and drops the offset, so a time written as 14:00+02:00
    would read back as 14:00 and compare wrongly; converting to UTC on the way in (naive
    values are taken as UTC) and labelling it on the way out makes both backends agree.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        """`value` to store, in UTC; a naive datetime is taken to be UTC already."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        """`value` as read back, in UTC (SQLite returns it naive)."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


def pack_floats(values: list[float]) -> bytes:
    """Little-endian float64, 8 bytes a value: exact (JSON numbers are float64 already).

    Measured for 100,000 results of 200 samples on SQLite (bench/store_ingest.py
    --compare-samples, bench/RESULTS.md): packing took 1.2 s against 24 s for JSON text,
    inserting 3.4 s against 7.1 s, and 153 MiB against 358 MiB. Samples are only ever read
    back whole, so nothing is lost by not being able to query inside them.
    """
    return struct.pack(f"<{len(values)}d", *values)


def unpack_floats(data: bytes) -> list[float]:
    """The float64 values packed in `data`."""
    return list(struct.unpack(f"<{len(data) // 8}d", data))


def pack_rows(rows: list[list[float]], width: int) -> bytes:
    """Rows of `width` values each, packed as one run of float64s."""
    flat = [value for row in rows for value in row]
    assert len(flat) == width * len(rows), "every row must have the same width"
    return pack_floats(flat)


def unpack_rows(data: bytes, width: int) -> list[list[float]]:
    """The rows of `width` values packed in `data`."""
    flat = unpack_floats(data)
    return [flat[i:i + width] for i in range(0, len(flat), width)]


assert sys.float_info.mant_dig == 53, "packed samples assume IEEE 754 float64"


class Base(DeclarativeBase):
    """The base of fleet's tables: constraint names, and UTC datetimes and JSON by type."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: dict[Any, Any] = {  # noqa: RUF012 (SQLAlchemy reads it as a class attribute)
        dt.datetime: UtcDateTime(),
        dict[str, Any]: Json,
        bytes: LargeBinary(),
    }


class Provider(Base):
    """A GPU provider, as the inventory names it."""

    __tablename__ = "provider"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)


class Host(Base):
    """A machine as the inventory (or `fleet ingest --host`) names it, at one provider."""

    __tablename__ = "host"
    __table_args__ = (UniqueConstraint("provider_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider_id: Mapped[int] = mapped_column(ForeignKey("provider.id"))
    name: Mapped[str] = mapped_column(String(255))


class Gpu(Base):
    """One physical card (or one UUID-less slice on one host), seen in one or more probes."""

    __tablename__ = "gpu"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    identity: Mapped[str] = mapped_column(String(160), unique=True)
    uuid: Mapped[str | None] = mapped_column(String(128), index=True)
    # Only for a GPU without a UUID: the host and NVML index that identify it.
    host_id: Mapped[int | None] = mapped_column(ForeignKey("host.id"))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    # When the agent saw it (collected_at of its documents), not when we stored them.
    first_seen: Mapped[dt.datetime]
    last_seen: Mapped[dt.datetime]


class ProbeRun(Base):
    """One `fleet probe`, `fleet sweep` or `fleet ingest`: the documents it stored."""

    __tablename__ = "probe_run"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    sweep: Mapped[str | None] = mapped_column(String(128), index=True)
    inventory: Mapped[str | None] = mapped_column(String(4096))
    controller_version: Mapped[str] = mapped_column(String(64))
    # The agent payload a probe shipped; NULL for hand ingest, where each document says.
    agent_version: Mapped[str | None] = mapped_column(String(128))
    started_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime | None]  # every host settled: nothing left to resume
    # The controller got to the end (set with finished_at, or alone when hosts stay open
    # for --resume): a whole night for the history, unlike a killed run.
    ended_at: Mapped[dt.datetime | None]


class Document(Base):
    """One agent document (fleet-agent/1), whole, as it was validated."""

    __tablename__ = "document"
    # sha256 of the canonical JSON (sorted keys, no spaces): the same document twice for
    # one host is one row, even when two processes store it at the same moment. Unique per
    # host, not alone: two inventory hosts that are one machine can send the very same
    # document, and each host's answer is its own (the report flags the pair, see
    # fleet/analysis/listing/duplicates.py). Led by content_hash, so a lookup by hash uses it too.
    __table_args__ = (Index(None, "host_id", "collected_at"),
                      UniqueConstraint("content_hash", "host_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64))
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"), index=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"))
    collected_at: Mapped[dt.datetime]
    stored_at: Mapped[dt.datetime]
    format: Mapped[str] = mapped_column(String(32))
    agent_version: Mapped[str] = mapped_column(String(128))
    hostname: Mapped[str | None] = mapped_column(String(128))
    platform: Mapped[str] = mapped_column(String(32))
    source_kind: Mapped[str] = mapped_column(String(32))
    gpu_count: Mapped[int] = mapped_column(Integer)
    benchmark_count: Mapped[int] = mapped_column(Integer)
    error_count: Mapped[int] = mapped_column(Integer)
    body: Mapped[dict[str, Any]]
    # Set by `fleet db prune`: the body's raw samples (samples_ms, telemetry_series of each
    # benchmark) were emptied then. `content_hash` stays the hash of the document as it
    # arrived, so the same document sent again is still known.
    samples_pruned_at: Mapped[dt.datetime | None]


class Fingerprint(Base):
    """What one GPU looked like in one document: the columns reports group and filter on.

    Everything else the agent said about the card is in `document.body`.
    """

    __tablename__ = "fingerprint"
    __table_args__ = (
        UniqueConstraint("document_id", "gpu_index"),
        Index(None, "variant", "form_factor"),
        Index(None, "probe_run_id", "gpu_id", "host_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"))
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpu.id"), index=True)
    gpu_index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(String(128))
    serial: Mapped[str | None] = mapped_column(String(128))
    pci_device_id: Mapped[str | None] = mapped_column(String(128))
    # `variant` is what reports group by: the catalog label, else what is known of it.
    variant: Mapped[str] = mapped_column(String(160))
    variant_label: Mapped[str | None] = mapped_column(String(128))
    variant_matched_by: Mapped[str] = mapped_column(String(16))
    family: Mapped[str | None] = mapped_column(String(128))
    form_factor: Mapped[str] = mapped_column(String(16))
    memory_gb: Mapped[int | None] = mapped_column(BigInteger)
    memory_total_mib: Mapped[int | None] = mapped_column(BigInteger)
    architecture: Mapped[str | None] = mapped_column(String(128))
    driver_version: Mapped[str | None] = mapped_column(String(128))
    cuda_driver_version: Mapped[str | None] = mapped_column(String(128))
    vbios_version: Mapped[str | None] = mapped_column(String(128))
    power_limit_w: Mapped[float | None] = mapped_column(Float)
    power_limit_default_w: Mapped[float | None] = mapped_column(Float)
    max_sm_clock_mhz: Mapped[int | None] = mapped_column(Integer)
    max_mem_clock_mhz: Mapped[int | None] = mapped_column(Integer)
    virtualization_mode: Mapped[str | None] = mapped_column(String(16))
    mig_enabled: Mapped[bool | None] = mapped_column(Boolean)
    ecc_enabled: Mapped[bool | None] = mapped_column(Boolean)
    persistence_mode: Mapped[bool | None] = mapped_column(Boolean)
    pcie_gen_max: Mapped[int | None] = mapped_column(Integer)
    pcie_width_max: Mapped[int | None] = mapped_column(Integer)
    nvlink_links_active: Mapped[int] = mapped_column(Integer)
    # Revision 0008: what "fleet as found" and the listing checks read, so that the report
    # need not re-read document bodies. Filled from the body for rows stored before it.
    power_limit_enforced_w: Mapped[float | None] = mapped_column(Float)
    power_limit_min_w: Mapped[float | None] = mapped_column(Float)
    power_limit_max_w: Mapped[float | None] = mapped_column(Float)
    app_sm_clock_target_mhz: Mapped[int | None] = mapped_column(Integer)
    pcie_gen_current: Mapped[int | None] = mapped_column(Integer)
    pcie_width_current: Mapped[int | None] = mapped_column(Integer)
    nvlink_links_total: Mapped[int | None] = mapped_column(Integer)
    # The MIG instances' profiles ("3g.40gb", ...), empty without MIG.
    mig_devices: Mapped[list[str] | None] = mapped_column(Json)
    vgpu_profile: Mapped[str | None] = mapped_column(String(64))
    # The document's run and host, repeated here as benchmark_result repeats them: the
    # report's search for GPUs that two hosts held in one run then reads one index of
    # this table, not a document row per fingerprint (0009).
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"))
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"))
    # {"application_clocks": "no", "power_limit": "unknown", ...}: may the tenant change it.
    capabilities: Mapped[dict[str, Any]]
    # The GPU's health verdict (agent/health/card.py), the reasons that decided it, and the
    # counters it was drawn from (0011); NULL where the agent did not read them.
    health: Mapped[str | None] = mapped_column(String(16))
    health_reasons: Mapped[list[str] | None] = mapped_column(Json)
    health_counters: Mapped[dict[str, Any] | None] = mapped_column(Json)
    # What the buyer asks the provider for: none, reset, drain_and_reset, replace (0014);
    # NULL for an unknown verdict and for agents before issue 36.
    health_action: Mapped[str | None] = mapped_column(String(16))
    # The GPU's memory in use and the processes NVML listed on it when the run began,
    # each [pid, MiB, visible, name, user] (0023): what a stage that failed for want of
    # memory is judged by (fleet/analysis/health/not_measured.py). NULL before 0023.
    memory_used_mib: Mapped[int | None] = mapped_column(Integer)
    processes: Mapped[list[list[Any]] | None] = mapped_column(Json)


SUMMARY_INDEX = "ix_benchmark_result_summary"
# What the main query groups by (the benchmark configuration, the thermal state and the
# software stack), then what it reads per GPU.
SUMMARY_COLUMNS = ("correctness_failed", "provider_id", "variant", *CONFIG_COLUMNS,
                   *STACK_COLUMNS, "gpu_id", "tflops", "first_20s_tflops", "soak_drop")
SOAK_CURVE_WIDTH = 5  # [end s, TFLOP/s, deg C, SM MHz, watts], as the agent sends it


class BenchmarkResult(Base):
    """One GPU's measurement of one matmul configuration, with its raw per-run samples."""

    __tablename__ = "benchmark_result"
    __table_args__ = (
        Index(None, "provider_id", "variant", "collected_at"),
        Index(None, "collected_at"),
        # Covers the report's main query (fleet/store/query.py, summarise_variants), so it
        # reads this narrow index instead of every row with its raw samples: over 100,000
        # results after the page cache was dropped, 0.23 s instead of 9.2 s.
        Index(SUMMARY_INDEX, *SUMMARY_COLUMNS),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), index=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpu.id"), index=True)
    # NULL when the agent benchmarked a GPU it could not fingerprint.
    fingerprint_id: Mapped[int | None] = mapped_column(ForeignKey("fingerprint.id"))
    # Copies of the document's facts (see the module docstring).
    provider_id: Mapped[int] = mapped_column(ForeignKey("provider.id"))
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"), index=True)
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"), index=True)
    collected_at: Mapped[dt.datetime]
    variant: Mapped[str] = mapped_column(String(160))

    gpu_index: Mapped[int] = mapped_column(Integer)
    harness_version: Mapped[str] = mapped_column(String(128))
    timing_method: Mapped[str] = mapped_column(String(128))
    mode: Mapped[str] = mapped_column(String(16))
    pause_ms: Mapped[float] = mapped_column(Float)
    cache: Mapped[str] = mapped_column(String(16))
    # "soaked" or "cool-start"; results before harness 1.3 were all cool-start.
    thermal: Mapped[str] = mapped_column(String(16))
    concurrency: Mapped[str] = mapped_column(String(16))
    gpus_in_run: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(8))
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    tflops: Mapped[float] = mapped_column(Float)

    runs: Mapped[int] = mapped_column(Integer)
    median_ms: Mapped[float] = mapped_column(Float)
    trimmed_mean_ms: Mapped[float] = mapped_column(Float)
    mean_ms: Mapped[float] = mapped_column(Float)
    min_ms: Mapped[float] = mapped_column(Float)
    max_ms: Mapped[float] = mapped_column(Float)
    stdev_ms: Mapped[float] = mapped_column(Float)
    cv: Mapped[float] = mapped_column(Float)
    ci95_low_ms: Mapped[float] = mapped_column(Float)
    ci95_high_ms: Mapped[float] = mapped_column(Float)

    warmup_steady: Mapped[bool] = mapped_column(Boolean)
    warmup_s: Mapped[float] = mapped_column(Float)
    correctness_passed: Mapped[bool] = mapped_column(Boolean)
    max_rel_error: Mapped[float | None] = mapped_column(Float)

    power_capped: Mapped[bool] = mapped_column(Boolean)
    thermal_throttled: Mapped[bool] = mapped_column(Boolean)
    hw_slowdown: Mapped[bool] = mapped_column(Boolean)
    contended: Mapped[bool] = mapped_column(Boolean)
    # The result's contention in words (0013): whose processes were on the GPU, how busy
    # it was, runs excluded as interrupted; None before 0013 and where there was none.
    contention: Mapped[str | None] = mapped_column(String(1024))
    not_steady: Mapped[bool] = mapped_column(Boolean)
    correctness_failed: Mapped[bool] = mapped_column(Boolean)
    clocks_locked: Mapped[bool] = mapped_column(Boolean)
    not_soaked: Mapped[bool] = mapped_column(Boolean)
    clock_lock_mhz: Mapped[int | None] = mapped_column(Integer)

    telemetry_samples: Mapped[int] = mapped_column(BigInteger)
    sm_clock_mhz_median: Mapped[float | None] = mapped_column(Float)
    mem_clock_mhz_median: Mapped[float | None] = mapped_column(Float)
    power_w_median: Mapped[float | None] = mapped_column(Float)
    temperature_c_max: Mapped[float | None] = mapped_column(Float)
    reason_shares: Mapped[dict[str, Any]]
    # The GPU's temperature under load: the soak's median over the measurement where the
    # result was soaked, else the telemetry's maximum (a cool start never settled).
    temperature_load_c: Mapped[float | None] = mapped_column(Float)

    # Soaked results only (harness 1.3 and later): the seconds of load before the
    # measurement, the level of the first 20 s of load, and 1 - tflops / that level.
    soak_s: Mapped[float | None] = mapped_column(Float)
    first_20s_tflops: Mapped[float | None] = mapped_column(Float)
    soak_drop: Mapped[float | None] = mapped_column(Float)

    # Soaked results stored at 0015 or later whose agent checked the product under load
    # (agent/matmul/integrity.py): checks done and how many found it changed, the first of those
    # (seconds of load, temperature, elements differing), the first product's digest and
    # whether the corruption was the test hook's. NULL before, and for cool-start results.
    integrity_checks: Mapped[int | None] = mapped_column(Integer)
    integrity_mismatches: Mapped[int | None] = mapped_column(Integer)
    integrity_first_s: Mapped[float | None] = mapped_column(Float)
    integrity_temperature_c: Mapped[float | None] = mapped_column(Float)
    integrity_elements: Mapped[int | None] = mapped_column(BigInteger)
    integrity_digest: Mapped[str | None] = mapped_column(String(16))
    integrity_injected: Mapped[bool | None] = mapped_column(Boolean)

    # Soaked results stored at 0012 or later: where a repeat run of this card should
    # land (95%), as ingest built it from the variant's run-to-run spread, the GPU's earlier
    # figures and the run's own wander (agent/timing/repeat.py); the relative sd it rests on; which
    # evidence set the width ("variant", "history", "run"); the run's own wander.
    repeat_low_tflops: Mapped[float | None] = mapped_column(Float)
    repeat_high_tflops: Mapped[float | None] = mapped_column(Float)
    repeat_sd: Mapped[float | None] = mapped_column(Float)
    repeat_basis: Mapped[str | None] = mapped_column(String(16))
    wander: Mapped[float | None] = mapped_column(Float)

    torch_version: Mapped[str | None] = mapped_column(String(128))
    cuda_runtime_version: Mapped[str | None] = mapped_column(String(128))
    cublas_version: Mapped[str | None] = mapped_column(String(128))
    wall_s: Mapped[float] = mapped_column(Float)
    # pack_floats: the per-run kernel times (ms), and the telemetry series as rows of
    # [seconds, SM MHz, memory MHz, watts, deg C, reasons bitmask].
    samples_ms: Mapped[bytes]
    telemetry_series: Mapped[bytes]
    # pack_rows: the soak's curve, SOAK_CURVE_WIDTH a row; empty when not soaked. Kept by
    # `fleet db prune`: it is the evidence for the drop, a few hundred values.
    soak_curve: Mapped[bytes]
    # The share of telemetry samples held at the power cap (config.POWER_CAP_REASONS),
    # from reason_shares: the report reads it for every result, and extracting it from
    # the JSON took it seconds over millions of them (0009).
    power_cap_share: Mapped[float] = mapped_column(Float)
    # 0020: a short soaked figure measured again quick on the hot card, without the
    # settings that could move it and then with them (agent/rerun/matmul.py): both
    # figures, the settings taken out (names, space-separated), the floor it fell under,
    # and whether another process was on the GPU around the pair.
    rerun_tflops: Mapped[float | None] = mapped_column(Float)
    rerun_with_tflops: Mapped[float | None] = mapped_column(Float)
    rerun_without: Mapped[str | None] = mapped_column(String(1024))
    rerun_floor_tflops: Mapped[float | None] = mapped_column(Float)
    rerun_contended: Mapped[bool | None] = mapped_column(Boolean)


class ResultSeries(Base):
    """Every result of one GPU under one configuration, stack, variant and verdict, packed
    into one row (fleet/store/series.py): the report reads these instead of the results.

    A second copy of each result's figures, kept by ingest in the transaction that stores
    the result and rebuilt from the results by migration 0010 or `fleet db repair`. At
    10,000 hosts x 8 GPUs x 30 nights the report read 2.4 M result rows, seconds of work
    for the database driver alone; it reads 80,000 of these.
    """

    __tablename__ = "result_series"
    __table_args__ = (UniqueConstraint("gpu_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpu.id"))
    # The series' other key columns as one JSON text (series.series_key): a unique
    # constraint over the columns themselves would let NULL stacks repeat.
    key: Mapped[str] = mapped_column(Text)
    variant: Mapped[str] = mapped_column(String(160))
    correctness_failed: Mapped[bool] = mapped_column(Boolean)
    harness_version: Mapped[str] = mapped_column(String(128))
    dtype: Mapped[str] = mapped_column(String(8))
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str] = mapped_column(String(16))
    cache: Mapped[str] = mapped_column(String(16))
    thermal: Mapped[str] = mapped_column(String(16))
    concurrency: Mapped[str] = mapped_column(String(16))
    torch_version: Mapped[str | None] = mapped_column(String(128))
    cuda_runtime_version: Mapped[str | None] = mapped_column(String(128))
    cublas_version: Mapped[str | None] = mapped_column(String(128))
    # series.ELEMENT records, one per result, in the order they were stored (its count:
    # length(packed) / series.ELEMENT.itemsize).
    packed: Mapped[bytes]


class NodeResult(Base):
    """One figure of the node suite (agent/node/suite.py): a GPU's memory or host-link copy, a
    pair's copy, or the node's all-reduce, with the configuration it is compared within
    (kind, size, direction, pinned or pageable, GPU count, software stack) as columns."""

    __tablename__ = "node_result"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), index=True)
    provider_id: Mapped[int] = mapped_column(ForeignKey("provider.id"))
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"), index=True)
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"), index=True)
    collected_at: Mapped[dt.datetime]
    # The GPU (per-GPU kinds; a pair's source) and the pair's destination; NULL for the
    # node's all-reduce, or a GPU the document gave no identity.
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpu.id"))
    peer_gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpu.id"))
    # The variant of the GPU (of the node's first GPU for the all-reduce).
    variant: Mapped[str] = mapped_column(String(160))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    peer_index: Mapped[int | None] = mapped_column(Integer)
    suite_version: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str | None] = mapped_column(String(16))
    memory: Mapped[str | None] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    gpus_in_run: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str] = mapped_column(String(32))
    dtype: Mapped[str | None] = mapped_column(String(16))
    # The median GB/s of the repeats; the all-reduce's bus bandwidth.
    gbs: Mapped[float] = mapped_column(Float)
    algbw_gbs: Mapped[float | None] = mapped_column(Float)
    runs: Mapped[int] = mapped_column(Integer)
    min_gbs: Mapped[float] = mapped_column(Float)
    max_gbs: Mapped[float] = mapped_column(Float)
    cv: Mapped[float] = mapped_column(Float)
    ci95_low_gbs: Mapped[float | None] = mapped_column(Float)
    ci95_high_gbs: Mapped[float | None] = mapped_column(Float)
    peer_access: Mapped[bool | None] = mapped_column(Boolean)
    topology: Mapped[str | None] = mapped_column(String(32))
    link_gen: Mapped[int | None] = mapped_column(Integer)
    link_width: Mapped[int | None] = mapped_column(Integer)
    link_gen_max: Mapped[int | None] = mapped_column(Integer)
    link_width_max: Mapped[int | None] = mapped_column(Integer)
    datasheet_gbs: Mapped[float | None] = mapped_column(Float)
    datasheet_source: Mapped[str | None] = mapped_column(String(512))
    torch_version: Mapped[str | None] = mapped_column(String(128))
    cuda_runtime_version: Mapped[str | None] = mapped_column(String(128))
    nccl_version: Mapped[str | None] = mapped_column(String(128))
    wall_s: Mapped[float] = mapped_column(Float)
    # Suite 1.1.0 and later (0013): what was seen on the figure's GPUs around it (other
    # processes with their owners, a busy GPU), joined in words, and whether anything
    # was; a host copy's NUMA node; the all-reduce's NCCL transports (most used first)
    # and the NCCL_* / CUDA_VISIBLE_DEVICES settings it ran under; a pair's NVLink links
    # and fabric ("switch" or "direct").
    contended: Mapped[bool] = mapped_column(Boolean, server_default=false())
    contention: Mapped[str | None] = mapped_column(String(1024))
    numa_node: Mapped[int | None] = mapped_column(Integer)
    transport: Mapped[str | None] = mapped_column(String(64))
    nccl_settings: Mapped[str | None] = mapped_column(String(1024))
    nvlink_links: Mapped[int | None] = mapped_column(Integer)
    nvlink_fabric: Mapped[str | None] = mapped_column(String(16))
    # 0018: the all-reduce measured again in the same run without the settings that
    # could move it (agent/rerun/allreduce.py): its bus bandwidth, the settings taken out and
    # those kept (names, space-separated), and the floor the agent called it short under.
    rerun_gbs: Mapped[float | None] = mapped_column(Float)
    rerun_without: Mapped[str | None] = mapped_column(String(1024))
    rerun_kept: Mapped[str | None] = mapped_column(String(1024))
    rerun_floor_gbs: Mapped[float | None] = mapped_column(Float)
    rerun_transport: Mapped[str | None] = mapped_column(String(64))


class RunSetting(Base):
    """One setting a document's run measured under, with where it came from
    (fleet/model/settings.py): what settles whose a short figure is (0018)."""

    __tablename__ = "run_setting"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    # NULL where the agent withheld it (`withheld` says why).
    value: Mapped[str | None] = mapped_column(String(256))
    withheld: Mapped[str | None] = mapped_column(String(128))
    source: Mapped[str] = mapped_column(String(512))
    family: Mapped[str] = mapped_column(String(16))
    applies: Mapped[bool] = mapped_column(Boolean)


class JobResult(Base):
    """One figure of the job suite (agent/job/suite.py): a GPU's tokens a second on a
    transformer's training or decode step under one attention backend, with its
    configuration (the model, every dimension of the shape, data type, attention,
    compile, graph, optimizer, concurrency, thermal state, software stack) as columns,
    since a figure is compared only within its configuration (fleet/store/job.py)."""

    __tablename__ = "job_result"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), index=True)
    provider_id: Mapped[int] = mapped_column(ForeignKey("provider.id"))
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"), index=True)
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"), index=True)
    collected_at: Mapped[dt.datetime]
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpu.id"))
    variant: Mapped[str] = mapped_column(String(160))
    gpu_index: Mapped[int] = mapped_column(Integer)
    suite_version: Mapped[str] = mapped_column(String(128))
    workload: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(128))
    layers: Mapped[int] = mapped_column(Integer)
    width: Mapped[int] = mapped_column(Integer)
    heads: Mapped[int] = mapped_column(Integer)
    kv_heads: Mapped[int] = mapped_column(Integer)
    head_dim: Mapped[int] = mapped_column(Integer)
    ffn: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    context: Mapped[int | None] = mapped_column(Integer)
    params: Mapped[int] = mapped_column(BigInteger)
    dtype: Mapped[str] = mapped_column(String(16))
    attention: Mapped[str] = mapped_column(String(16))
    compiled: Mapped[bool] = mapped_column(Boolean)
    graph: Mapped[bool] = mapped_column(Boolean)
    optimizer: Mapped[str | None] = mapped_column(String(32))
    concurrency: Mapped[str] = mapped_column(String(16))
    gpus_in_run: Mapped[int] = mapped_column(Integer)
    thermal: Mapped[str] = mapped_column(String(16))
    # "train/flash": measured right after that soaked load on the same card.
    follows: Mapped[str | None] = mapped_column(String(32))
    torch_version: Mapped[str | None] = mapped_column(String(128))
    cuda_runtime_version: Mapped[str | None] = mapped_column(String(128))
    cudnn_version: Mapped[str | None] = mapped_column(String(128))
    tokens_per_step: Mapped[int] = mapped_column(BigInteger)
    steps: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    step_median_ms: Mapped[float] = mapped_column(Float)
    step_cv: Mapped[float] = mapped_column(Float)
    within_low: Mapped[float | None] = mapped_column(Float)
    within_high: Mapped[float | None] = mapped_column(Float)
    flop_per_token: Mapped[float] = mapped_column(Float)
    flop_per_token_causal: Mapped[float] = mapped_column(Float)
    tflops: Mapped[float] = mapped_column(Float)
    tflops_causal: Mapped[float] = mapped_column(Float)
    peak_tflops: Mapped[float | None] = mapped_column(Float)
    mfu: Mapped[float | None] = mapped_column(Float)
    bytes_per_step: Mapped[int | None] = mapped_column(BigInteger)
    gbs: Mapped[float | None] = mapped_column(Float)
    hbm_gbs: Mapped[float | None] = mapped_column(Float)
    hbm_share: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    loss: Mapped[float | None] = mapped_column(Float)
    correctness_passed: Mapped[bool] = mapped_column(Boolean)
    max_rel_error: Mapped[float | None] = mapped_column(Float)
    # soak.soaked; NULL where the result carries no soak (cool start, or `follows`).
    soaked: Mapped[bool | None] = mapped_column(Boolean)
    soak_s: Mapped[float | None] = mapped_column(Float)
    not_soaked: Mapped[bool] = mapped_column(Boolean)
    contended: Mapped[bool] = mapped_column(Boolean)
    power_capped: Mapped[bool] = mapped_column(Boolean)
    thermal_throttled: Mapped[bool] = mapped_column(Boolean)
    hw_slowdown: Mapped[bool] = mapped_column(Boolean)
    contention: Mapped[str | None] = mapped_column(String(1024))
    # Under load: the soak's median temperature where judged, else telemetry's maximum.
    temperature_c: Mapped[float | None] = mapped_column(Float)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    compile_s: Mapped[float | None] = mapped_column(Float)
    wall_s: Mapped[float] = mapped_column(Float)
    # The run's own wander, relative (fleet/repeat.py job_wander): with the job's
    # run-to-run spread, the interval a repeat run falls in.
    wander: Mapped[float | None] = mapped_column(Float)
    # Suite 1.1.0 on (migration 0017): the fastest backend that passed its gate, of its
    # GPU's workload and decode point; how grouped-query attention reached the kernel;
    # decode's point; the same GPU's memory copy in the run and the share of it read.
    headline: Mapped[bool | None] = mapped_column(Boolean)
    gqa: Mapped[str | None] = mapped_column(String(16))
    point: Mapped[str | None] = mapped_column(String(16))
    copy_gbs: Mapped[float | None] = mapped_column(Float)
    copy_share: Mapped[float | None] = mapped_column(Float)
    # Migration 0019: a short headline measured again without the run's settings that
    # can move a job (agent/rerun/job.py).
    rerun_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    rerun_share: Mapped[float | None] = mapped_column(Float)
    rerun_floor: Mapped[float | None] = mapped_column(Float)
    rerun_without: Mapped[str | None] = mapped_column(String(1024))
    rerun_contended: Mapped[bool | None] = mapped_column(Boolean)


class HostError(Base):
    """Something that went wrong on or with a host: from its document, or from reaching it."""

    __tablename__ = "host_error"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"), index=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"), index=True)
    # NULL when the host never sent a document (unreachable, agent crashed, timed out).
    document_id: Mapped[int | None] = mapped_column(ForeignKey("document.id"), index=True)
    stage: Mapped[str] = mapped_column(String(128))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    occurred_at: Mapped[dt.datetime]


class RunHost(Base):
    """One host in one probe run: what the inventory listed for it, and how it ended.

    The listing (`expect`, price, tags) is kept per run because inventories change: a
    report judges each document against what was listed when it was collected. The row
    is also the run's record of which hosts are done, so a resumed sweep probes only the
    rest, and a host whose task is delivered twice (a Celery worker killed after storing,
    before acknowledging) is stored once: a run holds at most one document per host.
    """

    __tablename__ = "run_host"
    __table_args__ = (UniqueConstraint("probe_run_id", "host_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    probe_run_id: Mapped[int] = mapped_column(ForeignKey("probe_run.id"))
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"), index=True)
    # "stored" (document_id set) or "failed" (host_error rows say why).
    status: Mapped[str] = mapped_column(String(16))
    document_id: Mapped[int | None] = mapped_column(ForeignKey("document.id"), index=True)
    # The inventory's `expect` for the host, as validated (fleet.inventory.Expect).
    expect: Mapped[dict[str, Any] | None]
    price_per_gpu_hour: Mapped[float | None] = mapped_column(Float)
    currency: Mapped[str | None] = mapped_column(String(3))
    tags: Mapped[list[str]] = mapped_column(Json)
    updated_at: Mapped[dt.datetime]
    # The document's collection time, where one was stored (0010): the report picks each
    # host's newest from these rows alone, without reading a document per run.
    collected_at: Mapped[dt.datetime | None]


class Network(Base):
    """A document's network as a whole (fleet/model/network.py): GPUDirect RDMA, the
    fabric NIC count, the GPUs the distances name, what was read and the agent's notes
    (0021). A document without a network block (an agent before it, or one that could
    not read it) has no row."""

    __tablename__ = "network"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), unique=True)
    format: Mapped[str] = mapped_column(String(32))
    fabric_nics: Mapped[int] = mapped_column(Integer)
    device_count: Mapped[int] = mapped_column(Integer)
    gdr_state: Mapped[str] = mapped_column(String(16))
    peermem: Mapped[str] = mapped_column(String(16))
    dmabuf: Mapped[str] = mapped_column(String(16))
    gdr_basis: Mapped[str] = mapped_column(String(512))
    # [{"index", "pci_address", "numa_node"}], the sources read and the notes, as sent.
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    sources: Mapped[list[str]] = mapped_column(Json)
    notes: Mapped[list[str]] = mapped_column(Json)


class NetworkDevice(Base):
    """One RDMA port or network interface of a document's network, in the agent's order
    (`position`), with its PCI distance to each GPU and the nearest of them (0021)."""

    __tablename__ = "network_device"
    __table_args__ = (UniqueConstraint("document_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    device: Mapped[str | None] = mapped_column(String(128))
    port: Mapped[int | None] = mapped_column(Integer)
    netdev: Mapped[str | None] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    fabric: Mapped[bool] = mapped_column(Boolean)
    link_layer: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str | None] = mapped_column(String(64))
    physical_state: Mapped[str | None] = mapped_column(String(64))
    up: Mapped[bool | None] = mapped_column(Boolean)
    rate_gbps: Mapped[float | None] = mapped_column(Float)
    width: Mapped[str | None] = mapped_column(String(64))
    speed: Mapped[str | None] = mapped_column(String(64))
    firmware: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(64))
    driver: Mapped[str | None] = mapped_column(String(64))
    pci_address: Mapped[str | None] = mapped_column(String(16))
    numa_node: Mapped[int | None] = mapped_column(Integer)
    mtu: Mapped[int | None] = mapped_column(Integer)
    # The nearest GPU's level (PIX, PXB, PHB, NODE, SYS) and those GPUs, "0,1"; NULL
    # where no distance is known. `gpu_distance` holds every GPU's: {"0": "PIX", ...}.
    nearest_level: Mapped[str | None] = mapped_column(String(8))
    nearest_gpus: Mapped[str | None] = mapped_column(String(256))
    gpu_distance: Mapped[dict[str, Any]]
    distance_source: Mapped[str | None] = mapped_column(String(32))
    sources: Mapped[list[str]] = mapped_column(Json)


class HostLimitsRow(Base):
    """A document's host limits and software versions (fleet/model/host_limits.py), the
    figures the metrics and sweeps read as columns and the block itself in `body` (0024).
    A document without the block (an agent before it, or one that could not read it) has
    no row."""

    __tablename__ = "host_limits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), unique=True)
    format: Mapped[str] = mapped_column(String(32))
    cpus_available: Mapped[float | None] = mapped_column(Float)
    memory_available_mib: Mapped[int | None] = mapped_column(BigInteger)
    shm_bytes: Mapped[int | None] = mapped_column(BigInteger)
    memlock_bytes: Mapped[int | None] = mapped_column(BigInteger)  # NULL: unlimited
    governor: Mapped[str | None] = mapped_column(String(64))
    import_torch_s: Mapped[float | None] = mapped_column(Float)
    container_toolkit: Mapped[str | None] = mapped_column(String(64))
    fabric_manager: Mapped[str | None] = mapped_column(String(64))
    body: Mapped[dict[str, Any]]


class StorageRow(Base):
    """A document's storage suite as a whole (fleet/model/storage.py) in `body`, and one
    row per target in storage_target (0024)."""

    __tablename__ = "storage"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"), unique=True)
    format: Mapped[str] = mapped_column(String(32))
    seconds: Mapped[float] = mapped_column(Float)
    body: Mapped[dict[str, Any]]


class StorageTargetRow(Base):
    """One folder the storage suite measured or refused, in the agent's order (0024)."""

    __tablename__ = "storage_target"
    __table_args__ = (UniqueConstraint("document_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("document.id"))
    position: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(256))
    role: Mapped[str] = mapped_column(String(16))
    fs_type: Mapped[str | None] = mapped_column(String(64))
    refused: Mapped[str | None] = mapped_column(String(512))
    direct: Mapped[bool | None] = mapped_column(Boolean)
    write_gbps: Mapped[float | None] = mapped_column(Float)
    read_gbps: Mapped[float | None] = mapped_column(Float)
    small_read_per_s: Mapped[float | None] = mapped_column(Float)
    checkpoint_write_gbps: Mapped[float | None] = mapped_column(Float)
    checkpoint_read_gbps: Mapped[float | None] = mapped_column(Float)


class ClusterStep(Base):
    """One step between a cluster's nodes as it ran (fleet/model/step.py's
    StepResult, docs/cluster.md): the whole cluster, a pair of a round, or a suspect
    against a known-good node (0022). `run_id` is the controller's for one cluster run:
    the steps of the newest run are a cluster's figures now. A failed step keeps its
    error and has no figures."""

    __tablename__ = "cluster_step"
    __table_args__ = (
        Index(None, "cluster", "run_id"),
        UniqueConstraint("run_id", "step_id"),
        CheckConstraint("kind IN ('cluster', 'pair', 'suspect')", name="kind"),
        CheckConstraint("ranks_per_node > 0", name="ranks_per_node"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    cluster: Mapped[str] = mapped_column(String(128))
    provider: Mapped[str | None] = mapped_column(String(128))
    step_id: Mapped[str] = mapped_column(String(128))
    position: Mapped[int] = mapped_column(Integer)  # the step's place in the run
    kind: Mapped[str] = mapped_column(String(16))
    round: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[dt.datetime]
    wall_s: Mapped[float | None] = mapped_column(Float)
    ranks_per_node: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str] = mapped_column(String(16))
    algo: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(String(4096))
    # How the step was launched: "ssh" (fleet's own connections) or "slurm" (srun on the
    # cluster's Slurm); NULL for steps stored before 0026, all over SSH.
    launcher: Mapped[str | None] = mapped_column(String(16))


class ClusterStepNode(Base):
    """One node of a cluster step, in node-rank order: its agent document of the same
    probe (NULL where none was stored), what NCCL said it used, and the NCCL_*, GLOO_*
    and CUDA_VISIBLE_DEVICES settings its ranks ran under (NULL: not recorded; a value
    that may be a secret is withheld, fleet/store/cluster.py) (0022)."""

    __tablename__ = "cluster_step_node"
    __table_args__ = (UniqueConstraint("cluster_step_id", "node_rank"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_step_id: Mapped[int] = mapped_column(ForeignKey("cluster_step.id"), index=True)
    node_rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255))
    document_id: Mapped[int | None] = mapped_column(ForeignKey("document.id"), index=True)
    # False where the node sent no event: no transport (the columns below are empty).
    reported: Mapped[bool] = mapped_column(Boolean)
    network: Mapped[str | None] = mapped_column(String(64))
    plugin: Mapped[str | None] = mapped_column(String(128))
    gdrdma: Mapped[bool | None] = mapped_column(Boolean)
    paths: Mapped[list[str]] = mapped_column(Json)
    interfaces: Mapped[list[str]] = mapped_column(Json)
    set_by_environment: Mapped[list[str]] = mapped_column(Json)
    settings: Mapped[dict[str, Any] | None]
    # The NCCL its ranks loaded, as NCCL's log said ("2.28.9+cuda13.0") (0026).
    nccl_version: Mapped[str | None] = mapped_column(String(64))
    # The node's RDMA error counters around the step: {"ports": n, "rose": [[port,
    # counter, rise], ...], "reset": ["PORT COUNTER", ...]}; NULL where none were sent
    # (no event, an agent before them) (0026).
    counters: Mapped[dict[str, Any] | None]
    # The node's side of a pair's per-NIC RDMA test: {"role": ..., "skipped": ...,
    # "tests": [[device, port, rate_gbps, gbps, gdr, error, peer], ...]}; NULL where it did not
    # run (0027).
    nics: Mapped[dict[str, Any] | None]


# The collectives a cluster step measures (fleet/model/step.py's Op), as the check
# constraint lists them (0022: the first two; 0025: all four).
CLUSTER_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
OPS_SQL = ", ".join(f"'{op}'" for op in CLUSTER_OPS)


class ClusterFigure(Base):
    """One collective at one size of a cluster step, in nccl-tests' definitions, GB/s and
    microseconds (fleet/model/step.py's StepFigure) (0022)."""

    __tablename__ = "cluster_figure"
    __table_args__ = (
        CheckConstraint(f"op IN ({OPS_SQL})", name="op"),
        CheckConstraint("size_bytes > 0", name="size_bytes"),
        CheckConstraint("busbw_gbs >= 0 AND algbw_gbs >= 0 AND time_us >= 0",
                        name="figures"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cluster_step_id: Mapped[int] = mapped_column(ForeignKey("cluster_step.id"), index=True)
    op: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    busbw_gbs: Mapped[float] = mapped_column(Float)
    algbw_gbs: Mapped[float] = mapped_column(Float)
    time_us: Mapped[float] = mapped_column(Float)
    busbw_min_gbs: Mapped[float | None] = mapped_column(Float)
    busbw_max_gbs: Mapped[float | None] = mapped_column(Float)
