"""`fleet.Store.fingerprints()` and `findings()` with each GPU's health, on SQLite and
PostgreSQL: a verdict on every row, "not read" for an agent before the health counters."""

from __future__ import annotations

import datetime as dt

import pandas as pd

import fleet
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.store import factory
from tests.store.health import give_health, health

WHEN = dt.datetime(2026, 11, 26, 3, 0, tzinfo=dt.UTC)
ECC = "2 uncorrectable ECC errors since the driver loaded"


def test_fingerprints_carry_the_verdict_and_its_reasons(store_url: str) -> None:
    with fleet.Store(store_url) as store:
        failing = {**health("failing", [ECC], ecc_uncorrected_volatile=2), "action": "reset"}
        sick = give_health(factory.document(host="a-01", gpus=2, collected_at=WHEN),
                           {0: health(), 1: failing})
        old = factory.document(host="b-01", gpus=1, collected_at=WHEN)
        with Ingest(store.engine, RunInfo(kind="probe")) as ingest:
            ingest.store(AgentDocument.model_validate(sick), Origin("alpha", "a-01"))
            ingest.store(AgentDocument.model_validate(old), Origin("beta", "b-01"))
        fp = store.fingerprints().sort_values(["host", "gpu_index"])
        findings = store.findings()
    assert isinstance(fp.health.dtype, pd.CategoricalDtype)
    assert list(zip(fp.host, fp.gpu_index, fp.health, fp.health_reasons, strict=True)) == [
        ("a-01", 0, "healthy", []), ("a-01", 1, "failing", [ECC]),
        ("b-01", 0, "not read", [])]
    # What to ask the provider for, where the agent said (an older agent: missing).
    assert [None if pd.isna(a) else a for a in fp.health_action] == [None, "reset", None]
    # Counting verdicts keeps the card that was not read.
    assert fp.health.value_counts().to_dict() == {"failing": 1, "healthy": 1, "not read": 1}
    health_rows = findings[findings.kind == "health"]
    assert list(zip(health_rows.provider, health_rows.title, health_rows.evidence,
                    strict=True)) == [
        ("alpha", "a-01 GPU 1 (H100 SXM5 80GB) is failing: ask the provider to reset it", ECC)]
