"""The job suite's figures (issue 37) in the store, on SQLite and PostgreSQL: written with
their document or not at all, refused when they contradict themselves or the document's
GPUs, read back as the frame the report reads (`fleet.store.job.frame`,
`fleet.Store.jobs`), listed by `fleet results --jobs` and shown by `fleet bench`."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console
from sqlalchemy import Engine, select

import fleet
from fleet.cli import main
from fleet.cli.display import print_bench
from fleet.errors import AgentError, InputError
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin, RunInfo, parse_text, prepare
from fleet.store.job import JOB_COLUMNS, frame
from fleet.store.models import Gpu, JobResult
from fleet.store.query import load_document
from tests.conftest import FIXTURES
from tests.store import factory, job_factory, node_factory
from tests.store.refuse import refusing

Counts = Callable[[Engine], dict[str, int]]
WHEN = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)
# A real 4x H200 document from a lent node, with its node suite's figures.
H200X4 = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
# The frame's columns, as /tmp/job_contract.md (issue 37) lists them for the report.
CONTRACT = ["result_id", "provider", "host", "run_id", "collected_at", "gpu_uuid",
            "gpu_index", "variant", "suite_version", "workload", "model", "shape", "dtype",
            "attention", "compiled", "graph", "gpus_in_run", "concurrency", "thermal",
            "config", "torch_version", "cuda_runtime_version", "cudnn_version",
            "tokens_per_s", "tflops", "tflops_causal", "mfu", "peak_tflops", "gbs",
            "hbm_share", "peak_memory_bytes", "within_low", "within_high", "soaked",
            "not_soaked", "contended", "contention", "temperature_c", "sm_clock_mhz",
            "power_w", "compile_s", "wall_s", "correctness_passed", "repeat_low",
            "repeat_high", "headline", "gqa", "point", "copy_gbs", "copy_share",
            "rerun_tokens_per_s", "rerun_share", "rerun_floor", "rerun_without",
            "rerun_contended", "job_suspects"]


def _h200(**knobs: Any) -> dict[str, Any]:
    """The lent 4x H200 node's document with job figures: GPU 2 10% slow, GPU 1's decode
    under flash measured beside another process."""
    data = json.loads(H200X4.read_text())
    assert "jobs" not in data  # recorded before the job suite
    job_factory.with_jobs(data, gpu_scale={2: 0.9}, **knobs)
    busy = next(r for r in data["jobs"] if (r["gpu_index"], r["workload"], r["attention"])
                == (1, "decode", "flash"))
    busy["contention"] = ["pid 4242 (user other) used 9 GiB", "GPU 1 busy 35%"]
    busy["flags"]["contended"] = True
    AgentDocument.model_validate(data)
    return data


def _factory_document(host: str, gpus: int, when: dt.datetime = WHEN,
                      **knobs: Any) -> dict[str, Any]:
    data = node_factory.with_node(factory.document(host=host, gpus=gpus, collected_at=when))
    return job_factory.with_jobs(data, **knobs)


def _store(engine: Engine, data: dict[str, Any], provider: str = "lent",
           run: RunInfo | None = None) -> int:
    with Ingest(engine, run or RunInfo()) as ingest:
        return ingest.store(AgentDocument.model_validate(data), Origin(provider)).document_id


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(JobResult.__table__).order_by(JobResult.id)))


def test_a_document_with_jobs_round_trips_into_the_frame(engine: Engine,
                                                         counts: Counts) -> None:
    data = _h200()
    document_id = _store(engine, data)
    assert counts(engine)["job_result"] == 4 * 2 * 2  # GPUs x workloads x attentions
    assert counts(engine)["node_result"] == len(data["node"]) == 36
    assert counts(engine)["gpu"] == 4  # the document's GPUs; none added for the jobs
    with engine.connect() as conn:
        gpu_ids = {uuid: gpu_id for gpu_id, uuid in conn.execute(select(Gpu.id, Gpu.uuid))}
    uuids = {gpu["index"]: gpu["uuid"] for gpu in data["gpus"]}
    assert {(r.gpu_index, r.gpu_id) for r in _rows(engine)} == {
        (i, gpu_ids[uuids[i]]) for i in range(4)}
    assert {r.document_id for r in _rows(engine)} == {document_id}

    jobs = frame(engine)
    assert list(jobs.columns) == CONTRACT
    assert [c.name for c in JOB_COLUMNS] == CONTRACT
    # Newest first; train before decode, flash before cudnn, then by GPU.
    assert list(zip(jobs.workload, jobs.attention, jobs.gpu_index, strict=True))[:5] == [
        ("train", "flash", 0), ("train", "flash", 1), ("train", "flash", 2),
        ("train", "flash", 3), ("train", "cudnn", 0)]
    by = {(r.gpu_index, r.workload, r.attention): r for r in jobs.itertuples()}

    train = by[(0, "train", "flash")]
    assert (train.provider, train.host, train.variant, train.gpu_uuid) == (
        "lent", "vm", "H200-SXM-141GB", uuids[0])
    assert train.collected_at == pd.Timestamp(data["collected_at"]).tz_convert("UTC")
    assert (train.model, train.dtype, train.suite_version, train.gpus_in_run,
            train.concurrency, train.thermal) == ("llama3-8b", "bf16", "1.0.0", 4,
                                                  "concurrent", "soaked")
    assert train.shape == "4x4096 h32/8 ffn14336 b2 s4096"
    assert train.config == ("suite 1.0 train llama3-8b 4x4096 h32/8 d128 ffn14336 b2 s4096 "
                            "bf16 flash gqa-expanded eager adamw-fused concurrent x4 soaked; "
                            "torch 2.13.0+cu130, CUDA 13.0, cuDNN 91002")
    # Suite 1.0 said neither: its pinned backend (flash) was the headline, and its
    # training expanded the key-value heads.
    assert (train.headline, train.gqa) == (True, "expanded") and pd.isna(train.point)
    assert not by[(0, "train", "cudnn")].headline
    # 79,000 tokens/s x (6 x 872,484,864 + 12 x 4 x 4096 x 4096) FLOP a token.
    assert train.tokens_per_s == pytest.approx(79_000.0, rel=1e-12)
    assert train.tflops == pytest.approx(477.177028608, rel=1e-9)
    assert train.tflops_causal == pytest.approx(79_000 * 5_637_562_368 / 1e12, rel=1e-9)
    assert (train.peak_tflops, train.mfu) == (989.0, pytest.approx(477.177028608 / 989.0))
    assert pd.isna(train.gbs) and pd.isna(train.hbm_share)
    assert (train.within_low, train.within_high) == (pytest.approx(0.997 * 79_000),
                                                     pytest.approx(1.003 * 79_000))
    # Judged: its soak's verdict and temperature; the others follow it, telemetry's max.
    assert (train.soaked, train.not_soaked, train.temperature_c) == (True, False, 71.0)
    assert pd.isna(by[(0, "train", "cudnn")].soaked)
    assert by[(0, "train", "cudnn")].temperature_c == 73.0
    assert (train.sm_clock_mhz, train.power_w, train.wall_s) == (1980.0, 690.0, 52.3)
    assert (train.peak_memory_bytes, train.correctness_passed) == (13_200_000_000, True)
    assert pd.isna(train.compile_s) and not train.compiled and not train.graph
    assert by[(2, "train", "flash")].tokens_per_s == pytest.approx(0.9 * 79_000)

    decode = by[(1, "decode", "flash")]
    assert decode.shape == "4x4096 h32/8 ffn14336 b64 ctx2048"
    assert "decode" in decode.config and "adamw" not in decode.config
    # 48,000 tokens/s of 64 a step: 750 steps/s of bf16 weights and a 2048-token cache.
    assert decode.gbs == pytest.approx(2919.340032, rel=1e-9)
    assert decode.hbm_share == pytest.approx(2919.340032 / 4800.0, rel=1e-9)
    assert decode.contended and decode.contention == ("pid 4242 (user other) used 9 GiB; "
                                                      "GPU 1 busy 35%")
    assert not by[(0, "decode", "flash")].contended
    assert pd.isna(by[(0, "decode", "flash")].contention)

    for name in ("provider", "variant", "workload"):
        assert isinstance(jobs[name].dtype, pd.CategoricalDtype), name
    assert str(jobs["collected_at"].dtype) == "datetime64[us, UTC]"
    assert str(jobs["soaked"].dtype) == "boolean" and str(jobs["compiled"].dtype) == "bool"
    # What the document said stays in its body, for whoever needs the rest.
    assert len(load_document(engine, document_id).jobs) == 16


def test_a_document_without_jobs_still_reads(engine: Engine, store_url: str,
                                              counts: Counts) -> None:
    old = H200X4.read_text()
    assert AgentDocument.model_validate_json(old).jobs == []
    data = factory.document(gpus=2)
    assert "jobs" not in data
    document_id = _store(engine, data)
    assert counts(engine)["job_result"] == 0
    assert load_document(engine, document_id).jobs == []
    jobs = frame(engine)
    assert jobs.empty and list(jobs.columns) == CONTRACT
    assert str(jobs["collected_at"].dtype) == "datetime64[us, UTC]"
    with fleet.Store(store_url) as store:
        assert store.jobs().empty


def _result(data: dict[str, Any], gpu: int, workload: str, attention: str = "flash"
            ) -> dict[str, Any]:
    return next(r for r in data["jobs"] if (r["gpu_index"], r["workload"], r["attention"])
                == (gpu, workload, attention))


def _spoiled(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], str]:
    def spoil(data: dict[str, Any]) -> str:
        change(data)
        return json.dumps(data)
    return spoil


def _scale(workload: str, name: str, by: float) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        _result(data, 1, workload)[name] *= by
    return change


def _set(workload: str, name: str, value: Any, gpu: int = 1
         ) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        _result(data, gpu, workload)[name] = value
    return change


def _other_gpus_uuid(data: dict[str, Any]) -> None:
    # GPU 1's UUID on a result that says it is GPU 7, a GPU the document does not have.
    result = _result(data, 0, "train")
    result["gpu_index"], result["gpu_uuid"] = 7, data["gpus"][1]["uuid"]


CONTRADICTIONS = [
    (_scale("train", "tokens_per_s", 1.001),
     r"jobs\.\d+: Value error, tokens_per_s 79079 is not tokens_per_step x steps / seconds"),
    (_scale("train", "tflops", 1.01), r"jobs\.\d+: Value error, tflops .* is not "
                                      r"tokens_per_s x flop_per_token / 1e12"),
    (_scale("train", "tflops_causal", 0.5), r"tflops_causal .* is not tokens_per_s x "
                                            r"flop_per_token_causal"),
    (_scale("train", "mfu", 1.1), r"jobs\.\d+: Value error, mfu .* is not tflops / "
                                  r"peak_tflops"),
    (_set("train", "peak_tflops", None), r"mfu is a share of peak_tflops, which is not given"),
    (_scale("decode", "gbs", 1.05), r"gbs .* is not bytes_per_step x steps / seconds / 1e9"),
    (_scale("decode", "hbm_share", 2.0), r"hbm_share .* is not gbs / hbm_gbs"),
    (_set("decode", "gbs", None), r"a decode result must give gbs"),
    (_set("decode", "bytes_per_step", None), r"a decode result must give bytes_per_step"),
    (_set("train", "optimizer", None), r"jobs\.\d+: Value error, a train result must give "
                                       r"optimizer"),
    (_set("train", "loss", None), r"a train result must give loss"),
    (_set("decode", "loss", 1.5), r"a decode result has no loss"),
    (_set("train", "tokens_per_step", 4096), r"tokens_per_step 4096 is not batch x seq "
                                             r"\(8192\)"),
    (_set("train", "soak", None, gpu=0), r"a soaked result that follows no other load must "
                                         r"carry its soak"),
    (_set("train", "compile_s", 12.0), r"compile_s is given only for a compiled job"),
    (_set("train", "loss", float("nan")), r"jobs\.\d+\.loss: Input should be a finite number"),
    (_set("train", "attention", "sdpa"), r"jobs\.\d+\.attention: Input should be 'flash'"),
    (_set("train", "follows", "warm-up"), r"jobs\.\d+\.follows: String should match pattern"),
]


@pytest.mark.parametrize(("change", "reason"), CONTRADICTIONS)
def test_a_contradicting_job_result_refuses_the_whole_document(
        engine: Engine, counts: Counts, change: Callable[[dict[str, Any]], None],
        reason: str) -> None:
    text = _spoiled(change)(_h200())
    with pytest.raises(AgentError, match=reason), Ingest(engine) as ingest:
        ingest.store_prepared(prepare(parse_text(text, "bad.json"), "bad.json"),
                              Origin("lent"))
    assert sum(counts(engine).values()) == 0


@pytest.mark.parametrize(("change", "reason"), [
    (_set("decode", "gpu_uuid", "GPU-not-on-this-node"),
     r"bad\.json: invalid agent document: jobs\.\d+\.gpu_uuid: 'GPU-not-on-this-node' is "
     r"not the UUID of GPU 1 \('GPU-45c1f5da-"),
    (_other_gpus_uuid, r"jobs\.0\.gpu_index: 'GPU-45c1f5da-e0c4-77a2-ebe0-fcc3f73be564' is "
                       r"GPU 1, not 7"),
])
def test_a_job_result_naming_a_gpu_not_in_the_document_stores_nothing(
        engine: Engine, counts: Counts, change: Callable[[dict[str, Any]], None],
        reason: str) -> None:
    data = _h200()
    change(data)
    document = AgentDocument.model_validate(data)  # each result is valid on its own
    with pytest.raises(AgentError, match=reason), Ingest(engine) as ingest:
        ingest.store(document, Origin("lent"), "bad.json")
    assert sum(counts(engine).values()) == 0


def test_one_gpu_not_fingerprinted_has_one_uuid_across_its_jobs(engine: Engine,
                                                                counts: Counts) -> None:
    data = _h200()
    for result, uuid in zip(data["jobs"][:2], ("GPU-stray-a", "GPU-stray-b"), strict=True):
        result["gpu_index"], result["gpu_uuid"] = 7, uuid
    with pytest.raises(AgentError, match=r"jobs\.1\.gpu_uuid: 'GPU-stray-b' is not the UUID "
                                         r"of GPU 7 \('GPU-stray-a'"), Ingest(engine) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("lent"), "bad.json")
    assert sum(counts(engine).values()) == 0
    data["jobs"][1]["gpu_uuid"] = "GPU-stray-a"
    _store(engine, data)
    # As a benchmark of such a GPU: its figures follow its UUID, named by torch.
    stray = frame(engine).query("gpu_index == 7")
    assert list(stray.gpu_uuid) == ["GPU-stray-a"] * 2
    assert set(stray.variant) == {"unknown: NVIDIA H200"}


def test_the_cpu_paths_jobs_are_stored_without_a_gpu(engine: Engine, counts: Counts) -> None:
    """No GPU on the host: the suite runs on the CPU, as GPU 0 without a UUID, and its
    figures are kept on the host's own identity for that index."""
    data = factory.document(host="laptop", gpus=0)
    cpu = {"index": 0, "uuid": None, "name": "cpu"}
    data["jobs"] = [job_factory.job(cpu, workload, rate, thermal="cool-start")
                    for workload, rate in (("train", 900.0), ("decode", 300.0))]
    for result in data["jobs"]:
        result["peak_memory_bytes"] = None
    _store(engine, data)
    assert (counts(engine)["job_result"], counts(engine)["gpu"]) == (2, 1)
    jobs = frame(engine)
    assert list(jobs.workload) == ["train", "decode"]
    assert jobs.gpu_uuid.isna().all() and set(jobs.variant) == {"unknown: cpu"}
    assert jobs.mfu.isna().all() and jobs.hbm_share.isna().all()
    assert jobs.peak_memory_bytes.isna().all()


