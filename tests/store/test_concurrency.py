"""Several processes ingesting at once lose nothing and store nothing twice.

Four processes (spawned, as separate controllers would be) each store the same 50
documents, in their own shuffled order, plus 25 of their own. The documents share hosts,
so the processes also race on the same provider, host and GPU rows, and append to the
same GPUs' result series.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

from sqlalchemy import Engine, func, select

from fleet.store import series
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
        # Four writers appended to the same GPUs' series at once: none lost another's.
        problems = series.compare(conn)
    assert sorted(hashes) == sorted(every_hash)
    assert results_stored == 2 * len(every_hash)
    assert gpus == 2 * HOSTS
    assert problems == []


def test_concurrent_fleet_ingest_commands_lose_nothing(store_url: str, engine: Engine,
                                                       tmp_path: Path) -> None:
    """The same race through `fleet ingest`, which on SQLite stores its files in batches
    (each waiting for the one writer's lock) and on PostgreSQL one by one: every document
    ends up stored exactly once."""
    shared = []
    for seed in range(SHARED):
        path = tmp_path / f"shared-{seed}.json"
        path.write_text(_doc(seed))
        shared.append(str(path))
    commands = []
    for worker in range(WORKERS):
        files = list(shared)
        for i in range(OWN):
            path = tmp_path / f"own-{worker}-{i}.json"
            path.write_text(_doc(1000 * (worker + 1) + i))
            files.append(str(path))
        random.Random(worker).shuffle(files)
        commands.append(subprocess.Popen(
            [sys.executable, "-m", "fleet", "ingest", "--provider", "lambda", *files,
             "--db", store_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    finished = [(process, *process.communicate(timeout=300)) for process in commands]
    for process, _, stderr in finished:
        assert process.returncode == 0, stderr
    said: dict[str, list[str]] = {}
    for _, stdout, _ in finished:
        for line in stdout.splitlines():
            words = line.split()
            outcome, name = ("already", words[2]) if words[0] == "already" else words[:2]
            said.setdefault(name.rstrip(":"), []).append(outcome)
    assert len(said) == SHARED + WORKERS * OWN
    assert all(len(said[path]) == WORKERS for path in shared)
    assert all(outcomes.count("stored") == 1 and set(outcomes) <= {"stored", "already"}
               for outcomes in said.values()), "each file stored by exactly one command"
    with engine.connect() as conn:
        assert series.compare(conn) == []
    with engine.connect() as conn:
        documents = conn.execute(select(func.count(Document.id))).scalar_one()
        results_stored = conn.execute(select(func.count(BenchmarkResult.id))).scalar_one()
    assert documents == SHARED + WORKERS * OWN
    assert results_stored == 2 * documents
