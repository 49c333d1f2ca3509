"""`fleet cluster run` as a user runs it: real sshd servers on loopback as the nodes, the
agent uploaded and started on each over SSH, its ranks joining across the "nodes" through
torch.distributed's gloo on the CPU, the run judged and stored in SQLite.

What a GPU node adds (NCCL, its transport, the fabric's figures) ran for real on a lent
2x H100 split in two by NCCL_HOSTID (bench/device_cluster_split.sh); here it is the
orchestration: the rendezvous check before anything starts, the steps in order, a node
that dies mid-collective failing its step while the others are stopped, nothing
half-measured stored.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from fleet.store.cluster import read_cluster_runs, record_cluster_run
from fleet.store.database import open_engine, resolve
from fleet.store.models import ClusterFigure, ClusterStep
from tests.cluster.test_reach import (  # noqa: F401 (fixtures)
    USER,
    assert_80_columns,
    client_key,
    fleet,
    isolated_python,
    servers,
    ssh,
)
from tests.probe.sshd import SshServer, free_port

PYTHON = sys.executable  # torch (CPU) is installed beside fleet for the tests


def write_inventory(root: Path, key: Path, hosts: dict[str, dict[str, Any]], port: int
                    ) -> Path:
    document = {
        "defaults": {"user": USER, "identity_file": str(key), "ssh_config": "none",
                     "python": PYTHON, "runtime": {"use": "host"},
                     "cache_dir": str(root / "cache")},
        "providers": {"lab": {"cluster": "pod", "hosts": hosts}},
        "clusters": {"pod": {"rendezvous_port": port}},
    }
    path = root / "inventory.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def table(stdout: str) -> dict[str, list[str]]:
    return {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in stdout.splitlines() if line.startswith("│")}


def agent_processes(port: int) -> list[str]:
    """Command lines of the agent's cluster steps and ranks of the cluster at rendezvous
    `port` still running on this machine (other tests may run steps of their own)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if ("agent.cluster" in line or " cluster --address" in line) and \
                f" --port {port} " in line:
            found.append(line)
    return found


def run_args(inventory: Path, db: str) -> tuple[str, ...]:
    return ("cluster", "run", str(inventory), "--cpu", "--db", db, "--accept-new-host-keys",
            "--connect-retries", "0", "--sizes", "64K,1M")


@dataclass(frozen=True)
class FirstRun:
    root: Path  # the runs' HOME and directory
    inventory: Path
    db: Path
    port: int
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, client_key: Path,  # noqa: F811
              servers: list[SshServer]) -> FirstRun:  # noqa: F811
    """The first `fleet cluster run` of h1 and h2 into a new store, made once: the test of
    a first run reads it, the test of a run below its past starts from it."""
    root = tmp_path_factory.mktemp("first-run")
    port = free_port()
    inventory = write_inventory(root, client_key, {"h1": ssh(servers[0]),
                                                   "h2": ssh(servers[1])}, port)
    db = root / "fleet.db"
    done = fleet(root, *run_args(inventory, f"sqlite:///{db}"), timeout=240)
    return FirstRun(root, inventory, db, port, done)


