"""The regression verdict, table-driven over one GPU's nightly TFLOP/s, and the nights the
store hands it (finished runs only, but for the one being reported)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from fleet.document import AgentDocument
from fleet.history import GpuState, HostNight, Night, RegressionRule, compare_night
from fleet.store import sweeps
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.schema import upgrade
from fleet.store.sweeps import create_run, end_run, finish_run, read_nights
from tests.store import factory

LABEL = "bf16 8192x8192x8192 sustained cold-L2 concurrent harness 1.1.0"
START = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)


def _nights(series: list[float | None]) -> list[Night]:
    """One host with one GPU; None: the host failed that night (no measurement)."""
    nights = []
    for i, value in enumerate(series):
        if value is None:
            host = HostNight("lambda", "a", "failed")
        else:
            gpu = GpuState(0, "GPU-0", "H100-SXM5-80GB", {}, {LABEL: value})
            host = HostNight("lambda", "a", "stored", (gpu,))
        nights.append(Night(i + 1, START + dt.timedelta(days=i), {"lambda/a": host}))
    return nights


H = 690.0
SLOW = 0.75 * H


@pytest.mark.parametrize(("why", "series", "regression", "new"), [
    ("a noisy GPU's 4% dip over noisy history is within its own noise",
     [690.0, 672.0, 684.0, 664.0, 688.0, 668.0, 680.0, 0.96 * 680.0], False, False),
    ("the same dip over a quiet history is one",
     [680.0, 680.5, 679.5, 680.2, 679.8, 0.96 * 680.0], True, True),
    ("three past nights are too few to judge even a 25% drop",
     [H, 689.0, 691.0, SLOW], False, False),
    ("four past nights are still too few (min_history 5)",
     [H, 689.0, 691.0, 690.5, SLOW], False, False),
    ("five past nights and a 25% drop: a regression, new tonight",
     [H, 689.0, 691.0, 690.5, 689.5, SLOW], True, True),
    ("lasting: the second slow night is not news",
     [H, 689.0, 691.0, 690.5, 689.5, SLOW, SLOW], True, False),
    ("a night the GPU was not measured inside a lasting regression does not make it new",
     [H, 689.0, 691.0, 690.5, 689.5, SLOW, None, SLOW], True, False),
])
def test_regression_verdict(why: str, series: list[float | None], regression: bool,
                            new: bool) -> None:
    found = compare_night(_nights(series)).regressions
    assert bool(found) == regression, why
    if found:
        (one,) = found
        assert one.new == new, why


def test_a_lasting_regression_began_on_its_first_slow_night_across_a_gap() -> None:
    nights = _nights([H, 689.0, 691.0, 690.5, 689.5, SLOW, None, SLOW])
    (one,) = compare_night(nights).regressions
    assert one.began_run_id == 6


def test_min_history_is_five() -> None:
    assert RegressionRule().min_history == 5


def _store_night(engine: object, name: str, night: int, finish: bool,
                 end: bool = False) -> int:
    from sqlalchemy import Engine

    assert isinstance(engine, Engine)
    run_id = create_run(engine, RunInfo(kind="sweep", sweep=name, inventory="inv.yaml"))
    document = factory.document(host="b", gpus=1, seed=night,
                                collected_at=START + dt.timedelta(days=night))
    with Ingest(engine, RunInfo(kind="sweep", sweep=name, run_id=run_id)) as ingest:
        ingest.store(AgentDocument.model_validate(document), Origin("coreweave", "b",
                                                                    Listing()))
    if finish:
        finish_run(engine, run_id)
    elif end:
        end_run(engine, run_id)
    return run_id


def test_read_nights_leaves_out_unfinished_runs_but_the_reported_one(tmp_path: Path) -> None:
    engine = open_engine(resolve(f"sqlite:///{tmp_path / 'fleet.db'}"))
    upgrade(engine)
    try:
        one = _store_night(engine, "nightly", 1, finish=True)
        killed = _store_night(engine, "nightly", 2, finish=False)
        three = _store_night(engine, "nightly", 3, finish=True)
        tonight = _store_night(engine, "nightly", 4, finish=False)
        assert [n.run_id for n in read_nights(engine, "nightly", tonight)] == [
            one, three, tonight]
        assert [n.run_id for n in read_nights(engine, "nightly", killed)] == [one, killed]
        assert [n.run_id for n in read_nights(engine, "nightly")] == [one, three]
        # Ended with a queue no worker served: open for --resume, but a whole night.
        unserved = _store_night(engine, "nightly", 5, finish=False, end=True)
        assert [n.run_id for n in read_nights(engine, "nightly")] == [one, three, unserved]
    finally:
        engine.dispose()


def test_listing_verdicts_read_a_chunk_of_documents_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thirty nights of a fleet's documents are validated a chunk at a time; the chunks
    must not change a verdict (here one listing in three is broken, on every night)."""
    engine = open_engine(resolve(f"sqlite:///{tmp_path / 'fleet.db'}"))
    upgrade(engine)
    listed = {"variant": "H100 SXM5 80GB", "gpu_count": 1}
    try:
        for night in range(1, 4):
            with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
                for host, variant in (("a", "H100 SXM5 80GB"), ("b", "H100 PCIe 80GB"),
                                      ("c", "H100 SXM5 80GB")):
                    document = factory.document(
                        host=host, gpus=1, seed=night, variant=variant,
                        collected_at=START + dt.timedelta(days=night))
                    ingest.store(AgentDocument.model_validate(document),
                                 Origin("lambda", host, Listing(expect=listed)))
        whole = read_nights(engine, "nightly")
        monkeypatch.setattr(sweeps, "DOCUMENTS_AT_ONCE", 2)
        chunked = read_nights(engine, "nightly")
    finally:
        engine.dispose()
    assert chunked == whole and len(whole) == 3
    for stored in whole:
        mismatched = {key for key, host in stored.hosts.items() if host.mismatches}
        assert mismatched == {"lambda/b"}
        assert stored.hosts["lambda/a"].mismatches == ()


