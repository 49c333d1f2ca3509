"""Migrations on SQLite and PostgreSQL: up from empty, down, up again, and in step with
the models."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, func, inspect, select, text

from fleet.errors import StoreError
from fleet.store.database import open_engine, resolve
from fleet.store.models import Base
from fleet.store.schema import (
    downgrade,
    ensure_schema,
    head_revision,
    inspect_schema,
    upgrade,
)

TABLES = {table.name for table in Base.metadata.sorted_tables}


def _engine(url: str) -> Engine:
    return open_engine(resolve(url))


def _tables(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(inspect(conn).get_table_names())


def _differences(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True,
                                                         "compare_server_default": True})
        return list(compare_metadata(context, Base.metadata))


def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    engine = _engine(empty_url)
    try:
        assert inspect_schema(engine).revision is None
        assert upgrade(engine).revision == head_revision()
        assert _tables(engine) == TABLES | {"alembic_version"}
        assert downgrade(engine, "base").revision is None
        assert _tables(engine) == {"alembic_version"}
        assert upgrade(engine).current
        assert _tables(engine) == TABLES | {"alembic_version"}
        assert _differences(engine) == []
    finally:
        engine.dispose()


def test_models_and_migrations_agree(store_url: str) -> None:
    """What `alembic check` does: autogenerate finds nothing to write."""
    engine = _engine(store_url)
    try:
        assert _differences(engine) == []
    finally:
        engine.dispose()


def test_the_check_notices_a_difference(store_url: str) -> None:
    engine = _engine(store_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE INDEX ix_extra ON provider (name)"))
        assert any(diff[0] == "remove_index" for diff in _differences(engine))
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP INDEX ix_extra"))
        engine.dispose()


def test_an_empty_database_is_upgraded_on_first_use(empty_url: str) -> None:
    location = resolve(empty_url)
    engine = open_engine(location)
    try:
        assert ensure_schema(engine, location) is True
        assert ensure_schema(engine, location) is False
        assert inspect_schema(engine).current
    finally:
        engine.dispose()


def test_a_database_that_is_not_fleets_is_refused(empty_url: str) -> None:
    location = resolve(empty_url)
    engine = open_engine(location)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE customers (id INTEGER PRIMARY KEY)"))
        with pytest.raises(StoreError, match="not a fleet database"):
            ensure_schema(engine, location)
    finally:
        engine.dispose()


def test_a_database_from_a_newer_fleet_is_refused(store_url: str) -> None:
    location = resolve(store_url)
    engine = open_engine(location)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        with pytest.raises(StoreError, match="newer fleet wrote it"):
            ensure_schema(engine, location)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"UPDATE alembic_version SET version_num = '{head_revision()}'"))
        engine.dispose()


def _upgrade(url: str) -> str | None:
    engine = _engine(url)
    try:
        return upgrade(engine).revision
    finally:
        engine.dispose()


def test_processes_upgrading_one_new_database_take_turns(empty_url: str) -> None:
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        revisions = pool.map(_upgrade, [empty_url] * 3)
    assert revisions == [head_revision()] * 3


def test_results_stored_before_the_soak_read_as_cool_start(empty_url: str) -> None:
    """0006 fills the rows already stored: measured from a cool start (every result
    before harness 1.3 was), never soaked, hottest telemetry sample as the temperature."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin
    from fleet.store.models import BenchmarkResult
    from tests.store import factory

    engine = _engine(empty_url)
    try:
        upgrade(engine)
        with Ingest(engine) as ingest:
            ingest.store(AgentDocument.model_validate(factory.document(gpus=2)),
                         Origin("lambda"))
        downgrade(engine, "0005")
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("benchmark_result")}
        assert "thermal" not in columns and "soak_curve" not in columns
        upgrade(engine)
        r = BenchmarkResult
        with engine.connect() as conn:
            rows = conn.execute(select(r.thermal, r.not_soaked, r.temperature_load_c,
                                       r.temperature_c_max, r.soak_s, r.first_20s_tflops,
                                       r.soak_drop, r.soak_curve)).all()
        assert len(rows) == 2
        assert all(row == ("cool-start", False, 61.0, 61.0, None, None, None, b"")
                   for row in rows), rows
        assert _differences(engine) == []
    finally:
        engine.dispose()


