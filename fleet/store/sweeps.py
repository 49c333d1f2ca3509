"""Sweep runs in the store: creating, finding, finishing, and reading them back as nights.

A sweep is a probe_run of kind "sweep" named by `sweep`. It is created before any host is
probed (so Celery tasks can carry its id) and finished only when its controller got to
the end: a run with no `finished_at` is one that crashed or was killed, which is what
`fleet sweep --resume` continues.
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Text, cast, insert, or_, select, update

from fleet import __version__
from fleet.document import AgentDocument, read_stored
from fleet.expectation import FOUND_COLUMNS, FoundGpu, check_found, stored_expect
from fleet.history import CONFIG_FIELDS, GpuState, HostNight, Night
from fleet.inventory import Expect
from fleet.store.database import WRITES
from fleet.store.ingest import RunInfo
from fleet.store.models import (
    BenchmarkResult,
    Document,
    Fingerprint,
    Gpu,
    Host,
    HostError,
    ProbeRun,
    Provider,
    RunHost,
)
from fleet.store.query import in_chunks, no_gpu_reasons, software_stack

log = logging.getLogger(__name__)

HISTORY_NIGHTS = 30


@dataclass(frozen=True)
class SweepRun:
    """One run of a named sweep: its id, inventory, start and finish."""

    id: int
    sweep: str
    inventory: str | None
    started_at: dt.datetime
    finished_at: dt.datetime | None


@dataclass(frozen=True)
class SettledHost:
    """How a host ended in a run: stored with its document, or failed and why."""

    status: str  # "stored" or "failed"
    document_id: int | None
    stage: str | None = None  # of the newest failure, when failed
    message: str | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def create_run(engine: Engine, run: RunInfo) -> int:
    """Start a probe run as `run` describes; its id."""
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        return int(conn.execute(insert(ProbeRun).returning(ProbeRun.id), {
            "kind": run.kind, "sweep": run.sweep, "inventory": run.inventory,
            "controller_version": __version__, "agent_version": run.agent_version,
            "started_at": _now(), "finished_at": None, "ended_at": None}).scalar_one())


def finish_run(engine: Engine, run_id: int) -> None:
    """Mark the run finished: it is no longer there for --resume."""
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        now = _now()
        conn.execute(update(ProbeRun).where(ProbeRun.id == run_id)
                     .values(finished_at=now, ended_at=now))


def end_run(engine: Engine, run_id: int) -> None:
    """The controller reached the end, leaving hosts open for --resume."""
    with engine.connect().execution_options(**{WRITES: True}) as conn, conn.begin():
        conn.execute(update(ProbeRun).where(ProbeRun.id == run_id)
                     .values(ended_at=_now()))


def _sweep_run(row: Any) -> SweepRun:
    return SweepRun(row.id, row.sweep, row.inventory, row.started_at, row.finished_at)


def newest_run(engine: Engine, sweep: str, unfinished: bool = False) -> SweepRun | None:
    """The newest run of `sweep` (the newest unfinished one if asked); None when none."""
    stmt = select(ProbeRun).where(ProbeRun.kind == "sweep", ProbeRun.sweep == sweep)
    if unfinished:
        stmt = stmt.where(ProbeRun.finished_at.is_(None))
    with engine.connect() as conn:
        row = conn.execute(stmt.order_by(ProbeRun.id.desc()).limit(1)).first()
    return None if row is None else _sweep_run(row)


def settled_hosts(engine: Engine, run_id: int) -> dict[str, SettledHost]:
    """The run's hosts that ended, by provider/host, with the newest failure's reason."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Provider.name, Host.name, RunHost.status, RunHost.document_id, Host.id)
            .join(Host, RunHost.host_id == Host.id)
            .join(Provider, Host.provider_id == Provider.id)
            .where(RunHost.probe_run_id == run_id)).all()
        errors = {host_id: (stage, message) for host_id, stage, message in conn.execute(
            select(HostError.host_id, HostError.stage, HostError.message)
            .where(HostError.probe_run_id == run_id, HostError.document_id.is_(None))
            .order_by(HostError.id)).all()}
    settled = {}
    for provider, host, status, document_id, host_id in rows:
        stage, message = errors.get(host_id, (None, None)) if status != "stored" else (None,
                                                                                      None)
        settled[f"{provider}/{host}"] = SettledHost(status, document_id, stage, message)
    return settled


