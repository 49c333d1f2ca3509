"""`fleet.Store`: the store read back as typed DataFrames and the report's typed findings,
on stores filled through the real ingest path (SQLite and PostgreSQL), and a probe over
`transport: local` into a store, in this process."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import fleet
from fleet.errors import InputError, StoreError
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.sweeps import create_run, finish_run
from tests.conftest import GPU_CASES
from tests.report.scene import WHEN, store_scene
from tests.store import factory

NEXT_NIGHT = WHEN + dt.timedelta(days=1)


def _utc_dtype(series: pd.Series) -> bool:
    dtype = series.dtype
    return isinstance(dtype, pd.DatetimeTZDtype) and str(dtype.tz) == "UTC"


@pytest.fixture
def scene(tmp_path: Path) -> fleet.Store:
    """tests/report/scene.py stored twice: the nights of 2026-11-22 and 11-23."""
    store = fleet.Store(str(tmp_path / "fleet.db"))
    store_scene(store.engine)
    store_scene(store.engine, when=NEXT_NIGHT)
    return store


def test_results_are_typed_and_carry_what_a_buyer_compares(scene: fleet.Store) -> None:
    df = scene.results()
    # 6 answering hosts x 8 GPUs x 2 nights; delta-01 never answered.
    assert len(df) == 96
    assert _utc_dtype(df["collected_at"])
    for column in ("provider", "variant"):
        assert isinstance(df[column].dtype, pd.CategoricalDtype), column
    for column in ("tflops", "median_ms", "price_per_gpu_hour", "temperature_load_c",
                   "first_20s_tflops", "soak_drop"):
        assert df[column].dtype == "float64", column
    for column in ("gpu_index", "m", "runs", "run", "result"):
        assert df[column].dtype == "int64", column
    assert df["not_soaked"].dtype == bool and df["power_capped"].all()
    assert set(df["provider"].cat.categories) == {"alpha", "beta", "gamma"}
    # Newest first, and the listing's price and the fingerprint's form factor per result.
    assert df["collected_at"].iloc[0] == pd.Timestamp("2026-11-23 03:00", tz="UTC")
    assert df["collected_at"].iloc[-1] == pd.Timestamp("2026-11-22 03:00", tz="UTC")
    prices = df.groupby("provider", observed=True)["price_per_gpu_hour"].unique()
    assert {p: list(v) for p, v in prices.items()} == {"alpha": [2.49], "beta": [2.10],
                                                       "gamma": [1.90]}
    assert set(df["currency"]) == {"USD"} and set(df["thermal"]) == {"soaked"}
    forms = df.groupby("host")["form_factor"].unique()
    assert list(forms["gamma-01"]) == ["PCIe"] and list(forms["alpha-02"]) == ["SXM"]
    # The straggler planted at 630 TFLOP/s, within the 1% run-to-run noise of its samples.
    straggler = df[(df.host == "alpha-01") & (df.gpu_index == 3)]
    assert len(straggler) == 2 and straggler.tflops.between(630 * 0.99, 630 * 1.01).all()


def test_every_column_is_documented_in_its_methods_docstring(scene: fleet.Store) -> None:
    frames = {"results": scene.results(), "fingerprints": scene.fingerprints(),
              "runs": scene.runs(), "findings": scene.findings()}
    _documented(frames)
    # Nothing matches: the same columns, the same dtypes.
    _documented({"results": scene.results(provider="nobody"),
                 "fingerprints": scene.fingerprints(provider="nobody"),
                 "runs": scene.runs(kind="sweep")})


def _documented(frames: dict[str, pd.DataFrame]) -> None:
    """Each column is described, under the dtype it has, in its method's docstring."""
    for name, frame in frames.items():
        doc = getattr(fleet.Store, name).__doc__
        assert "Example" in doc, name
        for column in frame.columns:
            said = f"{column} ({frame[column].dtype}): "
            assert re.search(rf"\n +{re.escape(said)}", doc), f"{name}: {said}is not described"