def test_documents_stored_before_0007_keep_their_rows_and_references(empty_url: str) -> None:
    """0007 rebuilds the document table on SQLite, which every result and fingerprint
    refers to: the rows stay, the references hold, and afterwards one document can be
    stored under two hosts of a probe."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin, Outcome, RunInfo
    from fleet.store.models import BenchmarkResult, Document
    from tests.store import factory

    engine = _engine(empty_url)
    try:
        upgrade(engine)
        data = factory.document(gpus=2)
        with Ingest(engine, RunInfo(kind="probe")) as ingest:
            first = ingest.store(AgentDocument.model_validate(data), Origin("lambda", "a"))
        # Down and up again with the rows in place (today's ingest cannot write 0006).
        downgrade(engine, "0006")
        upgrade(engine)
        assert _differences(engine) == []
        with engine.connect() as conn:
            assert conn.execute(select(Document.id)).scalars().all() == [first.document_id]
            assert conn.execute(select(BenchmarkResult.document_id)).scalars().all() == [
                first.document_id] * 2
            if engine.dialect.name == "sqlite":
                assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        with Ingest(engine, RunInfo(kind="probe")) as ingest:
            second = ingest.store(AgentDocument.model_validate(data), Origin("lambda", "b"))
        assert second.outcome is Outcome.STORED
    finally:
        engine.dispose()


def test_fingerprints_stored_before_0008_are_filled_from_their_bodies(empty_url: str) -> None:
    """0008 adds what "fleet as found" reads per GPU and fills it from each stored body,
    MIG instances and a vGPU profile included."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin
    from fleet.store.models import Fingerprint
    from tests.store import factory

    data = factory.document(gpus=2)
    data["gpus"][0]["mig_devices"] = [
        {"index": 0, "name": "MIG 3g.40gb Device 0", "profile": "3g.40gb", "uuid": None,
         "memory_total_mib": 40192, "sm_count": 60, "gpu_instance_id": 1,
         "compute_instance_id": 0},
        {"index": 1, "name": "MIG 1g.10gb Device 1", "profile": None, "uuid": None,
         "memory_total_mib": 9984, "sm_count": 16, "gpu_instance_id": 2,
         "compute_instance_id": 0}]
    data["gpus"][0]["mig_enabled"] = True
    data["gpus"][1]["power_limit_enforced_w"] = 550.0
    data["gpus"][1]["pcie_gen_current"] = 4
    data["gpus"][1]["variant"]["vgpu_profile"] = {
        "profile": "RTXA6000-24Q", "board": "RTXA6000", "mig_slices": None,
        "framebuffer_gb": 24, "series": "Q", "series_meaning": "workstation",
        "physical_label": None}
    f = Fingerprint
    columns = (f.gpu_index, f.power_limit_enforced_w, f.power_limit_min_w,
               f.power_limit_max_w, f.app_sm_clock_target_mhz, f.pcie_gen_current,
               f.pcie_width_current, f.nvlink_links_total, f.mig_devices, f.vgpu_profile)
    engine = _engine(empty_url)
    try:
        upgrade(engine)
        with Ingest(engine) as ingest:
            ingest.store(AgentDocument.model_validate(data), Origin("lambda"))
        with engine.connect() as conn:
            stored = conn.execute(select(*columns).order_by(f.gpu_index)).all()
        expected = [
            (0, 700.0, 200.0, 700.0, 1755, 5, 16, 18, ["3g.40gb", "MIG 1g.10gb Device 1"],
             None),
            (1, 550.0, 200.0, 700.0, 1755, 4, 16, 18, [], "RTXA6000-24Q")]
        assert [tuple(row) for row in stored] == expected
        downgrade(engine, "0007")
        with engine.connect() as conn:
            names = {c["name"] for c in inspect(conn).get_columns("fingerprint")}
        assert "mig_devices" not in names and "power_limit_min_w" not in names
        upgrade(engine)
        assert _differences(engine) == []
        with engine.connect() as conn:
            filled = conn.execute(select(*columns).order_by(f.gpu_index)).all()
        assert [tuple(row) for row in filled] == expected
    finally:
        engine.dispose()


