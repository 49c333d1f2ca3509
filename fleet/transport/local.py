"""`transport: local`: this machine, through a child process instead of SSH."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from fleet.transport.base import (
    KILL_GRACE_S,
    StderrTail,
    TransportError,
    read_lines,
)


class LocalProcess:
    """A script running on this machine in a session of its own."""

    def __init__(self, popen: subprocess.Popen[bytes], origin: str) -> None:
        self._popen = popen
        self._origin = origin
        self._stderr = StderrTail()
        self._selector = selectors.DefaultSelector()
        assert popen.stdout is not None and popen.stderr is not None
        for stream in (popen.stdout, popen.stderr):
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream, selectors.EVENT_READ)
        self._open_streams = 2  # stdout and stderr, until each reaches its end
        self._stream: Iterator[str] | None = None

    def lines(self, deadline: float, cancel: threading.Event) -> Iterator[str]:
        """The script's stdout lines until it ends, `deadline` passes or `cancel` is set."""
        if self._stream is None:
            self._stream = read_lines(self._origin, self._receive, deadline, cancel)
        return self._stream

    def _receive(self, wait: float) -> bytes | None:
        """What stdout sent within `wait` seconds, keeping stderr; None once both have ended."""
        # Both pipes are read: a script that fills its stderr pipe would block forever.
        # The output ends when both close, so stderr is complete for `stderr_tail`.
        data = b""
        for key, _ in self._selector.select(wait):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self._selector.unregister(key.fileobj)
                self._open_streams -= 1
            elif key.fileobj is self._popen.stdout:
                data = chunk
            else:
                self._stderr.feed(chunk)
        return data if self._open_streams else None

    def exit_status(self, timeout: float) -> int | None:
        """The script's exit status, or None when it has not ended within `timeout` seconds."""
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stderr_tail(self) -> str:
        """The last of what the script wrote to stderr."""
        return self._stderr.text()

    def kill(self) -> None:
        """Signal the script's session, TERM then KILL, until it has ended."""
        # The script runs in a session of its own: the signal reaches the agent and
        # anything it started, never this process.
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, sig)
            if self.exit_status(grace) is not None:
                break

    def close(self) -> None:
        """Close the selector and the script's pipes."""
        self._selector.close()
        for stream in (self._popen.stdout, self._popen.stderr):
            if stream is not None:
                stream.close()


def fleet_has_torch() -> bool:
    """Whether fleet's own Python could import torch (looked up, not imported: the
    controller never loads torch)."""
    return importlib.util.find_spec("torch") is not None


def machine_environment(environ: Mapping[str, str], prefix: str, python: str = "python3",
                        keep_own: bool = False) -> dict[str, str]:
    """The environment the agent runs in on this machine, where `python` names its Python.

    Where fleet runs from its own activated virtualenv (`prefix`, its sys.prefix), that
    venv leads PATH, and its python3 has no torch after the README's install, while a login
    on this machine, and so a probe of it over SSH, finds the machine's own python3, torch
    and all. That venv leaves PATH, unless it is to stay (`keep_own`: it has torch) or
    `python` is not found without it. A venv the user activated stays: that is how they
    choose an interpreter.
    """
    env = dict(environ)
    venv = env.get("VIRTUAL_ENV")
    if keep_own or not venv or os.path.realpath(venv) != os.path.realpath(prefix):
        return env
    own_bin = os.path.realpath(os.path.join(venv, "bin"))
    path = os.pathsep.join(entry for entry in env.get("PATH", "").split(os.pathsep)
                           if not entry or os.path.realpath(entry) != own_bin)
    if shutil.which(python, path=path) is None:
        return env
    env["PATH"] = path
    env.pop("VIRTUAL_ENV")
    env.pop("VIRTUAL_ENV_PROMPT", None)
    return env


class LocalTransport:
    """Runs the scripts with this machine's /bin/sh, as the current user, in the
    environment a login on this machine would have (`machine_environment`)."""

    description = "this machine"

    def __init__(self, origin: str, python: str = "python3") -> None:
        self._origin = origin
        self._environment = machine_environment(os.environ, sys.prefix, python,
                                                keep_own=fleet_has_torch())
        self._processes: list[LocalProcess] = []

    def connect(self) -> None:
        """Nothing to connect to: the target is this machine."""
        pass

    def run(self, script: str) -> LocalProcess:
        """Start `script` under /bin/sh in a session of its own."""
        try:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
                env=self._environment)
        except OSError as exc:
            raise TransportError(f"{self._origin}: cannot start /bin/sh ({exc.strerror})"
                                 ) from None
        process = LocalProcess(popen, self._origin)
        self._processes.append(process)
        return process

    def put(self, data: bytes, path: str, timeout: float) -> None:
        """Write `data` to `path`, through a temporary file renamed into place."""
        final = Path(path).expanduser()
        try:
            final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(temporary, final)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            raise TransportError(
                f"{self._origin}: cannot write {final} ({exc.strerror}). Set `cache_dir:` "
                "in the inventory to a directory you may write") from None

    def append(self, path: str, chunks: Iterable[bytes], timeout: float) -> None:
        """Append `chunks` to `path`, creating it private to this user."""
        final = Path(path).expanduser()
        try:
            final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(final, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "ab") as fh:
                for chunk in chunks:
                    fh.write(chunk)
        except OSError as exc:
            raise TransportError(
                f"{self._origin}: cannot write {final} ({exc.strerror}). Set `cache_dir:` "
                "in the inventory to a directory you may write") from None

    def close(self) -> None:
        """Kill every script still running and close them all."""
        for process in self._processes:
            if process.exit_status(0) is None:
                process.kill()
            process.close()
        self._processes.clear()