def test_a_failure_writing_the_jobs_leaves_nothing(engine: Engine, counts: Counts) -> None:
    with refusing(engine, "job_result"), pytest.raises(Exception, match="refused by test"):
        _store(engine, _h200())
    assert sum(counts(engine).values()) == 0


def test_a_batch_stores_each_documents_jobs(engine: Engine, counts: Counts) -> None:
    """`fleet ingest`'s path: several documents in one transaction."""
    batch = [(prepare(AgentDocument.model_validate(_factory_document(host, gpus)), host),
              Origin("lambda")) for host, gpus in (("a", 2), ("b", 1))]
    with Ingest(engine) as ingest:
        stored = ingest.store_batch(batch)
    rows = _rows(engine)
    assert [sum(r.document_id == s.document_id for r in rows) for s in stored] == [8, 4]
    assert counts(engine)["job_result"] == 12


@pytest.fixture
def filled(store_url: str) -> Iterator[fleet.Store]:
    """gpu-01 (lambda, 2 GPUs) on two nights, the second on a newer cuDNN; gpu-02
    (coreweave, 1 GPU, compiled, cool start) under the sweep "nightly" on the second."""
    store = fleet.Store(store_url)
    _store(store.engine, _factory_document("gpu-01", 2), provider="lambda")
    _store(store.engine, _factory_document(
        "gpu-01", 2, WHEN + dt.timedelta(days=1), train_tokens_per_s=80_000.0,
        stack={**job_factory.STACK, "cudnn_version": "91100"}), provider="lambda")
    _store(store.engine, _factory_document(
        "gpu-02", 1, WHEN + dt.timedelta(days=1, hours=1), attentions=("flash",),
        compiled=True, thermal="cool-start", not_soaked=False),
        provider="coreweave", run=RunInfo(kind="sweep", sweep="nightly"))
    yield store
    store.close()


