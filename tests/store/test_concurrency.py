"""Several processes ingesting at once lose nothing and store nothing twice.

Four processes (spawned, as separate controllers would be) each store the same 50
documents, in their own shuffled order, plus 25 of their own. The documents share hosts,
so the processes also race on the same provider, host and GPU rows.
"""

from __future__ import annotations

import json
import multiprocessing
import random
from collections import Counter

from sqlalchemy import Engine, func, select

from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Origin, Outcome, RunInfo, parse_text, prepare
from fleet.store.models import BenchmarkResult, Document, Gpu
from tests.store import factory

WORKERS = 4
SHARED = 50
OWN = 25
HOSTS = 10


def _ingest(args: tuple[str, int, list[str]]) -> list[tuple[str, str]]:
    url, worker, texts = args
    engine = open_engine(resolve(url))
    outcomes = []
    try:
        with Ingest(engine, RunInfo(sweep=f"worker-{worker}")) as ingest:
            for number, text in enumerate(texts):
                prepared = prepare(parse_text(text, f"worker {worker} doc {number}"), "doc")
                stored = ingest.store_prepared(prepared, Origin("lambda"))
                outcomes.append((stored.content_hash, stored.outcome.value))
    finally:
        engine.dispose()
    return outcomes


def _doc(seed: int) -> str:
    return json.dumps(factory.document(host=f"gpu-{seed % HOSTS:02d}", gpus=2, runs=20,
                                       seed=seed))


def test_concurrent_ingest_loses_nothing(store_url: str, engine: Engine) -> None:
    shared = [_doc(seed) for seed in range(SHARED)]
    jobs = []
    for worker in range(WORKERS):
        own = [_doc(1000 * (worker + 1) + i) for i in range(OWN)]
        texts = shared + own
        random.Random(worker).shuffle(texts)
        jobs.append((store_url, worker, texts))
    with multiprocessing.get_context("spawn").Pool(WORKERS) as pool:
        results = pool.map(_ingest, jobs)

    outcomes = [outcome for worker in results for outcome in worker]
    stored = Counter(h for h, outcome in outcomes if outcome == Outcome.STORED.value)
    every_hash = {h for h, _ in outcomes}
    assert len(every_hash) == SHARED + WORKERS * OWN
    assert all(stored[h] == 1 for h in every_hash), "each document stored by exactly one"

    with engine.connect() as conn:
        hashes = conn.execute(select(Document.content_hash)).scalars().all()
        results_stored = conn.execute(select(func.count(BenchmarkResult.id))).scalar_one()
        gpus = conn.execute(select(func.count(Gpu.id))).scalar_one()
    assert sorted(hashes) == sorted(every_hash)
    assert results_stored == 2 * len(every_hash)
    assert gpus == 2 * HOSTS
