"""Reading back on SQLite and PostgreSQL: filters, and the report's main query."""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.errors import InputError
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.models import SUMMARY_INDEX
from fleet.store.query import (
    ResultFilter,
    count_results,
    list_results,
    software_stack,
    stored_variants,
    summarise_variants,
    summary_statement,
)
from tests.store import factory

DAY1 = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)
DAY2 = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.UTC)


def _store(engine: Engine, docs: list[tuple[str, str, dict[str, Any]]]) -> None:
    """(provider, sweep, document) triples, one ingest run per sweep."""
    for sweep in sorted({sweep for _, sweep, _ in docs}):
        with Ingest(engine, RunInfo(sweep=sweep)) as ingest:
            for provider, doc_sweep, data in docs:
                if doc_sweep == sweep:
                    ingest.store(AgentDocument.model_validate(data), Origin(provider))


@pytest.fixture
def fleet_db(engine: Engine) -> Engine:
    _store(engine, [
        ("lambda", "s1", factory.document(host="l1", gpus=2, collected_at=DAY1)),
        ("lambda", "s2", factory.document(host="l1", gpus=2, collected_at=DAY2, seed=1)),
        ("coreweave", "s1", factory.document(host="c1", gpus=2, collected_at=DAY1,
                                             tflops=600)),
        ("coreweave", "s2", factory.document(host="c2", gpus=1, collected_at=DAY2,
                                             variant="H100 PCIe 80GB", tflops=400)),
    ])
    return engine


@pytest.mark.parametrize(("where", "expected"), [
    (ResultFilter(), 7),
    (ResultFilter(provider="lambda"), 4),
    (ResultFilter(provider="nobody"), 0),
    (ResultFilter(variants=("H100 PCIe 80GB",)), 1),
    (ResultFilter(host="c1"), 2),
    (ResultFilter(since=DAY2), 3),
    (ResultFilter(since=DAY2 + dt.timedelta(seconds=1)), 0),
    (ResultFilter(sweep="s1"), 4),
    (ResultFilter(provider="coreweave", sweep="s2", since=DAY1), 1),
])
def test_filters(fleet_db: Engine, where: ResultFilter, expected: int) -> None:
    rows = list_results(fleet_db, where)
    assert len(rows) == expected == count_results(fleet_db, where)
    for row in rows:
        assert where.provider in (None, row.provider)
        assert where.host in (None, row.host)
        assert where.sweep in (None, row.sweep)
        assert where.since is None or row.collected_at >= where.since


def test_a_variant_is_found_however_a_listing_spells_it(fleet_db: Engine) -> None:
    for spelling in ("H100 PCIe 80GB", "h100-pcie-80gb", "H100_PCIE_80GB"):
        assert stored_variants(fleet_db, [spelling]) == ("H100 PCIe 80GB",)
    assert stored_variants(fleet_db, []) == ()
    # A result whose GPU was not fingerprinted is filed under its device's name.
    loose = factory.document(host="x1", gpus=1, collected_at=DAY2)
    loose["benchmarks"][0].update(gpu_index=7, gpu_uuid=None)
    loose["benchmarks"][0]["provenance"]["device_name"] = "NVIDIA H100 80GB HBM3"
    _store(fleet_db, [("lambda", "s3", loose)])
    unknown = "unknown: NVIDIA H100 80GB HBM3"
    assert stored_variants(fleet_db, [unknown]) == (unknown,)
    assert len(list_results(fleet_db, ResultFilter(variants=(unknown,)))) == 1
    with pytest.raises(InputError) as caught:
        stored_variants(fleet_db, ["H100 SXM5 80GB", "A100 80GB"])
    assert str(caught.value) == (
        "--variant 'A100 80GB': no GPU of that variant is stored; the stored variants are "
        "H100 PCIe 80GB, H100 SXM5 80GB, unknown: NVIDIA H100 80GB HBM3")


def test_since_in_another_timezone_means_the_same_instant(fleet_db: Engine) -> None:
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert len(list_results(fleet_db, ResultFilter(since=DAY2.astimezone(tokyo)))) == 3


def test_rows_are_newest_first_and_limited(fleet_db: Engine) -> None:
    rows = list_results(fleet_db, ResultFilter(), limit=3)
    assert len(rows) == 3
    assert all(row.collected_at == DAY2 for row in rows)
    assert rows[0].flags == ("power_capped",)
    assert rows[0].gpu_uuid is not None and rows[0].collected_at.tzinfo is not None


def test_main_query_is_the_median_of_per_gpu_medians(engine: Engine) -> None:
    """Three results on GPU 0 and one on GPU 1 weigh as one GPU each."""
    data = factory.document(host="h", gpus=2, results_per_gpu=3)
    data["benchmarks"] = data["benchmarks"][:4]  # GPU 0 three times, GPU 1 once
    _store(engine, [("lambda", "s", data)])
    gpu0 = statistics.median(r["tflops"] for r in data["benchmarks"][:3])
    gpu1 = data["benchmarks"][3]["tflops"]
    [summary] = summarise_variants(engine, ResultFilter())
    assert (summary.gpus, summary.results) == (2, 4)
    assert summary.median_tflops == pytest.approx(statistics.median([gpu0, gpu1]))
    assert (summary.min_gpu_tflops, summary.max_gpu_tflops) == (min(gpu0, gpu1),
                                                               max(gpu0, gpu1))


