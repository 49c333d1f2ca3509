"""Ingest on SQLite and PostgreSQL: stored once, nothing lost, nothing of a bad document."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.exc import DBAPIError

from fleet.errors import AgentError, InputError
from fleet.model.document import AgentDocument
from fleet.store.ingest import (
    Ingest,
    Listing,
    Origin,
    Outcome,
    RunInfo,
    parse_text,
    prepare,
)
from fleet.store.models import (
    BenchmarkResult,
    Document,
    Gpu,
    HostError,
    ProbeRun,
    RunHost,
    unpack_rows,
)
from fleet.store.query import load_document, load_samples
from tests.store import factory
from tests.store.refuse import refusing

Counts = Callable[[Engine], dict[str, int]]


def store(engine: Engine, data: dict[str, Any], provider: str = "lambda",
          host: str | None = None, sweep: str | None = None) -> Any:
    with Ingest(engine, RunInfo(sweep=sweep)) as ingest:
        return ingest.store(AgentDocument.model_validate(data), Origin(provider, host))


def test_stores_every_part_of_a_document(engine: Engine, counts: Counts) -> None:
    data = factory.document(gpus=2, errors=[{"stage": "benchmark", "message": "GPU 1 busy",
                                             "gpu": 1}])
    stored = store(engine, data, sweep="nightly")
    assert stored.outcome is Outcome.STORED
    assert counts(engine) == {"provider": 1, "host": 1, "gpu": 2, "probe_run": 1,
                              "document": 1, "fingerprint": 2, "benchmark_result": 2,
                              "host_error": 1, "run_host": 1, "result_series": 2,
                              "node_result": 0, "job_result": 0, "run_setting": 0,
                              "network": 0, "network_device": 0,
                              "cluster_step": 0, "cluster_step_node": 0, "cluster_figure": 0,
                              "host_limits": 0, "storage": 0, "storage_target": 0}
    with engine.connect() as conn:
        run = conn.execute(select(ProbeRun)).one()
        result = conn.execute(select(BenchmarkResult).order_by(BenchmarkResult.gpu_index)
                              ).first()
        error = conn.execute(select(HostError)).one()
    assert run.sweep == "nightly" and run.kind == "ingest" and run.finished_at is not None
    assert run.started_at.tzinfo is not None
    assert result is not None
    expected = data["benchmarks"][0]
    assert result.tflops == expected["tflops"]
    assert result.median_ms == expected["stats"]["median_ms"]
    assert result.power_capped is True and result.contended is False
    assert result.variant == "H100 SXM5 80GB"
    assert result.collected_at == dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)
    assert (error.stage, error.gpu_index, error.message) == ("benchmark", 1, "GPU 1 busy")


def test_the_same_document_twice_is_stored_once(engine: Engine, counts: Counts) -> None:
    data = factory.document()
    first = store(engine, data)
    before = counts(engine)
    again = store(engine, copy.deepcopy(data))
    assert again.outcome is Outcome.ALREADY_STORED
    assert again.document_id == first.document_id
    assert counts(engine) == before  # not even an empty probe run


def test_key_order_and_spacing_do_not_make_a_new_document(engine: Engine) -> None:
    data = factory.document()
    data["gpus"][0]["unavailable"] = {"b": "NVML_ERROR_NOT_SUPPORTED", "a": "NVML_ERROR_X"}
    reordered = copy.deepcopy(data)
    reordered["gpus"][0]["unavailable"] = {"a": "NVML_ERROR_X", "b": "NVML_ERROR_NOT_SUPPORTED"}
    first = store(engine, data)
    text_form = json.dumps(reordered, indent=3)
    with Ingest(engine) as ingest:
        again = ingest.store(parse_text(text_form, "x"), Origin("lambda"))
    assert again.outcome is Outcome.ALREADY_STORED
    assert again.content_hash == first.content_hash


def test_nothing_is_lost(engine: Engine) -> None:
    """The stored body is the canonical document: it validates again to the same hash,
    and the packed samples are the agent's floats bit for bit."""
    data = factory.document(gpus=3, runs=137)
    data["benchmarks"][0]["samples_ms"][0] = 0.1 + 0.2  # 0.30000000000000004
    stored = store(engine, data)
    again = load_document(engine, stored.document_id)
    assert again == AgentDocument.model_validate(data)
    again_prepared = prepare(again, "stored")
    assert again_prepared.content_hash == stored.content_hash
    body = again_prepared.document_row["body"]
    assert hashlib.sha256(body.encode()).hexdigest() == stored.content_hash
    with engine.connect() as conn:
        rows = conn.execute(select(BenchmarkResult.id, BenchmarkResult.gpu_index,
                                   BenchmarkResult.telemetry_series)).all()
    for result_id, index, series in rows:
        assert load_samples(engine, result_id) == data["benchmarks"][index]["samples_ms"]
        assert unpack_rows(series, 6) == data["benchmarks"][index]["telemetry_series"]


