"""`transport: local`, the README's first command, a CPU smoke benchmark, bad input, and
agents that send hostile documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from fleet.store.models import BenchmarkResult
from fleet.transport.local import machine_environment
from tests.conftest import ROOT
from tests.probe.conftest import Workspace, recording, variant_labels


def test_readme_first_command_probes_this_machine(workspace: Workspace) -> None:
    # Exactly the README's command, from the checkout, with the default store.
    done = subprocess.run([sys.executable, "-m", "fleet.cli", "probe", "inventory/local.yaml"],
                          env=workspace.env(), capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    default_db = workspace.home / ".local" / "share" / "fleet" / "fleet.db"
    assert default_db.is_file()
    assert f"1 of 1 host stored in sqlite:///{default_db}" in done.stdout
    assert "this-machine/localhost" in done.stdout


def test_checking_the_readme_inventory_counts_one_host(workspace: Workspace) -> None:
    result = workspace.fleet_in_process("inventory", "check",
                                        str(ROOT / "inventory" / "local.yaml"))
    assert result.returncode == 0, result.stderr
    assert "valid, 1 host from 1 provider (nothing was contacted)" in result.stdout


# fleet's venv as the README installs it, without torch.
NO_TORCH = "import sys\nsys.modules['torch'] = None\n"


@pytest.mark.parametrize("fleet_has_torch", [False, True])
def test_the_agent_runs_with_this_machines_python3_unless_fleets_has_torch(
        workspace: Workspace, fleet_has_torch: bool) -> None:
    # fleet runs from its activated venv; `machine/python3`, behind it on PATH, stands for
    # the python3 a login on this machine finds (the one with torch on a GPU box).
    if fleet_has_torch:
        pytest.importorskip("torch")
    machine = workspace.root / "machine"
    machine.mkdir()
    (machine / "python3").symlink_to(os.path.realpath(sys._base_executable))
    own_bin = Path(sys.prefix) / "bin"
    assert (own_bin / "python3").exists(), "the venv's python3 must be there to be skipped"
    workspace.env_extra.update(VIRTUAL_ENV=sys.prefix,
                               PATH=os.pathsep.join([str(own_bin), str(machine), "/usr/bin",
                                                     "/bin"]))
    if not fleet_has_torch:
        hide = workspace.root / "no-torch"
        hide.mkdir()
        (hide / "sitecustomize.py").write_text(NO_TORCH)
        workspace.env_extra["PYTHONPATH"] = os.pathsep.join([str(hide), str(ROOT)])
    inventory = workspace.root / "local.yaml"
    inventory.write_text("providers:\n  this-machine:\n    transport: local\n    hosts:\n"
                         f"      localhost: {{cache_dir: {workspace.cache}}}\n")
    # Processes of their own: which Python they pick follows from their PATH and venv.
    result = workspace.probe(inventory, "--fingerprint-only", process=True)
    assert result.returncode == 0, result.stderr
    [(_hostname, _gpus, body)] = workspace.documents()["this-machine/localhost"]
    probed_with = body["host"]["python_executable"]
    # `fleet fingerprint` and `fleet bench` pick the same way.
    result = workspace.fleet("fingerprint", "--document", "--no-torch", process=True)
    assert result.returncode == 0, result.stderr
    fingerprinted_with = json.loads(result.stdout)["host"]["python_executable"]
    if fleet_has_torch:
        assert (probed_with, fingerprinted_with) == (str(own_bin / "python3"), sys.executable)
    else:
        assert probed_with == fingerprinted_with == str(machine / "python3")


def _python3_in(directory: Path) -> str:
    directory.mkdir()
    (directory / "python3").write_text("#!/bin/sh\n")
    (directory / "python3").chmod(0o755)
    return str(directory)


def test_machine_environment_leaves_only_fleets_own_venv_without_torch(tmp_path: Path) -> None:
    fleet_venv = tmp_path / "fleet"
    fleet_venv.mkdir()
    _python3_in(fleet_venv / "bin")
    machine = _python3_in(tmp_path / "machine")
    empty = tmp_path / "empty"
    empty.mkdir()
    activated = {"VIRTUAL_ENV": str(fleet_venv), "VIRTUAL_ENV_PROMPT": "fleet",
                 "PATH": os.pathsep.join([str(fleet_venv / "bin"), "", machine]),
                 "HOME": "/home/u"}
    assert machine_environment(activated, str(fleet_venv)) == {
        "PATH": os.pathsep.join(["", machine]), "HOME": "/home/u"}
    # the same venv, named through a link
    (tmp_path / "link").symlink_to(fleet_venv)
    assert machine_environment(activated, str(tmp_path / "link")) == {
        "PATH": os.pathsep.join(["", machine]), "HOME": "/home/u"}
    # it stays where it has torch, where no other python3 is found, where it is not
    # fleet's own, and where none is activated
    assert machine_environment(activated, str(fleet_venv), keep_own=True) == activated
    alone = {**activated, "PATH": os.pathsep.join([str(fleet_venv / "bin"), str(empty)])}
    assert machine_environment(alone, str(fleet_venv)) == alone
    assert machine_environment(activated, str(tmp_path / "other")) == activated
    inactive = {"PATH": activated["PATH"]}
    assert machine_environment(inactive, str(fleet_venv)) == inactive


def test_local_transport_replaying_a_recording(workspace: Workspace) -> None:
    inventory = workspace.inventory({"here/box": {
        "transport": "local", "python": sys.executable, "cache_dir": str(workspace.cache),
        "env": {"FLEET_NVML_REPLAY": recording("h100-sxm5-x8-baremetal")},
        "expect": {"variant": "H100 SXM5 80GB", "gpu_count": 8, "min_power_limit_w": 700}}})
    result = workspace.probe(inventory, "--fingerprint-only")
    assert result.returncode == 0, result.stderr
    host = result.host("here/box")
    # The recording's GPU 5 is capped at 500 W: the provider's cap, caught by `expect`.
    assert host["expectation"] == {
        "matches": False, "problems": ["power limit 500 W on GPU 5, below the listed 700 W"],
        "unchecked": []}
    assert host["variants"] == "8 x H100-SXM5-80GB"
    [(_hostname, gpu_count, body)] = workspace.documents()["here/box"]
    assert gpu_count == 8 and variant_labels(body) == ["H100-SXM5-80GB"] * 8
    assert [p.name for p in workspace.cache.iterdir()] == [result.report["payload"]["file"]]


def test_cpu_smoke_benchmark_is_stored(workspace: Workspace) -> None:
    pytest.importorskip("torch", reason="the CPU smoke benchmark runs the harness on torch")
    # fleet's own Python and its torch: the pinned runtime has tests of its own
    # (test_runtime.py).
    inventory = workspace.inventory({"here/cpu": {
        "transport": "local", "python": sys.executable, "cache_dir": str(workspace.cache),
        "runtime": {"use": "host"}}})
    # Soaked, the default, with the shortest cap fleet takes: the 30-s span never fits in
    # it, so the result is measured at the cap and says so.
    result = workspace.probe(inventory, "--cpu", "--size", "128", "--measure-s", "0.3",
                             "--soak-cap-s", "10", timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.host("here/cpu")["tflops"] > 0
    engine = create_engine(f"sqlite:///{workspace.db}")
    with engine.connect() as conn:
        [row] = conn.execute(select(BenchmarkResult.thermal, BenchmarkResult.not_soaked,
                                    BenchmarkResult.soak_s, BenchmarkResult.soak_curve)).all()
    engine.dispose()
    assert row.thermal == "soaked" and row.not_soaked and 10.0 <= row.soak_s < 14.0
    assert len(row.soak_curve) >= 8 * 5 * 4  # four windows or more of five floats


@pytest.mark.parametrize(("text", "where"), [
    ("providers:\n  a:\n    hosts:\n      h:\n        port: seventy\n", ":5:15: "),
    ("providers:\n  a:\n    hosts:\n      h: {password: hunter2}\n", ":4:11: "),
    ("providers: [oops\n", ":2:1: "),
])
def test_bad_inventory_exits_2_naming_the_line(text: str, where: str,
                                               workspace: Workspace) -> None:
    inventory = workspace.root / "bad.yaml"
    inventory.write_text(text)
    result = workspace.probe(inventory)
    assert result.returncode == 2
    assert f"bad.yaml{where}" in result.stderr
    assert "hunter2" not in result.stderr
    assert not workspace.db.exists(), "nothing may be stored for a bad inventory"


# --- Hostile agents ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_document() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "agent", "fingerprint", "--no-torch"],
                          capture_output=True, text=True, check=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                               "FLEET_NVML_REPLAY": recording("provider-b-a100-sxm4")})
    document: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])["document"]
    return document


def _set(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        here: Any = document
        for step in path[:-1]:
            here = here[step]
        here[path[-1]] = value
    return mutate


HOSTILE = {
    # attack: (mutation, stage it is caught at, what the reason names)
    "oversize string": (_set("host", "os", value="A" * 100_000), "agent output", "host.os"),
    "NaN": (_set("gpus", 0, "power_limit_w", value=float("nan")), "agent output",
            "not a finite number"),
    "extra field": (_set("injected", value="'); DROP TABLE document; --"), "agent output",
                    "injected"),
    "NUL character": (_set("host", "kernel", value="6.1\x00evil"), "validation",
                      "host.kernel: holds a NUL character"),
    "second document": (None, "agent output", "second document"),
}


def _hostile_agent(workspace: Workspace, document: dict[str, Any], name: str,
                   extra_lines: int = 0) -> Path:
    lines = [json.dumps({"event": "progress", "stage": "host", "message": "reading"}),
             *[json.dumps({"event": "document", "document": document})] * (1 + extra_lines)]
    output = workspace.root / f"{name}.jsonl"
    output.write_text("\n".join(lines) + "\n")
    script = workspace.root / f"{name}.sh"
    script.write_text(f"#!/bin/sh\ncat {output}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("attack", list(HOSTILE))
def test_hostile_document_is_rejected_whole(attack: str, workspace: Workspace,
                                            real_document: dict[str, Any]) -> None:
    mutate, stage, names = HOSTILE[attack]
    document = json.loads(json.dumps(real_document))
    if mutate is not None:
        mutate(document)
    script = _hostile_agent(workspace, document, "hostile",
                            extra_lines=1 if attack == "second document" else 0)
    # One good host beside it (the whole set in test_probe_ssh.py): what it sent is kept.
    good, spec = next(iter(workspace.good_hosts().items()))
    hosts = {good: spec, "evil/host": workspace.ssh_host(workspace.servers[0],
                                                         python=str(script))}
    # In this process: what is tested is the validation, not the command's process.
    result = workspace.fleet_in_process("probe", str(workspace.inventory(hosts)), "--db",
                                        str(workspace.db), "--json", "--fingerprint-only",
                                        "--accept-new-host-keys")
    assert result.returncode == 3, result.stderr
    host = result.host("evil/host")
    assert (host["stage"], host["ok"]) == (stage, False)
    assert names in host["reason"]
    assert len(host["reason"]) < 2000, "a hostile value must not be echoed whole"
    assert "evil/host" not in workspace.documents()
    assert set(workspace.documents()) == {good}


def test_markup_escapes_and_script_from_a_host_are_stored_and_shown_as_text(
        workspace: Workspace, real_document: dict[str, Any]) -> None:
    document = json.loads(json.dumps(real_document))
    document["host"]["hostname"] = "<script>alert(1)</script>"
    document["gpus"][0]["variant"]["label"] = "\x1b]0;pwned\x07[bold green]H100 SXM5 80GB[/]"
    script = _hostile_agent(workspace, document, "sly")
    hosts = {"sly/host": workspace.ssh_host(workspace.servers[0], python=str(script))}
    result = workspace.fleet("probe", str(workspace.inventory(hosts)), "--db",
                             str(workspace.db), "--fingerprint-only", "--accept-new-host-keys")
    assert result.returncode == 0, result.stderr
    [(hostname, _, _body)] = workspace.documents()["sly/host"]
    assert hostname == "<script>alert(1)</script>"
    # Shown literally: markup from a host is text, and its escape sequences are inert.
    assert "1 x \\x1b]0;pwned\\x07[bold green]H100 SXM5 80GB[/]" in result.stdout
    assert "\x1b]0;" not in result.stdout + result.stderr