@pytest.mark.xdist_group("cluster-first-run")
def test_two_nodes_measured_judged_and_stored(first_run: FirstRun) -> None:
    port, done = first_run.port, first_run.done
    db = f"sqlite:///{first_run.db}"
    assert done.returncode == 0, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    rows = table(done.stdout)
    assert set(rows) == {"cluster", "pair-r1-0"}
    assert rows["cluster"][:2] == ["h1 h2", "gloo"]
    assert rows["pair-r1-0"][:2] == ["h1 h2", "gloo"]
    assert float(rows["pair-r1-0"][2]) > 0  # the all-reduce's bus bandwidth, GB/s
    assert "stored 2 steps" in done.stdout
    # Judged: no fingerprint stored (no probe ran), so information, not a fault, and the
    # way to a judgement said.
    assert "fault" not in done.stdout.lower()
    assert "do: Probe the nodes (`fleet probe`)" in " ".join(done.stdout.split())
    location = resolve(db)
    engine = open_engine(location)
    try:
        [run] = read_cluster_runs(engine, "pod")
        assert [r.kind for r in run.results] == ["cluster", "pair"]
        for result in run.results:
            assert result.error is None and result.backend == "gloo"
            assert result.hosts == ("h1", "h2") and result.ranks_per_node == 1
            sizes = sorted({(f.op, f.size_bytes) for f in result.figures})
            # The whole cluster runs the four collectives, a pair the two that judge it.
            ops = (["all_gather", "all_reduce", "all_to_all", "reduce_scatter"]
                   if result.kind == "cluster" else ["all_gather", "all_reduce"])
            assert [op for op, _ in sizes] == [op for op in ops for _ in range(2)]
            reduce = max((f for f in result.figures if f.op == "all_reduce"),
                         key=lambda f: f.size_bytes)
            # nccl-tests' busbw for two ranks: algbw x 2(n-1)/n = algbw.
            assert reduce.busbw_gbs == pytest.approx(reduce.algbw_gbs, rel=1e-3)
        assert run.results[1].algo == "Ring"  # a pair forces the ring; the cluster does not
        assert run.results[0].algo is None
    finally:
        engine.dispose()
    assert agent_processes(port) == []


@pytest.mark.xdist_group("cluster-first-run")
def test_a_run_below_its_past_runs_is_said_and_fails_the_command(
        tmp_path: Path, first_run: FirstRun) -> None:
    # Five earlier runs stored at 100 x what loopback gives: the next real run of the
    # same steps is far under its own past, and `fleet cluster run` says so, with whose
    # it is (nothing changed in the settings: unsettled) and what to do, and exits 3.
    port, first = first_run.port, first_run.done
    # A copy of the first run's store (through SQLite's backup, which reads what is
    # still in its write-ahead log), so that the first run's own test sees it unchanged.
    with closing(sqlite3.connect(first_run.db)) as source, \
            closing(sqlite3.connect(tmp_path / "fleet.db")) as copy:
        source.backup(copy)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    argv = run_args(first_run.inventory, db)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "against its past: no step has 5 earlier runs to compare with yet" in \
        " ".join(first.stdout.split())
    engine = open_engine(resolve(db))
    try:
        [run] = read_cluster_runs(engine, "pod")
        for night in range(1, 6):
            results = [replace(r, figures=tuple(
                replace(f, busbw_gbs=f.busbw_gbs * 100, algbw_gbs=f.algbw_gbs * 100)
                for f in r.figures)) for r in run.results]
            record_cluster_run(
                engine, f"past-{night}", results, run.documents, run.settings,
                started_at={r.step_id: run.started_at - dt.timedelta(days=night)
                            for r in results}, provider="lab")
    finally:
        engine.dispose()
    done = fleet(first_run.root, *argv, timeout=240)
    assert done.returncode == 3, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    said = " ".join(done.stdout.split())
    assert "against its past: 6 steps compared with their own earlier runs (up to 7): " \
           "6 below" in said
    assert "Pair h1 and h2: all_reduce" in said or "Pair h1 and h2: all_gather" in said
    assert "under its own past runs [unsettled]" in said
    assert "under the median of its 6 earlier runs" in said
    # Below its past the first time, each step was measured again before it was said.
    assert "measured again in the same run, the first time" in said
    assert "stored 4 steps" in said
    assert "do: Measure the pair again with its nodes otherwise idle" in said
    # The report says it too, among what is not settled.
    report = tmp_path / "r.md"
    made = fleet(first_run.root, "report", "--db", db, "--format", "md", "-o", str(report),
                 timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    text = report.read_text()
    assert "Against its past runs: 6 steps compared with their own earlier runs (up to 7): " \
           "6 below" in text
    assert "(whose: unsettled): Pair h1 and h2:" in text
    assert agent_processes(port) == []


def test_a_node_that_cannot_reach_the_rendezvous_starts_nothing(
        tmp_path: Path, client_key: Path, servers: list[SshServer],  # noqa: F811
        isolated_python: Path) -> None:  # noqa: F811
    port = free_port()
    path = write_inventory(tmp_path, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1], python=str(isolated_python))}, port)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    done = fleet(tmp_path, "cluster", "run", str(path), "--cpu", "--db", db,
                 "--accept-new-host-keys", "--connect-retries", "0", timeout=240)
    assert done.returncode == 3, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    assert "no-go, nothing was started" in done.stdout
    assert "h2:" in done.stdout and "nothing stored" not in done.stderr
    engine = open_engine(resolve(db))
    try:
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(ClusterStep)).scalar() == 0
    finally:
        engine.dispose()


