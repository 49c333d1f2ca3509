"""Real documents of lent nodes, stored as three providers would sell them (issue 56):
what a buyer reads in the report and in `fleet results` is made from what real GPUs
answered, not from a factory. The documents are as they ran; only the provider, the host's
name and its listing (what the inventory says was bought, and its price) are given here.

- lambda, H100 SXM5 at 2.49 USD: h100x4-a, a lent 4x H100 with every suite
  (bench/records/2026-11-27-h100x4-job-backends, run-4): healthy.
- lambda, H200 SXM at 3.49 USD: h200x4-a, the README's first command's node on a lent
  4x H200 (tests/fixtures/nodes/h200-sxm-x4-lent: matmul and node suite, no jobs).
- nebius, H200 SXM at 3.20 USD: h200x2-b, a lent 2x H200 whose GPU 1 a process of the
  renter's held (tests/fixtures/jobs/h200x2-held-oom: GPU 1's job out of memory, every
  figure beside it left out: yours to fix); h200-c, a lent H200 with every suite
  (bench/records/2026-11-28-h200-job-suite-1.3.0, run-1).
- runpod, listed "H100 NVL 94GB" at 1.99 USD: h100x2-d, the lent 2x H100 with NCCL's
  peer-to-peer turned off (tests/fixtures/nodes/h100x2-lent-faults/p2p-off.json: the
  all-reduce short, yours to fix) and h100x2-e, a lent 2x H100's job suite
  (tests/fixtures/jobs/h100x2-lent): SXM5 cards where NVL was listed, a mismatch to
  dispute.

`store_nights` adds a sweep: five repeat runs of one lent H100
(bench/records/2026-11-26-h100-repeat-1752824029521) as the nights of lambda's h100-n.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

from sqlalchemy import Engine, update

from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo, read_document_file
from fleet.store.models import ProbeRun
from tests.conftest import FIXTURES, ROOT

RECORDS = ROOT / "bench" / "records"
H100 = {"variant": "H100 SXM5 80GB"}
H200 = {"variant": "H200 SXM 141GB"}
NVL = {"variant": "H100 NVL 94GB"}

# (provider, host, document, what was listed, price per GPU-hour in USD)
HOSTS = (
    ("lambda", "h100x4-a", RECORDS / "2026-11-27-h100x4-job-backends" / "run-4.jsonl.gz",
     {**H100, "gpu_count": 4}, 2.49),
    ("lambda", "h200x4-a", FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json",
     {**H200, "gpu_count": 4}, 3.49),
    ("nebius", "h200x2-b", FIXTURES / "jobs" / "h200x2-held-oom" / "document.json",
     {**H200, "gpu_count": 2}, 3.20),
    ("nebius", "h200-c", RECORDS / "2026-11-28-h200-job-suite-1.3.0" / "run-1.jsonl.gz",
     {**H200, "gpu_count": 1}, 3.20),
    ("runpod", "h100x2-d", FIXTURES / "nodes" / "h100x2-lent-faults" / "p2p-off.json",
     {**NVL, "gpu_count": 2}, 1.99),
    ("runpod", "h100x2-e", FIXTURES / "jobs" / "h100x2-lent" / "document.json",
     {**NVL, "gpu_count": 2}, 1.99),
)
NIGHTS = RECORDS / "2026-11-26-h100-repeat-1752824029521"
# lambda's 4x H200 was measured at another configuration (its stack and GPUs at once)
# than nebius's H200s: said, not ranked beside them (issue 56's review).
OFFERS = {("lambda", "H100-SXM5-80GB"): "buy", ("lambda", "H200-SXM-141GB"): "not settled",
          ("nebius", "H200-SXM-141GB"): "yours to fix",
          ("runpod", "H100-SXM5-80GB"): "dispute"}


def read(path: Path) -> AgentDocument:
    """A stored record as the agent wrote it: a document, or its JSON lines (gzipped)."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return read_document_file(str(path), data)


def store_real(engine: Engine) -> None:
    """The three providers' hosts, one probe run."""
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for provider, host, path, expect, price in HOSTS:
            ingest.store(read(path), Origin(provider, host, Listing(expect, price, "USD")))


def store_nights(engine: Engine, sweep: str = "nightly") -> int:
    """Five runs of one H100 as five nights of `sweep`, a day apart from 2026-11-22 (as
    a sweep collects them; the runs themselves were minutes apart), for lambda's h100-n;
    returns the newest night's run."""
    run = 0
    for night in range(1, 6):
        document = read(NIGHTS / f"run-{night}.jsonl.gz")
        when = dt.datetime(2026, 11, 21 + night, 3, 0, tzinfo=dt.UTC)
        data = json.loads(document.model_dump_json())
        data["collected_at"] = when.isoformat()
        with Ingest(engine, RunInfo(kind="sweep", sweep=sweep)) as ingest:
            ingest.store(AgentDocument.model_validate(data), Origin(
                "lambda", "h100-n", Listing({**H100, "gpu_count": 1}, 2.49, "USD")))
            run = ingest.run_id or 0
        # The night began when it was collected, as a sweep's run does.
        with engine.begin() as conn:
            conn.execute(update(ProbeRun).where(ProbeRun.id == run).values(
                started_at=when, finished_at=when, ended_at=when))
    return run


def hostile_listing(engine: Engine, provider: str, host: str) -> None:
    """One more real node under a hostile provider and host name: every string a host
    or an inventory gives must reach the page as text."""
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(read(FIXTURES / "nodes" / "h100x2-lent-faults" / "healthy-1.json"),
                     Origin(provider, host, Listing({**H100, "gpu_count": 2}, 2.19, "USD")))