def test_the_frame_is_typed_and_every_column_described(filled: fleet.Store) -> None:
    jobs = filled.jobs()
    assert len(jobs) == 2 * 8 + 2
    doc = fleet.Store.jobs.__doc__ or ""
    assert "Example" in doc
    for column in jobs.columns:
        said = f"{column} ({jobs[column].dtype}): "
        assert re.search(rf"\n +{re.escape(said)}", doc), f"{said}is not described"
    first = jobs.iloc[0]
    assert (first.host, first.compiled, first.thermal, first.compile_s) == (
        "gpu-02", True, "cool-start", 41.5)
    assert pd.isna(first.soaked)  # a cool start carries no soak
    assert "compiled" in first.config and "cool-start" in first.config
    # A stack that differs only in cuDNN is another configuration.
    night = jobs[(jobs.host == "gpu-01") & (jobs.workload == "train")
                 & (jobs.attention == "flash")]
    assert night.config.nunique() == 2


def test_jobs_filters(filled: fleet.Store) -> None:
    store = filled
    assert set(store.jobs(provider="coreweave").host) == {"gpu-02"}
    assert len(store.jobs(host="gpu-01")) == 16
    assert len(store.jobs(sweep="nightly")) == 2
    assert len(store.jobs(variant="h100-sxm5-80gb")) == 18
    assert len(store.jobs(since="2026-11-23")) == 8 + 2
    assert set(store.jobs(until="2026-11-22").collected_at) == {WHEN}
    latest = store.jobs(latest=True)
    assert set(zip(latest.host, latest.collected_at.dt.day, strict=True)) == {
        ("gpu-01", 23), ("gpu-02", 23)}
    assert len(latest) == 8 + 2
    assert len(store.jobs(stack="cudnn 91100")) == 8
    assert store.jobs(stack="adamw").empty  # the stack, not the rest of the config
    runs = sorted(set(store.jobs().run_id))
    assert set(store.jobs(run=runs[-1]).host) == {"gpu-02"}
    with pytest.raises(InputError, match="no GPU of that variant is stored"):
        store.jobs(variant="A100 80GB")


