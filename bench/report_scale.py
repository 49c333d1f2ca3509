"""How long does `fleet report` take on a large store?

Stores --hosts hosts of 8 GPUs (four providers, one of them 3% slower, one GPU in fifty a
straggler) for --nights nights through the real ingest path into a new SQLite file, then
times the report as `fleet report` builds it (reading the store, every analysis, the
bootstrap intervals) and each rendering, three times.

    python bench/report_scale.py --hosts 500 --nights 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.schema import upgrade
from tests.store import factory

PROVIDERS = {"alpha": (700.0, 2.49), "beta": (679.0, 2.10), "gamma": (700.0, 1.90),
             "delta": (698.0, 2.30)}


def fill(url: str, hosts: int, nights: int) -> float:
    engine = open_engine(resolve(url))
    upgrade(engine)
    started = time.perf_counter()
    names = sorted(PROVIDERS)
    for night in range(nights):
        when = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC) + dt.timedelta(days=night)
        with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
            for i in range(hosts):
                provider = names[i % len(names)]
                centre, price = PROVIDERS[provider]
                rng = random.Random(f"{i}/{night}")
                tflops = [centre * (1 + rng.gauss(0, 0.005)) for _ in range(8)]
                if i % 50 == 7:
                    tflops[3] *= 0.9
                data = factory.document(host=f"{provider}-{i:05d}", gpus=8, collected_at=when,
                                        gpu_tflops=tflops, runs=20, seed=night)
                ingest.store(AgentDocument.model_validate(data), Origin(
                    provider, f"{provider}-{i:05d}",
                    Listing({"variant": "H100 SXM5 80GB", "gpu_count": 8}, price, "USD")))
    engine.dispose()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--nights", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'fleet.db'}"
        filled = fill(url, args.hosts, args.nights)
        print(f"stored {args.hosts} hosts x 8 GPUs x {args.nights} nights "
              f"({args.hosts * 8 * args.nights:,} results) in {filled:.1f} s")
        engine = open_engine(resolve(url))
        for attempt in range(3):
            started = time.perf_counter()
            report = build_report(engine, ReportOptions(), url)
            built = time.perf_counter() - started
            times = {}
            for fmt in ("html", "md", "json"):
                started = time.perf_counter()
                text = render(report, fmt)
                times[fmt] = (time.perf_counter() - started, len(text))
            print(f"run {attempt + 1}: build {built:.2f} s (hosts {report.hosts}, GPUs "
                  f"{report.gpus_measured}, results {report.results}, findings "
                  f"{report.counts()}); " + ", ".join(
                      f"{fmt} {t:.2f} s {size / 1024:.0f} KiB" for fmt, (t, size) in times.items()))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak resident memory {peak:.0f} MiB")
        engine.dispose()


if __name__ == "__main__":
    main()
