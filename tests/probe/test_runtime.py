"""fleet's pinned runtime over real sshd: installed once from a wheelhouse (torch 2.13.0's
CPU build: these hosts have no GPU, so the harness runs with --cpu) with the uv binary of
fleet's own installation, reused, rebuilt when broken (with pip, where the host cannot run
that uv), built once under two concurrent probes, failing its host alone, seen and removed
with `fleet runtime`.

The suite makes two full installs: one with uv (~3 s of install on a 2-core machine, plus
~200 MB of upload over loopback) and one with pip (~15-25 s)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import uv

from fleet.errors import InputError
from fleet.inventory import parse_inventory
from fleet.runtime import installer
from fleet.runtime.installer import UvBinary, choose_installer, elf_platform
from fleet.runtime.pin import CPU_BUILD, RuntimeFailure, choose_build, runtime_spec
from fleet.runtime.remote import classify, uv_problem
from fleet.runtime.wheelhouse import select_wheels
from tests.conftest import ROOT
from tests.probe.conftest import Result, Workspace
from tests.probe.sshd import free_port

HOST_PYTHON = "/usr/bin/python3"  # what the test inventories run (tests/probe/conftest.py)
# The matmul alone: the runtime is what is tested here, and the pinned torch runs it.
QUICK_CPU = ("--cpu", "--size", "128", "--quick", "--measure-s", "0.3", "--gemm-only")
UV_VERSION = importlib.metadata.version("uv")
UV_BYTES = os.path.getsize(uv.find_uv_bin())


def _host_python_version() -> str:
    code = "import sys; print('%d.%d' % sys.version_info[:2])"
    done = subprocess.run([HOST_PYTHON, "-c", code], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """torch 2.13.0+cpu and its dependencies for the hosts' Python, downloaded once and
    kept under test-artifacts/ between runs. The CPU build is pinned here, not in fleet:
    fleet picks it because these hosts have no GPU."""
    version = _host_python_version()
    directory = ROOT / "test-artifacts" / f"wheelhouse-torch-2.13.0-cpu-py{version}"
    done_mark = directory / ".complete"
    if done_mark.is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "-q", "torch==2.13.0+cpu",
            "--only-binary=:all:", "--python-version", version, "-d", str(directory)]
    # pip's own configuration first (a machine with the wheel on disk, as this one);
    # on a fresh machine, PyTorch's CPU index and PyPI.
    first = subprocess.run(base, capture_output=True, text=True)
    if first.returncode != 0:
        second = subprocess.run([*base, "--index-url", "https://download.pytorch.org/whl/cpu",
                                 "--extra-index-url", "https://pypi.org/simple"],
                                capture_output=True, text=True)
        assert second.returncode == 0, second.stderr[-2000:]
    done_mark.write_text("")
    return directory


def _bench(workspace: Workspace, inventory: Path, *args: str) -> Result:
    return workspace.probe(inventory, *QUICK_CPU, *args, timeout=600)


def _documents_torch(workspace: Workspace, key: str) -> list[tuple[str, str]]:
    return [(body["host"]["torch_version"], body["host"]["python_executable"])
            for _hostname, _gpus, body in workspace.documents().get(key, [])]


def _marker(env: Path) -> dict[str, Any]:
    marker: dict[str, Any] = json.loads((env / ".fleet-runtime.json").read_text())
    return marker


def _fleet_processes(marker: str) -> list[str]:
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if marker in line and "ps -eo" not in line]


def test_installed_once_under_two_probes_reused_rebuilt_shown_and_removed(
        workspace: Workspace, wheelhouse: Path) -> None:
    cache = workspace.root / "host-cache"
    hosts = {"lambda/box": workspace.ssh_host(workspace.servers[0], cache_dir=str(cache),
                                              runtime={"wheelhouse": str(wheelhouse)})}
    inventory = workspace.inventory(hosts)
    assert workspace.fleet("probe", str(inventory), "--db", str(workspace.db),
                           "--fingerprint-only", "--accept-new-host-keys").returncode == 0
    assert not (cache / "runtime").exists(), "a fingerprint needs no runtime"

    # Two probes of the host at once: one installs, the other waits on the host's lock
    # and uses what the first built.
    env = workspace.env()
    command = [sys.executable, "-m", "fleet.cli", "probe", str(inventory), "--db",
               str(workspace.db), "--json", *QUICK_CPU]
    running = [subprocess.Popen(command, env=env, cwd=workspace.root, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in running]
    results = [Result(p.returncode, out, err) for p, (out, err) in zip(running, outputs,
                                                                         strict=True)]
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    runtimes = [r.host("lambda/box")["runtime"] for r in results]
    assert sorted(rt["installed"] for rt in runtimes) == [False, True], runtimes
    assert [rt["installer"] for rt in runtimes] == [f"uv {UV_VERSION}"] * 2
    name = runtimes[0]["environment"]
    assert name.startswith("torch-2.13.0-cpu-py") and runtimes[1]["environment"] == name
    # The wheelhouse and fleet's uv, each once.
    assert sum(rt["uploaded_bytes"] for rt in runtimes) > 190_000_000 + UV_BYTES
    envs = cache / "runtime" / "envs"
    assert [p.name for p in envs.iterdir()] == [name], "no build directory may be left"
    python = str(envs / name / "bin" / "python")
    assert _marker(envs / name)["installer"] == f"uv {UV_VERSION}"
    assert not (envs / name / ".uv-cache").exists(), "uv's cache goes with the build"
    uv_on_host = cache / "runtime" / "bin" / f"uv-{UV_VERSION}"
    assert uv_on_host.stat().st_size == UV_BYTES
    # The fingerprint ran on the host's python3, which has no torch; the benchmarks on
    # the pinned runtime.
    assert _documents_torch(workspace, "lambda/box") == [
        (None, HOST_PYTHON), *[("2.13.0+cpu", python)] * 2]

    # The next night: nothing to install or upload.
    again = _bench(workspace, inventory)
    assert again.returncode == 0, again.stderr[-3000:]
    runtime = again.host("lambda/box")["runtime"]
    assert (runtime["installed"], runtime["uploaded_bytes"]) == (False, 0)
    assert runtime["seconds"] < 5

    # A broken environment (torch gone, as a half-deleted tree) is rebuilt, from the
    # wheels already on the host; and where the host cannot run the uv it holds (here
    # damaged in place, as a `noexec` cache_dir or too old a C library would stop it),
    # with the venv module and pip.
    (envs / name / "lib" / f"python{_host_python_version()}" / "site-packages" / "torch"
     / "__init__.py").unlink()
    shown = workspace.fleet("runtime", "show", str(inventory), "--json")
    assert shown.returncode == 0, shown.stderr
    [host] = json.loads(shown.stdout)
    items = {Path(i["path"]).name: i for i in host["items"]}
    assert items[name]["state"] == "torch is missing from it"
    assert items[name]["installer"] == f"uv {UV_VERSION}"
    assert (items[uv_on_host.name]["kind"], items[uv_on_host.name]["bytes"]) == ("uv", UV_BYTES)
    uv_on_host.write_bytes(bytes(UV_BYTES))
    rebuilt = _bench(workspace, inventory)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    runtime = rebuilt.host("lambda/box")["runtime"]
    assert (runtime["installed"], runtime["uploaded_bytes"]) == (True, 0)
    assert runtime["installer"].startswith("pip ")
    assert _documents_torch(workspace, "lambda/box")[-1] == ("2.13.0+cpu", python)
    assert _marker(envs / name)["installer"].startswith("pip ")

    shown = workspace.fleet("runtime", "show", str(inventory))
    assert shown.returncode == 0 and "lambda/box" in shown.stdout
    assert "ready, built with pip" in " ".join(shown.stdout.split()), shown.stdout
    (cache / "not-fleets.txt").write_text("mine")
    removed = workspace.fleet("runtime", "remove", str(inventory), "--host", "box")
    assert removed.returncode == 0, removed.stderr
    assert [p.name for p in cache.iterdir()] == ["not-fleets.txt"]


def test_an_unreachable_index_fails_that_host_alone(workspace: Workspace) -> None:
    port = free_port()  # nothing listens there
    hosts = {
        "offline/box": workspace.ssh_host(
            workspace.servers[0], cache_dir=str(workspace.root / "offline-cache"),
            runtime={"index_url": f"http://127.0.0.1:{port}/simple"}),
        # The host's own python3 (no torch here): benchmarked without a runtime, it stores
        # its document saying why it did not measure.
        "own/box": workspace.ssh_host(workspace.servers[1],
                                      cache_dir=str(workspace.root / "own-cache"),
                                      runtime={"use": "host"}),
    }
    result = workspace.probe(workspace.inventory(hosts), *QUICK_CPU, "--accept-new-host-keys",
                             timeout=300)
    assert result.returncode == 3, result.stderr[-3000:]
    failed = result.host("offline/box")
    assert (failed["ok"], failed["stage"]) == (False, "runtime")
    assert f"the index http://127.0.0.1:{port}/simple could not be reached" in failed["reason"]
    assert "wheelhouse" in failed["reason"], "the reason says what to do"
    assert result.host("own/box")["ok"]
    assert "uv" in failed["reason"] and "tcp connect error" in failed["reason"], \
        "uv installed, and its own words say why"
    assert workspace.host_errors()["offline/box"][0][0] == "runtime"
    envs = workspace.root / "offline-cache" / "runtime" / "envs"
    assert list(envs.iterdir()) == [], "a failed build leaves nothing behind"
    assert _fleet_processes(str(workspace.root / "offline-cache")) == []


def test_a_wheelhouse_without_torch_fails_before_uploading(workspace: Workspace,
                                                          tmp_path: Path) -> None:
    empty = tmp_path / "wheels"
    empty.mkdir()
    hosts = {"dark/box": workspace.ssh_host(workspace.servers[0],
                                            cache_dir=str(workspace.root / "c"),
                                            runtime={"wheelhouse": str(empty)})}
    result = workspace.probe(workspace.inventory(hosts), *QUICK_CPU, "--accept-new-host-keys")
    assert result.returncode == 3
    host = result.host("dark/box")
    assert host["stage"] == "runtime"
    assert "has no torch 2.13.0 wheel of build cpu" in host["reason"]
    assert "pip download torch==2.13.0" in host["reason"]


# --- The choices, as data ----------------------------------------------------------------

@pytest.mark.parametrize(("cuda", "gpus", "tag"), [
    (None, 0, "cpu"), ("13.1", 0, "cpu"), ("13.1", 8, "cu130"), ("12.9", 1, "cu128"),
    ("12.6", 1, "cu126")])
def test_the_build_follows_the_driver(cuda: str | None, gpus: int, tag: str) -> None:
    assert choose_build("p/h", cuda, gpus).tag == tag


def test_a_driver_too_old_for_every_build_says_what_to_do() -> None:
    with pytest.raises(RuntimeFailure, match=r"p/h: the driver supports CUDA 11\.8.*"
                                             r"Update the NVIDIA driver"):
        choose_build("p/h", "11.8", 4)


def test_an_old_python_and_the_spec_name() -> None:
    with pytest.raises(RuntimeFailure, match=r"its Python is 3\.8\.10"):
        runtime_spec("p/h", "3.8.10", "x86_64", None, 0)
    spec = runtime_spec("p/h", "3.11.2", "x86_64", None, 0)
    assert spec.build == CPU_BUILD and spec.requirement == "torch==2.13.0"
    assert spec.name == runtime_spec("q/i", "3.11.9", "x86_64", None, 0).name
    assert spec.name != runtime_spec("p/h", "3.12.1", "x86_64", None, 0).name


def test_wheel_selection_skips_other_builds_and_pythons(tmp_path: Path) -> None:
    for name in ("torch-2.13.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
                 "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "sympy-1.14.0-py3-none-any.whl",
                 "nvidia_cublas-13.0-py3-none-manylinux_2_28_x86_64.whl",
                 "markupsafe-3.0.4-cp312-cp312-manylinux_2_28_x86_64.whl"):
        (tmp_path / name).write_bytes(name.encode())
    spec = runtime_spec("p/h", "3.11.2", "x86_64", None, 0)
    assert [w.name for w in select_wheels(tmp_path, spec, "p/h")] == [
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "sympy-1.14.0-py3-none-any.whl"]


@pytest.mark.parametrize(("lines", "kind"), [
    (["ERROR: Could not install packages due to an OSError: [Errno 28] No space left on "
      "device"], "disk"),
    (["WARNING: Retrying ... Failed to establish a new connection: [Errno 111] Connection "
      "refused')': /simple/torch/", "ERROR: No matching distribution found for torch==2.13.0"],
     "index"),
    (["ERROR: Could not find a version that satisfies the requirement sympy"], "missing"),
    (["WARNING: Retrying (Retry(total=1)) after connection broken by "
      "'NewConnectionError(... Failed to establish a new connection')"], "index"),
    (["something else"], "install"),
    # uv 0.13.9's own words, from `uv pip install` against the same failures on this
    # machine: a 60 MB tmpfs ...
    (["Resolved 10 packages in 11ms", "error: Failed to download `typing-extensions==4.16.0`",
      "  cause: Failed to extract archive: /w/typing_extensions-4.16.0-py3-none-any.whl",
      "  cause: I/O operation failed during extraction",
      "  cause: failed to write to file `/s/v/.uv-cache/.tmpzEKpfN/typing_extensions-4.16.0"
      ".dist-info/WHEEL`: No space left on device (os error 28)"], "disk"),
    # ... --default-index http://127.0.0.1:9/simple (nothing listens) ...
    (["Using Python 3.11.2 environment at: v", "error: Request failed after 2 retries in 3.2s",
      "  cause: Failed to fetch: http://127.0.0.1:9/simple/torch/",
      "  cause: error sending request for url (http://127.0.0.1:9/simple/torch/)",
      "  cause: client error (Connect)", "  cause: tcp connect error",
      "  cause: Connection refused (os error 111)"], "index"),
    # ... a name that does not resolve ...
    (["error: Request failed after 3 retries in 12.1s",
      "  cause: Failed to fetch: http://fleet-no-such-host.invalid/simple/torch/",
      "  cause: error sending request for url (http://fleet-no-such-host.invalid/simple/"
      "torch/)", "  cause: client error (Connect)", "  cause: dns error",
      "  cause: error resolving DNS",
      "  cause: failed to lookup address information: Name or service not known"], "index"),
    # ... an index that answers but has no torch (404) ...
    (["error: No solution found when resolving dependencies",
      "  cause: Because torch was not found in the package registry and you require "
      "torch==2.13.0, we can conclude that your requirements are unsatisfiable."],
     "missing"),
    # ... and a wheelhouse holding torch without its dependencies.
    (["error: No solution found when resolving dependencies",
      "  cause: Because filelock was not found in the provided package locations and all "
      "versions of torch depend on filelock, we can conclude that all versions of torch "
      "cannot be used.", "         And because you require torch==2.13.0, we can conclude "
      "that your requirements are unsatisfiable."], "missing")])
def test_installer_output_is_classified(lines: list[str], kind: str) -> None:
    assert classify(lines) == kind


def _elf(path: Path, machine: int, interpreter: bytes | None) -> Path:
    """A 64-bit little-endian ELF header, with one PT_INTERP entry naming `interpreter`."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", header, 18, machine)
    body = b""
    if interpreter is not None:
        entry = bytearray(56)
        struct.pack_into("<IIQQQQQ", entry, 0, 3, 4, 64 + 56, 0, 0, len(interpreter) + 1, 0)
        struct.pack_into("<QHH", header, 32, 64, 0, 0)
        struct.pack_into("<HH", header, 54, 56, 1)
        body = bytes(entry) + interpreter + b"\0"
    path.write_bytes(bytes(header) + body)
    return path


