"""A cluster run in the store (fleet/store/cluster.py, revision 0022), on SQLite and
PostgreSQL: three nodes whose agent documents carry real network fingerprints
(tests/fixtures/network/: a and b 8 x NDR, c the same with one port at HDR), a run with
the whole cluster, a pair that passes, a short pair and a failed step, stored in one
transaction and read back as it was given; a secret among the ranks' settings never
reaches the database, and a run that fails midway leaves nothing."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, select
from sqlalchemy.exc import IntegrityError

from fleet.analysis.cluster.stored import judge_run
from fleet.errors import ClusterError, StoreError
from fleet.model.document import parse_document
from fleet.model.step import NodeTransport, StepFigure, StepKind, StepResult
from fleet.store import models
from fleet.store.cluster import ClusterRun, read_cluster_runs, record_cluster_run, screen_settings
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.schema import downgrade, upgrade
from tests.store import network_factory
from tests.store.conftest import row_counts

GIB = 1 << 30
CLUSTER_TABLES = ("cluster_step", "cluster_step_node", "cluster_figure")
CASES = {"a": "h100-8x-ib-ndr", "b": "h100-8x-ib-ndr", "c": "h100-8x-ib-hdr-port"}
START = dt.datetime(2026, 11, 28, 9, 0, tzinfo=dt.UTC)
SECRETS = ("hunter2-in-a-name", "s3cr3t@", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY")


def ib(host: str) -> NodeTransport:
    return NodeTransport(host, "IB", None, True, ("NET/IB/0/GDRDMA", "P2P/CUMEM/read"),
                         tuple(f"mlx5_{i}:1/IB" for i in range(8)), ("NCCL_ALGO=Ring",))


def figures(reduce: float, gather: float) -> tuple[StepFigure, ...]:
    return (StepFigure("all_reduce", 16 << 20, reduce * 0.6, reduce * 0.3, 523.25),
            StepFigure("all_reduce", GIB, reduce, reduce / 1.875, 5398.1234),
            StepFigure("all_gather", GIB, gather, gather / 0.9375, 3045.5))


def step(step_id: str, kind: StepKind, hosts: str, reduce: float | None = None,
         gather: float | None = None, error: str | None = None, round_: int | None = 1,
         cluster: str = "pod") -> StepResult:
    return StepResult(
        cluster=cluster, step_id=step_id, kind=kind,
        round=None if kind == "cluster" else round_, hosts=tuple(hosts),
        ranks_per_node=8, backend="nccl", algo="Ring",
        figures=() if reduce is None else figures(reduce, gather or reduce),
        # A node that sent no event has no transport: the failed step's c.
        transports=tuple(ib(h) for h in hosts if error is None or h != "c"), error=error)


def run_steps(cluster: str = "pod") -> list[StepResult]:
    return [step("whole", "cluster", "abc", 330.0, 340.0, cluster=cluster),
            step("r1-ab", "pair", "ab", 370.0, 380.0, round_=1, cluster=cluster),
            step("r2-ac", "pair", "ac", 185.0, 190.0, round_=2, cluster=cluster),
            step("r3-bc", "pair", "bc", error="could not join the rendezvous 10.0.4.22:"
                 "29550 within 120 s: rank 8 of 16: timed out", round_=3, cluster=cluster)]


def store_documents(engine: Engine, hosts: str = "abc") -> dict[str, int | None]:
    """Each host's agent document with its case's network, as a probe stores them."""
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        return {h: ingest.store(parse_document(network_factory.document(CASES[h], h), h),
                                Origin("lent", h)).document_id for h in hosts}


SETTINGS: dict[str, dict[str, str]] = {
    "a": {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5", "CUDA_VISIBLE_DEVICES": "0,1",
          "GLOO_SOCKET_IFNAME": "eth0", "HOME": "/root", "OMPI_MCA_x": "1"},
    "b": {"NCCL_ALGO": "Ring"},
    # c: not recorded
}


def record(engine: Engine, run_id: str = "run-1", start: dt.datetime = START,
           steps: list[StepResult] | None = None, **kw: Any) -> int:
    steps = run_steps() if steps is None else steps
    return record_cluster_run(
        engine, run_id, steps, kw.pop("documents", {}), kw.pop("settings", SETTINGS),
        started_at={s.step_id: start + dt.timedelta(seconds=10 * i)
                    for i, s in enumerate(steps)},
        wall_s={s.step_id: 6.5 + i for i, s in enumerate(steps)}, provider="lent", **kw)


def cluster_counts(engine: Engine) -> tuple[int, ...]:
    counts = row_counts(engine)
    return tuple(counts[t] for t in CLUSTER_TABLES)


def test_a_run_is_read_back_as_it_was_given(engine: Engine) -> None:
    documents = store_documents(engine)
    steps = run_steps()
    assert record(engine, documents=documents) == 4
    (run,) = read_cluster_runs(engine, cluster="pod")
    assert isinstance(run, ClusterRun)
    assert (run.cluster, run.run_id, run.started_at, run.provider) == (
        "pod", "run-1", START, "lent")
    assert run.results == tuple(steps)
    assert run.documents == documents
    # Only NCCL_*, GLOO_* and CUDA_VISIBLE_DEVICES; c's were not recorded.
    assert run.settings == {
        "a": {"CUDA_VISIBLE_DEVICES": "0,1", "GLOO_SOCKET_IFNAME": "eth0",
              "NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5"},
        "b": {"NCCL_ALGO": "Ring"}}
    # 4 steps; 3 + 2 + 2 + 2 nodes; 3 figures each for the three that ran.
    assert cluster_counts(engine) == (4, 9, 9)
    with engine.connect() as conn:
        failed = conn.execute(select(models.ClusterStep.__table__).where(
            models.ClusterStep.step_id == "r3-bc")).one()
        nodes = conn.execute(select(models.ClusterStepNode.host,
                                    models.ClusterStepNode.reported)
                             .where(models.ClusterStepNode.cluster_step_id == failed.id)
                             .order_by(models.ClusterStepNode.node_rank)).all()
    assert (failed.kind, failed.round, failed.wall_s) == ("pair", 3, 9.5)
    assert failed.error is not None and failed.error.startswith("could not join")
    assert failed.started_at == START + dt.timedelta(seconds=30)
    assert [tuple(n) for n in nodes] == [("b", True), ("c", False)]


def test_a_failed_step_keeps_its_error_and_no_figures(engine: Engine) -> None:
    failed = StepResult("pod", "r1-ab", "pair", 1, ("a", "b"), 8, "nccl", "Ring",
                        figures(10.0, 10.0), (ib("a"),), error="rank 3 died: SIGKILL")
    record(engine, steps=[failed])
    (run,) = read_cluster_runs(engine)
    (back,) = run.results
    assert (back.error, back.figures, back.transports) == (
        "rank 3 died: SIGKILL", (), (ib("a"),))
    assert cluster_counts(engine) == (1, 2, 0)


def test_the_judgement_reads_each_nodes_network(engine: Engine) -> None:
    record(engine, documents=store_documents(engine))
    (run,) = read_cluster_runs(engine)
    judgement = judge_run(engine, run)
    verdicts = {p.step_id: (p.passed, p.expected_gbs, p.cause) for p in judgement.pairs}
    assert verdicts["r1-ab"] == (True, 400.0, None)
    assert verdicts["r2-ac"] == (False, 400.0, "below rate on c")
    assert verdicts["r3-bc"][0] is False
    rules = {(f.rule, f.whose) for f in judgement.findings}
    assert ("pair-short", "provider") in rules and ("step-failed", "unsettled") in rules
    assert ("cluster-figure", None) in rules


def test_without_documents_nothing_is_judged_against_a_fabric(engine: Engine) -> None:
    record(engine)
    (run,) = read_cluster_runs(engine)
    assert run.documents == {"a": None, "b": None, "c": None}
    judgement = judge_run(engine, run)
    assert {p.step_id: p.expected_gbs for p in judgement.pairs} == {
        "r1-ab": None, "r2-ac": None, "r3-bc": None}


def test_the_newest_run_of_each_cluster(engine: Engine) -> None:
    record(engine, "old", START)
    record(engine, "new", START + dt.timedelta(hours=1))
    record(engine, "other", START - dt.timedelta(days=1), steps=run_steps("pod-b"))
    assert [(r.cluster, r.run_id) for r in read_cluster_runs(engine)] == [
        ("pod", "new"), ("pod-b", "other")]
    assert [r.run_id for r in read_cluster_runs(engine, "pod", latest=False)] == [
        "new", "old"]
    assert read_cluster_runs(engine, "nowhere") == []
    assert [r.run_id for r in read_cluster_runs(engine, until=START)] == ["old", "other"]
    assert read_cluster_runs(engine, providers=["elsewhere"]) == []


def test_a_secret_never_reaches_the_database(engine: Engine) -> None:
    settings = {"a": {"NCCL_ALGO": "Ring", "NCCL_COLLNET_TOKEN": SECRETS[0],
                      "NCCL_NET_PLUGIN": f"https://user:{SECRETS[1]}host/plugin.so",
                      "NCCL_IB_HCA": SECRETS[2], "AWS_SECRET_ACCESS_KEY": "plain"},
                "b": {}, "c": {}}
    steps = run_steps()
    said = (f"NCCL_IB_SECRET={SECRETS[0]}", "NCCL_ALGO=Ring")
    steps[1] = replace(steps[1], transports=(
        NodeTransport("a", "IB", None, True, set_by_environment=said), ib("b")))
    record(engine, steps=steps, settings=settings)
    with engine.connect() as conn:
        stored = json.dumps([[str(v) for v in row] for t in CLUSTER_TABLES
                             for row in conn.execute(select(getattr(
                                 models, _model(t)).__table__)).all()])
    for secret in (*SECRETS, "AWS_SECRET_ACCESS_KEY"):
        assert secret not in stored
    (run,) = read_cluster_runs(engine)
    assert run.settings["a"] == {
        "NCCL_ALGO": "Ring",
        "NCCL_COLLNET_TOKEN": "(withheld: its name says it may be a secret)",
        "NCCL_IB_HCA": "(withheld: it looks like a token or key)",
        "NCCL_NET_PLUGIN": "(withheld: a URL with credentials)"}
    assert run.settings["b"] == {}
    a = run.results[1].transports[0]
    assert a.set_by_environment == (
        "NCCL_IB_SECRET=(withheld: its name says it may be a secret)", "NCCL_ALGO=Ring")


def _model(table: str) -> str:
    return "".join(part.title() for part in table.split("_"))


def test_screen_settings_keeps_the_ranks_families_only() -> None:
    kept = screen_settings({"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "eth0",
                            "CUDA_VISIBLE_DEVICES": "0", "CUDA_LAUNCH_BLOCKING": "1",
                            "PATH": "/usr/bin", "NCCL_bad-name": "1"})
    assert kept == {"CUDA_VISIBLE_DEVICES": "0", "GLOO_SOCKET_IFNAME": "eth0",
                    "NCCL_DEBUG": "INFO"}


def test_a_run_that_fails_midway_leaves_nothing(engine: Engine) -> None:
    steps = run_steps()
    # The last step's figure breaks a constraint after every step row was written.
    broken = StepFigure("all_reduce", 0, 1.0, 1.0, 1.0)
    steps[2] = replace(steps[2], figures=(*steps[2].figures, broken))
    with pytest.raises(IntegrityError, match="size_bytes"):
        record(engine, steps=steps)
    assert cluster_counts(engine) == (0, 0, 0)
    # A document that is not in the store: refused by its foreign key, nothing kept.
    with pytest.raises(IntegrityError):
        record(engine, documents={"a": 999_999})
    assert cluster_counts(engine) == (0, 0, 0)
    # The run id was not taken: the whole run stores afterwards.
    assert record(engine) == 4


def test_what_cannot_be_one_run_is_refused_before_writing(engine: Engine) -> None:
    with pytest.raises(ClusterError, match="2 clusters"):
        record(engine, steps=[*run_steps(), step("x", "pair", "ab", 1.0, cluster="pod-b")])
    with pytest.raises(ClusterError, match="given twice"):
        record(engine, steps=[*run_steps(), run_steps()[1]])
    with pytest.raises(ClusterError, match="longer than 255"):
        record_cluster_run(engine, "r", [StepResult("pod", "x", "pair", 1, ("a", "h" * 300),
                                                    8, "nccl", None)], {}, {})
    assert cluster_counts(engine) == (0, 0, 0)
    record(engine)
    with pytest.raises(StoreError, match="stored already"):
        record(engine)
    assert cluster_counts(engine) == (4, 9, 9)


def test_cluster_tables_go_down_and_come_up_with_0022(empty_url: str) -> None:
    """0022 adds the three tables: down to 0021 they go with their rows while the
    documents stay; up again they are empty and take a run."""
    engine = open_engine(resolve(empty_url))
    try:
        upgrade(engine, "0021")
        assert not set(CLUSTER_TABLES) & set(inspect(engine).get_table_names())
        upgrade(engine)
        documents = store_documents(engine)
        record(engine, documents=documents)
        assert downgrade(engine, "0021").revision == "0021"
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            assert conn.execute(select(models.Document.id).order_by(models.Document.id)
                                ).scalars().all() == sorted(
                                    d for d in documents.values() if d is not None)
        assert not set(CLUSTER_TABLES) & tables
        upgrade(engine)
        assert cluster_counts(engine) == (0, 0, 0)
        assert record(engine, documents=documents) == 4
    finally:
        engine.dispose()


def _whole_with_every_collective() -> StepResult:
    more = (StepFigure("reduce_scatter", 16 * GIB, 379.0, 379.0 / 0.9375, 45_300.0),
            StepFigure("all_to_all", 16 * GIB, 95.0, 95.0 / 0.9375, 180_800.0))
    whole = step("whole", "cluster", "abc", 330.0, 340.0)
    return replace(whole, figures=whole.figures + more)


def test_the_whole_clusters_four_collectives_go_down_with_0025_and_come_back(
        empty_url: str) -> None:
    """0025 admits reduce-scatter and all-to-all: read back as given; down to 0024 their
    rows go (the old check cannot hold them) and the rest stay; up again a run takes
    them."""
    engine = open_engine(resolve(empty_url))
    try:
        upgrade(engine)
        steps = [_whole_with_every_collective(), *run_steps()[1:]]
        record(engine, steps=steps)
        (run,) = read_cluster_runs(engine, cluster="pod")
        assert run.results == tuple(steps)
        assert cluster_counts(engine) == (4, 9, 11)
        assert downgrade(engine, "0024").revision == "0024"
        with engine.connect() as conn:
            ops = conn.execute(select(models.ClusterFigure.op).distinct()).scalars().all()
        assert sorted(ops) == ["all_gather", "all_reduce"]
        assert cluster_counts(engine) == (4, 9, 9)
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(models.ClusterFigure.__table__.insert().values(
                cluster_step_id=1, op="all_to_all", size_bytes=GIB, busbw_gbs=1.0,
                algbw_gbs=1.0, time_us=1.0))
        upgrade(engine)
        record(engine, "run-2", steps=steps)
        assert cluster_counts(engine) == (8, 18, 20)
    finally:
        engine.dispose()


def test_each_nodes_counters_are_read_back_and_go_down_with_0026(empty_url: str) -> None:
    """0026 keeps each node's RDMA error counters around a step, the NCCL its ranks loaded
    and how the step was launched: read back as given (a node that sent no counters has
    none); down to 0025 the columns go and the steps stay."""
    from fleet.model.step import PortCounters

    engine = open_engine(resolve(empty_url))
    try:
        upgrade(engine)
        steps = run_steps()
        steps[1] = replace(steps[1], transports=(
            replace(steps[1].transports[0], version="2.28.9+cuda13.0"),
            *steps[1].transports[1:]), launcher="slurm", counters=(
            PortCounters("a", 8),
            PortCounters("b", 8, (("mlx5_3/1", "link_downed", 1),
                                  ("mlx5_3/1", "symbol_error", 27)),
                         ("mlx5_3/1 port_rcv_errors",))))
        record(engine, steps=steps)
        (run,) = read_cluster_runs(engine, cluster="pod")
        assert run.results == tuple(steps)
        assert run.results[0].counters == ()
        assert downgrade(engine, "0025").revision == "0025"
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("cluster_step_node")}
        assert not {"counters", "nccl_version"} & columns
        assert cluster_counts(engine) == (4, 9, 9)
        upgrade(engine)
        (run,) = read_cluster_runs(engine, cluster="pod")
        assert all(r.counters == () and r.launcher == "ssh" for r in run.results)
        assert all(t.version is None for r in run.results for t in r.transports)
    finally:
        engine.dispose()


def test_each_nodes_nic_tests_are_read_back_and_go_down_with_0027(empty_url: str) -> None:
    """0027 keeps each node's side of a pair's per-NIC RDMA test: read back as given, in
    the node's order (a node that sent none has none); down to 0026 the column goes and
    the steps stay."""
    from fleet.model.step import NicFigure, NodeNics

    engine = open_engine(resolve(empty_url))
    try:
        upgrade(engine)
        steps = run_steps()
        steps[1] = replace(steps[1], nics=(
            NodeNics("a", "server", None, (
                NicFigure(0, "mlx5_0", 1, 400.0, 391.2, True, None, "mlx5_0/1"),
                NicFigure(1, "mlx5_1", 1, 400.0, None, False,
                          "the other node's mlx5_1/1 is not Active"))),
            NodeNics("b", "client", "ib_write_bw is not installed (Debian/Ubuntu: "
                                    "apt-get install perftest)")))
        record(engine, steps=steps)
        (run,) = read_cluster_runs(engine, cluster="pod")
        assert run.results == tuple(steps)
        assert run.results[0].nics == ()
        assert downgrade(engine, "0026").revision == "0026"
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("cluster_step_node")}
        assert "nics" not in columns and "counters" in columns
        assert cluster_counts(engine) == (4, 9, 9)
        upgrade(engine)
        (run,) = read_cluster_runs(engine, cluster="pod")
        assert all(r.nics == () for r in run.results)
    finally:
        engine.dispose()
