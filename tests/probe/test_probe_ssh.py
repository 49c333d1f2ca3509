"""`fleet probe` against real sshd servers on loopback: the command a user runs, its exit
status, what it printed, and what the store holds afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.probe.conftest import GOOD_HOSTS, USER, Workspace, recording, variant_labels
from tests.probe.sshd import SshServer, free_port

V100 = recording("old-driver-v100")
EXPECTED_LABELS = {
    "lambda/a100-sxm4": ["A100-SXM4-80GB"],
    "lambda/a100-pcie": ["A100-PCIe-80GB"],
    "coreweave/h100": ["H100-SXM5-80GB"],
    "nebius/h200x2": ["H200-SXM-141GB", "H200-SXM-141GB"],
}


def assert_good_hosts_stored(workspace: Workspace, runs: int = 1) -> None:
    documents = workspace.documents()
    for key, labels in EXPECTED_LABELS.items():
        assert len(documents.get(key, [])) == runs, (key, sorted(documents))
        _hostname, gpu_count, body = documents[key][-1]
        assert variant_labels(body) == labels
        assert gpu_count == len(labels)


def test_four_hosts_each_replaying_its_recording(workspace: Workspace) -> None:
    inventory = workspace.inventory(workspace.good_hosts())
    first = workspace.probe(inventory, "--fingerprint-only", "--accept-new-host-keys")
    assert first.returncode == 0, first.stderr
    assert_good_hosts_stored(workspace)
    assert {h["uploaded"] for h in first.report["hosts"]} == {True}
    # Listed as SXM4, found PCIe: the probe succeeds and says so.
    pcie = first.host("lambda/a100-pcie")
    assert pcie["expectation"]["matches"] is False
    assert "found A100-PCIe-80GB" in pcie["expectation"]["problems"][0]
    assert first.host("lambda/a100-sxm4")["expectation"]["matches"] is True
    assert first.host("coreweave/h100")["expectation"]["matches"] is True
    assert first.host("nebius/h200x2")["expectation"]["matches"] is True
    # One agent file in the host's cache, under its hash, and no temporary left behind.
    for key in GOOD_HOSTS:
        cached = [p.name for p in (workspace.cache / key.replace("/", "-")).iterdir()]
        assert cached == [first.report["payload"]["file"]]
    # One line per host, each naming its own sshd's port (seen once in CI with a line
    # missing, not reproduced since: the message keeps what is needed to tell why).
    recorded = workspace.known_hosts.read_text()
    ports = sorted(f"[127.0.0.1]:{server.port}" for server in workspace.servers)
    assert sorted(line.split()[0] for line in recorded.splitlines()) == ports, recorded

    second = workspace.probe(inventory, "--fingerprint-only")
    assert second.returncode == 0, second.stderr
    assert {h["uploaded"] for h in second.report["hosts"]} == {False}
    assert_good_hosts_stored(workspace, runs=2)


def test_summary_table_for_a_person(workspace: Workspace) -> None:
    inventory = workspace.inventory(workspace.good_hosts())
    result = workspace.fleet("probe", str(inventory), "--db", str(workspace.db),
                             "--fingerprint-only", "--accept-new-host-keys")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "lambda/a100-pcie" in out and "MISMATCH" in out
    # A host's notes under the table, a line each, not folded into a column.
    assert "\nlambda/a100-pcie: listed variant A100 SXM4 80GB, found A100-PCIe-80GB on GPU 0" \
        in out
    assert "2 x H200-SXM-141GB" in out
    assert f"4 of 4 hosts stored in sqlite:///{workspace.db}" in out
    assert "fleet results --db" in out


def test_unknown_host_keys_are_refused_until_accepted(workspace: Workspace) -> None:
    hosts = workspace.good_hosts()
    hosts["here/local"] = {"transport": "local", "python": sys.executable,
                           "env": {"FLEET_NVML_REPLAY": V100}}
    result = workspace.probe(workspace.inventory(hosts), "--fingerprint-only")
    assert result.returncode == 3
    for key in GOOD_HOSTS:
        host = result.host(key)
        assert host["stage"] == "host key"
        assert "unknown host key for [127.0.0.1]:" in host["reason"]
        assert "--accept-new-host-keys" in host["reason"]
    assert not workspace.known_hosts.exists()
    # The host that needs no SSH is stored all the same.
    assert list(workspace.documents()) == ["here/local"]
    assert set(workspace.host_errors()) == set(GOOD_HOSTS)


def test_changed_host_key_is_always_refused(workspace: Workspace, tmp_path: Path) -> None:
    moving = SshServer(tmp_path / "moving", workspace.keys.authorized).start()
    try:
        hosts = workspace.good_hosts()
        hosts["shady/reinstalled"] = workspace.ssh_host(moving, "h100-sxm5-mig")
        inventory = workspace.inventory(hosts)
        assert workspace.probe(inventory, "--fingerprint-only",
                               "--accept-new-host-keys").returncode == 0
        moving.replace_host_key()
        # Even with --accept-new-host-keys: a new host is one thing, a changed key another.
        result = workspace.probe(inventory, "--fingerprint-only", "--accept-new-host-keys")
    finally:
        moving.stop()
    assert result.returncode == 3
    host = result.host("shady/reinstalled")
    assert host["stage"] == "host key"
    assert "has CHANGED" in host["reason"]
    assert "ssh-keygen -R" in host["reason"]
    assert len(workspace.documents()["shady/reinstalled"]) == 1  # the first run only
    assert_good_hosts_stored(workspace, runs=2)


FAULTS: dict[str, tuple[str, str]] = {
    # fault: (stage it fails at, what the reason must say)
    "unreachable": ("connect", "refused the connection: is sshd running there"),
    "refused key": ("connect", "refused authentication"),
    "agent killed": ("agent", "killed by SIGKILL"),
    "agent hangs": ("timeout", "did not finish in 20 s"),
    "garbage": ("agent output", "is not JSON"),
    "no python3": ("python", "has no /nonexistent/python3: install Python 3.8"),
}


def fault_host(fault: str, workspace: Workspace, scripts: dict[str, Path]) -> dict[str, Any]:
    servers = workspace.servers
    if fault == "unreachable":
        return {"address": "127.0.0.1", "port": free_port()}
    if fault == "refused key":
        return workspace.ssh_host(servers[1], identity_file=str(workspace.keys.stranger))
    if fault == "no python3":
        return workspace.ssh_host(servers[2], python="/nonexistent/python3")
    script = {"agent killed": "killed", "agent hangs": "hang", "garbage": "garbage"}[fault]
    spec = workspace.ssh_host(servers[3], python=str(scripts[script]))
    if fault == "agent hangs":
        spec["env"] = {"FLEET_TEST_PIDFILE": str(workspace.root / "hang.pid")}
    return spec


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_fails_its_host_alone(fault: str, workspace: Workspace,
                                      fault_scripts: dict[str, Path]) -> None:
    hosts = workspace.good_hosts()
    hosts["faulty/host"] = fault_host(fault, workspace, fault_scripts)
    inventory = workspace.inventory(hosts)
    # The healthy hosts' agents must finish inside the timeout too: a short one only
    # where the hanging agent is to be stopped, and not one a busy machine misses.
    timeout = 20 if fault == "agent hangs" else 90
    started = time.monotonic()
    result = workspace.probe(inventory, "--fingerprint-only", "--accept-new-host-keys",
                             "--timeout", str(timeout))
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    stage, says = FAULTS[fault]
    host = result.host("faulty/host")
    assert host["ok"] is False
    assert host["stage"] == stage, host["reason"]
    assert says in host["reason"]
    # The others were stored; the faulty host left a recorded failure and no document.
    assert_good_hosts_stored(workspace)
    assert "faulty/host" not in workspace.documents()
    assert workspace.host_errors()["faulty/host"] == [(stage, host["reason"])]
    assert elapsed < timeout + 120  # the timeout honoured, with room for a busy machine
    if fault == "agent hangs":
        pid = int((workspace.root / "hang.pid").read_text())
        assert not _alive(pid), "the hanging agent was left running on the host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent's wait is missing.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1].split()[0] != "Z"


def test_the_summary_lists_every_failure_with_its_reason(
        workspace: Workspace, fault_scripts: dict[str, Path]) -> None:
    hosts = workspace.good_hosts()
    hosts["faulty/garbage"] = fault_host("garbage", workspace, fault_scripts)
    hosts["faulty/nopython"] = fault_host("no python3", workspace, fault_scripts)
    result = workspace.fleet("probe", str(workspace.inventory(hosts)), "--db",
                             str(workspace.db), "--fingerprint-only",
                             "--accept-new-host-keys")
    assert result.returncode == 3
    assert "2 hosts failed:" in result.stdout
    assert "faulty/garbage (agent output):" in result.stdout
    assert "faulty/nopython (python): host faulty/nopython has no /nonexistent/python3" \
        in result.stdout


def test_ctrl_c_stops_remote_agents_and_keeps_what_arrived(
        workspace: Workspace, fault_scripts: dict[str, Path]) -> None:
    hosts = workspace.good_hosts()
    hosts["faulty/hang"] = fault_host("agent hangs", workspace, fault_scripts)
    inventory = workspace.inventory(hosts)
    workspace.home.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "probe", str(inventory), "--db",
         str(workspace.db), "--fingerprint-only", "--accept-new-host-keys", "--json"],
        env=workspace.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=workspace.root)
    pidfile = workspace.root / "hang.pid"
    # Bounded generously: on a busy 2-core machine the healthy hosts' agents are slow.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (
            pidfile.exists() and len(workspace.documents()) == len(GOOD_HOSTS)):
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert_good_hosts_stored(workspace)
    hung = next(h for h in json.loads(stdout)["hosts"] if h["host"] == "hang")
    assert hung["stage"] == "interrupted"
    assert not _alive(int(pidfile.read_text())), "Ctrl-C left the remote agent running"


def test_jump_host_and_ssh_config_alias(workspace: Workspace, tmp_path: Path) -> None:
    """A jump host given in the inventory, and a host known only by its ssh_config alias
    whose jump host, user and key come from ssh_config (through an Include)."""
    a, b = workspace.servers[0], workspace.servers[1]
    config = tmp_path / "ssh_config"
    config.write_text(f"""\