def test_a_gpu_is_followed_by_uuid_across_hosts_and_providers(engine: Engine) -> None:
    early = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    late = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    middle = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    first = factory.document(host="a", gpus=1, collected_at=middle)
    resold = factory.document(host="b", gpus=1, collected_at=late, seed=1)
    older = factory.document(host="c", gpus=1, collected_at=early, seed=2)
    uuid = first["gpus"][0]["uuid"]
    for doc in (resold, older):
        doc["gpus"][0]["uuid"] = doc["benchmarks"][0]["gpu_uuid"] = uuid
    store(engine, first, provider="lambda")
    store(engine, resold, provider="coreweave")
    store(engine, older, provider="lambda")  # collected earliest, ingested last
    with engine.connect() as conn:
        gpus = conn.execute(select(Gpu)).all()
        result_gpus = set(conn.execute(select(BenchmarkResult.gpu_id)).scalars())
    assert len(gpus) == 1
    assert gpus[0].uuid == uuid
    assert (gpus[0].first_seen, gpus[0].last_seen) == (early, late)
    assert result_gpus == {gpus[0].id}


def test_a_gpu_without_uuid_is_followed_on_its_host_only(engine: Engine) -> None:
    store(engine, factory.document(host="a", gpus=2, with_uuid=False))
    store(engine, factory.document(host="a", gpus=2, with_uuid=False, seed=1))
    store(engine, factory.document(host="b", gpus=2, with_uuid=False))
    with engine.connect() as conn:
        identities = sorted(conn.execute(select(Gpu.identity)).scalars())
    assert len(identities) == 4  # a:0, a:1, b:0, b:1
    assert all(identity.startswith("host:") for identity in identities)


def test_host_name_from_the_option_or_the_document(engine: Engine) -> None:
    store(engine, factory.document(host="reported-name"))
    store(engine, factory.document(host="reported-name", seed=1), host="inventory-name")
    with engine.connect() as conn:
        names = sorted(conn.execute(text("SELECT name FROM host")).scalars())
    assert names == ["inventory-name", "reported-name"]


def test_a_document_without_hostname_needs_host(engine: Engine, counts: Counts) -> None:
    data = factory.document()
    data["host"]["hostname"] = None
    with pytest.raises(InputError, match="--host"):
        store(engine, data)
    assert sum(counts(engine).values()) == 0
    assert store(engine, data, host="gpu-07").outcome is Outcome.STORED


def _nan_tflops(data: dict[str, Any]) -> str:
    data["benchmarks"][0]["tflops"] = float("nan")
    return json.dumps(data)


def _unknown_field(data: dict[str, Any]) -> str:
    data["gpus"][0]["password"] = "hunter2"
    return json.dumps(data)


def _oversize_string(data: dict[str, Any]) -> str:
    data["host"]["os"] = "x" * 10_000
    return json.dumps(data)


def _duplicate_gpu(data: dict[str, Any]) -> str:
    data["gpus"][1]["index"] = 0
    return json.dumps(data)


def _nul_character(data: dict[str, Any]) -> str:
    data["host"]["kernel"] = "6.8\x00evil"
    return json.dumps(data)


def _bad_time(data: dict[str, Any]) -> str:
    data["collected_at"] = "yesterday"
    return json.dumps(data)


def _uuid_mismatch(data: dict[str, Any]) -> str:
    data["benchmarks"][0]["gpu_uuid"] = "GPU-someone-else"
    return json.dumps(data)


@pytest.mark.parametrize(("spoil", "reason"), [
    (_nan_tflops, "benchmarks.0.tflops: Input should be a finite number"),
    (_unknown_field, "gpus.0.password"),
    (_oversize_string, "host.os"),
    (_duplicate_gpu, "gpus.1.index"),
    (_nul_character, "host.kernel: holds a NUL"),
    (_bad_time, "collected_at"),
    (_uuid_mismatch, "benchmarks.0.gpu_uuid"),
])
def test_an_invalid_document_is_rejected_whole(engine: Engine, counts: Counts,
                                               spoil: Callable[[dict[str, Any]], str],
                                               reason: str) -> None:
    store(engine, factory.document(host="good"))
    before = counts(engine)
    text_form = spoil(factory.document(host="bad"))
    with pytest.raises(AgentError, match=reason), Ingest(engine) as ingest:
        ingest.store_prepared(prepare(parse_text(text_form, "bad.json"), "bad.json"),
                              Origin("lambda"))
    assert counts(engine) == before