def test_a_node_dying_mid_collective_fails_its_steps_and_stops_the_others(
        tmp_path: Path, client_key: Path, servers: list[SshServer]) -> None:  # noqa: F811
    # h2's python kills its own process group (the agent and its ranks) six seconds into
    # each cluster step: after the rendezvous, during the collectives.
    dying = tmp_path / "dying-python"
    dying.write_text("#!/bin/sh\n"
                     'case " $* " in *" cluster "*) ( sleep 6; kill -KILL 0 ) & ;; esac\n'
                     f'exec {PYTHON} "$@"\n')
    dying.chmod(0o755)
    port = free_port()
    path = write_inventory(tmp_path, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1], python=str(dying))}, port)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    done = fleet(tmp_path, "cluster", "run", str(path), "--cpu", "--db", db,
                 "--accept-new-host-keys", "--connect-retries", "0",
                 "--sizes", "64M,256M", "--step-timeout", "20", "--no-suspects",
                 timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    rows = table(done.stdout)
    assert rows["cluster"][-1] == "failed" and rows["pair-r1-0"][-1] == "failed"
    said = " ".join(done.stdout.split())
    assert "cluster failed: h2" in said or "cluster failed: h1" in said
    engine = open_engine(resolve(db))
    try:
        [run] = read_cluster_runs(engine, "pod")
        assert all(r.error for r in run.results)
        with engine.connect() as conn:
            # Failed steps are stored with their reason and never with figures.
            assert conn.execute(select(func.count()).select_from(ClusterFigure)).scalar() == 0
    finally:
        engine.dispose()
    assert agent_processes(port) == []


def test_probe_measures_the_cluster_after_its_nodes(tmp_path: Path, client_key: Path,  # noqa: F811
                                                    servers: list[SshServer]) -> None:  # noqa: F811
    # `fleet probe` runs each node's own suite, then the cluster between the nodes whose
    # suite passed; the steps are stored beside the nodes' documents, each node's step
    # row pointing at the document its fingerprint was judged by.
    port = free_port()
    path = write_inventory(tmp_path, client_key, {"h1": ssh(servers[0]),
                                                  "h2": ssh(servers[1])}, port)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    # The matmul alone on the nodes (their suites have tests of their own): the cluster
    # follows any benchmark; its pairs' RDMA ports asked for too (none here).
    done = fleet(tmp_path, "probe", str(path), "--cpu", "--size", "128", "--quick",
                 "--measure-s", "0.3", "--gemm-only", "--db", db, "--accept-new-host-keys",
                 "--connect-retries", "0", "--nic-test", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster pod: 2 nodes" in done.stdout
    assert set(table(done.stdout)) >= {"cluster", "pair-r1-0"}
    engine = open_engine(resolve(db))
    try:
        [run] = read_cluster_runs(engine, "pod")
        assert [r.kind for r in run.results] == ["cluster", "pair"]
        assert set(run.documents) == {"h1", "h2"} and all(run.documents.values())
        assert [n.role for n in run.results[1].nics] == ["server", "client"]
        assert run.results[0].nics == ()
    finally:
        engine.dispose()
    skipped = fleet(tmp_path, "probe", str(path), "--fingerprint-only", "--db", db,
                    "--connect-retries", "0", timeout=300)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "cluster pod" not in skipped.stdout


def test_a_nightly_sweep_measures_the_cluster_into_its_report(
        tmp_path: Path, client_key: Path, servers: list[SshServer]) -> None:  # noqa: F811
    port = free_port()
    path = write_inventory(tmp_path, client_key, {"h1": ssh(servers[0]),
                                                  "h2": ssh(servers[1])}, port)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    report = tmp_path / "night.html"
    done = fleet(tmp_path, "sweep", str(path), "--name", "nightly", "--cpu", "--size", "128",
                 "--quick", "--measure-s", "0.3", "--gemm-only", "--db", db,
                 "--accept-new-host-keys", "--report", str(report), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster pod: 2 nodes" in done.stdout
    engine = open_engine(resolve(db))
    try:
        [run] = read_cluster_runs(engine, "pod")
        assert [r.kind for r in run.results] == ["cluster", "pair"]
    finally:
        engine.dispose()
    page = report.read_text()
    assert '<section id="cluster">' in page and run.run_id in page


def test_one_bad_node_and_one_lost_are_named_and_the_rest_measured(
        tmp_path: Path, client_key: Path, servers: list[SshServer]) -> None:  # noqa: F811
    # Issue 57's case on real nodes: h2's python has no torch (its steps fail), `down`'s
    # sshd is down (lost before its steps), and the four live nodes share 127.0.0.1, so
    # two pairs of a round meet on one address at once. Before issue 57 the lost node
    # stopped the run, the pairs of a round met on one port (EADDRINUSE, or one pair in
    # another's store), and the verdict blamed the fabric's switches.
    port = free_port()
    path = write_inventory(tmp_path, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1], python="/usr/bin/python3"),
        "here": {"transport": "local"}, "here2": {"transport": "local"},
        "down": ssh(servers[2])}, port)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    done = fleet(tmp_path, "cluster", "run", str(path), "--cpu", "--db", db,
                 "--accept-new-host-keys", "--connect-retries", "0", "--sizes", "64K",
                 "--no-suspects", timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    said = " ".join(done.stdout.split())
    assert "down: lost before its steps, not measured [unsettled]" in said
    assert ("h2: every pair step it was in failed (3 of 3), where its partners ran with "
            "others [unsettled]") in said
    ran = said.split("pair steps without h2 ran: ", 1)[1].split(" do: ", 1)[0]
    assert sorted(ran.split(", ")) == ["h1 and here", "h1 and here2", "here and here2"]
    assert "no torch to run the ranks on h2" in said
    assert "shared" not in said and "switches" not in said
    engine = open_engine(resolve(db))
    try:
        [run] = read_cluster_runs(engine, "pod")
    finally:
        engine.dispose()
    lost = [r for r in run.results if len(r.hosts) == 1]
    assert [(r.hosts, r.kind) for r in lost] == [(("down",), "cluster")]
    pairs = [r for r in run.results if r.kind == "pair"]
    assert len(pairs) == 6
    # Every pair without h2 ran, though a round's two pairs met on one address at once.
    assert all((r.error is None) == ("h2" not in r.hosts) for r in pairs), [
        (r.hosts, r.error) for r in pairs]
    assert not any("in use" in (r.error or "").lower() for r in run.results)
    report = tmp_path / "r.md"
    made = fleet(tmp_path, "report", "--db", db, "--format", "md", "-o", str(report),
                 timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    text = report.read_text()
    assert "| h2 | 0 | 0 | - | steps failed | 3 failed |" in text
    assert "| down | 0 | 0 | - | lost | - |" in text
    assert "| h1 | 0 | 0 | - |  | 1 failed, 2 ran |" in text
    assert "fabric and its switches" not in text
    assert agent_processes(port) == []