def test_result_filters(scene: fleet.Store) -> None:
    beta = scene.results(provider="beta")
    assert len(beta) == 32 and set(beta.host) == {"beta-01", "beta-02"}
    # A variant as a listing spells it; the catalog label is stored.
    pcie = scene.results(variant="h100-pcie-80gb")
    assert set(pcie.host) == {"gamma-01"} and set(pcie.variant) == {"H100 PCIe 80GB"}
    assert len(scene.results(host="gamma-02", since="2026-11-23")) == 8
    # A bare date as `until` is that whole day; as `since`, its start.
    assert set(scene.results(until="2026-11-22").collected_at) == {
        pd.Timestamp("2026-11-22 03:00", tz="UTC")}
    assert scene.results(since=dt.date(2026, 11, 24)).empty
    assert len(scene.results(until=dt.datetime(2026, 11, 22, 2, 59))) == 0
    latest = scene.results(latest=True)
    assert len(latest) == 48 and set(latest.collected_at) == {
        pd.Timestamp("2026-11-23 03:00", tz="UTC")}
    with pytest.raises(InputError, match="no GPU of that variant is stored; the stored "
                                         "variants are H100 PCIe 80GB, H100 SXM5 80GB"):
        scene.results(variant="A100 80GB")
    with pytest.raises(InputError, match=r"until='last week' is not a date or time"):
        scene.results(until="last week")


def test_times_given_with_an_offset_are_read_back_in_utc(tmp_path: Path) -> None:
    store = fleet.Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    berlin = dt.timezone(dt.timedelta(hours=2))
    with Ingest(store.engine, RunInfo(kind="probe")) as ingest:
        ingest.store(AgentDocument.model_validate(factory.document(
            collected_at=dt.datetime(2026, 11, 22, 5, 30, tzinfo=berlin))),
            Origin("alpha", "a-01", Listing()))
    df = store.results()
    assert _utc_dtype(df.collected_at)
    assert list(df.collected_at.unique()) == [pd.Timestamp("2026-11-22 03:30", tz="UTC")]
    # No price listed: missing, not zero.
    assert df.price_per_gpu_hour.isna().all() and df.currency.isna().all()
    # A filter given at an offset means the same instant.
    assert len(store.results(since=dt.datetime(2026, 11, 22, 5, 30, tzinfo=berlin))) == 2
    assert store.results(since="2026-11-22T05:31:00+02:00").empty
    assert len(store.results(until=pd.Timestamp("2026-11-22 04:30", tz="Europe/Berlin"))) == 2
    assert store.results(until=pd.Timestamp("2026-11-22 04:29", tz="Europe/Berlin")).empty


def test_fingerprints_frame(scene: fleet.Store) -> None:
    fp = scene.fingerprints(latest=True)
    assert len(fp) == 48 and set(fp.collected_at) == {pd.Timestamp("2026-11-23 03:00",
                                                                   tz="UTC")}
    assert _utc_dtype(fp.collected_at)
    assert isinstance(fp.provider.dtype, pd.CategoricalDtype)
    assert isinstance(fp.variant.dtype, pd.CategoricalDtype)
    assert fp.power_limit_w.dtype == "float64"
    assert str(fp.memory_gb.dtype) == "Int64" and str(fp.max_sm_clock_mhz.dtype) == "Int64"
    assert str(fp.ecc_enabled.dtype) == "boolean"
    limits = fp.groupby("provider", observed=True).power_limit_w.unique()
    assert list(limits["beta"]) == [650.0] and list(limits["alpha"]) == [700.0]
    drivers = fp.groupby("host").driver_version.unique()
    assert list(drivers["gamma-02"]) == ["535.104.05"]
    assert len(scene.fingerprints()) == 96
    assert set(scene.fingerprints(variant="H100 PCIe 80GB").host) == {"gamma-01"}
    assert scene.fingerprints(provider="beta", until="2026-11-22").collected_at.nunique() == 1


def test_runs_frame_counts_each_runs_hosts(scene: fleet.Store) -> None:
    runs = scene.runs()
    assert list(runs.run) == [1, 2] and set(runs.kind) == {"probe"}
    assert set(runs.sweep) == {"nightly"}
    # Six hosts stored a document, delta-01 failed to connect.
    assert list(runs.hosts) == [7, 7] and list(runs.stored) == [6, 6]
    assert list(runs.failed) == [1, 1] and list(runs.documents) == [6, 6]
    assert _utc_dtype(runs.started_at) and _utc_dtype(runs.ended_at)
    assert scene.runs(kind="sweep").empty