def test_the_platform_a_uv_binary_runs_on(tmp_path: Path) -> None:
    assert elf_platform(Path(uv.find_uv_bin())) == ("x86_64", "glibc")  # this machine's
    assert elf_platform(_elf(tmp_path / "a", 62, b"/lib64/ld-linux-x86-64.so.2")) == (
        "x86_64", "glibc")
    assert elf_platform(_elf(tmp_path / "b", 183, b"/lib/ld-musl-aarch64.so.1")) == (
        "aarch64", "musl")
    assert elf_platform(_elf(tmp_path / "c", 62, None)) == ("x86_64", "static")
    assert elf_platform(_elf(tmp_path / "d", 3, None)) is None  # i386
    (tmp_path / "e").write_bytes(b"\xcf\xfa\xed\xfe" + bytes(60))  # a Mac's Mach-O
    assert elf_platform(tmp_path / "e") is None


GLIBC_HOST = {"system": "Linux", "machine": "x86_64", "libc": ["glibc", "2.36"]}


@pytest.mark.parametrize(("libc", "host", "why_pip"), [
    ("glibc", GLIBC_HOST, None),
    ("static", {**GLIBC_HOST, "libc": ["", ""]}, None),
    ("musl", {**GLIBC_HOST, "libc": ["", ""]}, None),
    ("glibc", {**GLIBC_HOST, "libc": ["", ""]}, "this controller's uv needs glibc, the host "
                                                "has musl"),
    ("glibc", {**GLIBC_HOST, "machine": "aarch64"}, "this controller's uv is for x86_64 "
                                                    "Linux, the host is aarch64 Linux"),
    ("static", {**GLIBC_HOST, "system": "Darwin"}, "is for x86_64 Linux, the host is x86_64 "
                                                   "Darwin"),
])
def test_uv_goes_only_to_a_host_of_its_platform(
        monkeypatch: pytest.MonkeyPatch, libc: str, host: dict[str, Any],
        why_pip: str | None) -> None:
    monkeypatch.setattr(installer, "local_uv", lambda: UvBinary(Path("uv"), "0.13.9",
                                                                "x86_64", libc))
    monkeypatch.delenv(installer.FORCE_ENV, raising=False)
    choice = choose_installer(host)
    assert (choice.name, choice.why_pip and why_pip in choice.why_pip) == (
        ("uv", None) if why_pip is None else ("pip", True)), choice
    # The bench's switch: every host installs with pip.
    monkeypatch.setenv(installer.FORCE_ENV, "pip")
    assert choose_installer(host).name == "pip"