def test_sqlite_and_postgresql_give_the_same_frame(tmp_path: Path, postgres_url: str
                                                   ) -> None:
    frames = []
    for url in (f"sqlite:///{tmp_path / 'fleet.db'}", postgres_url):
        with fleet.Store(url) as store:
            _store(store.engine, _h200())
            frames.append(store.jobs())
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert len(frames[0]) == 16


def _fleet(*args: str, db: str, columns: int = 80) -> Any:
    return CliRunner().invoke(main, [*args, "--db", db], env={"COLUMNS": str(columns)},
                              catch_exceptions=False)


def _split(lines: list[str]) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def test_fleet_results_jobs_fits_80_columns(store_url: str) -> None:
    with fleet.Store(store_url) as store:
        _store(store.engine, _h200())
    done = _fleet("results", "--jobs", db=store_url)
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[:3] == ["Job figures (newest first; times UTC)",
                         "torch 2.13.0+cu130, CUDA 13.0, cuDNN 91002",
                         "vm (lent, H200-SXM-141GB), 2026-11-26 01:37"]
    rows = _split(lines)
    assert rows[3] == ["GPU", "job", "tokens/s", "next", "TFLOP/s", "MFU", "GB/s", "HBM",
                       "°C"]
    # "next": an H200's job spread is not measured, so the widest measured one (H100 SXM5
    # cuDNN training, 0.35% over 21 dof: t 2.080 x sqrt 2 x 0.35% = 1.03%) stands in.
    assert ["0", "train flash *", "79,000", "±2.2%", "477.2", "48.2%", "-", "-", "71"] in rows
    assert ["2", "train cudnn", "71,100", "±2.2%", "429.5", "43.4%", "-", "-", "73"] in rows
    # Decode: what bounds it, not an MFU that would read as a fault.
    assert ["1", "decode flash *", "48,000", "±2.2%", "-", "-", "2,919", "60.8%", "73"] in rows
    assert sum(row[:2] == ["3", "decode cudnn"] for row in rows) == 1
    # What the jobs ran, and what to be wary of, under the table in lines, not columns.
    text = re.sub(r"\s+", " ", " ".join(lines))
    assert "train: llama3-8b 4x4096 h32/8 ffn14336 b2 s4096, bf16, soaked, 4 GPUs at once" \
        in text
    assert "decode: llama3-8b 4x4096 h32/8 ffn14336 b64 ctx2048, bf16" in text
    assert ("Measured beside other work: pid 4242 (user other) used 9 GiB; GPU 1 busy 35% "
            "(decode flash * on GPU 1)") in text