Host gpu-behind-bastion
    HostName 127.0.0.1
    Port {b.port}
    ProxyJump bastion

Include {tmp_path / "config.d"}/*.conf

Host *
    User {USER}
    IdentityFile {workspace.keys.client}
""")
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "bastion.conf").write_text(f"""\
Host bastion
    HostName 127.0.0.1
    Port {a.port}
""")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"""\
defaults:
  cache_dir: {workspace.cache}
  python: /usr/bin/python3
  env: {{FLEET_NVML_REPLAY: {V100}}}
providers:
  viajump:
    hosts:
      v100:
        address: 127.0.0.1
        port: {b.port}
        user: {USER}
        identity_file: {workspace.keys.client}
        jump: {USER}@127.0.0.1:{a.port}
        ssh_config: none
  alias:
    ssh_config: {config}
    hosts:
      gpu-behind-bastion:
        env: {{FLEET_NVML_REPLAY: {recording("h100-sxm5-mig")}}}
""")
    check = workspace.fleet_in_process("inventory", "check", str(inventory))
    assert check.returncode == 0, check.stderr
    assert check.stdout.count(f"{USER}@127.0.0.1:{b.port} via {USER}@127.0.0.1:{a.port}") == 2
    result = workspace.probe(inventory, "--fingerprint-only", "--accept-new-host-keys")
    assert result.returncode == 0, result.stderr
    assert set(workspace.documents()) == {"viajump/v100", "alias/gpu-behind-bastion"}


def test_one_machine_listed_three_times_is_stored_thrice_and_flagged(
        workspace: Workspace) -> None:
    """Three aliases of one address replaying one recording: the agents may send the very
    same document (same second). Each host is stored against its own name, none is
    "already stored" under another's, and the probe says they answered with the same GPUs."""
    server = workspace.servers[0]
    hosts = {f"lambda/{name}": workspace.ssh_host(server, "h100-sxm5-mig")
             for name in ("alpha", "beta", "gamma")}
    inventory = workspace.inventory(hosts)
    result = workspace.probe(inventory, "--fingerprint-only", "--accept-new-host-keys")
    assert result.returncode == 0, result.stderr
    report = result.report
    assert {(h["ok"], h["already_stored"]) for h in report["hosts"]} == {(True, False)}
    ids = {h["document_id"] for h in report["hosts"]}
    assert len(ids) == 3
    documents = workspace.documents()
    assert sorted(documents) == sorted(hosts) and all(len(d) == 1 for d in documents.values())
    pairs = {tuple(p["hosts"]) for p in report["same_gpus"]}
    assert pairs == {("lambda/alpha", "lambda/beta"), ("lambda/alpha", "lambda/gamma"),
                     ("lambda/beta", "lambda/gamma")}
    uuids = {gpu["uuid"] for gpu in documents["lambda/alpha"][0][2]["gpus"]}
    assert {g for p in report["same_gpus"] for g in p["gpus"]} == {f"uuid:{u}" for u in uuids}

    person = workspace.fleet("probe", str(inventory), "--db", str(workspace.db),
                             "--fingerprint-only")
    assert person.returncode == 0, person.stderr
    out = " ".join(person.stdout.split())  # a terminal wraps the notes' lines
    assert "3 of 3 hosts stored" in out
    assert "lambda/alpha and lambda/beta answered with the same GPUs (uuid:" in out
    assert "same GPUs as lambda/alpha" in out
    assert "interrupted" not in out and "failed" not in out