def test_a_uv_that_cannot_run_on_the_host_is_refused_with_why(tmp_path: Path) -> None:
    assert uv_problem(uv.find_uv_bin(), UV_VERSION) is None
    damaged = tmp_path / "uv-damaged"
    damaged.write_bytes(bytes(1000))
    damaged.chmod(0o700)
    assert "does not start: Exec format error" in (uv_problem(str(damaged), UV_VERSION) or "")
    other = tmp_path / "uv-other"
    other.write_text("#!/bin/sh\necho uv 0.0.1\n")
    other.chmod(0o700)
    assert uv_problem(str(other), UV_VERSION) == f"it says 'uv 0.0.1', not uv {UV_VERSION}"


def test_runtime_settings_merge_and_refuse_a_password(tmp_path: Path) -> None:
    source = str(tmp_path / "inv.yaml")
    text = ("defaults: {runtime: {wheelhouse: wheels}}\nproviders:\n  a:\n"
            "    runtime: {use: host}\n    hosts:\n      h: {runtime: {use: pinned}}\n"
            "      g: {}\n")
    _, (h, g) = parse_inventory(text, source)
    assert (h.runtime.use, h.runtime.wheelhouse) == ("pinned", tmp_path / "wheels")
    assert g.runtime.use == "host"
    secret = ("providers:\n  a:\n    hosts:\n      h:\n        runtime: {index_url: "
              "'https://u:hunter2@pypi.example/simple'}\n")
    with pytest.raises(InputError, match="index_url_env") as caught:
        parse_inventory(secret, source)
    assert "hunter2" not in str(caught.value)