def test_rows_stored_before_0009_get_their_power_cap_share_run_and_host(
        empty_url: str) -> None:
    """0009 repeats each fingerprint's run and host beside it, and gives each result the
    share of its samples at the power cap; both are filled for rows already stored, and
    the ingest path fills them alike."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin, RunInfo
    from fleet.store.models import BenchmarkResult, Document, Fingerprint, Host
    from tests.store import factory

    documents = []
    for host, shares in (("a", {"sw_power_cap": 0.625, "hw_power_brake_slowdown": 0.25}),
                         ("b", {"sw_thermal_slowdown": 0.5})):
        data = factory.document(host=host, gpus=2)
        for result in data["benchmarks"]:
            result["telemetry"]["reason_shares"] = shares
        documents.append(AgentDocument.model_validate(data))
    r, f, d = BenchmarkResult, Fingerprint, Document
    engine = _engine(empty_url)
    try:
        upgrade(engine)
        for document in documents:  # two runs
            with Ingest(engine, RunInfo(kind="probe")) as ingest:
                ingest.store(document, Origin("lambda"))

        def read() -> tuple[list[Any], list[Any]]:
            with engine.connect() as conn:
                shares = conn.execute(select(Host.name, r.gpu_index, r.power_cap_share)
                                      .join(Host, Host.id == r.host_id)
                                      .order_by(Host.name, r.gpu_index)).all()
                owners = conn.execute(
                    select(Host.name, f.gpu_index, f.probe_run_id == d.probe_run_id)
                    .join(d, d.id == f.document_id).join(Host, Host.id == f.host_id)
                    .order_by(Host.name, f.gpu_index)).all()
            return [tuple(row) for row in shares], [tuple(row) for row in owners]

        expected = ([("a", 0, 0.875), ("a", 1, 0.875), ("b", 0, 0.0), ("b", 1, 0.0)],
                    [("a", 0, True), ("a", 1, True), ("b", 0, True), ("b", 1, True)])
        assert read() == expected
        downgrade(engine, "0008")
        with engine.connect() as conn:
            names = {c["name"] for c in inspect(conn).get_columns("fingerprint")}
        assert "probe_run_id" not in names and "host_id" not in names
        upgrade(engine)
        assert _differences(engine) == []
        assert read() == expected
    finally:
        engine.dispose()


def test_node_results_go_down_and_come_up_with_0011(empty_url: str) -> None:
    """0011 adds node_result: down to 0010 it goes with its rows while the documents and
    results stay; up again it is empty, and the documents' figures are in their bodies."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin
    from fleet.store.models import BenchmarkResult, Document, NodeResult
    from fleet.store.query import load_document
    from tests.store import factory, node_factory

    data = node_factory.with_node(factory.document(gpus=2))
    engine = _engine(empty_url)
    try:
        upgrade(engine)
        with Ingest(engine) as ingest:
            stored = ingest.store(AgentDocument.model_validate(data), Origin("lambda"))
        with engine.connect() as conn:
            # 2 GPUs x 5 figures, one pair x 2, 4 all-reduce sizes.
            assert conn.execute(select(func.count(NodeResult.id))).scalar_one() == 16
        downgrade(engine, "0010")
        assert "node_result" not in _tables(engine)
        with engine.connect() as conn:
            assert conn.execute(select(func.count(BenchmarkResult.id))).scalar_one() == 2
            assert conn.execute(select(Document.id)).scalars().all() == [stored.document_id]
        upgrade(engine)
        assert _differences(engine) == []
        with engine.connect() as conn:
            assert conn.execute(select(func.count(NodeResult.id))).scalar_one() == 0
        assert len(load_document(engine, stored.document_id).node) == 16
    finally:
        engine.dispose()


