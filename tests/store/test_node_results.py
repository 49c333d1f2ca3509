"""The node suite's figures in the store, on SQLite and PostgreSQL: written with their
document or not at all, read back as a typed frame (`read_node_results`,
`fleet.Store.node_results`) and listed by `fleet results --node`."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select

import fleet
from fleet.cli import main
from fleet.errors import AgentError, InputError
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin, RunInfo, parse_text, prepare
from fleet.store.models import Document, Gpu, Host, NodeResult
from fleet.store.node import NODE_COLUMNS, read_node_results
from fleet.store.prune import prune_samples
from fleet.store.query import load_document
from tests.store import factory, node_factory
from tests.store.node_factory import GiB, MiB
from tests.store.refuse import refusing

Counts = Callable[[Engine], dict[str, int]]
WHEN = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)


def _node_document(host: str = "gpu-01", gpus: int = 4, **knobs: Any) -> dict[str, Any]:
    """`gpus` H100 SXM (GPU 0 a PCIe card, to tell whose variant a row takes), every figure
    exact (no noise): GPU 2 10% slow, the pair 1-3 half speed, one all-reduce size."""
    data = factory.document(host=host, gpus=gpus, collected_at=knobs.pop("when", WHEN),
                            variants=["H100 PCIe 80GB"] + ["H100 SXM5 80GB"] * (gpus - 1))
    settings: dict[str, Any] = {"noise": 0.0, "gpu_scale": {2: 0.9},
                                "pair_scale": {(1, 3): 0.5}, "busbw_gbs": {GiB: 360.0}}
    return node_factory.with_node(data, **{**settings, **knobs})


def _store(engine: Engine, data: dict[str, Any], provider: str = "lambda",
           run: RunInfo | None = None) -> int:
    with Ingest(engine, run or RunInfo()) as ingest:
        return ingest.store(AgentDocument.model_validate(data), Origin(provider)).document_id


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(NodeResult.__table__).order_by(NodeResult.id)))


def test_each_figure_is_stored_with_its_gpus_and_document(engine: Engine,
                                                          counts: Counts) -> None:
    document_id = _store(engine, _node_document(), provider="coreweave")
    # 4 GPUs x (memory + host link 2 ways x pinned/pageable) + 6 pairs x 2 + 1 size.
    assert counts(engine)["node_result"] == 4 * 5 + 6 * 2 + 1
    assert counts(engine)["gpu"] == 4  # the GPUs the fingerprints named; none added
    with engine.connect() as conn:
        gpu_ids = {uuid: gpu_id for gpu_id, uuid in conn.execute(select(Gpu.id, Gpu.uuid))}
        ids = conn.execute(select(Document.probe_run_id, Document.host_id, Host.provider_id)
                           .join(Host, Host.id == Document.host_id)).one()
    rows = _rows(engine)
    by = {(r.kind, r.gpu_index, r.peer_index, r.direction, r.memory): r for r in rows}
    assert {(r.document_id, r.probe_run_id, r.host_id, r.provider_id) for r in rows} == {
        (document_id, ids.probe_run_id, ids.host_id, ids.provider_id)}
    assert {r.collected_at for r in rows} == {WHEN}

    copy = by[("memory_copy", 2, None, None, None)]
    assert (copy.gbs, copy.min_gbs, copy.max_gbs, copy.cv, copy.runs) == (
        2709.0, 2709.0, 2709.0, 0.0, 10)
    assert copy.gpu_id == gpu_ids[factory.gpu_uuid("gpu-01", 2)]
    assert (copy.size_bytes, copy.datasheet_gbs, copy.variant) == (
        GiB, 3350.0, "H100 SXM5 80GB")
    assert (copy.suite_version, copy.backend, copy.torch_version) == ("1.0.0", "cuda", "2.9.0")

    pinned = by[("host_to_device", 0, None, None, "pinned")]
    assert (pinned.gbs, pinned.variant, pinned.link_gen, pinned.link_width,
            pinned.link_gen_max, pinned.link_width_max) == (55.2, "H100 PCIe 80GB", 5, 16,
                                                            5, 16)
    assert by[("device_to_host", 3, None, None, "pageable")].gbs == 12.0

    pair = by[("peer_copy", 1, 3, "one_way", None)]
    assert (pair.gbs, pair.peer_access, pair.topology, pair.size_bytes) == (
        198.0, True, "NVLINK", 512 * MiB)
    assert pair.gpu_id == gpu_ids[factory.gpu_uuid("gpu-01", 1)]
    assert pair.peer_gpu_id == gpu_ids[factory.gpu_uuid("gpu-01", 3)]
    assert by[("peer_copy", 1, 3, "both_ways", None)].gbs == 385.5

    allreduce = by[("allreduce", None, None, None, None)]
    assert (allreduce.gpu_id, allreduce.peer_gpu_id, allreduce.gpus_in_run) == (None, None, 4)
    # busbw 360 over 4 ranks: algbw = 360 x 4 / 6.
    assert (allreduce.gbs, allreduce.algbw_gbs) == (360.0, 240.0)
    assert (allreduce.backend, allreduce.dtype, allreduce.nccl_version) == (
        "nccl", "bf16", "2.28.9")
    # The node's: its first GPU's variant, a PCIe card here.
    assert allreduce.variant == "H100 PCIe 80GB"
    assert (allreduce.ci95_low_gbs, allreduce.ci95_high_gbs) == (360.0, 360.0)


def test_a_batch_stores_each_documents_figures(engine: Engine, counts: Counts) -> None:
    """`fleet ingest`'s path: several documents in one transaction."""
    batch = [(prepare(AgentDocument.model_validate(_node_document(host, gpus)), host),
              Origin("lambda")) for host, gpus in (("a", 2), ("b", 1))]
    with Ingest(engine) as ingest:
        stored = ingest.store_batch(batch)
    rows = _rows(engine)
    # Two GPUs: 2 x 5 + 1 pair x 2 + 1 all-reduce; one GPU: 5 and no all-reduce.
    assert [sum(r.document_id == s.document_id for r in rows) for s in stored] == [13, 5]
    assert counts(engine)["node_result"] == 18