def test_a_stored_document_that_no_longer_validates_is_left_out_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from sqlalchemy import select, update

    from fleet.store.models import Document

    engine = open_engine(resolve(f"sqlite:///{tmp_path / 'fleet.db'}"))
    upgrade(engine)
    try:
        first = _store_night(engine, "nightly", 1, finish=True)
        second = _store_night(engine, "nightly", 2, finish=True)
        with engine.begin() as conn:
            ids = [row.id for row in conn.execute(select(Document.id).order_by(Document.id))]
            body = conn.execute(select(Document.body).where(Document.id == ids[0])).scalar_one()
            data = body if isinstance(body, dict) else json.loads(body)
            data["benchmarks"][0]["tflops"] = 0.0  # stored before tflops had to be above 0
            conn.execute(update(Document).where(Document.id == ids[0]).values(body=data))
        with caplog.at_level("WARNING", logger="fleet.store.sweeps"):
            assert list(sweeps.load_documents(engine, ids)) == [ids[1]]
            nights = read_nights(engine, "nightly")
    finally:
        engine.dispose()
    assert f"stored document {ids[0]} does not pass" in caplog.text
    # Both nights stand: the host's measurements come from the store's rows, only the
    # listing's verdict needed the document.
    assert [n.run_id for n in nights] == [first, second]
    assert all(n.hosts["coreweave/b"].status == "stored" for n in nights)


def test_a_new_software_stack_is_a_change_and_soaked_nights_are_their_own_series(
        tmp_path: Path) -> None:
    engine = open_engine(resolve(f"sqlite:///{tmp_path / 'fleet.db'}"))
    upgrade(engine)
    try:
        for night, stack in ((1, factory.OLD_STACK), (2, factory.NEW_STACK)):
            run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly"))
            document = factory.document(host="b", gpus=1, seed=night, harness="1.3.0",
                                        stack=stack,
                                        collected_at=START + dt.timedelta(days=night))
            with Ingest(engine, RunInfo(kind="sweep", sweep="nightly", run_id=run_id)) as ingest:
                ingest.store(AgentDocument.model_validate(document), Origin("lambda", "b"))
            finish_run(engine, run_id)
        nights = read_nights(engine, "nightly")
    finally:
        engine.dispose()
    (gpu,) = nights[-1].hosts["lambda/b"].gpus
    assert list(gpu.tflops) == [
        "bf16 8192x8192x8192 sustained soaked cold-L2 concurrent harness 1.3.0"]
    (change,) = compare_night(nights).changes
    assert (change.field, change.before, change.after) == (
        "software_stack", "torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4",
        "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2")
    assert "software_stack torch 2.9.0" in change.describe()


def test_a_night_without_results_says_nothing_of_the_stack() -> None:
    measured = GpuState(0, "GPU-0", "H100", {"software_stack": "torch 2.9.0, CUDA 12.8, "
                                                                "cuBLAS 12.8.4"}, {LABEL: H})
    unmeasured = GpuState(0, "GPU-0", "H100", {"software_stack": None})
    nights = [Night(i + 1, START + dt.timedelta(days=i),
                    {"lambda/a": HostNight("lambda", "a", "stored", (gpu,))})
              for i, gpu in enumerate((measured, unmeasured))]
    assert compare_night(nights).changes == ()