def test_nights_of_a_sweep(tmp_path: Path) -> None:
    store = fleet.Store(tmp_path / "fleet.db")
    for night, tflops in ((22, 700.0), (23, 650.0)):
        run_id = create_run(store.engine, RunInfo(kind="sweep", sweep="nightly"))
        with Ingest(store.engine, RunInfo(kind="sweep", sweep="nightly",
                                          run_id=run_id)) as ingest:
            ingest.store(AgentDocument.model_validate(factory.document(
                host="b-01", gpus=2, gpu_tflops=[tflops, tflops], seed=night,
                collected_at=dt.datetime(2026, 11, night, 3, 0, tzinfo=dt.UTC))),
                Origin("beta", "b-01", Listing()))
            ingest.record_error(Origin("beta", "b-02", Listing()), "connect", "refused")
        finish_run(store.engine, run_id)
    nights = store.nights("nightly")
    _documented({"nights": nights})
    assert list(nights.run) == [1, 1, 1, 2, 2, 2]
    assert _utc_dtype(nights.started_at)
    failed = nights[nights.host == "b-02"]
    assert list(failed.status) == ["failed", "failed"] and failed.gpu_index.isna().all()
    measured = nights[nights.host == "b-01"]
    assert str(measured.gpu_index.dtype) == "Int64"
    per_night = measured.groupby("run").tflops.median()
    assert per_night[1] == pytest.approx(700.0, rel=0.01)
    assert per_night[2] == pytest.approx(650.0, rel=0.01)
    assert len(store.nights("nightly", limit=1)) == 3
    with pytest.raises(InputError, match="no sweep named 'weekly' is stored; the stored "
                                         "sweeps are nightly"):
        store.nights("weekly")


def test_findings_as_typed_objects_and_as_a_frame(scene: fleet.Store) -> None:
    report = scene.report(until="2026-11-22")
    # The scene's known truth: beta is 3% slower than alpha on the soaked configuration.
    [gap] = report.gaps
    assert (gap.slower, gap.faster) == ("beta", "alpha")
    assert gap.gap == pytest.approx(0.03, abs=0.006)
    assert [(s.host, s.gpu_index) for s in report.stragglers] == [("alpha-01", 3)]
    assert [m.host for m in report.mismatches] == ["gamma-01"]
    assert report.hosts == 6 and report.runs == 1
    found = scene.findings(until="2026-11-22")
    assert isinstance(found.kind.dtype, pd.CategoricalDtype)
    assert isinstance(found.provider.dtype, pd.CategoricalDtype)
    assert list(found.columns) == ["kind", "side", "provider", "title", "cause", "evidence",
                                   "details"]
    rows = set(zip(found.kind, found.provider, strict=True))
    assert {("gap", "beta"), ("straggler", "alpha"), ("mismatch", "gamma")} <= rows
    [gap_row] = found[found.kind == "gap"].itertuples()
    assert gap_row.title.startswith("beta is 3.") and "slower than alpha" in gap_row.title
    # Filters narrow the report as `fleet report`'s do.
    assert scene.findings(providers="alpha", variants="H100 SXM5 80GB").kind.tolist() == [
        "straggler"]
    with pytest.raises(InputError, match="since is after until"):
        scene.report(since="2026-11-23", until="2026-11-22")


def test_a_password_in_the_url_is_never_shown() -> None:
    # Nothing connects until the store is used.
    store = fleet.Store("postgresql://fleet:hunter2@db.invalid:5432/fleet")
    for text in (repr(store), str(store)):
        assert "hunter2" not in text and "fleet:***@db.invalid:5432/fleet" in text
    assert repr(store).startswith("Store(")
    with pytest.raises(StoreError) as failure:
        store.results()
    assert "hunter2" not in str(failure.value) and "db.invalid" in str(failure.value)


