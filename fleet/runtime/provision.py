"""Making sure a host has fleet's pinned runtime before the harness runs there.

One round trip on a night when nothing needs installing (`inspect`: the driver's CUDA
version through the payload's pynvml, the host's Python, which environments are whole),
then the agent starts with that environment's python. Otherwise the host installs it,
from its own network or from a wheelhouse this controller uploads, under a lock on the
host, and the environment appears only when torch imports from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.inventory import Target
from fleet.payload import MARKER, NoPython, Payload, PayloadError
from fleet.runtime.installer import Choice, choose_installer
from fleet.runtime.pin import PYPI_INDEX, RuntimeFailure, RuntimeSpec, runtime_spec
from fleet.runtime.wheelhouse import HostFile, select_wheels
from fleet.store.database import hide_passwords
from fleet.transport.base import Transport, describe_exit, last_lines

REMOTE_SOURCE = (Path(__file__).parent / "remote.py").read_text(encoding="utf-8")
RUNTIME_MARK = "fleet-runtime: "
INSTALL_TIMEOUT_S = 1800.0  # a CUDA build is ~3 GB of wheels on a slow mirror
INSPECT_TIMEOUT_S = 60.0
# The longest the runtime step may take before the agent starts: the inspect round trips
# (under one INSPECT_TIMEOUT_S deadline), the payload's upload and an index URL's secret
# file (INSPECT_TIMEOUT_S each), then uploads, lock and install under one
# INSTALL_TIMEOUT_S deadline. A Celery task's expiry and visibility count it.
RUNTIME_BUDGET_S = 3 * INSPECT_TIMEOUT_S + INSTALL_TIMEOUT_S
CHUNK = 1 << 20
PROGRESS_EVERY_S = 0.5
# Installed size over wheel size (torch 2.13.0+cpu: 192 MB of wheel, ~1 GB installed),
# with room for pip's unpacking; from an index, by build, what a torch install took.
WHEEL_SPREAD = 4.0
INDEX_NEED_BYTES = {"cpu": 2_000_000_000}
CUDA_NEED_BYTES = 10_000_000_000

Report = Callable[[str], None]  # a progress message for the live display


@dataclass(frozen=True)
class RuntimeReady:
    """The runtime a host's agent runs with."""

    python: str | None  # the environment's python; None: no runtime was needed
    name: str | None  # the environment's name (torch-2.13.0-cu128-py3.11-HASH)
    installed: bool  # built during this probe
    payload_uploaded: bool
    uploaded_bytes: int = 0  # of wheels, this probe
    seconds: float = 0.0
    why_none: str | None = None  # why no runtime was needed
    installer: str | None = None  # what built the environment: "uv 0.13.9", "pip 23.0.1"


def remote_script(python: str, command: str, args: dict[str, Any],
                  env: dict[str, str]) -> str:
    """The shell command that runs the host's half of the runtime with `python`."""
    assigned = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()))
    run = f'env {assigned} "$py"' if assigned else '"$py"'
    return "; ".join([
        f"py={shlex.quote(python)}",
        f'command -v "$py" >/dev/null 2>&1 || {{ echo "{MARKER}no-python"; exit 0; }}',
        f"{run} -c {shlex.quote(REMOTE_SOURCE)} {shlex.quote(command)} "
        f"{shlex.quote(json.dumps(args))} </dev/null",
        "exit $?",
    ])


