"""`fleet cluster check`: a real listener on the rendezvous host, a real connection from
every other node, through real sshd servers on loopback and `transport: local`.

The "hosts" are sshd servers on 127.0.0.1 and this machine; a node on a network of its own
is a `python:` that runs in an empty network namespace (`unshare -rn`), where nothing on
127.0.0.1 can be reached.
"""

from __future__ import annotations

import ast
import getpass
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.cluster.reach import (
    CONNECTOR,
    CONNECTOR_MANY,
    LISTENER,
    ReachCheck,
    ReachOptions,
    check_cluster,
    connector_script,
)
from fleet.inventory import load_inventory
from fleet.transport.local import LocalTransport
from tests.conftest import ROOT, fleet_in_process
from tests.probe.sshd import SshServer, free_port, generate_key, sshd_missing, start_servers

USER = getpass.getuser()
PYTHON = "/usr/bin/python3"
OPTIONS = ReachOptions(timeout_s=2.0, connect_timeout_s=5.0, connect_retries=0,
                       accept_new_host_keys=True)


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = sshd_missing()
    if missing:
        pytest.fail(f"the cluster check's tests need a real OpenSSH server: {missing}")
    return generate_key(tmp_path_factory.mktemp("keys") / "client")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, client_key: Path
            ) -> Iterator[list[SshServer]]:
    authorized = client_key.with_name("authorized_keys")
    authorized.write_text(client_key.with_name("client.pub").read_text())
    started = start_servers(tmp_path_factory.mktemp("sshd"), 3, authorized)
    # The third has stopped: a host whose sshd is down.
    started[2].stop()
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """fleet's known_hosts in the test's own directory, for the in-process checks."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


@pytest.fixture(scope="module")
def isolated_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `python:` that runs in a network namespace of its own: a node on another network."""
    done = subprocess.run(["unshare", "-rn", "true"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        pytest.fail(f"unshare -rn does not run here ({done.stderr.strip()}): the test of a "
                    "node on another network needs it (util-linux, user namespaces)")
    path = tmp_path_factory.mktemp("isolated") / "python3"
    path.write_text(f'#!/bin/sh\nexec unshare -rn {PYTHON} "$@"\n')
    path.chmod(0o755)
    return path


def ssh(server: SshServer, **settings: Any) -> dict[str, Any]:
    return {"address": "127.0.0.1", "port": server.port, **settings}


def write_inventory(root: Path, key: Path, hosts: dict[str, dict[str, Any]],
                    cluster: dict[str, Any]) -> Path:
    document = {
        "defaults": {"user": USER, "identity_file": str(key), "ssh_config": "none",
                     "python": PYTHON},
        "providers": {"lab": {"cluster": "pod", "hosts": hosts}},
        "clusters": {"pod": cluster},
    }
    path = root / "inventory.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def check(path: Path) -> ReachCheck:
    inventory = load_inventory(path)
    [cluster] = inventory.clusters
    return check_cluster(inventory, cluster, OPTIONS)


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port (a TIME_WAIT left behind does not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def rows(result: ReachCheck) -> dict[str, tuple[bool, bool | None]]:
    return {row.host: (row.rendezvous, row.reached) for row in result.nodes}


def test_every_node_reaches_the_rendezvous(home: Path, client_key: Path,
                                           servers: list[SshServer]) -> None:
    port = free_port()
    path = write_inventory(home, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]), "here": {"transport": "local"}},
        {"rendezvous_port": port})
    result = check(path)
    assert result.go, result.message
    assert (result.rendezvous.host, result.rendezvous.address, result.rendezvous.port) == (
        "h1", "127.0.0.1", port)
    assert rows(result) == {"h1": (True, True), "h2": (False, True), "here": (False, True)}
    for row in result.nodes[1:]:
        assert row.seconds is not None and 0 < row.seconds < OPTIONS.timeout_s
    # Then every pair's meeting point (issue 57): the three nodes share 127.0.0.1, so
    # h2's and here's pairs meet on ports of their own, and every node reached them.
    assert result.message == (
        f"go: 3 nodes reach the rendezvous h1 (127.0.0.1) port {port}\n  pairs meet at: "
        f"h2 127.0.0.1 port {port + 1}, here 127.0.0.1 port {port + 2}: every node "
        "reaches each")
    assert [(p.host, p.port) for p in result.points] == [("h2", port + 1), ("here", port + 2)]
    assert result.misses == ()
    assert result.note == ""
    assert port_free(port) and port_free(port + 1) and port_free(port + 2)


def test_the_port_taken_on_the_rendezvous_host_is_no_go(home: Path, client_key: Path,
                                                        servers: list[SshServer]) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        path = write_inventory(home, client_key, {
            "h1": ssh(servers[0]), "h2": ssh(servers[1])}, {"rendezvous_port": port})
        result = check(path)
    finally:
        taken.close()
    assert not result.go
    assert rows(result)["h1"] == (True, False)
    [failed] = result.decision.failed
    assert failed.host == "h1"
    assert "Address already in use" in failed.error
    assert f"port {port} is taken on h1: set clusters.pod.rendezvous_port" in result.message