def test_a_failure_inside_the_transaction_leaves_nothing(engine: Engine,
                                                         counts: Counts) -> None:
    """A real database error after the document row was written (a trigger refuses the
    benchmark rows) rolls the whole document back, probe run and GPUs included."""
    with refusing(engine, "benchmark_result"), pytest.raises(Exception, match="refused by test"):
        store(engine, factory.document(gpus=2))
    assert sum(counts(engine).values()) == 0
    assert store(engine, factory.document(gpus=2)).outcome is Outcome.STORED


def test_documents_of_one_ingest_share_one_probe_run(engine: Engine) -> None:
    with Ingest(engine, RunInfo(sweep="s1")) as ingest:
        for seed in range(3):
            ingest.store(AgentDocument.model_validate(factory.document(seed=seed)),
                         Origin("lambda"))
    with engine.connect() as conn:
        runs = conn.execute(select(Document.probe_run_id)).scalars().all()
    assert len(runs) == 3 and len(set(runs)) == 1


def test_a_host_that_sent_nothing_is_recorded(engine: Engine) -> None:
    with Ingest(engine, RunInfo(kind="probe", sweep="nightly")) as ingest:
        ingest.record_error(Origin("lambda", "gpu-09"), "connect",
                            "ssh: connect to host gpu-09 port 22: Connection refused")
    with engine.connect() as conn:
        error = conn.execute(select(HostError)).one()
    assert error.document_id is None and error.stage == "connect"


def test_no_gpu_document_is_stored(engine: Engine, counts: Counts) -> None:
    data = factory.document(gpus=0)
    data["no_gpu_reason"] = "NVML Shared Library Not Found"
    data["system"] = None
    assert store(engine, data).outcome is Outcome.STORED
    assert counts(engine)["document"] == 1 and counts(engine)["gpu"] == 0


def _run_hosts(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(RunHost).order_by(RunHost.id)).all())


def test_a_probe_keeps_each_hosts_listing(engine: Engine) -> None:
    listing = Listing(expect={"variant": "H100 SXM5 80GB", "gpu_count": 2},
                      price_per_gpu_hour=2.49, currency="USD", tags=("us-east", "spot"))
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        stored = ingest.store(AgentDocument.model_validate(factory.document()),
                              Origin("lambda", "gpu-01", listing))
        ingest.record_error(Origin("lambda", "gpu-02", Listing(price_per_gpu_hour=1.0,
                                                                 currency="EUR")),
                            "connect", "refused")
    first, second = _run_hosts(engine)
    assert (first.status, first.document_id) == ("stored", stored.document_id)
    assert first.expect == {"variant": "H100 SXM5 80GB", "gpu_count": 2}
    assert (first.price_per_gpu_hour, first.currency, first.tags) == (
        2.49, "USD", ["us-east", "spot"])
    assert (second.status, second.document_id, second.currency) == ("failed", None, "EUR")


def test_a_probe_stores_one_document_per_host(engine: Engine, counts: Counts) -> None:
    """A task delivered twice (a worker killed after storing, before acknowledging) probes
    the host again: the run keeps its first document, and a later failure of the same host
    does not undo it."""
    with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
        first = ingest.store(AgentDocument.model_validate(factory.document(seed=1)),
                             Origin("lambda", "gpu-01"))
        run_id = ingest.run_id
    before = counts(engine)
    with Ingest(engine, RunInfo(kind="sweep", sweep="nightly", run_id=run_id)) as again:
        second = again.store(AgentDocument.model_validate(factory.document(seed=2)),
                             Origin("lambda", "gpu-01"))
        again.record_error(Origin("lambda", "gpu-01"), "timeout", "late")
    assert second.outcome is Outcome.ALREADY_STORED
    assert second.document_id == first.document_id
    assert counts(engine) == before
    (row,) = _run_hosts(engine)
    assert (row.status, row.document_id) == ("stored", first.document_id)


def test_a_failed_host_stored_on_a_later_try_counts_as_stored(engine: Engine) -> None:
    with Ingest(engine, RunInfo(kind="sweep")) as ingest:
        ingest.record_error(Origin("lambda", "gpu-01"), "connect", "refused")
        stored = ingest.store(AgentDocument.model_validate(factory.document()),
                              Origin("lambda", "gpu-01"))
    (row,) = _run_hosts(engine)
    assert (row.status, row.document_id) == ("stored", stored.document_id)


def test_hand_ingest_may_load_a_hosts_history_into_one_run(engine: Engine) -> None:
    with Ingest(engine) as ingest:
        for seed in range(3):
            last = ingest.store(AgentDocument.model_validate(factory.document(seed=seed)),
                                Origin("lambda", "gpu-01"))
            assert last.outcome is Outcome.STORED
    (row,) = _run_hosts(engine)
    assert row.document_id == last.document_id


