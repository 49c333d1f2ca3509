"""A sweep's past nights read back from the store, as `fleet.analysis.sweep.history` compares them.

Every fact comes from the store's columns (runs, run hosts, fingerprints, results): each
GPU's TFLOP/s per benchmark series and its results' run-to-run sd, its compared
configuration, its health verdict and counters, and the host's listing judged against its
fingerprints as the report judges it (fleet/analysis/listing/mismatches.py). Thirty nights of a
large fleet's document bodies would each have to be read and validated again otherwise.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from sqlalchemy import Engine, or_, select

from fleet.analysis.listing.expectation import FOUND_COLUMNS, FoundGpu, check_found, stored_expect
from fleet.analysis.sweep.history import CONFIG_FIELDS, HOST_FIELDS, GpuState, HostNight, Night
from fleet.inventory import Expect
from fleet.store.models import (
    BenchmarkResult,
    Fingerprint,
    Gpu,
    Host,
    HostLimitsRow,
    ProbeRun,
    Provider,
    RunHost,
)
from fleet.store.query import no_gpu_reasons, software_stack

HISTORY_NIGHTS = 30


def _label(row: Any) -> str:
    """A GPU's series: a soaked night is never judged against cool-start ones."""
    thermal = "" if row.thermal == "cool-start" else f" {row.thermal}"
    return (f"{row.dtype} {row.m}x{row.n}x{row.k} {row.mode}{thermal} {row.cache}-L2 "
            f"{row.concurrency} harness {row.harness_version}")