def test_the_default_store_is_the_clis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    monkeypatch.delenv("FLEET_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert str(fleet.Store()) == f"sqlite:///{tmp_path / 'data' / 'fleet' / 'fleet.db'}"
    monkeypatch.setenv("FLEET_DB", str(tmp_path / "env.db"))
    store = fleet.Store()
    assert str(store) == f"sqlite:///{tmp_path / 'env.db'}" and store.created
    assert store.location.origin == "FLEET_DB"
    with pytest.raises(InputError, match="mysql database"):
        fleet.Store("mysql://u@h/db")


def test_sqlite_and_postgresql_give_the_same_frames(tmp_path: Path, postgres_url: str
                                                    ) -> None:
    frames = []
    for url in (f"sqlite:///{tmp_path / 'fleet.db'}", postgres_url):
        with fleet.Store(url) as store:
            store_scene(store.engine)
            since = pd.Timestamp("2026-11-22 04:00", tz="Europe/Berlin")  # 03:00 UTC
            frames.append((store.results(since=since), store.fingerprints(), store.runs(),
                           store.findings()))
    for sqlite, postgresql in zip(*frames, strict=True):
        # Runs' times are when each store was written; everything else is the same data.
        times = [c for c in ("started_at", "ended_at", "finished_at") if c in sqlite]
        pd.testing.assert_frame_equal(sqlite.drop(columns=times),
                                      postgresql.drop(columns=times))
    assert len(frames[1][0]) == 48


def test_probe_over_local_transport_lands_in_the_store(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    pytest.importorskip("torch", reason="the CPU smoke benchmark runs the harness on torch")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FLEET_DB", raising=False)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"providers": {"here": {
        "transport": "local", "price_per_gpu_hour": 2.5, "currency": "EUR",
        "hosts": {"box": {
            "python": sys.executable, "cache_dir": str(tmp_path / "cache"),
            "runtime": {"use": "host"},
            "env": {"FLEET_NVML_REPLAY": str(GPU_CASES / "h100-sxm5-x8-baremetal"
                                             / "nvml-recording.json")},
            "expect": {"variant": "H100 SXM5 80GB", "gpu_count": 8}}}}}}))
    store = fleet.Store(str(tmp_path / "fleet.db"))
    heard: list[str] = []
    done = store.probe(inventory, fleet.ProbeOptions(bench=None),
                       observe=lambda target, stage, message: heard.append(stage))
    [host] = done.hosts
    assert host.ok and host.target.key == "here/box" and not done.failed
    assert heard, "the observer hears the probe's stages"
    fp = store.fingerprints()
    assert len(fp) == 8 and set(fp.variant) == {"H100-SXM5-80GB"}
    # The recording's GPU 5 is capped at 500 W.
    assert fp.set_index("gpu_index").power_limit_w[5] == 500.0
    assert store.results().empty
    # A CPU smoke benchmark (no GPU here): one cool-start result, at the listed price (the
    # matmul alone: the suites after it have tests of their own).
    bench = fleet.BenchOptions(cpu=True, m=128, n=128, k=128, quick=True, measure_s=0.3,
                               max_warmup_s=0.5, max_total_s=2.0, suite="gemm")
    done = store.probe(str(inventory), fleet.ProbeOptions(bench=bench))
    assert done.hosts[0].ok, done.hosts[0].reason
    results = store.results()
    assert len(results) >= 1 and (results.tflops > 0).all()
    assert set(results.thermal) == {"cool-start"}
    assert set(results.price_per_gpu_hour) == {2.5} and set(results.currency) == {"EUR"}
    assert list(store.runs().kind) == ["probe", "probe"]


def test_a_store_is_created_upgraded_filled_and_pruned_through_the_api(
        tmp_path: Path) -> None:
    """What `fleet db` and `fleet ingest` do, as a notebook would call it."""
    path = tmp_path / "new.db"
    store = fleet.Store(path)
    assert not store.exists()
    before, after = store.upgrade()
    assert before.revision is None and after.current and path.exists()
    assert store.schema() == after
    good = tmp_path / "gpu-01.json"
    old = dt.datetime(2026, 10, 1, 3, 0, tzinfo=dt.UTC)
    good.write_text(json.dumps(factory.document(host="gpu-01", gpus=2, collected_at=old)))
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema_version": 1}')
    heard: list[str] = []
    counts = store.ingest([good, bad, good], provider="lambda", jobs=1,
                          on_item=lambda item: heard.append(item.outcome))
    assert dict(counts) == {"stored": 1, "rejected": 1, "already stored": 1}
    assert heard == ["stored", "rejected", "already stored"]
    assert list(store.results()["provider"].astype(str)) == ["lambda", "lambda"]
    pruned = store.prune_samples(30)
    assert (pruned.results, pruned.documents) == (2, 1)
    with pytest.raises(InputError, match="--keep-samples-days"):
        store.prune_samples(-1)
    store.close()
