"""`fleet probe` as a user installs it (the wheel, in a new virtualenv), over a real sshd
on loopback, with a renter's setting in the inventory's `env:` and a short figure: the
agent in the zipapp the installed fleet packs measures the short figure again without the
setting, and the report puts it to the renter (issue 54).

The CPU path stands in for the GPU's: the host replays a real H100's NVML recording, its
job suite runs on the CPU (`--cpu`), and agent/job/standin.py gives that path the floor
and the setting's cost a GPU would have (both figures are real timings; only the floor
and the cost are the stand-in's). The setting is CUDA_LAUNCH_BLOCKING=1, which on a lent
H100 cost a matmul 4.6-8.6% (bench/RESULTS.md).
"""

from __future__ import annotations

import getpass
import json
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import GPU_CASES
from tests.install.conftest import Installed
from tests.probe.sshd import SshServer, generate_key, sshd_missing, start_servers

# One wheel and one venv for both modules (conftest.py's `installed`): on one xdist
# worker, or each worker would build its own.
pytestmark = pytest.mark.xdist_group("installed")

SETTING = "CUDA_LAUNCH_BLOCKING"
RECORDING = GPU_CASES / "h100-sxm5-passthrough" / "nvml-recording.json"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshServer, Path]]:
    missing = sshd_missing()
    if missing:
        pytest.fail(f"the installed probe needs a real OpenSSH server: {missing}")
    root = tmp_path_factory.mktemp("installed-sshd")
    key = generate_key(root / "client")
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client.pub").read_text())
    [started] = start_servers(root / "sshd", 1, authorized)
    yield started, key
    started.stop()


def test_the_installed_fleet_measures_again_and_puts_the_figure_to_the_renter(
        installed: Installed, server: tuple[SshServer, Path], tmp_path: Path) -> None:
    sshd, key = server
    cache = tmp_path / "remote-cache"
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"providers": {"lent": {"hosts": {"h100": {
        "address": "127.0.0.1", "port": sshd.port, "user": getpass.getuser(),
        "identity_file": str(key), "ssh_config": "none", "cache_dir": str(cache),
        # The host's own Python, torch and all, as `runtime: host` runs it.
        "python": sys.executable, "runtime": {"use": "host"},
        "env": {SETTING: "1", "FLEET_CPU_STANDIN": SETTING,
                "FLEET_NVML_REPLAY": str(RECORDING)}}}}}}))
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "COLUMNS": "80"}
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    probed = installed.run("probe", str(inventory), "--db", db, "--accept-new-host-keys",
                           "--cpu", "--suite", "job", "--report", str(tmp_path / "r.html"),
                           cwd=tmp_path, env=env, timeout=600)
    assert probed.returncode == 0, probed.stdout + probed.stderr
    said = " ".join(probed.stdout.split())
    assert "findings: job_shortfall 1 (yours to fix 1)" in said, said
    assert "not measured" not in said and "did not run" not in said

    # The agent that ran is the zipapp the installed fleet packed, and it carried its data.
    [payload] = cache.glob("agent-*.pyz")
    with zipfile.ZipFile(payload) as archive:
        assert {"agent/node/floors.json", "agent/job/standin.py"} <= set(archive.namelist())

    # The document: nothing failed, and the short training step was measured again
    # without the renter's setting, in the child, and was no longer short.
    listed = installed.run("report", "--db", db, "--format", "json", "-o", "-",
                           "--fail-on", "job_shortfall", cwd=tmp_path, env=env)
    assert listed.returncode == 1, listed.stderr  # --fail-on counts the renter's too
    report = json.loads(listed.stdout)
    assert report["not_measured"]["rows"] == []
    [found] = [f for f in report["renter"] if f["kind"] == "job_shortfall"]
    assert found["cause"].startswith(f"{SETTING}=1 (inventory): ")
    assert "without it, measured again in the same run" in found["cause"]
    assert not [f for f in report["dispute"] + report["unsettled"]
                if f["kind"] == "job_shortfall"]
    jobs = installed.run("results", "--jobs", "--json", "--db", db, cwd=tmp_path, env=env)
    [train] = [j for j in json.loads(jobs.stdout) if j["workload"] == "train"]
    assert train["rerun_without"] == SETTING
    assert train["rerun_tokens_per_s"] > train["rerun_floor"] > train["tokens_per_s"]
    page = (tmp_path / "r.html").read_text()
    assert "Yours to fix" in page and f"{SETTING}=1 (inventory)" in page
