"""What the network block (issue 46) costs the store: 1,000 agent documents of 8 GPUs
stored through `fleet.store.ingest.Ingest` in one process into a new SQLite file, without
a network block and with the published 8x H100 NDR node's (10 devices), twice each,
alternating. Documents are validated before the clock starts.

    python bench/network_ingest.py [--documents N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine

from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.schema import upgrade
from tests.store import factory
from tests.store.network_factory import fingerprint


def documents(count: int, network: dict[str, object] | None) -> list[AgentDocument]:
    """`count` documents of 8 GPUs, each its own host, with `network` where given."""
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    found = []
    for i in range(count):
        data = factory.document(host=f"h{i}", gpus=8, collected_at=start + dt.timedelta(seconds=i))
        if network is not None:
            data["network"] = network
        found.append(AgentDocument.model_validate(data))
    return found


def rate(docs: list[AgentDocument]) -> float:
    """Documents a second, stored into a new SQLite file."""
    engine = create_engine(f"sqlite:///{tempfile.mkdtemp()}/fleet.db")
    upgrade(engine)
    started = time.perf_counter()
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for doc in docs:
            ingest.store(doc, Origin("bench", doc.host.hostname or "host"))
    elapsed = time.perf_counter() - started
    engine.dispose()
    return len(docs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1000)
    args = parser.parse_args()
    block = fingerprint("h100-8x-ib-ndr")
    for label, network in (("without", None), ("with", block)) * 2:
        docs = documents(args.documents, network)
        print(f"{label:7} a network block: {rate(docs):6.0f} documents/s")


if __name__ == "__main__":
    main()