def _prepared(host: str, seed: int = 0) -> Any:
    return prepare(AgentDocument.model_validate(factory.document(host=host, seed=seed)), host)


def test_a_batch_stores_what_one_by_one_would(engine: Engine, counts: Counts) -> None:
    """One transaction for several documents (`fleet ingest`): a copy within the batch and
    a document stored before under another name are already stored, and that other name
    is not left behind as a host."""
    earlier = store(engine, factory.document(host="gpu-01", seed=9))
    with Ingest(engine) as ingest:
        stored = ingest.store_batch([
            (_prepared("gpu-01"), Origin("lambda")),
            (_prepared("gpu-02"), Origin("lambda")),
            (_prepared("gpu-01"), Origin("lambda")),
            (_prepared("gpu-01", seed=9), Origin("lambda", "renamed")),
        ])
    assert [s.outcome for s in stored] == [Outcome.STORED, Outcome.STORED,
                                           Outcome.ALREADY_STORED, Outcome.ALREADY_STORED]
    assert stored[2].document_id == stored[0].document_id
    assert stored[3].document_id == earlier.document_id
    with engine.connect() as conn:
        hosts = sorted(conn.execute(text("SELECT name FROM host")).scalars())
        runs = conn.execute(select(Document.probe_run_id)).scalars().all()
    assert hosts == ["gpu-01", "gpu-02"]
    assert len(set(runs)) == 2  # the earlier store's run and the batch's
    assert counts(engine)["document"] == 3 and counts(engine)["run_host"] == 3


def test_a_batch_of_known_documents_makes_no_run(engine: Engine, counts: Counts) -> None:
    store(engine, factory.document(host="gpu-01"))
    before = counts(engine)
    with Ingest(engine) as ingest:
        (stored,) = ingest.store_batch([(_prepared("gpu-01"), Origin("lambda"))])
    assert stored.outcome is Outcome.ALREADY_STORED
    assert counts(engine) == before


def test_a_batch_that_fails_stores_none_of_it(engine: Engine, counts: Counts) -> None:
    """A database error on the second document rolls the first back too; the caller then
    stores them one by one (`fleet ingest`), and the first is stored alone."""
    batch = [(_prepared("gpu-01"), Origin("lambda")), (_prepared("gpu-02"), Origin("lambda"))]
    with refusing(engine, "document", "NEW.hostname = 'gpu-02'"), Ingest(engine) as ingest:
        with pytest.raises(DBAPIError, match="refused by test"):
            ingest.store_batch(batch)
        assert sum(counts(engine).values()) == 0
        assert ingest.store_prepared(*batch[0]).outcome is Outcome.STORED
    assert counts(engine)["document"] == 1 and counts(engine)["probe_run"] == 1


def test_a_probe_does_not_batch(engine: Engine) -> None:
    with Ingest(engine, RunInfo(kind="probe")) as ingest, pytest.raises(ValueError):
        ingest.store_batch([(_prepared("gpu-01"), Origin("lambda"))])


def test_two_hosts_sending_one_document_each_keep_their_own(engine: Engine,
                                                            counts: Counts) -> None:
    """Two inventory hosts that are one machine send the very same document: each host's
    answer is stored against its own name and settled in the run; the same document again
    for the same host is still already stored."""
    data = factory.document(gpus=2)
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        alpha = ingest.store(AgentDocument.model_validate(data), Origin("lambda", "alpha"))
        beta = ingest.store(AgentDocument.model_validate(data), Origin("lambda", "beta"))
    assert (alpha.outcome, beta.outcome) == (Outcome.STORED, Outcome.STORED)
    assert alpha.content_hash == beta.content_hash
    assert alpha.document_id != beta.document_id
    rows = _run_hosts(engine)
    assert sorted((row.status, row.document_id) for row in rows) == sorted(
        [("stored", alpha.document_id), ("stored", beta.document_id)])
    # The GPUs are one set of cards, found under both hosts: one row per UUID.
    assert counts(engine)["gpu"] == 2 and counts(engine)["benchmark_result"] == 4
    before = counts(engine)
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        again = ingest.store(AgentDocument.model_validate(data), Origin("lambda", "beta"))
    assert again.outcome is Outcome.ALREADY_STORED
    assert again.document_id == beta.document_id
    assert counts(engine) == before


def test_hand_ingest_takes_one_document_under_two_names_as_one(engine: Engine,
                                                               counts: Counts) -> None:
    data = factory.document()
    first = store(engine, data, host="alpha")
    before = counts(engine)
    again = store(engine, data, host="beta")
    assert again.outcome is Outcome.ALREADY_STORED
    assert again.document_id == first.document_id
    assert counts(engine) == before  # and "beta" is not left behind as a host