def test_a_compiled_figure_is_named_so_with_its_compile_time_apart(
        filled: fleet.Store, store_url: str) -> None:
    done = _fleet("results", "--jobs", "--host", "gpu-02", db=store_url)
    assert done.exit_code == 0, done.output
    text = re.sub(r"\s+", " ", done.stdout)
    assert "train flash compiled *" in text
    assert "train flash compiled: torch.compile took 41.5 s (GPU 0)" in text


def test_fleet_results_jobs_json_csv_and_options(filled: fleet.Store, store_url: str) -> None:
    records = json.loads(_fleet("results", "--jobs", "--json", "--host", "gpu-02",
                                db=store_url).stdout)
    assert len(records) == 2 and list(records[0]) == CONTRACT
    assert records[0]["collected_at"] == "2026-11-23T04:00:00+00:00"
    assert (records[0]["workload"], records[0]["compiled"], records[0]["soaked"]) == (
        "train", True, None)
    listed = _fleet("results", "--jobs", "--csv", "--provider", "lambda", db=store_url).stdout
    header, *lines = listed.splitlines()
    assert header.split(",") == CONTRACT and len(lines) == 16
    limited = _fleet("results", "--jobs", "--limit", "5", db=store_url)
    assert "Showing the newest 5 of 18 figures" in limited.stderr
    several = _fleet("results", "--jobs", db=store_url)
    # The stacks differ, so each document's title says its own.
    assert ("gpu-01 (lambda, H100 SXM5 80GB), 2026-11-23 03:00\n"
            "torch 2.13.0+cu130, CUDA 13.0, cuDNN 91100\n") in several.stdout
    assert max(len(line) for line in several.stdout.splitlines()) <= 80
    assert "No job figures match" in _fleet("results", "--jobs", "--since", "2030-01-01",
                                            db=store_url).stderr
    wrong = CliRunner().invoke(main, ["results", "--jobs", "--node", "--db", store_url])
    assert wrong.exit_code == 2 and "--jobs lists the job suite's figures alone" in wrong.output
    assert "fleet results --jobs" in CliRunner().invoke(main, ["results", "--help"]).output