def call_remote(transport: Transport, target: Target, python: str, command: str,
                args: dict[str, Any], deadline: float, cancel: threading.Event,
                on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one command of remote.py on the host; its last event."""
    process = transport.run(remote_script(python, command, args, dict(target.env)))
    last: dict[str, Any] | None = None
    try:
        for line in process.lines(deadline, cancel):
            if line.strip() == f"{MARKER}no-python":
                raise NoPython(f"host {target.key} has no {python}: install Python 3.10 or "
                               f"newer, or set `python:` for it in the inventory "
                               f"({target.where})")
            if not line.startswith(RUNTIME_MARK):
                continue
            try:
                event = json.loads(line[len(RUNTIME_MARK):])
            except ValueError:
                continue
            if isinstance(event, dict):
                last = event
                if on_event is not None:
                    on_event(event)
    finally:
        if process.exit_status(0) is None:
            process.kill()
    status = process.exit_status(5.0)
    if last is None or status not in (0, None):
        stderr = hide_passwords(last_lines(process.stderr_tail()))
        raise RuntimeFailure(
            f"{target.key}: fleet's {command} step {describe_exit(status)}"
            + (f": {stderr}" if stderr else "") + f". Check that {python} runs on the host")
    return last


def _inspect(transport: Transport, target: Target, payload: Payload, cancel: threading.Event
             ) -> tuple[dict[str, Any], bool]:
    deadline = time.monotonic() + INSPECT_TIMEOUT_S
    pyz = payload.remote_path(target.cache_dir)
    args = {"cache_dir": target.cache_dir, "pyz": pyz}
    facts = call_remote(transport, target, target.python, "inspect", args, deadline, cancel)
    if facts.get("payload"):
        return facts, False
    transport.put(payload.data, pyz, INSPECT_TIMEOUT_S)
    facts = call_remote(transport, target, target.python, "inspect", args, deadline, cancel)
    if not facts.get("payload"):
        raise PayloadError(f"{target.key}: the agent at {pyz} cannot be read after the "
                           f"upload ({facts.get('payload_error')})")
    return facts, True


@contextlib.contextmanager
def _host_lock(transport: Transport, target: Target, deadline: float, cancel: threading.Event,
               report: Report) -> Iterator[None]:
    """The host's install lock, held by a remote process for as long as this block runs."""
    args = {"cache_dir": target.cache_dir, "lock_wait_s": max(1.0, deadline - time.monotonic()),
            "hold_s": max(1.0, deadline - time.monotonic())}
    process = transport.run(remote_script(target.python, "hold", args, {}))
    try:
        for line in process.lines(deadline, cancel):
            if not line.startswith(RUNTIME_MARK):
                continue
            event = json.loads(line[len(RUNTIME_MARK):])
            if event.get("event") == "stage":
                report(str(event.get("message", "")))
            elif event.get("event") == "failed":
                raise RuntimeFailure(f"{target.key}: {event.get('detail')}. "
                                     + FIXES["lock"])
            elif event.get("event") == "held":
                break
        else:
            stderr = last_lines(process.stderr_tail())
            raise RuntimeFailure(f"{target.key}: taking the host's install lock "
                                 f"failed: {stderr or 'no answer'}")
        yield
    finally:
        process.kill()


def _size(count: float) -> str:
    return f"{count / 1e6:.1f} MB" if count < 1e9 else f"{count / 1e9:.2f} GB"


def _upload_files(transport: Transport, target: Target, wheels: list[HostFile],
                  remote_dir: str, what: str, deadline: float, cancel: threading.Event,
                  report: Report) -> int:
    """Upload what the host lacks of `wheels` (`what`: "the wheelhouse", "uv") into
    `remote_dir`, resuming partial files; the bytes sent."""
    files = [{"name": w.name, "size": w.size} for w in wheels]
    status = call_remote(transport, target, target.python, "wheel-status",
                         {"dir": remote_dir, "files": files}, deadline, cancel)
    have: dict[str, int] = status["have"]
    missing = [w for w in wheels if have.get(w.name, 0) != -1]
    total = sum(w.size - have.get(w.name, 0) for w in missing)
    if total > int(status.get("free_bytes", total)):
        raise RuntimeFailure(
            f"{target.key}: {what} needs {_size(total)} under "
            f"{target.cache_dir} and only {_size(status['free_bytes'])} is free. Free space "
            "there, or set `cache_dir:` for this host to a larger disk")
    sent = 0
    started = time.monotonic()
    last_report = 0.0

    def chunks(wheel: HostFile, offset: int) -> Iterator[bytes]:
        nonlocal sent, last_report
        with wheel.path.open("rb") as fh:
            fh.seek(offset)
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                if cancel.is_set():
                    return
                yield chunk
                sent += len(chunk)
                now = time.monotonic()
                if now - last_report >= PROGRESS_EVERY_S:
                    last_report = now
                    report(f"uploading {what}: {_size(sent)} of {_size(total)}, "
                           f"{now - started:.1f} s")

    for wheel in missing:
        offset = have.get(wheel.name, 0)
        part = f"{remote_dir}/.{wheel.name}.part"
        transport.append(part, chunks(wheel, offset), max(60.0, deadline - time.monotonic()))
        if cancel.is_set():
            break
        sealed = call_remote(transport, target, target.python, "wheel-seal",
                             {"dir": remote_dir, "name": wheel.name, "sha256": wheel.sha256,
                              "executable": wheel.executable}, deadline, cancel)
        if not sealed.get("ok"):
            raise RuntimeFailure(
                f"{target.key}: {wheel.name} arrived with sha256 "
                f"{sealed.get('sha256', '?')[:16]}..., not {wheel.sha256[:16]}...: the "
                "upload was damaged or the file changed while it was sent; it was deleted, "
                "and the next probe uploads it again")
    if missing:
        report(f"uploaded {what}: {_size(sent)} in {time.monotonic() - started:.1f} s")
    return sent


def _index_source(target: Target, spec: RuntimeSpec, transport: Transport,
                  root: str) -> dict[str, Any]:
    choice = target.runtime
    if choice.index_url_env is not None:
        url = os.environ.get(choice.index_url_env)
        if not url:
            raise RuntimeFailure(
                f"{target.key}: the inventory names the index through the environment "
                f"variable {choice.index_url_env}, which is not set here: export it "
                f"({target.where})")
        # Through a file the host deletes once read: on a command line any user of the
        # host could read the password.
        secret = f"{root}/.index-{uuid.uuid4().hex[:12]}"
        transport.put((url + "\n").encode(), secret, INSPECT_TIMEOUT_S)
        return {"kind": "index", "index_url_file": secret, "extra_index_urls": []}
    if choice.index_url is not None:
        return {"kind": "index", "index_url": choice.index_url, "extra_index_urls": []}
    # PyTorch's index for the build; PyPI beside it for the dependencies it lacks.
    return {"kind": "index", "index_url": spec.build.index_url,
            "extra_index_urls": [PYPI_INDEX]}


FIXES = {
    "disk": "Free space there, or set `cache_dir:` for this host to a larger disk",
    "index": "Check that the host reaches the index (or set `runtime: {index_url: ...}` to a "
             "mirror it reaches), or give it a `wheelhouse:` to upload from this machine",
    "missing": "The index or wheelhouse lacks a file the install needs (named above): add it, "
               "or point `runtime:` at a source that has it",
    "venv": "Install the venv module for that Python (Debian/Ubuntu: apt install "
            "python3-venv), or set `python:` to an interpreter that has it, or probe it "
            "from a controller of the host's platform (Linux, same machine), whose uv fleet "
            "uploads and which needs no venv module",
    "build": "Point `runtime: {index_url: ...}` at an index that serves this build (PyTorch's "
             "own is https://download.pytorch.org/whl/BUILD), or give the host a "
             "`wheelhouse:` holding it",
    "lock": "Another probe of this host is installing the runtime; run again when it is done",
    "verify": "The new environment was deleted; run again, and report it if it recurs",
    "install": "The environment was not kept; see the installer's output above",
}


def _failure(target: Target, event: dict[str, Any], source: dict[str, Any],
             spec: RuntimeSpec) -> RuntimeFailure:
    kind = str(event.get("kind", "install"))
    tail = [hide_passwords(str(line)) for line in event.get("tail", [])]
    # pip's "ERROR: ..." lines; uv's "error: ..." and the "cause: ..." lines under it.
    said = [line for line in tail if any(word in line.lower() for word in (
        "error", "no matching", "could not", "space", "not found", "cause:"))][-3:] or tail[-3:]
    where = ("the wheelhouse" if source["kind"] == "wheelhouse" else
             "the index" if kind != "index" else "the index " + hide_passwords(
                 str(source.get("index_url") or "named by index_url_env")))
    what = {"disk": "the host ran out of disk space",
            "index": f"{where} could not be reached",
            "missing": f"{where} lacks a file the install needs",
            "venv": "the host's Python cannot create a virtual environment",
            "lock": "the install lock is held",
            "verify": "torch does not import from the new environment",
            "build": "the installed torch is not the build fleet pins",
            }.get(kind, "installing the runtime failed")
    detail = hide_passwords(str(event.get("detail", "")))
    return RuntimeFailure(
        f"{target.key}: {what} ({detail})"
        + (f": {' | '.join(s[:200] for s in said)}" if said else "")
        + f". {FIXES.get(kind, FIXES['install']).replace('BUILD', spec.build.tag)}")


def prepare_runtime(transport: Transport, target: Target, payload: Payload, cpu: bool,
                    cancel: threading.Event, report: Report) -> RuntimeReady:
    """The pinned runtime's python on `target`, installed when it is not there yet.

    Not needed (python None) on a host without a GPU unless the harness runs on the CPU:
    the agent then only says that it found no GPU."""
    started = time.monotonic()
    report("checking fleet's runtime")
    facts, payload_uploaded = _inspect(transport, target, payload, cancel)
    gpus = int(facts.get("gpu_count") or 0)
    if gpus == 0 and not cpu:
        return RuntimeReady(None, None, False, payload_uploaded,
                            why_none="no GPU found, and the harness is not run on the CPU")
    spec = runtime_spec(target.key, str(facts.get("python")), str(facts.get("machine")),
                        facts.get("cuda_driver_version"), gpus)
    found = facts.get("envs", {}).get(spec.name)
    if found is not None and found.get("problem") is None:
        return RuntimeReady(found["python"], spec.name, False, payload_uploaded,
                            seconds=time.monotonic() - started,
                            installer=found.get("installer"))
    installer = choose_installer(facts)
    if installer.uv is None and (not facts.get("venv") or not facts.get("ensurepip")):
        raise RuntimeFailure(
            f"{target.key}: {facts.get('executable')} cannot create a virtual "
            f"environment (no {'venv' if not facts.get('venv') else 'ensurepip'} module), "
            f"and fleet cannot use uv there ({installer.why_pip}). "
            + FIXES["venv"] + ", or `runtime: {use: host}` to use the host's own torch")
    deadline = time.monotonic() + INSTALL_TIMEOUT_S
    root = f"{target.cache_dir.rstrip('/')}/runtime"
    uploaded = 0
    wheels = (select_wheels(target.runtime.wheelhouse, spec, target.key)
              if target.runtime.wheelhouse is not None else [])
    if wheels or installer.uv is not None:
        # Two probes of one host must not append to the same partial file.
        with _host_lock(transport, target, deadline, cancel, report):
            if installer.uv is not None:
                uploaded += _upload_files(transport, target, [installer.uv.host_file()],
                                          f"{root}/bin", f"uv {installer.uv.version}",
                                          deadline, cancel, report)
            if wheels:
                uploaded += _upload_files(transport, target, wheels, f"{root}/wheelhouse",
                                          "the wheelhouse", deadline, cancel, report)
    if wheels:
        source: dict[str, Any] = {"kind": "wheelhouse", "dir": f"{root}/wheelhouse"}
        need = int(sum(w.size for w in wheels) * WHEEL_SPREAD)
    else:
        source = _index_source(target, spec, transport, root)
        need = INDEX_NEED_BYTES.get(spec.build.tag, CUDA_NEED_BYTES)
    if cancel.is_set():
        raise RuntimeFailure(f"{target.key}: interrupted")
    report(f"installing torch {spec.torch} ({spec.build.tag}) into {spec.name} with "
           f"{installer.name}" + (f" ({installer.why_pip})" if installer.why_pip else ""))
    install_started = time.monotonic()

    def relay(event: dict[str, Any]) -> None:
        elapsed = time.monotonic() - install_started
        if event.get("event") == "stage":
            report(f"{event.get('message', '')} ({elapsed:.0f} s)")
        elif event.get("event") == "log":
            report(f"{event.get('stage')}: {hide_passwords(str(event.get('line', '')))[:80]} "
                   f"({elapsed:.0f} s)")

    args = {"cache_dir": target.cache_dir, "name": spec.name, "spec": spec.as_dict(),
            "requirement": spec.requirement, "source": source, "need_bytes": need,
            "lock_wait_s": max(1.0, deadline - time.monotonic() - 60.0),
            "uv": _uv_args(installer, root),
            "expect": {"torch": spec.torch, "cuda": None if spec.build.cuda is None
                       else "{}.{}".format(*spec.build.cuda)}}
    done = call_remote(transport, target, target.python, "install", args, deadline, cancel,
                       relay)
    if done.get("event") != "done":
        raise _failure(target, done, source, spec)
    return RuntimeReady(str(done["python"]), spec.name, bool(done.get("installed")),
                        payload_uploaded, uploaded, time.monotonic() - started,
                        installer=done.get("installer"))


def _uv_args(installer: Choice, root: str) -> dict[str, str] | None:
    if installer.uv is None:
        return None
    return {"path": f"{root}/bin/{installer.uv.remote_name}", "version": installer.uv.version}
