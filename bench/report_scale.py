"""How long does `fleet report` take on a large store, and how much memory?

Stores --hosts hosts of 8 GPUs (four providers, one of them 3% slower, one GPU in fifty a
straggler) for --nights nights, then times the report as `fleet report` builds it (reading
the store, every analysis, the bootstrap intervals) and each rendering, three times, in a
fresh process whose peak resident memory is the report's own.

How the store is filled (--fill):
- `ingest`: every night's documents through the real ingest path (Ingest.store), as a
  sweep stores them. Each night a host sends the same measurements as on the first night,
  collected a day later.
- `bulk` (the default): the first night through the real ingest path, then each later
  night as copies of the first night's rows made by INSERT ... SELECT in the database
  (probe_run, document, fingerprint, benchmark_result, run_host), with times shifted by
  whole days and new ids and content hashes, and the results' series rebuilt from them
  at the end (fleet/store/series.py). These are the rows the ingest path writes
  for those documents, less the body's own `collected_at` (the copies keep the first
  night's body, which the report does not read for times). 300,000 documents through
  the ingest path would take about 20 minutes at the 4 ms a document it took here
  (2,000 hosts x 2 nights in 16.8 s); 10,000 hosts x 30 nights filled this way took
  411 s on SQLite and 376 s on PostgreSQL (bench/records/2026-11-25-report-scale.md).
`--check` fills a small store both ways and says whether the two give the same report
(the JSON rendering, less the time it was generated and the store's name).

    python bench/report_scale.py --hosts 2000 --nights 2
    python bench/report_scale.py --hosts 10000 --nights 30
    python bench/report_scale.py --hosts 10000 --nights 30 \\
        --url postgresql://postgres@127.0.0.1:5432/postgres
    python bench/report_scale.py --check

With --url (a PostgreSQL server), a scratch database is created there and dropped after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, func, insert, literal, select, text, update
from sqlalchemy.engine import make_url

from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.store import series
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.models import (
    BenchmarkResult,
    Document,
    Fingerprint,
    Gpu,
    ProbeRun,
    RunHost,
)
from fleet.store.schema import upgrade
from tests.store import factory

PROVIDERS = {"alpha": (700.0, 2.49), "beta": (679.0, 2.10), "gamma": (700.0, 1.90),
             "delta": (698.0, 2.30)}
FIRST_NIGHT = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)


def _night(engine: Engine, hosts: int, night: int) -> None:
    """One night through the real ingest path: each host's document, the first night's
    measurements collected `night` days later."""
    names = sorted(PROVIDERS)
    when = FIRST_NIGHT + dt.timedelta(days=night)
    with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
        for i in range(hosts):
            provider = names[i % len(names)]
            centre, price = PROVIDERS[provider]
            rng = random.Random(f"{i}/0")
            tflops = [centre * (1 + rng.gauss(0, 0.005)) for _ in range(8)]
            if i % 50 == 7:
                tflops[3] *= 0.9  # the straggler: one GPU in fifty, 10% slow
            data = factory.document(host=f"{provider}-{i:05d}", gpus=8, collected_at=when,
                                    gpu_tflops=tflops, runs=20, seed=0)
            ingest.store(AgentDocument.model_validate(data), Origin(
                provider, f"{provider}-{i:05d}",
                Listing({"variant": "H100 SXM5 80GB", "gpu_count": 8}, price, "USD")))


def _shifted(column: Any, days: int, dialect: str) -> Any:
    """`column` (a UtcDateTime) `days` later, in SQL, in the form the dialect stores."""
    if dialect == "postgresql":
        return column + text(f"interval '{days} days'")
    # SQLite keeps "YYYY-MM-DD HH:MM:SS.ffffff" (models.UtcDateTime): shift the date and
    # time, keep the microseconds.
    return func.datetime(column, f"+{days} days").op("||")(func.substr(column, 20))


def _copy(engine: Engine, table: Any, changed: dict[str, Any], where: Any) -> None:
    columns = [c.name for c in table.columns]
    source = select(*(changed.get(name, table.c[name]) for name in columns)).where(where)
    with engine.begin() as conn:
        conn.execute(insert(table).from_select(columns, source))


def _replicate(engine: Engine, nights: int) -> None:
    """Nights 2.. as copies of the first night's rows (see the module docstring)."""
    dialect = engine.dialect.name
    with engine.connect() as conn:
        (run_id, started, finished), = conn.execute(
            select(ProbeRun.id, ProbeRun.started_at, ProbeRun.finished_at)).all()
        spans = {table: conn.execute(select(func.max(table.id))).scalar_one()
                 for table in (Document, Fingerprint, BenchmarkResult, RunHost)}
    d, f, r, h = (t.__table__ for t in (Document, Fingerprint, BenchmarkResult, RunHost))
    for night in range(1, nights):
        shift = {table: night * span for table, span in spans.items()}
        new_run = run_id + night
        day = dt.timedelta(days=night)
        with engine.begin() as conn:
            conn.execute(insert(ProbeRun).values(
                id=new_run, kind="sweep", sweep="nightly", inventory=None,
                controller_version="bench", agent_version=None, started_at=started + day,
                finished_at=finished + day if finished else None,
                ended_at=finished + day if finished else None))
        doc_shift = shift[Document]
        _copy(engine, d, {
            "id": d.c.id + doc_shift, "probe_run_id": literal(new_run),
            "collected_at": _shifted(d.c.collected_at, night, dialect),
            "stored_at": _shifted(d.c.stored_at, night, dialect),
            "content_hash": func.substr(d.c.content_hash, 1, 56).op("||")(
                literal(f"{night:08d}"))}, d.c.probe_run_id == run_id)
        first_docs = d.c.probe_run_id == run_id
        docs = select(d.c.id).where(first_docs).scalar_subquery()
        _copy(engine, f, {"id": f.c.id + shift[Fingerprint],
                          "document_id": f.c.document_id + doc_shift,
                          "probe_run_id": literal(new_run)},
              f.c.document_id.in_(docs))
        _copy(engine, r, {"id": r.c.id + shift[BenchmarkResult],
                          "document_id": r.c.document_id + doc_shift,
                          "fingerprint_id": r.c.fingerprint_id + shift[Fingerprint],
                          "probe_run_id": literal(new_run),
                          "collected_at": _shifted(r.c.collected_at, night, dialect)},
              r.c.probe_run_id == run_id)
        _copy(engine, h, {"id": h.c.id + shift[RunHost], "probe_run_id": literal(new_run),
                          "document_id": h.c.document_id + doc_shift,
                          "updated_at": _shifted(h.c.updated_at, night, dialect),
                          "collected_at": _shifted(h.c.collected_at, night, dialect)},
              h.c.probe_run_id == run_id)
    with engine.begin() as conn:
        last = FIRST_NIGHT + dt.timedelta(days=nights - 1)
        conn.execute(update(Gpu).values(last_seen=last))
        # The copies' series, built from the results as `fleet db repair` builds them.
        series.rebuild(conn)
        if dialect == "postgresql":
            # Explicit ids leave the sequences behind: a later insert would collide.
            for table in ("probe_run", "document", "fingerprint", "benchmark_result",
                          "run_host"):
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                  f"(SELECT max(id) FROM {table}))"))


