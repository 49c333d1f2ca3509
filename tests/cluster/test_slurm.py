"""A cluster whose steps go through its own Slurm (`clusters: {NAME: {slurm: ...}}`): a real
Slurm on loopback (munged, slurmctld and two slurmd, tests/cluster/slurm.py), `fleet cluster
run` starting srun from each step's first node, one task a node, each task's agent
finding its place from SLURMD_NODENAME and its ranks meeting through gloo on the CPU."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.errors import InputError
from fleet.inventory import load_inventory
from fleet.store.cluster import read_cluster_runs
from fleet.store.database import open_engine, resolve
from tests.cluster.slurm import Slurm, slurm_missing
from tests.cluster.test_reach import assert_80_columns, fleet
from tests.probe.sshd import free_port

# One Slurm for the module, on one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    missing = slurm_missing()
    if missing:
        pytest.fail(f"the Slurm tests need a real Slurm: {missing}", pytrace=False)
    started = Slurm(tmp_path_factory.mktemp("slurm")).start()
    yield started
    started.stop()


def free_ports(count: int) -> int:
    """A port with the `count - 1` after it free too: the rendezvous's, then the pairs'."""
    for _ in range(50):
        port = free_port()
        held = []
        try:
            for offset in range(1, count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    pytest.fail(f"no {count} free ports in a row on 127.0.0.1 in 50 tries", pytrace=False)


def write_inventory(root: Path, port: int, slurm: dict[str, Any]) -> Path:
    document = {
        "defaults": {"transport": "local", "python": sys.executable,
                     "runtime": {"use": "host"}, "cache_dir": str(root / "cache")},
        "providers": {"lab": {"cluster": "pod", "hosts": {"n1": {}, "n2": {}}}},
        "clusters": {"pod": {"rendezvous_port": port, "slurm": slurm}},
    }
    path = root / "inventory.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def run(root: Path, inventory: Path, slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return fleet(root, "cluster", "run", str(inventory), "--cpu", "--db",
                 f"sqlite:///{root / 'fleet.db'}", "--sizes", "64K,1M", timeout=300)


def test_the_steps_go_through_srun_one_task_a_node(
        tmp_path: Path, slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = write_inventory(tmp_path, free_ports(2), {"partition": "debug"})
    done = run(tmp_path, inventory, slurm, monkeypatch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    said = " ".join(done.stdout.split())
    assert "through Slurm (srun from each step's first node)" in said
    assert "stored 2 steps" in said
    # Each task's progress, as srun labelled it.
    assert "srun task 1: joined" in done.stderr
    engine = open_engine(resolve(f"sqlite:///{tmp_path / 'fleet.db'}"))
    try:
        [stored] = read_cluster_runs(engine, "pod")
    finally:
        engine.dispose()
    assert [(r.kind, r.launcher, r.error) for r in stored.results] == [
        ("cluster", "slurm", None), ("pair", "slurm", None)]
    whole = stored.results[0]
    assert sorted({f.op for f in whole.figures}) == [
        "all_gather", "all_reduce", "all_to_all", "reduce_scatter"]
    # Slurm itself started a task on each node (its own log says so).
    for node in ("n1", "n2"):
        log = (slurm.root / "log" / f"slurmd-{node}.log").read_text(errors="replace")
        assert "launch task" in log.lower(), log[-2000:]


def test_the_check_asks_slurm_first_and_says_what_it_cannot_take(
        tmp_path: Path, slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    # A node name Slurm does not know: no-go before any step, in sinfo's terms.
    inventory = write_inventory(tmp_path, free_ports(2), {"nodes": {"n2": "n9"}})
    done = run(tmp_path, inventory, slurm, monkeypatch)
    assert done.returncode == 3, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    said = " ".join(done.stdout.split())
    assert ("no-go, nothing was started: Slurm knows no node n9 (sinfo on n1): give "
            "clusters.pod.slurm.nodes each host's Slurm node name (n2: n9 now)") in said
    assert "stored" not in said  # nothing ran, nothing is stored
    # A drained node: said with how to bring it back.
    env = {**os.environ, **slurm.env}
    subprocess.run(["scontrol", "update", "nodename=n2", "state=drain", "reason=fleet-test"],
                   env=env, check=True, capture_output=True)
    try:
        again = tmp_path / "again"
        again.mkdir()
        done = run(again, write_inventory(again, free_ports(2), {}), slurm, monkeypatch)
        assert done.returncode == 3, done.stdout + done.stderr
        said = " ".join(done.stdout.split())
        assert "Slurm's nodes are not ready for a step: n2 (n2) is drained" in said
        assert "scontrol update nodename=... state=resume" in said
    finally:
        subprocess.run(["scontrol", "update", "nodename=n2", "state=resume"], env=env,
                       check=True, capture_output=True)


def test_a_node_srun_cannot_place_fails_the_step_with_sruns_words(
        tmp_path: Path, slurm: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    # Past the check (Slurm changed since): the step fails, srun's words in its error.
    import threading

    from fleet.cluster.slurm import run_step_slurm
    from fleet.cluster.step import StepNode, StepSpec
    from fleet.inventory.model import SlurmSpec
    from fleet.payload import build_payload
    from fleet.transport.local import LocalTransport

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    inventory = load_inventory(write_inventory(tmp_path, 29550, {}))
    nodes = {t.name: StepNode(t, LocalTransport(t.key), None) for t in inventory.targets}
    spec = StepSpec("pod", "s-1", "pair", 1, ("n1", "n2"), "127.0.0.1", free_ports(2), 1,
                    30.0, launcher="slurm")
    run_ = run_step_slurm(spec, nodes, build_payload(), SlurmSpec(nodes={"n2": "n9"}),
                          threading.Event())
    assert run_.error is not None
    assert run_.error.startswith("n1, n2: no report through srun --nodelist=n1,n9 (it exited "
                                 "with status 1: srun: error: Unable to allocate resources: "
                                 "Invalid node name specified"), run_.error
    assert run_.reports == {}


@pytest.mark.parametrize(("settings", "said"), [
    ({"nodes": {"zz": "n1"}},
     "clusters.pod.slurm.nodes: zz is not a host of cluster pod (n1, n2): name its own "
     "hosts, each with its Slurm node name"),
    ({"nodes": {"n1": "gpu7", "n2": "gpu7"}},
     "Slurm node gpu7 stands for two hosts; give each host its own node"),
    ({"srun_options": ["--account=ml", "--nodes=4"]},
     "--nodes=4 is fleet's to set"),
    ({"srun_options": ["-N4"]}, "srun_options"),
])
def test_slurm_settings_are_checked_before_anything_runs(
        tmp_path: Path, settings: dict[str, Any], said: str) -> None:
    inventory = write_inventory(tmp_path, 29550, settings)
    with pytest.raises(InputError, match=r"inventory\.yaml") as caught:
        load_inventory(inventory)
    assert said in str(caught.value)


def test_a_node_without_srun_is_told_so_before_any_task(tmp_path: Path) -> None:
    # The step's first node runs fleet's script: without srun on its PATH it says so
    # (and fleet then tells the user to install Slurm's client or leave `slurm:` out),
    # and with srun it starts one task on each of the step's Slurm nodes.
    import subprocess

    from fleet.cluster.slurm import srun_script
    from fleet.cluster.step import StepSpec
    from fleet.inventory.model import SlurmSpec
    from fleet.payload import MARKER

    spec = StepSpec("pod", "s-1", "pair", 1, ("a", "b"), "10.0.0.5", 29551, 8, 180.0,
                    algo="Ring", launcher="slurm")
    slurm = SlurmSpec(partition="gpu", nodes={"b": "gpu-b"}, srun_options=["--account=ml"])
    script = srun_script(spec, slurm, "/opt/py/bin/python3", "~/.cache/fleet/agent.pyz",
                         {"NCCL_IB_HCA": "mlx5"})
    done = subprocess.run(["/bin/sh", "-c", script], env={"PATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, f"{MARKER}no-srun\n")
    fake = tmp_path / "srun"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    done = subprocess.run(["/bin/sh", "-c", script], env={"PATH": f"{tmp_path}:/usr/bin:/bin",
                                                          "HOME": "/home/u"},
                          capture_output=True, text=True, timeout=30, check=False)
    said = done.stdout.splitlines()
    assert said[0] == f"{MARKER}run"
    assert said[1:9] == ["--nodes=2", "--nodelist=a,gpu-b", "--ntasks-per-node=1", "--label",
                         "--kill-on-bad-exit=1", "--export=ALL", "--partition=gpu",
                         "--account=ml"]
    assert said[9:13] == ["env", "NCCL_IB_HCA=mlx5", "/opt/py/bin/python3",
                          "/home/u/.cache/fleet/agent.pyz"]
    assert said[13:20] == ["cluster", "--address", "10.0.0.5", "--port", "29551",
                           "--nodes", "2"]
    assert "--slurm-nodes" in said and said[said.index("--slurm-nodes") + 1] == "a,gpu-b"
    assert "--node-rank" not in said