def test_job_results_go_down_and_come_up_with_0016(empty_url: str) -> None:
    """0016 adds job_result: a store at 0015 (node results and all) upgrades to it, takes
    job figures, and down to 0015 loses the table with its rows while the documents,
    node figures and results stay; up again it is empty, and the document's job figures
    are still in its body."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin
    from fleet.store.models import BenchmarkResult, Document, JobResult, NodeResult
    from fleet.store.query import load_document
    from tests.store import factory, job_factory, node_factory

    data = job_factory.with_jobs(node_factory.with_node(factory.document(gpus=2)))
    engine = _engine(empty_url)
    try:
        upgrade(engine, "0015")
        assert "job_result" not in _tables(engine)
        assert upgrade(engine, "0016").revision == "0016"
        assert "job_result" in _tables(engine)
        # The models are the head's: the store goes up the rest of the way (0017's job
        # headline columns, 0018's run settings) before it takes a document, and down
        # through them again below.
        upgrade(engine)
        assert _differences(engine) == []
        with Ingest(engine) as ingest:
            stored = ingest.store(AgentDocument.model_validate(data), Origin("lambda"))
        with engine.connect() as conn:
            # 2 GPUs x train and decode x flash and cudnn.
            assert conn.execute(select(func.count(JobResult.id))).scalar_one() == 8
        assert downgrade(engine, "0015").revision == "0015"
        assert "job_result" not in _tables(engine)
        with engine.connect() as conn:
            assert conn.execute(select(func.count(BenchmarkResult.id))).scalar_one() == 2
            assert conn.execute(select(func.count(NodeResult.id))).scalar_one() == 16
            assert conn.execute(select(Document.id)).scalars().all() == [stored.document_id]
        upgrade(engine)
        assert _differences(engine) == []
        with engine.connect() as conn:
            assert conn.execute(select(func.count(JobResult.id))).scalar_one() == 0
        assert len(load_document(engine, stored.document_id).jobs) == 8
    finally:
        engine.dispose()


def test_job_rows_stored_before_0017_read_their_pinned_backend_as_headline(
        empty_url: str) -> None:
    """0017 adds what a job figure's headline rests on; a row stored at 0016 has none of
    it, and reads as suite 1.0 ran: the pinned backend (the soaked training step, and
    decode) the headline, training's GQA expanded, decode's grouped."""
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin
    from fleet.store.job import frame
    from tests.store import factory, job_factory, node_factory

    data = job_factory.with_jobs(node_factory.with_node(factory.document(gpus=2)))
    engine = _engine(empty_url)
    try:
        upgrade(engine)
        with Ingest(engine) as ingest:
            ingest.store(AgentDocument.model_validate(data), Origin("lambda"))
        assert downgrade(engine, "0016").revision == "0016"
        assert upgrade(engine).revision != "0016"
        assert _differences(engine) == []
        with engine.connect() as conn:
            # Up again, the rows stored before are back with the columns empty.
            assert conn.execute(text("SELECT count(*) FROM job_result WHERE headline IS NULL"
                                     " AND gqa IS NULL")).scalar_one() == 8
        jobs = frame(engine)
        pinned = {(r.workload, r.attention): (bool(r.headline), r.gqa)
                  for r in jobs.itertuples()}
        assert pinned[("train", "flash")] == (True, "expanded")
        assert pinned[("train", "cudnn")] == (False, "expanded")
        assert pinned[("decode", "flash")][1] == "grouped"
    finally:
        engine.dispose()


def test_fingerprints_stored_before_0011_read_as_health_not_read(empty_url: str) -> None:
    """0011 adds each GPU's health to its fingerprint row; rows stored before it have none
    (their agents read no counters, so there is nothing in their bodies to fill them
    from), and the library shows them as "not read", never as healthy."""
    import fleet
    from fleet.model.document import AgentDocument
    from fleet.store.ingest import Ingest, Origin
    from fleet.store.models import Fingerprint
    from tests.store import factory

    engine = _engine(empty_url)
    try:
        upgrade(engine)
        with Ingest(engine) as ingest:
            ingest.store(AgentDocument.model_validate(factory.document(gpus=2)),
                         Origin("lambda"))
        downgrade(engine, "0010")
        with engine.connect() as conn:
            names = {c["name"] for c in inspect(conn).get_columns("fingerprint")}
        assert not names & {"health", "health_reasons", "health_counters"}
        upgrade(engine)
        assert _differences(engine) == []
        f = Fingerprint
        with engine.connect() as conn:
            rows = conn.execute(select(f.health, f.health_reasons, f.health_counters)).all()
        assert [tuple(row) for row in rows] == [(None, None, None)] * 2
    finally:
        engine.dispose()
    with fleet.Store(empty_url) as store:
        assert store.fingerprints().health.tolist() == ["not read", "not read"]