def test_fleet_bench_shows_each_gpus_jobs_in_80_columns() -> None:
    document = AgentDocument.model_validate(_h200())
    out = io.StringIO()
    print_bench(Console(file=out, width=80, color_system=None), document)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = _split(lines)
    assert ["GPU", "job", "tokens/s", "next", "TFLOP/s", "MFU", "GB/s", "HBM", "°C"] in rows
    assert ["0", "train flash *", "79,000", "±2.2%", "477.2", "48.2%", "-", "-", "71"] in rows
    assert ["3", "decode cudnn", "48,000", "±2.2%", "-", "-", "2,919", "60.8%", "73"] in rows
    # The node suite's figures still come first, as before.
    assert any(line.startswith("Node figures") for line in lines)
    assert lines.index("Job figures (newest first; times UTC)") > next(
        i for i, line in enumerate(lines) if line.startswith("Node figures"))


def test_a_short_jobs_rerun_and_the_runs_suspects_reach_the_frame(engine: Engine) -> None:
    # agent/rerun/job.py: GPU 0's headline training step measured again without the run's
    # settings that can move a job; the run's settings as the agent records them.
    data = _h200()
    for result in data["jobs"]:  # as suite 1.1.0 marks them
        result["headline"] = result["attention"] == "flash"
    train = _result(data, 0, "train")
    train["rerun"] = {"without": ["PYTORCH_NO_CUDA_MEMORY_CACHING"],
                      "floor_tokens_per_s": 49_400.0, "floor_basis": "datasheet: mfu 0.190",
                      "tokens_per_s": 79_100.0, "attention": "flash", "mfu": 0.48,
                      "hbm_share": None, "contended": False, "ran_with": ["NCCL_ALGO"],
                      "wall_s": 21.5}
    data["settings"] = [
        {"name": "PYTORCH_NO_CUDA_MEMORY_CACHING", "value": "1", "withheld": None,
         "source": "environment", "family": "torch", "applies": True},
        {"name": "NCCL_ALGO", "value": "Tree", "withheld": None, "source": "environment",
         "family": "nccl", "applies": True}]
    _store(engine, data)
    jobs = frame(engine)
    row = jobs[(jobs.gpu_index == 0) & (jobs.workload == "train")
               & (jobs.attention == "flash")].iloc[0]
    assert (row.rerun_tokens_per_s, row.rerun_share, row.rerun_floor, row.rerun_without,
            bool(row.rerun_contended)) == (79_100.0, 0.48, 49_400.0,
                                           "PYTORCH_NO_CUDA_MEMORY_CACHING", False)
    # The all-reduce's NCCL_ALGO cannot move a job: not a suspect of one.
    assert set(jobs.job_suspects) == {"PYTORCH_NO_CUDA_MEMORY_CACHING=1 (environment)"}
    others = jobs[jobs.result_id != row.result_id]
    assert others.rerun_tokens_per_s.isna().all()
    # A rerun on a figure that is not its GPU's headline contradicts the agent's rule.
    data = _h200()
    for result in data["jobs"]:
        result["headline"] = result["attention"] == "flash"
    _result(data, 0, "train", "cudnn")["rerun"] = dict(train["rerun"])
    with pytest.raises(ValueError, match="only a headline figure is measured again"):
        AgentDocument.model_validate(data)