def test_a_node_on_another_network_is_named_with_the_reason(
        home: Path, client_key: Path, servers: list[SshServer],
        isolated_python: Path) -> None:
    port = free_port()
    path = write_inventory(home, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]),
        "apart": {"transport": "local", "python": str(isolated_python)}},
        {"rendezvous_port": port})
    started = time.monotonic()
    result = check(path)
    took = time.monotonic() - started
    assert not result.go
    assert rows(result) == {"h1": (True, True), "h2": (False, True), "apart": (False, False)}
    [failed] = result.decision.failed
    assert (failed.host, failed.error) == ("apart", "Network is unreachable")
    assert ("  apart: Network is unreachable; apart has no route to 127.0.0.1: give "
            "clusters.pod.rendezvous_address") in result.message
    assert "1 of 3 nodes cannot reach" in result.message
    # The listener waited for a node that never came: fleet stopped it, long before its
    # own timeout (62 s here), and the port is free for the ranks.
    assert took < 50
    assert port_free(port)


def test_an_address_no_node_resolves(home: Path, client_key: Path,
                                     servers: list[SshServer]) -> None:
    port = free_port()
    path = write_inventory(home, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]), "here": {"transport": "local"}},
        {"rendezvous_host": "h1", "rendezvous_address": "rendezvous.invalid",
         "rendezvous_port": port})
    result = check(path)
    assert not result.go
    assert rows(result) == {"h1": (True, True), "h2": (False, False), "here": (False, False)}
    for failed in result.decision.failed:
        assert failed.error.startswith("cannot resolve rendezvous.invalid: ")
    assert "no node reaches it: the fault is likely at h1" in result.message
    assert "h2 cannot resolve rendezvous.invalid: set clusters.pod.rendezvous_address" in (
        result.message)
    assert result.note.startswith("rendezvous.invalid does not resolve there (")
    assert "note: rendezvous.invalid does not resolve there" in result.message
    assert port_free(port)


def test_a_node_whose_sshd_is_down_fails_with_the_ssh_reason(
        home: Path, client_key: Path, servers: list[SshServer]) -> None:
    port = free_port()
    path = write_inventory(home, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]), "down": ssh(servers[2])},
        {"rendezvous_port": port})
    result = check(path)
    assert not result.go
    assert rows(result) == {"h1": (True, True), "h2": (False, True), "down": (False, None)}
    assert result.decision.silent == ("down",)
    assert "  down: sent no report; check that fleet reaches it over SSH" in result.message
    assert (f"  down over SSH: lab/down: 127.0.0.1:{servers[2].port} refused the "
            "connection") in result.message
    assert port_free(port)


def test_the_named_rendezvous_host_unreachable_over_ssh(
        home: Path, client_key: Path, servers: list[SshServer]) -> None:
    port = free_port()
    path = write_inventory(home, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]), "down": ssh(servers[2])},
        {"rendezvous_host": "down", "rendezvous_port": port})
    result = check(path)
    assert not result.go
    assert result.rendezvous.host == "down"
    assert rows(result) == {"h1": (False, False), "h2": (False, False), "down": (True, None)}
    assert "no node reaches it: the fault is likely at down" in result.message
    assert "  h1: Connection refused; nothing accepted on 127.0.0.1:" in result.message
    assert "  down over SSH: lab/down: " in result.message
    # Unnamed, the rendezvous is the first host fleet reaches, as the probe would choose.
    path = write_inventory(home, client_key, {
        "down": ssh(servers[2]), "h1": ssh(servers[0]), "h2": ssh(servers[1])},
        {"rendezvous_port": port})
    result = check(path)
    assert result.rendezvous.host == "h1"
    assert rows(result) == {"down": (False, None), "h1": (True, True), "h2": (False, True)}
    assert not result.go and result.decision.silent == ("down",)


def test_the_scripts_take_inventory_values_as_arguments(tmp_path: Path) -> None:
    # The inventory refuses such an address; the scripts would not run it anyway.
    planted = tmp_path / "planted"
    hostile = f"$(touch {planted});`touch {planted}`'\"x"
    transport = LocalTransport("lab/here", PYTHON)
    try:
        process = transport.run(connector_script(PYTHON, hostile, 1024, 0.5))
        out = list(process.lines(time.monotonic() + 30, threading.Event()))
    finally:
        transport.close()
    assert not planted.exists()
    assert out and out[-1].startswith('fleet-reach {"reached": false, "error": "cannot resolve')
    # The hosts' python may be the agent's oldest.
    for code in (LISTENER, CONNECTOR, CONNECTOR_MANY):
        ast.parse(code, feature_version=(3, 8))


# --- The command, as a user runs it ------------------------------------------------------

