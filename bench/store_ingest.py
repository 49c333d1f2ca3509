"""How fast does the store take documents in, and answer the report's main query?

Ingests 100,000 benchmark results with 200 raw samples each, as fleet-agent/1 documents
of --gpus GPUs (one result per GPU: 12,500 documents of 8 GPUs by default), into a new
SQLite file and a new PostgreSQL database. The documents are written as files, one
directory per provider (not timed), then stored through `fleet ingest`'s own pipeline
(fleet/store/intake.py: reader processes read, validate and prepare them, this process
stores 100 to a transaction; `--jobs 1`: all in one process, `--batch 1`: one document
to a transaction), one provider after the other, as `fleet ingest --provider P DIR`
four times. Timed from the first file read to the last commit. Then the report's main
query (per provider and variant, the median of per-GPU medians) over all of it.

    python bench/store_ingest.py --gpus 1
    python bench/store_ingest.py --gpus 8 --jobs 1
    python bench/store_ingest.py --gpus 1 --batch 1 --workers 2 --no-sqlite --postgresql postgresql://postgres@127.0.0.1/postgres
    python bench/store_ingest.py --compare-samples   # packed float64 against JSON text
    python bench/store_ingest.py --gpus 8 --results 16000 --node   # with the node suite
    python bench/store_ingest.py --gpus 1 --soaked   # soaked results: each stored with its
                                                     # repeat interval, its GPU's history read
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import random
import sqlite3
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import psycopg

from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.intake import BATCH_DOCUMENTS, default_jobs, ingest_files
from fleet.store.models import pack_floats
from fleet.store.query import ResultFilter, list_results, summarise_variants
from fleet.store.schema import upgrade
from tests.store import factory, node_factory

PROVIDERS = ("lambda", "coreweave", "aws", "gcp")
VARIANTS = tuple(factory.VARIANTS)
SPEED = {"lambda": 1.0, "coreweave": 0.97, "aws": 0.93, "gcp": 0.99}
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Documents:
    """Distinct, valid documents, cheaply: a validated template per variant, with new
    hostnames, UUIDs, times and samples (and statistics computed from them) per copy."""

    def __init__(self, gpus: int, samples: int, hosts: int, node: bool = False,
                 soaked: bool = False) -> None:
        self.gpus, self.samples, self.hosts = gpus, samples, hosts
        # Soaked (harness 1.3): ingest reads each GPU's series for the repeat interval's
        # history, 100 results a GPU by the end (1,000 hosts).
        self.templates = {v: factory.document(gpus=gpus, variant=v, runs=samples,
                                              harness="1.3.0" if soaked else "1")
                          for v in VARIANTS}
        if node:  # the node suite's figures as agent/node/suite.py measures them
            for template in self.templates.values():
                template["node"] = node_factory.node_results(template)

    def make(self, number: int) -> tuple[str, bytes]:
        rng = random.Random(number)
        host = number % self.hosts
        provider = PROVIDERS[host % len(PROVIDERS)]
        variant = VARIANTS[host % len(VARIANTS)]
        template = self.templates[variant]
        name = f"{provider}-{host:05d}"
        doc = dict(template)
        doc["collected_at"] = (START + dt.timedelta(minutes=number)).isoformat()
        doc["host"] = dict(template["host"], hostname=name)
        doc["gpus"] = [dict(gpu, uuid=factory.gpu_uuid(name, gpu["index"]))
                       for gpu in template["gpus"]]
        peak = factory.VARIANTS[variant]["peak"] * 0.9 * SPEED[provider]
        results = []
        for gpu in doc["gpus"]:
            result = dict(template["benchmarks"][gpu["index"]], gpu_uuid=gpu["uuid"])
            flops = 2.0 * result["m"] * result["n"] * result["k"]
            median = flops / (peak * (1 + rng.gauss(0, 0.02)) * 1e12) * 1e3
            values = factory.samples(rng, median, self.samples)
            stats = factory.summary(values)
            statistic = result.get("statistic") or "median"
            tflops = flops / (stats[f"{statistic}_ms"] * 1e-3) / 1e12
            result.update(samples_ms=values, stats=stats, tflops=tflops)
            if result.get("soak"):
                drop = result["soak"]["drop"]
                result["soak"] = dict(result["soak"], first_20s_tflops=tflops / (1 - drop))
            results.append(result)
        doc["benchmarks"] = results
        if "node" in template:
            uuids = {gpu["index"]: gpu["uuid"] for gpu in doc["gpus"]}
            doc["node"] = [dict(figure, gpu_uuid=uuids.get(figure["gpu_index"]),
                                peer_uuid=uuids.get(figure.get("peer_index")))
                           for figure in template["node"]]
        return provider, orjson.dumps(doc)


def machine_busy_s() -> float:
    """CPU-seconds every core of the machine has been busy since boot (/proc/stat): the
    readers are the forkserver's children, not this process's, and the machine is shared,
    so this says how much of it the run kept busy."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = \
            (int(v) for v in stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def write_documents(directory: Path, count: int, gpus: int, samples: int,
                    node: bool = False, soaked: bool = False) -> dict[str, list[str]]:
    """The documents as files, one directory per provider (not timed)."""
    documents = Documents(gpus, samples, hosts=1000, node=node, soaked=soaked)
    names: dict[str, list[str]] = {provider: [] for provider in PROVIDERS}
    for provider in PROVIDERS:
        (directory / provider).mkdir()
    for number in range(count):
        provider, text = documents.make(number)
        path = directory / provider / f"{number:06d}.json"
        path.write_bytes(text)
        names[provider].append(str(path))
    return names


