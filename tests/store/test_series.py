"""The results' series (fleet/store/series.py): a second copy of every result's figures,
which the report reads. Each test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, delete, func, literal_column, select, update
from sqlalchemy.exc import DBAPIError

from fleet.analysis.dataset import Scope, load_dataset
from fleet.cli import main
from fleet.errors import StoreError
from fleet.model.document import AgentDocument
from fleet.store import series
from fleet.store.database import WRITES, open_engine, resolve
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.models import BenchmarkResult, Document, ResultSeries, RunHost
from fleet.store.schema import downgrade, upgrade
from tests.store import factory

NIGHT = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)


def _store(engine: Engine, data: dict[str, Any], provider: str = "alpha",
           host: str | None = None, sweep: str = "nightly") -> None:
    with Ingest(engine, RunInfo(kind="sweep", sweep=sweep)) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin(provider, host))


def _fill(engine: Engine) -> None:
    """Two hosts over three nights: soaked and cool-start results, two per GPU a night on
    one host, a host whose GPU has no UUID, and one result that failed its check."""
    for night in range(3):
        when = NIGHT + dt.timedelta(days=night)
        _store(engine, factory.document(host="a-1", gpus=2, collected_at=when,
                                        harness="1.3.0", seed=night, results_per_gpu=2))
        _store(engine, factory.document(host="b-1", gpus=1, collected_at=when,
                                        with_uuid=False, seed=night), provider="beta")
    failed = factory.document(host="a-1", gpus=1, collected_at=NIGHT + dt.timedelta(days=3))
    failed["benchmarks"][0]["correctness"].update(passed=False, max_rel_error=0.5)
    failed["benchmarks"][0]["flags"]["correctness_failed"] = True
    _store(engine, failed)


def _records(engine: Engine) -> dict[tuple[int, str], bytes]:
    """Each series' records in one order, as bytes (NaN equal to NaN)."""
    with engine.connect() as conn:
        return {(gpu, key): np.sort(series.unpack(packed),
                                    order=list(series.ELEMENT.names or ())).tobytes()
                for gpu, key, packed in conn.execute(
                    select(ResultSeries.gpu_id, ResultSeries.key, ResultSeries.packed))}


def test_ingest_keeps_every_result_in_its_series(engine: Engine) -> None:
    _fill(engine)
    with engine.connect() as conn:
        results = conn.execute(select(BenchmarkResult.__table__)).all()
        assert series.compare(conn) == []
        rows = conn.execute(select(ResultSeries.__table__)).all()
    # Two GPUs of a-1 under the soaked configuration, its GPU 0 under the failed check
    # (cool-start, harness 1), and b-1's one GPU.
    counts = [len(series.unpack(row.packed)) for row in rows]
    assert sorted(counts) == [1, 3, 6, 6]
    assert sum(counts) == len(results)
    # Each record is a result of its document and GPU, with that result's figures.
    by_tflops = {(r.document_id, r.gpu_index, r.tflops): r for r in results}
    assert len(by_tflops) == len(results)
    for row in rows:
        for record in series.unpack(row.packed):
            result = by_tflops[(int(record["document_id"]), int(record["gpu_index"]),
                                float(record["tflops"]))]
            assert (result.gpu_id, result.variant, result.dtype, result.thermal) == (
                row.gpu_id, row.variant, row.dtype, row.thermal)
            assert record["at"] == series.epoch_us(result.collected_at)
            assert (record["document_id"], record["probe_run_id"], record["host_id"],
                    record["provider_id"], record["gpu_index"]) == (
                result.document_id, result.probe_run_id, result.host_id,
                result.provider_id, result.gpu_index)
            assert record["tflops"] == result.tflops
            assert record["power_cap_share"] == result.power_cap_share
            assert bool(record["flags"] & 1 << series.FLAG_COLUMNS.index("not_soaked")) \
                == result.not_soaked
            if result.first_20s_tflops is None:
                assert np.isnan(record["first_20s_tflops"])
            else:
                assert record["first_20s_tflops"] == result.first_20s_tflops
    failed = [row for row in rows if row.correctness_failed]
    assert [len(series.unpack(row.packed)) for row in failed] == [1]


def test_two_hosts_with_one_gpu_append_to_one_series(engine: Engine) -> None:
    """The same card (UUID) answered under two hosts: the upsert appends on the database,
    keeping both records and every byte of the first."""
    data = factory.document(host="twin", gpus=1, seed=1)
    _store(engine, data, host="twin-a")
    _store(engine, factory.document(host="twin", gpus=1, seed=2,
                                    collected_at=NIGHT), host="twin-b")
    with engine.connect() as conn:
        (row,) = conn.execute(select(ResultSeries.__table__)).all()
        assert series.compare(conn) == []
    assert len(row.packed) == 2 * series.ELEMENT.itemsize
    assert len({int(record["host_id"]) for record in series.unpack(row.packed)}) == 2