def read_nights(engine: Engine, sweep: str, upto_run: int | None = None,
                limit: int = HISTORY_NIGHTS) -> list[Night]:
    """The newest `limit` ended runs of `sweep` (up to `upto_run`, which counts even
    while running: it is the night being reported), oldest first, as Nights.

    A run that did not end is a night that was killed: its hosts missing from it would
    read as gone, and back the next night as new. One that ended with hosts no worker
    reached (left open for --resume) counts: those hosts are settled as failed in it."""
    stmt = select(ProbeRun.id, ProbeRun.started_at).where(ProbeRun.kind == "sweep",
                                                          ProbeRun.sweep == sweep)
    if upto_run is not None:
        stmt = stmt.where(ProbeRun.id <= upto_run, or_(ProbeRun.ended_at.is_not(None),
                                                       ProbeRun.id == upto_run))
    else:
        stmt = stmt.where(ProbeRun.ended_at.is_not(None))
    with engine.connect() as conn:
        runs = list(reversed(conn.execute(stmt.order_by(ProbeRun.id.desc()).limit(limit))
                             .all()))
        run_ids = [run_id for run_id, _ in runs]
        hosts = conn.execute(
            select(RunHost.probe_run_id, Provider.name, Host.name, Host.id, RunHost.status,
                   RunHost.document_id, RunHost.expect)
            .join(Host, RunHost.host_id == Host.id)
            .join(Provider, Host.provider_id == Provider.id)
            .where(RunHost.probe_run_id.in_(run_ids))).all()
        # The nights' documents as a subquery: a list of their ids would pass SQLite's
        # limit on bound values (32,766) for a thousand hosts over thirty nights.
        document_ids = select(RunHost.document_id).where(RunHost.probe_run_id.in_(run_ids),
                                                         RunHost.document_id.is_not(None))
        compared = [getattr(Fingerprint, name) for name in CONFIG_FIELDS if name != "uuid"]
        checked = [getattr(Fingerprint, name) for name in FOUND_COLUMNS]
        fingerprints = conn.execute(
            select(Fingerprint.document_id, Fingerprint.gpu_index, Fingerprint.variant,
                   Gpu.uuid, *compared, *checked, Fingerprint.health,
                   Fingerprint.health_counters, Fingerprint.health_action)
            .join(Gpu, Fingerprint.gpu_id == Gpu.id)
            .where(Fingerprint.document_id.in_(document_ids.scalar_subquery()))).all()
        results = conn.execute(
            select(BenchmarkResult.document_id, BenchmarkResult.gpu_index,
                   BenchmarkResult.tflops, BenchmarkResult.dtype, BenchmarkResult.m,
                   BenchmarkResult.n, BenchmarkResult.k, BenchmarkResult.mode,
                   BenchmarkResult.cache, BenchmarkResult.thermal,
                   BenchmarkResult.concurrency, BenchmarkResult.harness_version,
                   BenchmarkResult.correctness_passed, BenchmarkResult.torch_version,
                   BenchmarkResult.cuda_runtime_version, BenchmarkResult.cublas_version,
                   BenchmarkResult.repeat_sd, BenchmarkResult.contended)
            .where(BenchmarkResult.document_id.in_(document_ids.scalar_subquery()))).all()
        limits = {int(row.document_id): {name: getattr(row, name) for name in HOST_FIELDS}
                  for row in conn.execute(
                      select(HostLimitsRow.document_id,
                             *(getattr(HostLimitsRow, name) for name in HOST_FIELDS))
                      .where(HostLimitsRow.document_id.in_(document_ids.scalar_subquery())))}
        listed = {h.document_id: h.expect for h in hosts
                  if h.document_id is not None and h.expect}
        with_gpus = {fp.document_id for fp in fingerprints}
        reasons = no_gpu_reasons(conn, sorted(set(listed) - with_gpus))
    tflops: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    repeat_sds: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    stacks: dict[tuple[int, int], set[str]] = defaultdict(set)
    for r in results:
        stacks[(r.document_id, r.gpu_index)].add(
            software_stack(r.torch_version, r.cuda_runtime_version, r.cublas_version))
        # A wrong answer's speed is no speed; a night measured beside another process
        # is the renter's contention, not the card's (fleet/analysis/contention.py): a
        # regression must not be made of it, nor a baseline.
        if r.correctness_passed and not r.contended:
            tflops[(r.document_id, r.gpu_index)][_label(r)].append(r.tflops)
            if r.repeat_sd is not None:
                repeat_sds[(r.document_id, r.gpu_index)][_label(r)].append(r.repeat_sd)
    gpus: dict[int, list[GpuState]] = defaultdict(list)
    found: dict[int, list[FoundGpu]] = defaultdict(list)
    for fp in fingerprints:
        config = {name: getattr(fp, name) for name in CONFIG_FIELDS}
        stack = stacks.get((fp.document_id, fp.gpu_index))
        config["software_stack"] = "; ".join(sorted(stack)) if stack else None
        medians = {label: float(statistics.median(values)) for label, values in
                   tflops[(fp.document_id, fp.gpu_index)].items()}
        sds = {label: float(statistics.median(values)) for label, values in
               repeat_sds[(fp.document_id, fp.gpu_index)].items()}
        gpus[fp.document_id].append(GpuState(fp.gpu_index, fp.uuid, fp.variant, config,
                                             medians, fp.health, fp.health_counters, sds,
                                             fp.health_action))
        found[fp.document_id].append(FoundGpu(
            fp.gpu_index, fp.variant_label, fp.family, fp.form_factor, fp.memory_gb,
            fp.memory_total_mib, fp.power_limit_enforced_w or fp.power_limit_w))
    verdicts: dict[int, tuple[str, ...] | None] = {}
    expects: dict[str, Expect | None] = {}
    for document_id, expect in listed.items():
        judge = stored_expect(expect, expects)
        verdict = None if judge is None else check_found(
            judge, sorted(found.get(document_id, []), key=lambda g: g.index),
            reasons.get(document_id))
        verdicts[document_id] = None if verdict is None else verdict.problems
    by_run: dict[int, dict[str, HostNight]] = defaultdict(dict)
    for run_id, provider, host, _, status, document_id, _ in hosts:
        mismatches = verdicts.get(document_id) if document_id is not None else None
        states = tuple(sorted(gpus.get(document_id, []), key=lambda g: g.index)) \
            if document_id is not None else ()
        by_run[run_id][f"{provider}/{host}"] = HostNight(
            provider, host, status, states, mismatches,
            limits.get(document_id) if document_id is not None else None)
    return [Night(run_id, started_at, by_run.get(run_id, {})) for run_id, started_at in runs]
