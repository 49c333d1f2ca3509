"""A change of the host's limits or of a version the provider patches, between two nights
of a sweep, is news (issue 58): read back from the store and told as a change, naming the
host, the field and both nights' values; a night without the block says nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine

from fleet.analysis.sweep.history import compare_night
from fleet.analysis.sweep.nights import read_nights
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.sweeps import create_run, finish_run
from tests.store import factory
from tests.store import host_storage_factory as make

START = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC)


def _store_night(engine: Engine, night: int, limits: dict[str, Any] | None) -> int:
    run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly"))
    data = factory.document(host="a", gpus=2, seed=night,
                            collected_at=START + dt.timedelta(days=night))
    data["host_limits"] = limits
    with Ingest(engine, RunInfo(kind="sweep", sweep="nightly", run_id=run_id)) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("lambda", "a"))
    finish_run(engine, run_id)
    return run_id


def test_a_new_image_and_a_smaller_shm_are_news(engine: Engine) -> None:
    _store_night(engine, 1, None)  # an agent before the limits: nothing to compare with
    second = _store_night(engine, 2, make.limits("hgx-bare-metal", toolkit="1.17.7"))
    _store_night(engine, 3, make.limits("hgx-bare-metal", toolkit="1.17.8",
                                        shm_bytes=64 << 20))
    nights = read_nights(engine, "nightly")
    assert compare_night(nights, 1).changes == ()
    findings = compare_night(nights)
    assert [c.describe() for c in findings.changes] == [
        f"lambda/a: shm_bytes {1081896960000} -> {64 << 20}",
        "lambda/a: container_toolkit 1.17.7 -> 1.17.8"]
    assert {c.since_run_id for c in findings.changes} == {second}
    assert findings.kinds() == {"change"}