def test_a_document_before_the_node_suite_stores_none_and_still_reads(
        engine: Engine, counts: Counts) -> None:
    data = factory.document(gpus=2)
    assert "node" not in data
    document_id = _store(engine, data)
    assert counts(engine)["node_result"] == 0
    assert load_document(engine, document_id).node == []
    frame = read_node_results(engine)
    assert frame.empty and list(frame.columns) == [c.name for c in NODE_COLUMNS]
    assert str(frame["collected_at"].dtype) == "datetime64[us, UTC]"


def _negative(data: dict[str, Any]) -> str:
    data["node"][3]["gbs"] = -1.0
    return json.dumps(data)


def _unknown_kind(data: dict[str, Any]) -> str:
    data["node"][0]["kind"] = "triad"
    return json.dumps(data)


def _nan(data: dict[str, Any]) -> str:
    data["node"][-1]["stats"]["cv"] = float("nan")
    return json.dumps(data)


def _another_gpus_uuid(data: dict[str, Any]) -> str:
    data["node"][0]["gpu_uuid"] = factory.gpu_uuid("gpu-01", 1)
    return json.dumps(data)


def _peer_elsewhere(data: dict[str, Any]) -> str:
    pair = next(r for r in data["node"] if r["kind"] == "peer_copy")
    pair["peer_uuid"] = "GPU-not-on-this-node"
    return json.dumps(data)


def _long_backend(data: dict[str, Any]) -> str:
    data["node"][-1]["backend"] = "nccl" * 10
    return json.dumps(data)


def _no_direction(data: dict[str, Any]) -> str:
    pair = next(r for r in data["node"] if r["kind"] == "peer_copy")
    pair["direction"] = None
    return json.dumps(data)


def _headline_off(data: dict[str, Any]) -> str:
    data["node"][0]["gbs"] = 9999.0
    return json.dumps(data)