def _ingest(args: tuple[str, int, int, dict[str, list[str]], int, int, Any]
            ) -> dict[str, float]:
    """One ingesting process: `fleet ingest --provider P DIR` for each provider in turn,
    on its share of the files, through the command's own pipeline."""
    url, worker, workers, names, batch, jobs, barrier = args
    mine = {provider: paths[worker::workers] for provider, paths in names.items()}
    engine = open_engine(resolve(url))
    barrier.wait()
    begin, cpu = time.perf_counter(), time.process_time()
    stored = 0
    with Ingest(engine, RunInfo(sweep="bench")) as run:
        for provider, paths in mine.items():
            counts = ingest_files(run, paths, Origin(provider), batch=batch, jobs=jobs,
                                  on_item=lambda item: None)
            stored += counts["stored"]
    wall = time.perf_counter() - begin
    engine.dispose()
    return {"wall": wall, "documents": stored, "cpu": time.process_time() - cpu,
            "bytes": sum(os.path.getsize(p) for paths in mine.values() for p in paths)}


def run(url: str, label: str, args: argparse.Namespace, names: dict[str, list[str]]
        ) -> dict[str, Any]:
    engine = open_engine(resolve(url))
    upgrade(engine)
    engine.dispose()
    context = multiprocessing.get_context("spawn")
    barrier = context.Manager().Barrier(args.workers + 1)
    # Not multiprocessing.Pool: its daemonic workers may not start the readers.
    with ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        pending = [pool.submit(_ingest, (url, w, args.workers, names, args.batch, args.jobs,
                                         barrier)) for w in range(args.workers)]
        load_before = os.getloadavg()[0]
        barrier.wait()
        begin, busy = time.perf_counter(), machine_busy_s()
        timings = [future.result() for future in pending]
        wall = time.perf_counter() - begin
        busy = machine_busy_s() - busy
        load_after = os.getloadavg()[0]
    documents = sum(t["documents"] for t in timings)
    expected = sum(len(paths) for paths in names.values())
    if documents != expected:
        raise SystemExit(f"stored {documents} documents of {expected}")
    engine = open_engine(resolve(url))
    if args.drop_caches:
        # The first query after a load of 1.3 GiB can find its pages evicted; this makes
        # that case certain (Linux, root).
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    query_times = []
    for _ in range(3):
        t0 = time.perf_counter()
        summary = summarise_variants(engine, ResultFilter())
        query_times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    filtered = list_results(engine, ResultFilter(provider="aws", variants=(VARIANTS[0],),
                                                 since=START + dt.timedelta(days=5)), 100)
    filtered_s = time.perf_counter() - t0
    engine.dispose()
    cpu = sum(t["cpu"] for t in timings)
    result = {
        "backend": label, "workers": args.workers, "jobs": args.jobs, "batch": args.batch,
        "gpus_per_document": args.gpus, "node_suite": args.node,
        "documents": documents, "results": documents * args.gpus,
        "samples_per_result": args.samples,
        "document_kib": sum(t["bytes"] for t in timings) / documents / 1024,
        "wall_s": wall, "documents_per_s": documents / wall,
        "results_per_s": documents * args.gpus / wall,
        "writer_cpu_s": cpu, "machine_busy_s": busy,
        "load_average": [load_before, load_after],
        "main_query_s": query_times, "main_query_cold": args.drop_caches,
        "main_query_groups": len(summary),
        "main_query_gpus": sum(s.gpus for s in summary),
        "filtered_list_s": filtered_s, "filtered_rows": len(filtered),
    }
    print(f"{label:10s} {args.workers} ingest(s) of {args.jobs} reader(s), {args.batch} per "
          f"transaction, {documents} documents of {args.gpus} GPU(s) "
          f"({result['document_kib']:.0f} KiB): {wall:.1f} s, "
          f"{result['documents_per_s']:.0f} documents/s, {result['results_per_s']:.0f} "
          f"results/s; CPU per document: writer {1e3 * cpu / documents:.2f} ms, whole "
          f"machine {1e3 * busy / documents:.2f} ms ({busy / wall:.2f} of {os.cpu_count()} "
          f"cores busy); "
          f"load average {load_before:.1f} -> {load_after:.1f}", flush=True)
    print(f"{label:10s} main query over {documents * args.gpus} results"
          f"{' (page cache dropped first)' if args.drop_caches else ''}: "
          f"{', '.join(f'{t:.2f}' for t in query_times)} s ({len(summary)} groups, "
          f"{result['main_query_gpus']} GPUs); filtered list: {filtered_s:.3f} s", flush=True)
    return result


