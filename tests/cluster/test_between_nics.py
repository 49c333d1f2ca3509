"""`fleet cluster run --nic-test` as a user runs it: two real sshd "nodes" on loopback,
the pair's agents running perftest's real `ib_write_bw` where it is installed (CI
installs Debian's perftest; this machine has no RDMA port), the nodes' answers validated,
stored and judged. A port's figure comes from no real RDMA device here: the per-NIC path
with figures runs against a replay of published outputs (tests/agent/
test_network_perftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from fleet.store.cluster import read_cluster_runs
from fleet.store.database import open_engine, resolve
from tests.cluster.test_between import agent_processes, run_args, write_inventory
from tests.cluster.test_reach import (  # noqa: F401 (fixtures)
    client_key,
    fleet,
    servers,
    ssh,
)
from tests.probe.sshd import SshServer, free_port


def test_a_pairs_nic_test_is_stored_and_said(tmp_path: Path, client_key: Path,  # noqa: F811
                                             servers: list[SshServer]) -> None:  # noqa: F811
    port = free_port()
    inventory = write_inventory(tmp_path, client_key, {"h1": ssh(servers[0]),
                                                       "h2": ssh(servers[1])}, port)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    done = fleet(tmp_path, *run_args(inventory, db), "--nic-test", timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    # Why no port was tested, as each node's agent found it.
    why = ("no active RDMA port" if shutil.which("ib_write_bw") else
           "ib_write_bw is not installed (Debian/Ubuntu: apt-get install perftest)")
    said = " ".join(done.stdout.split())
    assert "h1 and h2: no per-NIC test ran" in said, said
    assert f"h1: {why}" in said
    engine = open_engine(resolve(db))
    try:
        [run] = read_cluster_runs(engine, "pod")
        whole, pair = run.results
        # Only a pair tests its ports; each node's side is stored.
        assert whole.nics == ()
        assert [(n.host, n.role, n.skipped, n.tests) for n in pair.nics] == [
            ("h1", "server", why, ()), ("h2", "client", why, ())]
    finally:
        engine.dispose()
    assert agent_processes(port) == []


def test_the_flag_is_taught_in_help(tmp_path: Path) -> None:
    done = fleet(tmp_path, "cluster", "run", "--help", timeout=60)
    text = " ".join(done.stdout.split())
    assert "--nic-test" in text and "apt-get install perftest" in text