@pytest.mark.parametrize(("spoil", "reason"), [
    (_negative, r"node\.3\.gbs: Input should be greater than or equal to 0"),
    (_unknown_kind, r"node\.0\.kind: Input should be 'memory_copy'"),
    (_nan, r"node\.\d+\.stats\.cv: Input should be a finite number"),
    (_another_gpus_uuid, r"node\.0\.gpu_uuid: .* is not the UUID of GPU 0"),
    (_peer_elsewhere, r"node\.\d+\.peer_uuid: 'GPU-not-on-this-node' is not the UUID of "
                      "GPU 1"),
    (_long_backend, r"node\.\d+\.backend: String should have at most 32 characters"),
    (_no_direction, r"node\.\d+: Value error, a peer_copy figure must say its direction"),
    (_headline_off, r"node\.0: Value error, gbs 9999 is not the median of its repeats"),
])
def test_an_invalid_node_figure_refuses_the_whole_document(
        engine: Engine, counts: Counts, spoil: Callable[[dict[str, Any]], str],
        reason: str) -> None:
    text = spoil(_node_document(gpus=2))
    with pytest.raises(AgentError, match=reason), Ingest(engine) as ingest:
        ingest.store_prepared(prepare(parse_text(text, "bad.json"), "bad.json"),
                              Origin("lambda"))
    assert sum(counts(engine).values()) == 0


def test_a_failure_writing_the_figures_leaves_nothing(engine: Engine, counts: Counts) -> None:
    with refusing(engine, "node_result"), pytest.raises(Exception, match="refused by test"):
        _store(engine, _node_document(gpus=2))
    assert sum(counts(engine).values()) == 0


def test_a_figure_of_a_gpu_not_fingerprinted_follows_its_uuid(engine: Engine) -> None:
    """As a benchmark result of such a GPU does: it gets a GPU of its own."""
    data = _node_document(gpus=2)
    stray = dict(data["node"][0], gpu_index=7, gpu_uuid="GPU-stray")
    data["node"].append(stray)
    _store(engine, data)
    with engine.connect() as conn:
        stray_id = conn.execute(select(Gpu.id).where(Gpu.uuid == "GPU-stray")).scalar_one()
    (row,) = [r for r in _rows(engine) if r.gpu_index == 7]
    assert (row.gpu_id, row.variant) == (stray_id, "unknown: not fingerprinted")


@pytest.fixture
def filled(store_url: str) -> Iterator[fleet.Store]:
    """Three documents: gpu-01 (lambda, 4 GPUs) on two nights, gpu-02 (coreweave, 2
    GPUs, a host link trained down to Gen4 x8, no peer access) under the sweep "nightly"
    on the second."""
    store = fleet.Store(store_url)
    _store(store.engine, _node_document("gpu-01", 4))
    _store(store.engine, _node_document("gpu-01", 4, when=WHEN + dt.timedelta(days=1),
                                        gpu_scale={}, seed=1))
    _store(store.engine, _node_document(
        "gpu-02", 2, when=WHEN + dt.timedelta(days=1, hours=1), link=(4, 8),
        peer_access=False, topology="SYS", peer_gbs=20.0, both_ways_gbs=38.0),
        provider="coreweave", run=RunInfo(kind="sweep", sweep="nightly"))
    yield store
    store.close()


def test_the_frame_is_typed_and_every_column_described(filled: fleet.Store) -> None:
    frame = filled.node_results()
    assert len(frame) == 2 * 33 + 13
    doc = fleet.Store.node_results.__doc__ or ""
    assert "Example" in doc
    for column in frame.columns:
        said = f"{column} ({frame[column].dtype}): "
        assert re.search(rf"\n +{re.escape(said)}", doc), f"{said}is not described"
    assert [c.name for c in NODE_COLUMNS] == list(frame.columns)
    for name in ("provider", "variant", "kind"):
        assert isinstance(frame[name].dtype, pd.CategoricalDtype), name
    assert list(frame["kind"].cat.categories) == ["memory_copy", "host_to_device",
                                                  "device_to_host", "peer_copy", "allreduce"]
    # Newest first; within a document, by kind, GPU, peer, direction and host memory.
    assert list(frame["host"][:3]) == ["gpu-02"] * 3
    first = frame[frame.host == "gpu-02"]
    assert list(zip(first.kind, first.gpu_index.astype(object), first.memory.astype(object),
                    strict=True))[:6] == [
        ("memory_copy", 0, pd.NA), ("memory_copy", 1, pd.NA),
        ("host_to_device", 0, "pinned"), ("host_to_device", 0, "pageable"),
        ("host_to_device", 1, "pinned"), ("host_to_device", 1, "pageable")]
    pair = first[first.kind == "peer_copy"]
    assert list(pair.direction) == ["one_way", "both_ways"]
    assert list(pair.peer_access) == [False, False] and list(pair.topology) == ["SYS"] * 2
    assert pair.peer_uuid.iloc[0] == factory.gpu_uuid("gpu-02", 1)
    allreduce = frame[(frame.kind == "allreduce") & (frame.host == "gpu-02")].iloc[0]
    assert allreduce.stack == "torch 2.9.0, CUDA 12.8, NCCL 2.28.9"
    assert pd.isna(allreduce.gpu_index) and allreduce.gpus_in_run == 2
    assert first.iloc[0].stack == "torch 2.9.0, CUDA 12.8"
    assert first.iloc[0].collected_at == pd.Timestamp("2026-11-23 04:00", tz="UTC")
    assert first.iloc[0].sweep == "nightly" and pd.isna(frame.iloc[-1].sweep)