def fill(url: str, hosts: int, nights: int, how: str) -> float:
    engine = open_engine(resolve(url))
    upgrade(engine)
    started = time.perf_counter()
    if how == "ingest":
        for night in range(nights):
            _night(engine, hosts, night)
    else:
        _night(engine, hosts, 0)
        _replicate(engine, nights)
    engine.dispose()
    return time.perf_counter() - started


def measure(url: str, runs: int) -> None:
    """Build and render the report `runs` times; print the times and this process's peak
    resident memory (run in a process of its own, so it is the report's)."""
    engine = open_engine(resolve(url))
    for attempt in range(runs):
        started = time.perf_counter()
        report = build_report(engine, ReportOptions(), url)
        built = time.perf_counter() - started
        times = {}
        for fmt in ("html", "md", "json"):
            started = time.perf_counter()
            rendered = render(report, fmt)
            times[fmt] = (time.perf_counter() - started, len(rendered))
        print(f"run {attempt + 1}: build {built:.2f} s (hosts {report.hosts}, GPUs "
              f"{report.gpus_measured}, results {report.results}, findings "
              f"{report.counts()}); " + ", ".join(
                  f"{fmt} {t:.2f} s {size / 1024:.0f} KiB" for fmt, (t, size) in times.items()),
              flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of the report process {peak:.0f} MiB")
    engine.dispose()


def _comparable(url: str) -> dict[str, Any]:
    engine = open_engine(resolve(url))
    report = build_report(engine, ReportOptions(), "store")
    engine.dispose()
    data: dict[str, Any] = json.loads(render(report, "json"))
    data.pop("generated_at", None)
    return data


def check(hosts: int, nights: int) -> bool:
    """Whether a store filled through the ingest path and one filled in bulk give the same
    report."""
    with tempfile.TemporaryDirectory() as tmp:
        reports = []
        for how in ("ingest", "bulk"):
            url = f"sqlite:///{Path(tmp) / f'{how}.db'}"
            fill(url, hosts, nights, how)
            reports.append(_comparable(url))
    same = reports[0] == reports[1]
    differing = sorted(k for k in reports[0] if reports[0][k] != reports[1].get(k))
    print(f"{hosts} hosts x {nights} nights, ingest vs bulk fill: "
          + ("the same report" if same else f"reports differ in {', '.join(differing)}"))
    return same


@contextmanager
def scratch_database(server: str | None, tmp: str, keep: bool = False) -> Iterator[str]:
    """A new empty database: a SQLite file in `tmp`, or one on the PostgreSQL `server`,
    dropped on the way out unless `keep`."""
    if server is None:
        yield f"sqlite:///{Path(tmp) / 'fleet.db'}"
        return
    import psycopg

    admin = make_url(server).set(drivername="postgresql")
    name = f"fleet_bench_{os.getpid()}"
    dsn = admin.render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        if keep:
            print(f"kept database {name}: drop it with DROP DATABASE \"{name}\"")
        else:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--nights", type=int, default=4)
    parser.add_argument("--fill", choices=("bulk", "ingest"), default="bulk")
    parser.add_argument("--url", help="a PostgreSQL server to fill a scratch database on "
                        "(e.g. postgresql://postgres@127.0.0.1:5432/postgres); SQLite if "
                        "not given")
    parser.add_argument("--store", type=Path, help="a SQLite file to fill and keep (to "
                        "measure it again with --measure sqlite:///FILE)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the PostgreSQL scratch database (to --measure it again)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--check", action="store_true",
                        help="whether ingest and bulk fills give the same report, and stop")
    parser.add_argument("--measure", metavar="STORE_URL",
                        help="only build the report of that store, --runs times")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.runs)
        return
    if args.check:
        sys.exit(0 if check(40, 3) else 1)
    with tempfile.TemporaryDirectory() as tmp, scratch_database(args.url, tmp, args.keep) as url:
        if args.store is not None:
            url = f"sqlite:///{args.store.resolve()}"
        filled = fill(url, args.hosts, args.nights, args.fill)
        print(f"stored {args.hosts} hosts x 8 GPUs x {args.nights} nights "
              f"({args.hosts * 8 * args.nights:,} results) by {args.fill} fill in "
              f"{filled:.1f} s", flush=True)
        print(f"store {url}", flush=True)
        subprocess.run([sys.executable, __file__, "--measure", url, "--runs", str(args.runs)],
                       check=True)


if __name__ == "__main__":
    main()
