"""The payload: the agent and pynvml in one zipapp, named by its content hash.

Built once per run from the installed `agent` package and the `pynvml` module of
nvidia-ml-py (so a host needs nothing but Python 3.8+), deterministically: sorted entries,
fixed timestamps and modes, so the same sources always give the same bytes and the same
name. A host keeps it in its cache directory; it is uploaded only when that name is not
there, through a temporary name and a rename, so a half-written file never carries it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import shlex
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.source.settings import INVENTORY_NAMES
from fleet.errors import FleetError, InputError
from fleet.inventory import Target
from fleet.transport.base import (
    Process,
    Transport,
    TransportError,
    describe_exit,
    last_lines,
    shell_path,
)

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
SHEBANG = b"#!/usr/bin/env python3\n"
MARKER = "fleet-probe: "
MAX_SHELL_NOISE_LINES = 200  # what a chatty .bashrc may print before fleet's command runs
MIN_UPLOAD_TIMEOUT_S = 30.0
PACKAGED_SUFFIXES = (".py", ".json")

# Python 2 must be able to parse this file, so that it can say what is wrong.
MAIN = b'''\
# The fleet agent, packed by `fleet agent build` / `fleet probe`: `python3 THIS.pyz --help`.
import sys

if sys.version_info < (3, 8):
    sys.stderr.write("fleet-agent: needs Python 3.8 or newer; %s is Python %s. Install a "
                     "newer python3, or set `python:` in the inventory\\n"
                     % (sys.executable, sys.version.split()[0]))
    sys.exit(2)

from agent.__main__ import main  # noqa: E402

sys.exit(main())
'''

StageHandler = Callable[[str, str], None]


class PayloadError(FleetError):
    """The agent cannot be packed, or cannot be started on a host."""

    exit_code = 3


class NoPython(PayloadError):
    """The host has no Python to run the agent with."""


@dataclass(frozen=True)
class Payload:
    """The agent as a zipapp: its bytes, their sha256, and the files in it."""

    data: bytes
    sha256: str
    files: tuple[str, ...]

    @property
    def filename(self) -> str:
        """The payload's file name on a host, from its hash."""
        # 64 bits of the hash: fleet's own builds are the only files in the directory.
        return f"agent-{self.sha256[:16]}.pyz"

    def remote_path(self, cache_dir: str) -> str:
        """Where the payload lies on a host, in `cache_dir`."""
        return f"{cache_dir.rstrip('/') or '/'}/{self.filename}"


def _package_files(package: str) -> list[tuple[str, Path]]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PayloadError(f"the `{package}` package is not installed beside fleet: "
                           "reinstall fleet (pip install .)")
    root = Path(next(iter(spec.submodule_search_locations)))
    # Sources and data only: an editor's backup or a stray build file must neither ship
    # nor change the hash.
    return [(f"{package}/{path.relative_to(root).as_posix()}", path)
            for path in root.rglob("*")
            if path.suffix in PACKAGED_SUFFIXES and "__pycache__" not in path.parts
            and path.is_file()]


def _module_file(module: str, distribution: str) -> tuple[str, Path]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise PayloadError(f"the `{module}` module is not installed: pip install "
                           f"{distribution} (fleet depends on it)")
    return f"{module}.py", Path(spec.origin)


def build_payload() -> Payload:
    """Pack the agent; the same sources give byte-identical output."""
    sources = [*_package_files("agent"), _module_file("pynvml", "nvidia-ml-py")]
    entries = [(name, path.read_bytes()) for name, path in sources]
    entries.append(("__main__.py", MAIN))
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, whatever builds it, so the bytes do not vary
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, compresslevel=9)
    data = buffer.getvalue()
    return Payload(data, hashlib.sha256(data).hexdigest(), tuple(sorted(n for n, _ in entries)))