def fleet(home: Path, *args: str, timeout: float = 120, process: bool = False
          ) -> subprocess.CompletedProcess[str]:
    """`fleet ARGS` run from `home` within `timeout`: in this process (tests/conftest.py)
    unless `process`, where the command's own process is what is tested."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SSH_AUTH_SOCK", "FLEET_DB", "XDG_CONFIG_HOME", "XDG_DATA_HOME")}
    env.update(HOME=str(home / "home"), COLUMNS="80", PYTHONPATH=str(ROOT))
    if not process:
        code, out, err = fleet_in_process(args, env, home, timeout)
        return subprocess.CompletedProcess(["fleet", *args], code, out, err)
    return subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=home)


def assert_80_columns(text: str) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert not too_wide, too_wide


def test_the_command_go_no_go_and_bad_input(tmp_path: Path, client_key: Path,
                                            servers: list[SshServer],
                                            isolated_python: Path) -> None:
    port = free_port()
    path = write_inventory(tmp_path, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]), "here": {"transport": "local"}},
        {"rendezvous_port": port})
    done = fleet(tmp_path, "cluster", "check", str(path), "--cluster", "pod",
                 "--accept-new-host-keys", "--connect-retries", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    lines = done.stdout.splitlines()
    heading = " ".join(" ".join(lines[:[x[0] for x in lines].index("┏")]).split())
    assert heading == (f"cluster pod: rendezvous h1 (127.0.0.1) port {port} (the first "
                       "healthy host in file order)")
    table = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in lines if line.startswith("│")}
    assert table["h1"] == ["rendezvous", "listening", "-"]
    assert table["h2"][:2] == ["node", "yes"] and table["h2"][2].endswith(" ms")
    assert table["here"][:2] == ["node", "yes"]
    flat = " ".join(done.stdout.split())
    assert (f"go: 3 nodes reach the rendezvous h1 (127.0.0.1) port {port} pairs meet at: h2 "
            f"127.0.0.1 port {port + 1}, here 127.0.0.1 port {port + 2}: every node "
            "reaches each") in flat

    path = write_inventory(tmp_path, client_key, {
        "h1": ssh(servers[0]), "h2": ssh(servers[1]),
        "apart": {"transport": "local", "python": str(isolated_python)},
        "down": ssh(servers[2])}, {"rendezvous_port": port})
    done = fleet(tmp_path, "cluster", "check", str(path), "--timeout", "1",
                 "--connect-retries", "0")
    assert done.returncode == 3, done.stdout + done.stderr
    assert_80_columns(done.stdout)
    text = done.stdout
    flat = " ".join(text.split())
    assert "no-go, nothing was started: 2 of 4 nodes cannot reach the rendezvous h1" in flat
    # Reasons are lines under the table, each starting with the node it is about.
    starts = [m.group(1) for m in re.finditer(r"^  (\w[^:\n]*): ", text, re.MULTILINE)]
    assert starts == ["apart", "down", "down over SSH"]
    assert ("apart: Network is unreachable; apart has no route to 127.0.0.1: give "
            "clusters.pod.rendezvous_address on the network the nodes share") in flat
    assert "down: sent no report; check that fleet reaches it over SSH" in flat
    assert (f"down over SSH: lab/down: 127.0.0.1:{servers[2].port} refused the "
            "connection: is sshd running there") in flat
    assert port_free(port)

    done = fleet(tmp_path, "cluster", "check", str(path), "--cluster", "pdo")
    assert done.returncode == 2
    assert f"{path}: no cluster pdo; it has pod" in " ".join(done.stderr.split())
    no_cluster = tmp_path / "none.yaml"
    no_cluster.write_text("providers:\n  lab:\n    transport: local\n    hosts:\n      a: {}\n")
    done = fleet(tmp_path, "cluster", "check", str(no_cluster))
    assert done.returncode == 2
    assert "no host has `cluster: NAME`" in " ".join(done.stderr.split())

    done = fleet(tmp_path, "cluster", "check", "--help")
    assert done.returncode == 0
    assert "fleet cluster check inventory.yaml --cluster a100-pod" in done.stdout
    assert_80_columns(done.stdout)


def test_ctrl_c_stops_the_listener(tmp_path: Path, client_key: Path,
                                   servers: list[SshServer]) -> None:
    # A node whose python starts slowly keeps the check waiting with the listener up.
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 60\nexec {PYTHON} "$@"\n')
    slow.chmod(0o755)
    port = free_port()
    path = write_inventory(tmp_path, client_key, {
        "h1": ssh(servers[0]), "slow": {"transport": "local", "python": str(slow)}},
        {"rendezvous_port": port})
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK",)}
    env.update(HOME=str(tmp_path / "home"), COLUMNS="80", PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "cluster", "check", str(path),
         "--accept-new-host-keys"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while port_free(port):
            assert time.monotonic() < deadline, "the listener never started"
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, out + err
    assert "Interrupted: the rendezvous listener was stopped" in err
    assert port_free(port)
