"""The report's data comes from the store's tables, not from re-read document bodies.

Each expected figure below is what the documents stored here say (tests/store/factory.py,
tests/report/scene.py), written out, or read straight from a table with plain SQL; none
is computed by the code under test.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics

from sqlalchemy import Engine, select, update

from fleet.analysis.dataset import Scope, anonymize, load_dataset
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.models import BenchmarkResult, Document, Host
from tests.report.scene import SXM, WHEN, store_scene
from tests.store import factory

STACK = "torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4"  # factory.OLD_STACK, as reports name it


def test_the_fleet_as_found_is_one_row_per_gpu_of_each_hosts_newest_document(
        engine: Engine) -> None:
    store_scene(engine)
    # A second night for beta-01, on a new driver: the newest document is the one judged.
    later = factory.document(host="beta-01", gpus=8, collected_at=WHEN + dt.timedelta(days=1),
                             power_limit_w=650.0, driver_version="580.200.01", seed=1)
    with Ingest(engine, RunInfo(kind="probe", sweep="nightly")) as ingest:
        ingest.store(AgentDocument.model_validate(later),
                     Origin("beta", "beta-01", Listing(SXM, 2.10, "USD", ())))
    data = load_dataset(engine, Scope())
    gpus = data.gpus
    assert len(gpus) == 48  # six hosts of eight GPUs; delta-01 never answered
    assert {"provider", "host", "collected_at", "software_stack", "gpu_id", "gpu_index",
            "variant", "power_limit_enforced_w", "app_sm_clock_target_mhz",
            "pcie_gen_current", "nvlink_links_total", "mig_devices", "vgpu_profile",
            "capabilities"} <= set(gpus.columns)
    per_host = gpus.groupby("host").size().to_dict()
    assert per_host == {h: 8 for h in ("alpha-01", "alpha-02", "beta-01", "beta-02",
                                       "gamma-01", "gamma-02")}
    beta = gpus[gpus["host"] == "beta-01"]
    assert set(beta["driver_version"]) == {"580.200.01"}
    assert set(beta["collected_at"]) == {WHEN + dt.timedelta(days=1)}
    assert set(beta["power_limit_enforced_w"]) == {650.0}
    assert sorted(beta["gpu_index"]) == list(range(8))
    gamma = gpus[gpus["host"] == "gamma-01"]
    assert set(gamma["variant"]) == {"H100 PCIe 80GB"} and set(gamma["form_factor"]) == {"PCIe"}
    assert set(gamma["power_limit_enforced_w"]) == {350.0}
    assert set(gpus["app_sm_clock_target_mhz"]) == {1755}
    assert set(gpus["software_stack"]) == {STACK}
    assert gpus.iloc[0]["capabilities"]["power_limit"] == "no"
    # Each variant's datasheet, as the factory's catalog gives it.
    assert data.datasheets["H100 SXM5 80GB"].default_power_w == 700.0
    assert data.datasheets["H100 SXM5 80GB"].peak_tflops == {"bf16": 989.0}
    assert data.datasheets["H100 PCIe 80GB"].peak_tflops == {"bf16": 756.0}
    hosts = {h.host: h for h in data.hosts}
    assert hosts["beta-01"].collected_at == WHEN + dt.timedelta(days=1)
    assert hosts["beta-01"].gpu_count == 8 and hosts["beta-01"].listing.price_per_gpu_hour == 2.1
    assert data.runs == 2


def test_the_report_reads_no_document_body_but_a_sheet_and_a_missing_gpus_reason(
        engine: Engine) -> None:
    """Emptying a body's GPUs changes nothing: the fingerprint rows speak for it."""
    store_scene(engine)
    before = build_report(engine, ReportOptions(), "test")
    with engine.begin() as conn:
        document_id, body = conn.execute(
            select(Document.id, Document.body).join(Host, Host.id == Document.host_id)
            .where(Host.name == "beta-01")).one()
        data = body if isinstance(body, dict) else json.loads(body)
        data["gpus"] = []
        conn.execute(update(Document).where(Document.id == document_id).values(body=data))
    after = build_report(engine, ReportOptions(), "test")
    assert after.counts() == before.counts() == {
        "mismatch": 2, "gap": 1, "cooling": 0, "drift": 1, "straggler": 1, "regression": 0,
        "duplicate": 0, "health": 0, "hostlink": 0, "peer": 0, "shortfall": 0,
            "contention": 0, "corruption": 0, "job_shortfall": 0, "network": 0,
            "not_measured": 0, "host_limit": 0, "storage": 0, "bulletin": 0}
    assert after.drift == before.drift and after.mismatches == before.mismatches
    assert after.gpus_fingerprinted == 48