def test_node_results_filters(filled: fleet.Store) -> None:
    store = filled
    assert set(store.node_results(provider="coreweave").host) == {"gpu-02"}
    assert len(store.node_results(host="gpu-01")) == 66
    assert len(store.node_results(sweep="nightly")) == 13
    assert set(store.node_results(kind="allreduce").gbs) == {360.0}
    both = store.node_results(kind=["peer_copy", "allreduce"], host="gpu-02")
    assert list(both.kind) == ["peer_copy", "peer_copy", "allreduce"]
    # As listings spell a variant; the all-reduce goes with the node's first GPU, a PCIe.
    pcie = store.node_results(variant="h100-pcie-80gb")
    assert set(pcie.gpu_index.dropna()) == {0} and "allreduce" in set(pcie.kind)
    assert len(store.node_results(since="2026-11-23")) == 33 + 13
    assert set(store.node_results(until="2026-11-22").collected_at) == {
        pd.Timestamp("2026-11-22 03:00", tz="UTC")}
    latest = store.node_results(latest=True)
    assert set(zip(latest.host, latest.collected_at.dt.day, strict=True)) == {
        ("gpu-01", 23), ("gpu-02", 23)}
    assert len(store.node_results(stack="nccl 2.28")) == 3  # the all-reduce rows
    runs = sorted(set(store.node_results().run))
    assert set(store.node_results(run=runs[-1]).host) == {"gpu-02"}
    with pytest.raises(InputError, match="kind 'triad' is not a node figure; the kinds are "
                                         "memory_copy, host_to_device"):
        store.node_results(kind="triad")
    with pytest.raises(InputError, match="no GPU of that variant is stored"):
        store.node_results(variant="A100 80GB")


def test_the_reader_takes_documents_in_chunks_and_a_connection(filled: fleet.Store) -> None:
    engine = filled.engine
    with engine.connect() as conn:
        ids = sorted(conn.execute(select(Document.id)).scalars())
    everything = read_node_results(engine)
    # 2,500 ids: three statements of at most 1,000, most of them stored nowhere.
    chosen = read_node_results(engine, documents=[*range(10_000, 12_499), ids[0]])
    # As objects: the categories of a part of the store are fewer than the whole's.
    pd.testing.assert_frame_equal(chosen.astype(object), everything[
        everything.document_id == ids[0]].reset_index(drop=True).astype(object))
    assert read_node_results(engine, documents=[]).empty
    with engine.connect() as conn:
        newest = read_node_results(conn, documents=ids[1:], kind="memory_copy",
                                   provider="lambda")
    assert list(newest.gbs) == [3010.0] * 4 and set(newest.document_id) == {ids[1]}


def test_sqlite_and_postgresql_give_the_same_frame(tmp_path: Path, postgres_url: str
                                                   ) -> None:
    frames = []
    for url in (f"sqlite:///{tmp_path / 'fleet.db'}", postgres_url):
        with fleet.Store(url) as store:
            _store(store.engine, _node_document("gpu-01", 3))
            frames.append(store.node_results())
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert len(frames[0]) == 3 * 5 + 3 * 2 + 1


def _fleet(*args: str, db: str, columns: int = 80) -> Any:
    return CliRunner().invoke(main, [*args, "--db", db], env={"COLUMNS": str(columns)},
                              catch_exceptions=False)


