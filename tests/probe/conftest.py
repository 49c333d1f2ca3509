"""Fixtures for the probe: real sshd servers on loopback, a client key they accept and one
they do not, misbehaving "agents", and a workspace that runs the real `fleet` command with
its own HOME (so known_hosts, ssh_config and the store are the test's own).

Each of the four good hosts is its own sshd and replays a different NVML recording; fault
hosts reuse those servers with another key, port or `python:`.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, select

from fleet.store.models import Document, Host, HostError, Provider
from tests.conftest import GPU_CASES, ROOT, fleet_in_process
from tests.probe.sshd import SshServer, generate_key, sshd_missing, start_servers

# The four good hosts: name -> (recording, what the listing promised). The A100 PCIe host
# is listed as SXM4, as in seed 001's story, so the summary must say MISMATCH.
GOOD_HOSTS: dict[str, tuple[str, dict[str, Any]]] = {
    "lambda/a100-sxm4": ("provider-b-a100-sxm4",
                         {"variant": "A100 SXM4 80GB", "gpu_count": 1}),
    "lambda/a100-pcie": ("provider-a-a100-pcie",
                         {"variant": "A100 SXM4 80GB", "gpu_count": 1}),
    "coreweave/h100": ("h100-sxm5-passthrough",
                       {"variant": "H100 SXM5 80GB", "min_power_limit_w": 700}),
    "nebius/h200x2": ("h200-sxm-x2-passthrough", {"family": "H200", "gpu_count": 2}),
}
PROBE_TIMEOUT_S = 180
USER = getpass.getuser()  # sshd runs as this user, so only this user can log in

# Stand-ins for a broken agent: the inventory's `python:` points at them, so fleet runs
# `SCRIPT /path/agent-HASH.pyz fingerprint` exactly as it would run python3.
FAULT_SCRIPTS = {
    "killed": """#!/bin/sh
echo '{"event": "progress", "stage": "host", "message": "reading host facts"}'
kill -KILL $$
""",
    "hang": """#!/bin/sh
echo '{"event": "progress", "stage": "host", "message": "reading host facts"}'
echo $$ > "$FLEET_TEST_PIDFILE"
exec sleep 600
""",
    "garbage": """#!/bin/sh