def test_rebuild_gives_what_ingest_kept(engine: Engine) -> None:
    _fill(engine)
    kept = _records(engine)
    with engine.begin() as conn:
        assert series.rebuild(conn) == len(kept)
    assert _records(engine) == kept


def test_compare_and_repair_find_and_mend_a_series_out_of_step(engine: Engine) -> None:
    _fill(engine)
    kept = _records(engine)
    with engine.begin() as conn:
        gone, changed = conn.execute(select(ResultSeries.id).order_by(ResultSeries.id)
                                     .limit(2)).scalars().all()
        conn.execute(delete(ResultSeries).where(ResultSeries.id == gone))
        packed = conn.execute(select(ResultSeries.packed)
                              .where(ResultSeries.id == changed)).scalar_one()
        conn.execute(update(ResultSeries).where(ResultSeries.id == changed)
                     .values(packed=packed[:-series.ELEMENT.itemsize]))
        problems = series.compare(conn)
    assert len(problems) == 2
    assert any("no series" in problem for problem in problems)
    assert any("figures differ" in problem for problem in problems)
    checked = series.repair(engine, check=True)
    assert len(checked.problems) == 2 and checked.rebuilt is None
    assert len(_records(engine)) == len(kept) - 1  # --check changed nothing
    mended = series.repair(engine)
    assert mended.rebuilt == len(kept)
    assert _records(engine) == kept
    assert series.repair(engine).problems == ()


def test_fleet_db_repair(store_url: str) -> None:
    engine = open_engine(resolve(store_url))
    _fill(engine)
    with engine.begin() as conn:
        conn.execute(delete(ResultSeries).where(ResultSeries.id == conn.execute(
            select(func.min(ResultSeries.id))).scalar_one()))
    engine.dispose()
    runner = CliRunner()
    checked = runner.invoke(main, ["db", "repair", "--check", "--db", store_url])
    assert checked.exit_code == 1, checked.output
    # The card by its UUID, the series in words.
    assert "GPU-" in checked.output and "bf16 8192x8192x8192 sustained" in checked.output
    assert "results stored, no series" in checked.output
    assert "1 series disagree with the stored results; `fleet db repair` rebuilds them" \
        in checked.output
    mended = runner.invoke(main, ["db", "repair", "--db", store_url])
    assert mended.exit_code == 0, mended.output
    assert "1 series disagreed; rebuilt all 4 from the stored results" in mended.output
    again = runner.invoke(main, ["db", "repair", "--check", "--db", store_url])
    assert again.exit_code == 0 and "agree with the stored results" in again.output


def _without_repeat_sd(records: dict[tuple[int, str], bytes]) -> dict[tuple[int, str], bytes]:
    found = {}
    for key, data in records.items():
        values = np.frombuffer(data, dtype=series.ELEMENT).copy()
        values["repeat_sd"] = np.nan
        found[key] = values.tobytes()
    return found


def test_an_upgrade_to_0010_builds_the_series_of_stored_results(engine: Engine) -> None:
    _fill(engine)
    kept = _records(engine)
    assert any(not np.isnan(np.frombuffer(data, dtype=series.ELEMENT)["repeat_sd"]).all()
               for data in kept.values())
    downgrade(engine, "0009")
    upgrade(engine)
    # Every record comes back but the repeat sd: below 0012 a result has no repeat
    # interval, and going up again does not make one up after the fact.
    again = _records(engine)
    assert _without_repeat_sd(again) == _without_repeat_sd(kept)
    assert all(np.isnan(np.frombuffer(data, dtype=series.ELEMENT)["repeat_sd"]).all()
               for data in again.values())
    with engine.connect() as conn:
        # run_host.collected_at was filled from the documents.
        pairs = conn.execute(select(RunHost.collected_at, Document.collected_at)
                             .join(Document, Document.id == RunHost.document_id)).all()
    assert pairs and all(ours == theirs for ours, theirs in pairs)