def compare_samples(results: int, samples: int) -> dict[str, Any]:
    """Packed float64 against JSON text for the raw samples column, on SQLite."""
    rng = random.Random(0)
    rows = [[1.6 * (1 + rng.gauss(0, 0.01)) for _ in range(samples)] for _ in range(results)]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, encode in (("float64", pack_floats),
                              ("json", lambda v: json.dumps(v, separators=(",", ":")))):
            t0 = time.perf_counter()
            encoded = [encode(v) for v in rows]
            t1 = time.perf_counter()
            conn = sqlite3.connect(os.path.join(tmp, f"{label}.db"), isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, samples)")
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO s (samples) VALUES (?)", ((e,) for e in encoded))
            conn.execute("COMMIT")
            t2 = time.perf_counter()
            decoded = [row[0] for row in conn.execute("SELECT samples FROM s")]
            t3 = time.perf_counter()
            (json.loads if label == "json" else lambda b: b)(decoded[0])
            conn.close()
            size = sum(len(e) for e in encoded)
            out[label] = {"encode_s": t1 - t0, "insert_s": t2 - t1, "read_s": t3 - t2,
                          "mib": size / 2**20}
            print(f"samples as {label:8s}: encode {t1 - t0:.2f} s, insert {t2 - t1:.2f} s, "
                  f"read {t3 - t2:.2f} s, {size / 2**20:.0f} MiB for {results} results",
                  flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs (results) per document")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--node", action="store_true",
                        help="documents carry the node suite's figures too (5 per GPU, 2 "
                             "per pair, 4 all-reduce sizes: 100 for 8 GPUs)")
    parser.add_argument("--soaked", action="store_true",
                        help="soaked results (harness 1.3), each stored with its repeat "
                             "interval from its GPU's earlier results")
    parser.add_argument("--workers", type=int, default=1,
                        help="concurrent ingests (as several `fleet ingest` commands)")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="reader processes of each ingest (`fleet ingest --readers`; 1: "
                             "read and validate in the writing process)")
    parser.add_argument("--batch", type=int, default=BATCH_DOCUMENTS,
                        help="documents per transaction: as `fleet ingest` into SQLite by "
                             "default, 1 as a probe or sweep (or PostgreSQL) stores them")
    parser.add_argument("--sqlite", help="SQLite file to create (default: a temporary one)")
    parser.add_argument("--postgresql", metavar="ADMIN_URL",
                        help="a server where a scratch database is created and dropped")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--drop-caches", action="store_true",
                        help="drop the page cache before the main query, to time it cold "
                             "(needs root)")
    parser.add_argument("--compare-samples", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               "cpus": os.cpu_count(), "runs": []}
    if args.compare_samples:
        figures["samples"] = compare_samples(args.results, args.samples)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            names = write_documents(Path(tmp), args.results // args.gpus, args.gpus,
                                    args.samples, args.node, args.soaked)
            print(f"wrote {args.results // args.gpus} documents in "
                  f"{time.perf_counter() - t0:.0f} s (not timed)", flush=True)
            if not args.no_sqlite:
                path = args.sqlite or os.path.join(tmp, "bench.db")
                figures["runs"].append(run(f"sqlite:///{path}", "SQLite", args, names))
                figures["runs"][-1]["db_mib"] = os.path.getsize(path) / 2**20
            if args.postgresql:
                name = f"fleet_bench_{os.getpid()}"
                with psycopg.connect(args.postgresql, autocommit=True) as admin:
                    admin.execute(f'CREATE DATABASE "{name}"')
                try:
                    url = args.postgresql.rsplit("/", 1)[0] + f"/{name}"
                    figures["runs"].append(run(url, "PostgreSQL", args, names))
                finally:
                    with psycopg.connect(args.postgresql, autocommit=True) as admin:
                        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