def test_listings_are_judged_on_the_fingerprint_columns(engine: Engine) -> None:
    """The four checks that read what only the body had before revision 0008 (the enforced
    power limit) or has only in the body (why no GPU was found)."""
    capped = factory.document(host="cap-01", gpus=2, collected_at=WHEN, power_limit_w=650.0)
    small = factory.document(host="small-01", gpus=2, collected_at=WHEN)
    empty = factory.document(host="empty-01", gpus=0, collected_at=WHEN)
    empty["no_gpu_reason"] = "nvidia-smi not found on empty-01.internal"
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for data, host, expect in (
                (capped, "cap-01", {"min_power_limit_w": 700.0}),
                (small, "small-01", {"family": "H100", "memory_gb": 141, "gpu_count": 4}),
                (empty, "empty-01", {"variant": "H100 SXM5 80GB"})):
            ingest.store(AgentDocument.model_validate(data),
                         Origin("eta", host, Listing(expect, None, None, ())))
    report = build_report(engine, ReportOptions(), "test")
    problems = {m.host: m.problems for m in report.mismatches}
    assert problems == {
        "cap-01": ("power limit 650 W on GPUs 0, 1, below the listed 700 W",),
        "small-01": ("listed 4 GPUs, found 2", "listed 141 GB per GPU, found 80 GB on GPUs 0, 1"),
        "empty-01": ("listed GPUs, found no NVIDIA GPU (nvidia-smi not found on "
                     "empty-01.internal)",),
    }
    assert {m.host: m.found for m in report.mismatches}["small-01"] == "2 x H100 SXM5 80GB"
    hidden = build_report(engine, ReportOptions(anonymize=True), "test")
    assert not any("empty-01" in p for m in hidden.mismatches for p in m.problems)


def test_per_gpu_medians_over_nights_match_the_stored_results(engine: Engine) -> None:
    """Three nights of one host: each GPU's measure is the median of its three results,
    over the configuration's rows as the table holds them."""
    for night in range(3):  # a run holds one document per host: one run a night
        data = factory.document(host="n-01", gpus=2, seed=night,
                                collected_at=WHEN + dt.timedelta(days=night),
                                gpu_tflops=[700.0 - 5 * night, 690.0 + 5 * night])
        with Ingest(engine, RunInfo(kind="sweep", sweep="nightly")) as ingest:
            ingest.store(AgentDocument.model_validate(data),
                         Origin("nu", "n-01", Listing({}, None, None, ())))
    with engine.connect() as conn:
        stored = {(row.gpu_index, row.collected_at): row.tflops for row in conn.execute(
            select(BenchmarkResult.gpu_index, BenchmarkResult.collected_at,
                   BenchmarkResult.tflops))}
    loaded = load_dataset(engine, Scope())
    assert len(loaded.measures) == 2
    for measure in loaded.measures:
        mine = [v for (index, _), v in stored.items() if index == measure.gpu_index]
        assert measure.results == 3
        assert measure.tflops == statistics.median(mine)
        assert (measure.first, measure.last) == (WHEN, WHEN + dt.timedelta(days=2))
        assert measure.config.stack == STACK and measure.stack == STACK
        assert measure.power_limit_w == 700.0 and measure.driver_version == "580.159.04"
    # The nights' medians, as planted: 695 (700, 695, 690) and 695 (690, 695, 700), each
    # within the samples' 1% run-to-run noise.
    assert all(abs(m.tflops - 695.0) < 0.02 * 695.0 for m in loaded.measures)
    since = load_dataset(engine, Scope(since=WHEN + dt.timedelta(days=1)))
    assert {m.results for m in since.measures} == {2}
    assert set(since.gpus["collected_at"]) == {WHEN + dt.timedelta(days=2)}


def test_an_anonymized_fleet_as_found_names_no_host_provider_or_serial(engine: Engine) -> None:
    store_scene(engine)
    hidden = anonymize(load_dataset(engine, Scope()))
    gpus = hidden.gpus
    assert len(gpus) == 48
    names = {"alpha", "beta", "gamma", "delta"}
    assert not set(gpus["provider"]) & names
    assert all(p.startswith("Provider ") for p in gpus["provider"])
    assert not any(h.startswith(tuple(names)) for h in gpus["host"])
    assert gpus["serial"].isna().all()
    text = gpus.to_json(date_format="iso")
    assert "SN000" not in text and "alpha" not in text and "GPU-" not in text
    keys = list(zip(gpus["provider"], gpus["host"], gpus["gpu_index"], strict=True))
    assert keys == sorted(keys)