def write_payload(payload: Payload, directory: Path) -> Path:
    """Write the zipapp into `directory` under its hashed name (atomically)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{payload.filename}.")
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload.data)
        os.chmod(temporary, 0o755)
        final = directory / payload.filename
        os.replace(temporary, final)
    except OSError as exc:
        raise InputError(f"{directory}: cannot write the agent there ({exc.strerror}). "
                         "Give --out a directory you may write") from None
    return final


# --- Starting it on a host ------------------------------------------------------------------

@dataclass
class Launched:
    """The agent started on a host: its process, its stdout lines, and whether it was uploaded."""

    process: Process
    lines: Iterator[str]  # the agent's stdout, from its first line
    uploaded: bool


def launch_script(python: str, path: str, args: list[str], env: Mapping[str, str]) -> str:
    """sh that finds Python, runs the cached agent if it is there, or says what is missing.

    The environment travels on the command line, so sshd's AcceptEnv does not matter.
    One line, with `;`: the login shell that hands it to sh may be csh.
    """
    assigned = " ".join(shlex.quote(f"{name}={value}") for name, value in sorted(env.items()))
    run = f'env {assigned} "$py" "$f"' if assigned else '"$py" "$f"'
    return "; ".join([
        f"py={shlex.quote(python)}",
        f"f={shell_path(path)}",
        f'command -v "$py" >/dev/null 2>&1 || {{ echo "{MARKER}no-python"; exit 0; }}',
        f'[ -f "$f" ] || {{ echo "{MARKER}missing"; exit 0; }}',
        f'echo "{MARKER}run"',
        f"{run} {' '.join(shlex.quote(a) for a in args)} </dev/null",
        "exit $?",
    ])


def inventory_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The inventory's `env:` as the agent starts under it, with the names it set listed
    in FLEET_INVENTORY_ENV: the agent records each such setting's source as "inventory",
    not "environment" (agent/source/settings.py)."""
    if not env:
        return {}
    return {**env, INVENTORY_NAMES: ",".join(sorted(env))}


def _marker(process: Process, lines: Iterator[str], target: Target) -> str:
    for _, line in zip(range(MAX_SHELL_NOISE_LINES), lines, strict=False):
        if line.startswith(MARKER):
            return line[len(MARKER):].strip()
    status = process.exit_status(5.0)
    stderr = last_lines(process.stderr_tail())
    raise TransportError(
        f"{target.key}: the host's shell did not run fleet's command: it "
        f"{describe_exit(status)}" + (f": {stderr}" if stderr else "") +
        ". Check that the user's login shell works (`ssh HOST true`)")


def launch_agent(transport: Transport, payload: Payload, target: Target, args: list[str],
                 deadline: float, cancel: threading.Event,
                 on_stage: StageHandler | None = None, python: str | None = None) -> Launched:
    """Start the agent on the host, uploading the payload first if its hash is not there.
    `python` (fleet's runtime on the host) runs it instead of the inventory's `python:`."""
    path = payload.remote_path(target.cache_dir)
    python = python or target.python
    script = launch_script(python, path, args, inventory_environment(target.env))
    uploaded = False
    while True:
        process = transport.run(script)
        lines = process.lines(deadline, cancel)
        answer = _marker(process, lines, target)
        if answer == "run":
            return Launched(process, lines, uploaded)
        process.exit_status(5.0)
        if answer == "no-python":
            raise NoPython(
                f"host {target.key} has no {python}: install Python 3.8 or newer, "
                f"or set `python:` for it in the inventory ({target.where})")
        if answer != "missing":
            raise PayloadError(f"{target.key}: fleet's command answered {answer[:60]!r}, "
                               "which this fleet does not know")
        if uploaded:
            raise PayloadError(f"{target.key}: {path} is still missing after the upload: "
                               "is the cache directory on a file system that drops files?")
        if on_stage is not None:
            on_stage("upload", f"uploading the agent ({len(payload.data) // 1024} KB)")
        left = max(MIN_UPLOAD_TIMEOUT_S, deadline - time.monotonic())
        transport.put(payload.data, path, left)
        uploaded = True
