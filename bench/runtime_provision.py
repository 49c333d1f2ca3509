"""What fleet's pinned runtime costs: first use, reuse, and a night with nothing to install.

Starts a real sshd on 127.0.0.1 (as tests/probe does) whose "host" runs /usr/bin/python3
(no torch), and a wheelhouse holding torch 2.13.0's CPU build (the host has no GPU, so
fleet picks that build and the harness runs with --cpu):

- first use: `fleet probe --cpu` with an empty host cache: upload the wheelhouse (and
  fleet's uv binary, where uv installs), build the environment, then the benchmark; the
  runtime's seconds and bytes from the JSON report, the installer from the marker;
- reuse: the same probe again (the runtime step is the `inspect` round trip alone);
- nightly cost: `prepare_runtime()` against the host over SSH with the environment there,
  --repeat times: what a night adds per host to the probe that ran before this runtime
  existed (which started the agent directly);

each with fleet's default installer (uv) and with pip (FLEET_RUNTIME_INSTALLER=pip), on a
fresh host cache each; then the installers alone: a fresh venv plus the same wheelhouse
installed by each, with no index and no SSH.

    python bench/runtime_provision.py --wheelhouse test-artifacts/wheelhouse-torch-2.13.0-cpu-py3.11
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from fleet.inventory import load_inventory  # noqa: E402
from fleet.payload import build_payload  # noqa: E402
from fleet.runtime.installer import FORCE_ENV, local_uv  # noqa: E402
from fleet.runtime.provision import prepare_runtime  # noqa: E402
from fleet.transport import open_transport  # noqa: E402
from fleet.transport.hostkeys import KnownHosts  # noqa: E402
from fleet.transport.ssh import SshOptions, plan_ssh  # noqa: E402
from tests.probe.sshd import generate_key, start_servers  # noqa: E402

HOST_PYTHON = "/usr/bin/python3"
PROBE = ("--cpu", "--size", "128", "--quick", "--measure-s", "0.3")


def _probe(root: Path, inventory: Path, installer: str, *args: str
           ) -> tuple[float, dict[str, Any]]:
    env = {"HOME": str(root / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    if installer == "pip":
        env[FORCE_ENV] = "pip"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fleet.cli", "probe", str(inventory), "--db",
                           str(root / "fleet.db"), "--json", *args], capture_output=True,
                          text=True, env=env, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"probe failed ({done.returncode}): {done.stderr[-2000:]}")
    host: dict[str, Any] = json.loads(done.stdout)["hosts"][0]
    return wall, host


def _installer(root: Path, wheelhouse: Path, tool: str) -> float:
    venv = root / f"venv-{tool}"
    started = time.monotonic()
    if tool == "pip":
        subprocess.run([HOST_PYTHON, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--no-cache-dir", "--no-index", "--find-links", str(wheelhouse),
                        "torch==2.13.0"], check=True, env={"PIP_CONFIG_FILE": "/dev/null",
                                                           "PATH": "/usr/bin:/bin"})
    else:
        uv = _uv_path()
        subprocess.run([uv, "venv", "-q", "--python", HOST_PYTHON, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "-q", "--no-cache", "--no-index", "--find-links",
                        str(wheelhouse), "--python", str(venv / "bin" / "python"),
                        "torch==2.13.0"], check=True, env={"UV_NO_CONFIG": "1",
                                                           "PATH": "/usr/bin:/bin"})
    seconds = time.monotonic() - started
    shutil.rmtree(venv)
    return seconds


def _uv_path() -> str:
    found = local_uv()
    if isinstance(found, str):
        raise SystemExit(found)
    return str(found.path)


def _runtime_of(cache: Path) -> dict[str, Any]:
    """The environment's marker: which installer built it, in how many seconds."""
    [marker] = (cache / "runtime" / "envs").glob("*/.fleet-runtime.json")
    found: dict[str, Any] = json.loads(marker.read_text())
    return {"installer": found["installer"], "host_install_s": round(found["seconds"], 2)}


def _measure(root: Path, port: int, key: Path, wheelhouse: Path, installer: str,
             repeat: int) -> dict[str, Any]:
    """First use, reuse and the nightly step on a fresh host cache, with `installer`."""
    cache = root / f"host-cache-{installer}"
    inventory = root / f"inventory-{installer}.yaml"
    inventory.write_text(yaml.safe_dump({
        "defaults": {"user": getpass.getuser(), "identity_file": str(key),
                     "ssh_config": "none", "python": HOST_PYTHON, "cache_dir": str(cache)},
        "providers": {"bench": {"hosts": {"box": {
            "address": "127.0.0.1", "port": port,
            "runtime": {"wheelhouse": str(wheelhouse)}}}}}}))
    results: dict[str, Any] = {}
    wall, host = _probe(root, inventory, installer, *PROBE, "--accept-new-host-keys")
    results["first_use"] = {"probe_wall_s": round(wall, 2), **host["runtime"],
                            **_runtime_of(cache)}
    wall, host = _probe(root, inventory, installer, *PROBE)
    results["reuse"] = {"probe_wall_s": round(wall, 2), **host["runtime"]}

    # The probes' home, with the host key they recorded.
    os.environ["HOME"] = str(root / "home")
    [target] = load_inventory(inventory).targets
    payload = build_payload()
    ssh = SshOptions(KnownHosts(accept_new=False))
    seconds = []
    for _ in range(repeat):
        transport = open_transport(target, plan_ssh(target), ssh)
        transport.connect()
        started = time.monotonic()
        ready = prepare_runtime(transport, target, payload, True, threading.Event(),
                                lambda message: None)
        seconds.append(time.monotonic() - started)
        transport.close()
        assert not ready.installed
    results["nightly_runtime_step_s"] = {
        "median": round(statistics.median(seconds), 3), "max": round(max(seconds), 3),
        "runs": len(seconds)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--installers", default="uv,pip",
                        help="which installers' first use, reuse and nights to measure")
    parser.add_argument("--no-installers-alone", action="store_true",
                        help="skip the installers alone, without SSH")
    args = parser.parse_args()
    wheelhouse = args.wheelhouse.resolve()
    results: dict[str, Any] = {"uv_binary_bytes": os.path.getsize(_uv_path())}
    with tempfile.TemporaryDirectory(prefix="fleet-runtime-bench-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        key = generate_key(root / "client")
        (root / "authorized_keys").write_text((root / "client.pub").read_text())
        [server] = start_servers(root / "sshd", 1, root / "authorized_keys")
        try:
            for installer in args.installers.split(","):
                results[installer] = _measure(root, server.port, key, wheelhouse, installer,
                                              args.repeat)
        finally:
            server.stop()
        if not args.no_installers_alone:
            results["install_from_wheelhouse_s"] = {
                tool: round(_installer(root, wheelhouse, tool), 2) for tool in ("pip", "uv")}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