def test_main_query_groups_and_filters(fleet_db: Engine) -> None:
    summaries = summarise_variants(fleet_db, ResultFilter())
    keys = {(s.provider, s.variant, s.gpus, s.results) for s in summaries}
    assert keys == {("lambda", "H100 SXM5 80GB", 2, 4), ("coreweave", "H100 SXM5 80GB", 2, 2),
                    ("coreweave", "H100 PCIe 80GB", 1, 1)}
    by_provider = {s.provider: s for s in summaries if s.variant == "H100 SXM5 80GB"}
    assert by_provider["lambda"].median_tflops > by_provider["coreweave"].median_tflops
    assert [s.provider for s in summarise_variants(fleet_db, ResultFilter(sweep="s2"))] == [
        "coreweave", "lambda"]
    assert {s.provider for s in summarise_variants(fleet_db, ResultFilter(host="c1"))} == {
        "coreweave"}


def test_main_query_keeps_harness_versions_apart_and_drops_wrong_results(
        engine: Engine) -> None:
    old = factory.document(host="h", gpus=2)
    new = factory.document(host="h", gpus=2, seed=1, harness="1.3.0")
    new["benchmarks"][1]["flags"]["correctness_failed"] = True
    _store(engine, [("lambda", "s", old), ("lambda", "s", new)])
    summaries = {s.harness_version: s for s in summarise_variants(engine, ResultFilter())}
    assert summaries["1"].gpus == 2
    assert summaries["1.3.0"].gpus == 1 and summaries["1.3.0"].results == 1


def test_soaked_and_cool_start_results_are_grouped_apart_with_their_soak(
        engine: Engine) -> None:
    soaked = factory.document(host="h", gpus=2, harness="1.3.0", gpu_drops=[0.01, 0.03],
                              gpu_temperatures=[70.0, 80.0])
    quick = factory.document(host="h", gpus=2, seed=1, harness="1.3.0", thermal="cool-start")
    old = factory.document(host="h", gpus=2, seed=2)
    _store(engine, [("lambda", "s", soaked), ("lambda", "s", quick), ("lambda", "s", old)])
    summaries = {(s.harness_version, s.thermal): s
                 for s in summarise_variants(engine, ResultFilter())}
    assert set(summaries) == {("1.3.0", "soaked"), ("1.3.0", "cool-start"),
                              ("1", "cool-start")}
    hot = summaries[("1.3.0", "soaked")]
    assert hot.drop == pytest.approx(0.02)
    firsts = [r["soak"]["first_20s_tflops"] for r in soaked["benchmarks"]]
    assert hot.first_20s_tflops == pytest.approx(statistics.median(firsts))
    assert summaries[("1.3.0", "cool-start")].first_20s_tflops is None
    assert summaries[("1.3.0", "cool-start")].drop is None

    rows = {(row.harness_version, row.thermal, row.gpu_index): row
            for row in list_results(engine, ResultFilter())}
    row = rows[("1.3.0", "soaked", 1)]
    assert row.soak_drop == pytest.approx(0.03) and row.temperature_load_c == 80.0
    assert row.first_20s_tflops == pytest.approx(firsts[1]) and row.soak_s == 120.0
    # A result that never soaked has its telemetry's hottest sample as its temperature.
    assert rows[("1", "cool-start", 0)].temperature_load_c == 61.0
    assert rows[("1", "cool-start", 0)].first_20s_tflops is None


def test_software_stacks_are_grouped_apart_and_filtered_by_their_label(
        engine: Engine) -> None:
    _store(engine, [
        ("lambda", "s", factory.document(host="h1", gpus=2, harness="1.3.0")),
        ("lambda", "s", factory.document(host="h2", gpus=2, harness="1.3.0",
                                         stack=factory.NEW_STACK)),
    ])
    new = software_stack(*factory.NEW_STACK)
    assert new == "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2"
    summaries = summarise_variants(engine, ResultFilter())
    assert sorted(s.stack for s in summaries) == sorted([software_stack(*factory.OLD_STACK),
                                                         new])
    for text in ("cublas 13.0", "TORCH 2.13", new):
        where = ResultFilter(stack=text)
        rows = list_results(engine, where)
        assert {row.host for row in rows} == {"h2"} and count_results(engine, where) == 2
        assert {row.stack for row in rows} == {new}
        assert [s.stack for s in summarise_variants(engine, where)] == [new]
    # LIKE's wildcards in the text are matched as themselves.
    assert list_results(engine, ResultFilter(stack="torch 2_13")) == []
    assert list_results(engine, ResultFilter(stack="%")) == []
    assert len(list_results(engine, ResultFilter(stack="cuBLAS"))) == 4


def test_a_stack_the_agent_could_not_read_is_labelled_unknown(engine: Engine) -> None:
    data = factory.document(host="h", gpus=1, harness="1.3.0")
    data["benchmarks"][0]["provenance"]["cublas_version"] = None
    _store(engine, [("lambda", "s", data)])
    [row] = list_results(engine, ResultFilter(stack="cuBLAS ?"))
    assert row.stack == "torch 2.9.0, CUDA 12.8, cuBLAS ?"


def test_main_query_reads_the_summary_index_alone(fleet_db: Engine) -> None:
    """Unfiltered, the main query must not touch the results' rows (each carries its raw
    samples): over 100,000 results from a cold cache that is 9 s against 0.2 s."""
    statement = summary_statement(ResultFilter())
    dialect = fleet_db.dialect
    sql = str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    with fleet_db.connect() as conn:
        if dialect.name == "sqlite":
            plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql}"))
            assert f"USING COVERING INDEX {SUMMARY_INDEX}" in plan, plan
        else:
            # A handful of rows make any scan of the table cheaper; the question is
            # whether the index can answer alone (which VACUUM's visibility map allows).
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                "VACUUM ANALYZE benchmark_result")
            conn.exec_driver_sql("SET enable_seqscan = off")
            conn.exec_driver_sql("SET enable_bitmapscan = off")
            plan = " ".join(str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}"))
            assert f"Index Only Scan using {SUMMARY_INDEX}" in plan, plan
