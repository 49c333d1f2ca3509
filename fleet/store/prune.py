"""Retention: old results keep their statistics and lose their raw samples.

A result's raw per-run times and telemetry series are most of the store's size: packed
in benchmark_result (samples_ms, telemetry_series: ~1.5 KiB per 200-sample result) and
again as JSON in the document kept whole (about half of an 8-GPU document's 66 KiB;
bench/RESULTS.md, Store). They are read only to look into one night's measurement; the
median, interval, CV, clocks and flags stay and keep serving every report and comparison
with history. Both copies are emptied, the document marked `samples_pruned_at`. The node
suite's figures keep their samples only in the document (node_result holds the median,
range, CV and interval), about 1,000 numbers for an 8-GPU node; those go with the rest.
The job suite's figures carry no raw samples (their step times come as statistics), and
their soak curves stay, as the matmul's do.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, exists, func, or_, select, update

from fleet.errors import InputError
from fleet.store.database import WRITES
from fleet.store.models import BenchmarkResult, Document, NodeResult

BATCH = 200  # documents rewritten per transaction


@dataclass(frozen=True)
class Pruned:
    """What a prune emptied: its cutoff, results, documents and bytes."""

    cutoff: dt.datetime
    results: int  # results whose samples were emptied
    documents: int  # documents whose bodies lost their samples
    bytes_freed: int  # packed samples and JSON (the file shrinks after VACUUM / autovacuum)


def prune_samples(engine: Engine, keep_days: int, now: dt.datetime | None = None) -> Pruned:
    """Empty the raw samples of results collected more than `keep_days` days ago."""
    if keep_days < 0:
        raise InputError("--keep-samples-days must be 0 or more")
    cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=keep_days)
    r = BenchmarkResult
    old = (r.collected_at < cutoff,
           or_(func.length(r.samples_ms) > 0, func.length(r.telemetry_series) > 0))
    with engine.connect().execution_options(**{WRITES: True}) as conn:
        with conn.begin():
            count, size = conn.execute(
                select(func.count(), func.coalesce(func.sum(
                    func.length(r.samples_ms) + func.length(r.telemetry_series)), 0))
                .where(*old)).one()
            conn.execute(update(r).where(*old).values(samples_ms=b"", telemetry_series=b""))
        documents, body_bytes = _prune_bodies(conn, cutoff)
    return Pruned(cutoff, int(count), documents, int(size) + body_bytes)


def _without_samples(body: dict[str, Any]) -> dict[str, Any]:
    benchmarks = [{**result, "samples_ms": [], "telemetry_series": []}
                  for result in body.get("benchmarks", [])]
    pruned = {**body, "benchmarks": benchmarks}
    if "node" in body:  # documents before the node suite have no such key, nor get one
        pruned["node"] = [{**result, "stats": {**result["stats"], "samples_gbs": []}}
                          for result in body["node"]]
    return pruned


def _prune_bodies(conn: Connection, cutoff: dt.datetime) -> tuple[int, int]:
    """Empty the samples in old documents' bodies, a batch per transaction, so a large
    prune neither holds one long lock nor loses its work when stopped."""
    d = Document
    documents = freed = 0
    while True:
        with conn.begin():
            batch = conn.execute(
                select(d.id, d.body)
                .where(d.collected_at < cutoff, d.samples_pruned_at.is_(None),
                       or_(d.benchmark_count > 0,
                           exists().where(NodeResult.document_id == d.id)))
                .order_by(d.id).limit(BATCH)).all()
            now = dt.datetime.now(dt.UTC)
            for document_id, body in batch:
                pruned = _without_samples(body)
                freed += len(orjson.dumps(body)) - len(orjson.dumps(pruned))
                conn.execute(update(d).where(d.id == document_id)
                             .values(body=pruned, samples_pruned_at=now))
        documents += len(batch)
        if len(batch) < BATCH:
            return documents, freed