def test_fleet_results_node_fits_80_columns(filled: fleet.Store, store_url: str) -> None:
    done = _fleet("results", "--node", db=store_url)
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0] == "Node figures (newest first; times UTC); torch 2.9.0, CUDA 12.8; NCCL 2.28.9"
    assert lines[1] == "gpu-02 (coreweave, H100 PCIe 80GB + H100 SXM5 80GB), 2026-11-23 04:00"
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines]
    header = ["figure", "size", "GB/s", "CV", "datasheet", "share"]
    assert rows[2] == header
    assert ["GPU 0 memory", "1 GiB", "3,010", "0.0%", "3,350", "90%"] in rows
    assert ["host→GPU 1 pinned", "256 MiB", "55.2", "0.0%", "63.0", "88%"] in rows
    assert ["GPU 0→1 one way", "512 MiB", "20.0", "0.0%", "450", "4%"] in rows
    assert ["GPU 1⇄3 both ways", "512 MiB", "386", "0.0%", "900", "43%"] in rows
    assert ["all-reduce 4 GPUs bf16", "1 GiB", "360", "0.0%", "450", "80%"] in rows
    # gpu-02's links, once each, under its table; gpu-01's are sound.
    said = [line for line in lines if "under load" in line or "peer access" in line]
    assert said == ["PCIe Gen4 x8 under load where the card supports Gen5 x16: GPU 0, 1",
                    "No peer access (path SYS): GPUs 0-1"]
    # One header for the three tables, whose titles name each document.
    assert rows.count(header) == 1
    assert sum(line.startswith("gpu-01 (lambda") for line in lines) == 2


def test_fleet_results_node_json_csv_and_options(filled: fleet.Store, store_url: str) -> None:
    records = json.loads(_fleet("results", "--node", "--json", "--kind", "allreduce",
                                db=store_url).stdout)
    assert len(records) == 3 and set(records[0]) == {c.name for c in NODE_COLUMNS}
    assert records[0]["host"] == "gpu-02" and records[0]["gpu_index"] is None
    assert records[0]["collected_at"] == "2026-11-23T04:00:00+00:00"
    assert (records[0]["gbs"], records[0]["algbw_gbs"], records[0]["gpus_in_run"]) == (
        360.0, 360.0, 2)
    listed = _fleet("results", "--node", "--csv", "--host", "gpu-02", db=store_url).stdout
    header, *lines = listed.splitlines()
    assert header.split(",") == [c.name for c in NODE_COLUMNS] and len(lines) == 13
    limited = _fleet("results", "--node", "--limit", "5", db=store_url)
    assert "Showing the newest 5 of 79 figures" in limited.stderr
    assert "No node figures match" in _fleet("results", "--node", "--since", "2030-01-01",
                                             db=store_url).stderr
    wrong = CliRunner().invoke(main, ["results", "--kind", "allreduce", "--db", store_url])
    assert wrong.exit_code == 2 and "give --node too" in wrong.output
    assert "fleet results --node" in CliRunner().invoke(main, ["results", "--help"]).output


def test_prune_empties_the_figures_samples_and_keeps_their_statistics(
        engine: Engine) -> None:
    """A document of the node suite alone (`fleet bench --suite node`: no matmul result)
    is pruned too: its samples lived only in its body."""
    now = dt.datetime.now(dt.UTC)
    old = _node_document("old", 2, when=now - dt.timedelta(days=40), noise=0.01)
    old["benchmarks"] = []
    new = _node_document("new", 2, when=now - dt.timedelta(days=2), noise=0.01)
    ids = [_store(engine, old), _store(engine, new)]
    before = _rows(engine)
    pruned = prune_samples(engine, 30)
    assert (pruned.results, pruned.documents) == (0, 1)
    assert pruned.bytes_freed > 16 * 10 * 5  # 16 figures of 10 samples, 5 bytes or more each
    kept, whole = (load_document(engine, i) for i in ids)
    assert {len(r.stats.samples_gbs) for r in kept.node} == {0}
    assert {len(r.stats.samples_gbs) for r in whole.node} == {10}
    assert [r.stats.median_gbs for r in kept.node] == [r["stats"]["median_gbs"]
                                                       for r in old["node"]]
    assert _rows(engine) == before
    assert prune_samples(engine, 30).documents == 0