def documents_stored(engine: Engine, run_id: int) -> dict[str, int]:
    """How many documents the run holds per provider/host (exactly-once checks)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Provider.name, Host.name, Document.id)
            .join(Host, Document.host_id == Host.id)
            .join(Provider, Host.provider_id == Provider.id)
            .where(Document.probe_run_id == run_id)).all()
    counts: dict[str, int] = defaultdict(int)
    for provider, host, _ in rows:
        counts[f"{provider}/{host}"] += 1
    return dict(counts)


def load_documents(engine: Engine, ids: Collection[int]) -> dict[int, AgentDocument]:
    """The stored documents with `ids`, by id."""
    return dict(iter_documents(engine, ids))


# Documents validated at a time by `iter_documents`: an 8-GPU document is ~66 KiB of JSON
# and some hundreds of KiB as a model.
DOCUMENTS_AT_ONCE = 100


def iter_documents(engine: Engine, ids: Collection[int]) -> Iterator[tuple[int, AgentDocument]]:
    """The documents, validated, DOCUMENTS_AT_ONCE at a time: a caller that keeps only
    what it concludes from each holds one chunk in memory, not a month of nights. One that
    no longer validates is left out, with a warning naming it."""
    for chunk in in_chunks(sorted(ids), DOCUMENTS_AT_ONCE):
        with engine.connect() as conn:
            # As text, validated in one pass by pydantic (fleet/analysis/dataset.py).
            rows = conn.execute(select(Document.id, cast(Document.body, Text))
                                .where(Document.id.in_(chunk))).all()
        for document_id, body in rows:
            document = read_stored(int(document_id), body)
            if isinstance(document, str):
                log.warning("%s", document)  # its host's night counts, unjudged
                continue
            yield int(document_id), document


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
                   Gpu.uuid, *compared, *checked).join(Gpu, Fingerprint.gpu_id == Gpu.id)
            .where(Fingerprint.document_id.in_(document_ids.scalar_subquery()))).all()
        results = conn.execute(
            select(BenchmarkResult.document_id, BenchmarkResult.gpu_index,
                   BenchmarkResult.tflops, BenchmarkResult.dtype, BenchmarkResult.m,
                   BenchmarkResult.n, BenchmarkResult.k, BenchmarkResult.mode,
                   BenchmarkResult.cache, BenchmarkResult.thermal,
                   BenchmarkResult.concurrency, BenchmarkResult.harness_version,
                   BenchmarkResult.correctness_passed, BenchmarkResult.torch_version,
                   BenchmarkResult.cuda_runtime_version, BenchmarkResult.cublas_version)
            .where(BenchmarkResult.document_id.in_(document_ids.scalar_subquery()))).all()
        listed = {h.document_id: h.expect for h in hosts
                  if h.document_id is not None and h.expect}
        with_gpus = {fp.document_id for fp in fingerprints}
        reasons = no_gpu_reasons(conn, sorted(set(listed) - with_gpus))
    tflops: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    stacks: dict[tuple[int, int], set[str]] = defaultdict(set)
    for r in results:
        stacks[(r.document_id, r.gpu_index)].add(
            software_stack(r.torch_version, r.cuda_runtime_version, r.cublas_version))
        if r.correctness_passed:  # a wrong answer's speed is no speed
            tflops[(r.document_id, r.gpu_index)][_label(r)].append(r.tflops)
    gpus: dict[int, list[GpuState]] = defaultdict(list)
    found: dict[int, list[FoundGpu]] = defaultdict(list)
    for fp in fingerprints:
        config = {name: getattr(fp, name) for name in CONFIG_FIELDS}
        stack = stacks.get((fp.document_id, fp.gpu_index))
        config["software_stack"] = "; ".join(sorted(stack)) if stack else None
        medians = {label: float(statistics.median(values)) for label, values in
                   tflops[(fp.document_id, fp.gpu_index)].items()}
        gpus[fp.document_id].append(GpuState(fp.gpu_index, fp.uuid, fp.variant, config,
                                             medians))
        found[fp.document_id].append(FoundGpu(
            fp.gpu_index, fp.variant_label, fp.family, fp.form_factor, fp.memory_gb,
            fp.memory_total_mib, fp.power_limit_enforced_w or fp.power_limit_w))
    # Judged from the fingerprint columns, as the report judges its hosts
    # (fleet/analysis/listing.py): thirty nights of a large fleet's document bodies would
    # each have to be read and validated again.
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
        by_run[run_id][f"{provider}/{host}"] = HostNight(provider, host, status, states,
                                                         mismatches)
    return [Night(run_id, started_at, by_run.get(run_id, {})) for run_id, started_at in runs]