@pytest.mark.parametrize(("where", "expected"), [
    (series.Filter(), 16),
    (series.Filter(since_us=series.epoch_us(NIGHT + dt.timedelta(days=1))), 11),
    (series.Filter(until_us=series.epoch_us(NIGHT)), 5),
])
def test_read_filters_record_by_record(engine: Engine, where: series.Filter,
                                       expected: int) -> None:
    _fill(engine)
    with engine.connect() as conn:
        found = series.read(conn, where)
    assert len(found.records) == len(found.series) == expected
    with engine.connect() as conn:
        results = {(r.document_id, r.gpu_id) for r in conn.execute(
            select(BenchmarkResult.document_id, BenchmarkResult.gpu_id))}
    # Each record is under its own GPU's series.
    assert {(int(record["document_id"]), found.keys[i][0]) for record, i in zip(
        found.records, found.series.tolist(), strict=True)} <= results


def test_read_filters_by_run_and_provider(engine: Engine) -> None:
    _fill(engine)
    with engine.connect() as conn:
        runs = sorted(set(conn.execute(select(BenchmarkResult.probe_run_id)).scalars()))
        beta = conn.execute(select(BenchmarkResult.provider_id)
                            .where(BenchmarkResult.host_id == select(func.max(
                                BenchmarkResult.host_id)).scalar_subquery())).scalar()
        first_run = series.read(conn, series.Filter(runs=frozenset(runs[:1])))
        of_beta = series.read(conn, series.Filter(providers=frozenset({beta})))
    assert set(first_run.records["probe_run_id"].tolist()) == {runs[0]}
    assert len(first_run.records) == 4  # a-1's first night: 2 GPUs, 2 results each
    assert set(of_beta.records["provider_id"].tolist()) == {beta}
    assert len(of_beta.records) == 3


def test_a_damaged_series_is_named_and_never_read_as_figures(engine: Engine) -> None:
    _fill(engine)
    with engine.begin() as conn:
        damaged = conn.execute(select(func.min(ResultSeries.id))).scalar_one()
        packed = conn.execute(select(ResultSeries.packed)
                              .where(ResultSeries.id == damaged)).scalar_one()
        conn.execute(update(ResultSeries).where(ResultSeries.id == damaged)
                     .values(packed=packed[:-3]))
        assert any("not whole records" in problem for problem in series.compare(conn))
    with engine.connect() as conn, pytest.raises(StoreError, match="fleet db repair"):
        series.read(conn, series.Filter())
    assert series.repair(engine).rebuilt == 4
    with engine.connect() as conn:
        assert len(series.read(conn, series.Filter()).records) == 16


def test_a_check_reads_while_an_ingest_holds_its_transaction(engine: Engine) -> None:
    """--check reads a snapshot: a writer in the middle of a document neither blocks it
    nor shows as a disagreement (on SQLite, a repair would wait for the writer)."""
    _fill(engine)
    writer = engine.connect().execution_options(**{WRITES: True})
    try:
        writer.begin()
        writer.execute(delete(ResultSeries).where(ResultSeries.id == writer.execute(
            select(func.min(ResultSeries.id))).scalar_one()))
        assert series.repair(engine, check=True).problems == ()
    finally:
        writer.rollback()
        writer.close()


def test_a_store_without_its_series_is_not_reported_as_empty(engine: Engine) -> None:
    """Results but no series (a store brought to 0010 by bare Alembic): the report says
    to repair it rather than show no measurements."""
    _fill(engine)
    with engine.begin() as conn:
        conn.execute(delete(ResultSeries))
    with pytest.raises(StoreError, match="fleet db repair"):
        load_dataset(engine, Scope())
    series.repair(engine)
    data = load_dataset(engine, Scope())
    # a-1's two GPUs and b-1's; a-1's failed check is left out, with its reason.
    assert len(data.measures) == 3
    assert [e.reason for e in data.excluded] == ["failed the correctness check"]


def test_a_runs_report_reads_only_its_gpus_series(engine: Engine) -> None:
    _fill(engine)
    with engine.connect() as conn:
        first = conn.execute(select(func.min(BenchmarkResult.probe_run_id))).scalar_one()
        narrow = series.read(conn, series.Filter(runs=frozenset({first}),
                                                 only_gpus_of_runs=True))
        wide = series.read(conn, series.Filter(runs=frozenset({first})))
    assert len(narrow.keys) < len(wide.keys)
    assert np.sort(narrow.records, order=list(series.ELEMENT.names or ())).tobytes() == \
        np.sort(wide.records, order=list(series.ELEMENT.names or ())).tobytes()


def test_a_database_error_while_reading_is_sqlalchemys(engine: Engine) -> None:
    """So that the CLI words it (database_errors), on PostgreSQL's binary path too."""
    with engine.connect() as conn, pytest.raises(DBAPIError):
        series._fetch(conn, select(literal_column("no_such_column")))
