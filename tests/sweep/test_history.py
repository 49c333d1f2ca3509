"""The regression verdict, table-driven over one GPU's nightly TFLOP/s, and the nights the
store hands it (finished runs only, but for the one being reported)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from fleet.analysis.listing.expectation import check_expectation
from fleet.analysis.sweep.history import GpuState, HostNight, Night, RegressionRule, compare_night
from fleet.analysis.sweep.nights import read_nights
from fleet.inventory import Expect
from fleet.model.document import AgentDocument
from fleet.store import sweeps
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.sweeps import create_run, end_run, finish_run
from tests.store import factory
from tests.store.conftest import migrated_sqlite

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
    engine = open_engine(resolve(migrated_sqlite(tmp_path / "fleet.db")))
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


def test_listing_verdicts_come_from_the_fingerprint_columns_as_from_the_documents(
        tmp_path: Path) -> None:
    """The nights judge each host's listing from the stored fingerprint columns, without
    reading a body again; the verdict must be the one the document itself gives."""
    engine = open_engine(resolve(migrated_sqlite(tmp_path / "fleet.db")))
    listed = {"variant": "H100 SXM5 80GB", "gpu_count": 2, "min_power_limit_w": 600}
    hosts = {  # host -> its document's keyword arguments
        "a": {"gpus": 2},
        "b": {"gpus": 2, "variants": ["H100 SXM5 80GB", "H100 PCIe 80GB"]},
        "c": {"gpus": 1, "power_limit_w": 500.0},
        "d": {"gpus": 0},
    }
    documents: dict[str, AgentDocument] = {}
    try:
        for night in range(1, 3):
            with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
                for host, kwargs in hosts.items():
                    data = factory.document(host=host, seed=night,
                                            collected_at=START + dt.timedelta(days=night),
                                            **kwargs)  # type: ignore[arg-type]
                    if not kwargs["gpus"]:
                        data["no_gpu_reason"] = "NVML: driver not loaded"
                    documents[host] = AgentDocument.model_validate(data)
                    ingest.store(documents[host], Origin("lambda", host,
                                                         Listing(expect=listed)))
        nights = read_nights(engine, "nightly")
    finally:
        engine.dispose()
    assert len(nights) == 2
    expect = Expect.model_validate(listed)
    for host, document in documents.items():
        verdict = check_expectation(expect, document)
        assert verdict is not None
        assert nights[-1].hosts[f"lambda/{host}"].mismatches == verdict.problems, host
    # Written out, so that both paths cannot be wrong alike.
    tonight = nights[-1].hosts
    assert tonight["lambda/a"].mismatches == ()
    assert tonight["lambda/b"].mismatches == (
        "listed variant H100 SXM5 80GB, found H100 PCIe 80GB on GPU 1",
        "power limit 350 W on GPU 1, below the listed 600 W")  # the PCIe card's own limit
    assert tonight["lambda/c"].mismatches == (
        "listed 2 GPUs, found 1", "power limit 500 W on GPU 0, below the listed 600 W")
    assert tonight["lambda/d"].mismatches == (
        "listed GPUs, found no NVIDIA GPU (NVML: driver not loaded)",)


def test_a_stored_document_that_no_longer_validates_is_left_out_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from sqlalchemy import select, update

    from fleet.store.models import Document

    engine = open_engine(resolve(migrated_sqlite(tmp_path / "fleet.db")))
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
    # Both nights stand: the nights are read from the store's rows, not the bodies.
    assert [n.run_id for n in nights] == [first, second]
    assert all(n.hosts["coreweave/b"].status == "stored" for n in nights)
    assert [len(n.hosts["coreweave/b"].gpus) for n in nights] == [1, 1]


def test_a_new_software_stack_is_a_change_and_soaked_nights_are_their_own_series(
        tmp_path: Path) -> None:
    engine = open_engine(resolve(migrated_sqlite(tmp_path / "fleet.db")))
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



@pytest.mark.parametrize("contended", [True, False])
def test_a_night_measured_beside_another_process_is_no_regression(
        tmp_path: Path, contended: bool) -> None:
    """Five steady nights, then one at half speed: beside another process (the report's
    contention) it is no regression and no night of the GPU's series; the same night
    uncontended is one, so the rule still bites."""
    engine = open_engine(resolve(migrated_sqlite(tmp_path / "fleet.db")))
    try:
        for night in range(1, 7):
            run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly",
                                                inventory="inv.yaml"))
            slow = night == 6
            data = factory.document(host="b", gpus=1, seed=night,
                                    tflops=340.0 if slow else 680.0,
                                    collected_at=START + dt.timedelta(days=night))
            if slow and contended:
                for result in data["benchmarks"]:
                    result["flags"]["contended"] = True
                    result["contention"] = ["other processes on the GPU: pid 4242 (user "
                                            "bob, not the agent's user)"]
            with Ingest(engine, RunInfo(kind="sweep", sweep="nightly",
                                        run_id=run_id)) as ingest:
                ingest.store(AgentDocument.model_validate(data),
                             Origin("coreweave", "b", Listing()))
            finish_run(engine, run_id)
        nights = read_nights(engine, "nightly")
        assert len(nights) == 6
        found = compare_night(nights).regressions
        assert [r.gpu_index for r in found] == ([] if contended else [0])
        assert (nights[-1].hosts["coreweave/b"].gpus[0].tflops == {}) is contended
    finally:
        engine.dispose()