echo 'Segmentation fault (core dumped) <html><body>not an agent</body></html>'
""",
}


@dataclass(frozen=True)
class Keys:
    client: Path  # in authorized_keys
    stranger: Path  # not
    authorized: Path


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    missing = sshd_missing()
    if missing:
        pytest.fail(f"the probe tests need a real OpenSSH server: {missing}")
    root = tmp_path_factory.mktemp("keys")
    client = generate_key(root / "client")
    stranger = generate_key(root / "stranger")
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client.pub").read_text())
    return Keys(client, stranger, authorized)


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Iterator[list[SshServer]]:
    started = start_servers(tmp_path_factory.mktemp("sshd"), len(GOOD_HOSTS), keys.authorized)
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def fault_scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faults")
    paths = {}
    for name, text in FAULT_SCRIPTS.items():
        path = root / f"{name}.sh"
        path.write_text(text)
        path.chmod(0o755)
        paths[name] = path
    return paths


def recording(case: str) -> str:
    return str(GPU_CASES / case / "nvml-recording.json")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    def host(self, key: str) -> dict[str, Any]:
        for host in self.report["hosts"]:
            if f"{host['provider']}/{host['host']}" == key:
                return host
        raise KeyError(key)


@dataclass
class Workspace:
    """One test's HOME, store, remote cache and inventory, and the `fleet` command."""

    root: Path
    keys: Keys
    servers: list[SshServer]
    env_extra: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def db(self) -> Path:
        return self.root / "fleet.db"

    @property
    def cache(self) -> Path:
        # The sshd's user is this process's user, whose real home must stay untouched.
        return self.root / "remote-cache"

    @property
    def known_hosts(self) -> Path:
        return self.home / ".config" / "fleet" / "known_hosts"

    def ssh_host(self, server: SshServer, case: str | None = None, **settings: Any
                 ) -> dict[str, Any]:
        spec: dict[str, Any] = {"address": "127.0.0.1", "port": server.port}
        if case is not None:
            spec["env"] = {"FLEET_NVML_REPLAY": recording(case)}
        spec.update(settings)
        return spec

    def good_hosts(self) -> dict[str, dict[str, Any]]:
        hosts = {}
        for (key, (case, expect)), server in zip(GOOD_HOSTS.items(), self.servers,
                                                 strict=True):
            # Each "host" keeps its own agent cache, as separate machines would.
            hosts[key] = self.ssh_host(server, case, expect=expect,
                                       cache_dir=str(self.cache / key.replace("/", "-")))
        return hosts

    def inventory(self, hosts: dict[str, dict[str, Any]], name: str = "inventory.yaml"
                  ) -> Path:
        providers: dict[str, Any] = {}
        for key, spec in hosts.items():
            provider, host = key.split("/")
            providers.setdefault(provider, {"hosts": {}})["hosts"][host] = spec
        document = {
            "defaults": {"user": USER, "identity_file": str(self.keys.client),
                         "cache_dir": str(self.cache), "ssh_config": "none",
                         "python": "/usr/bin/python3", "currency": "USD"},
            "providers": providers,
        }
        path = self.root / name
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("SSH_AUTH_SOCK", "FLEET_DB", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
                            "FLEET_NVML_REPLAY")}
        env.update(HOME=str(self.home), COLUMNS="200", PYTHONPATH=str(ROOT))
        env.update(self.env_extra)
        return env

    def fleet(self, *args: str, timeout: float = PROBE_TIMEOUT_S, process: bool = False
              ) -> Result:
        """`fleet ARGS` with the workspace's environment and directory, within `timeout`:
        in this process (`fleet_in_process`) unless `process`, where the command's own
        process is what is tested (its exit, its signals, what it leaves behind). A process
        of its own costs 4-5 s of CPU importing fleet on a 2-core machine."""
        if not process:
            self.home.mkdir(parents=True, exist_ok=True)
            return Result(*fleet_in_process(args, self.env(), self.root, timeout))
        self.home.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "fleet.cli", *args], env=self.env(),
                              capture_output=True, text=True, timeout=timeout, cwd=self.root)
        return Result(done.returncode, done.stdout, done.stderr)

    def fleet_in_process(self, *args: str) -> Result:
        """`fleet ARGS` in this process (tests/conftest.py `fleet_in_process`), with the
        workspace's environment and directory."""
        self.home.mkdir(parents=True, exist_ok=True)
        return Result(*fleet_in_process(args, self.env(), self.root))

    def probe(self, inventory: Path, *args: str, timeout: float = PROBE_TIMEOUT_S,
              process: bool = False) -> Result:
        return self.fleet("probe", str(inventory), "--db", str(self.db), "--json", *args,
                          timeout=timeout, process=process)

    def documents(self) -> dict[str, list[Any]]:
        """Stored documents by provider/host."""
        found: dict[str, list[Any]] = {}
        if not self.db.exists():
            return found
        engine = create_engine(f"sqlite:///{self.db}")
        with engine.connect() as conn:
            rows = conn.execute(
                select(Provider.name, Host.name, Document.hostname, Document.gpu_count,
                       Document.body)
                .join(Host, Document.host_id == Host.id)
                .join(Provider, Host.provider_id == Provider.id)).all()
        engine.dispose()
        for provider, host, *rest in rows:
            found.setdefault(f"{provider}/{host}", []).append(rest)
        return found

    def host_errors(self) -> dict[str, list[tuple[str, str]]]:
        """Recorded failures by provider/host: (stage, message)."""
        found: dict[str, list[tuple[str, str]]] = {}
        if not self.db.exists():
            return found
        engine = create_engine(f"sqlite:///{self.db}")
        with engine.connect() as conn:
            rows = conn.execute(
                select(Provider.name, Host.name, HostError.stage, HostError.message)
                .join(Host, HostError.host_id == Host.id)
                .join(Provider, Host.provider_id == Provider.id)).all()
        engine.dispose()
        for provider, host, stage, message in rows:
            found.setdefault(f"{provider}/{host}", []).append((stage, message))
        return found


@pytest.fixture
def workspace(tmp_path: Path, keys: Keys, servers: list[SshServer]) -> Workspace:
    return Workspace(tmp_path, keys, servers)


def variant_labels(body: dict[str, Any]) -> list[str | None]:
    return [gpu["variant"]["label"] for gpu in body["gpus"]]
