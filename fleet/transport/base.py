"""What every way of reaching a host offers: connect, run a shell script while streaming its
stdout lines, kill it, put a file, disconnect.

The probe and the payload logic hold a `Transport` and never know which one: `ssh.py`
reaches a rented host, `local.py` this machine, and both run the same POSIX shell scripts,
so a probe through `local` exercises everything but the network.
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from fleet.errors import FleetError
from fleet.events import MAX_LINE

STDERR_TAIL = 4096
POLL_S = 0.25  # how often a blocked read looks at its deadline and at Ctrl-C
KILL_GRACE_S = 2.0  # SIGTERM, then this long before SIGKILL


class TransportError(FleetError):
    """A host could not be reached, refused us, or lost the connection."""

    exit_code = 3


class ConnectError(TransportError):
    """Connecting failed in a way that may pass (refused, timed out): worth a retry."""


class HostKeyError(TransportError):
    """The host's key is unknown or has changed: never retried, never accepted silently."""


class RunTimeout(TransportError):
    """The command did not finish before its deadline."""


class Cancelled(TransportError):
    """The user interrupted the run (Ctrl-C)."""


class Process(Protocol):
    """A command running on a host."""

    def lines(self, deadline: float, cancel: threading.Event) -> Iterator[str]:
        """Its stdout, line by line as they arrive; RunTimeout at `deadline` (monotonic
        seconds), Cancelled when `cancel` is set. Call once: later calls continue the
        same stream."""
        ...

    def exit_status(self, timeout: float) -> int | None:
        """Its exit status once stdout has ended, or None if it is not known in time."""
        ...

    def stderr_tail(self) -> str:
        """The last few KB it wrote to stderr."""
        ...

    def kill(self) -> None:
        """Stop it and everything it started (SIGTERM, then SIGKILL)."""
        ...


class Transport(Protocol):
    """A way to run scripts and write files on one target: over SSH, or on this machine."""

    description: str  # "root@10.0.0.5:22 via bastion", "this machine": for messages

    def connect(self) -> None:
        """Open the connection; TransportError naming the host when it cannot."""
        ...

    def run(self, script: str) -> Process:
        """Start a POSIX sh script; stdin is empty."""
        ...

    def put(self, data: bytes, path: str, timeout: float) -> None:
        """Write `data` to `path` (`~/` is the user's home) atomically: the file appears
        whole under its name or not at all. Parent directories are created."""
        ...

    def append(self, path: str, chunks: Iterable[bytes], timeout: float) -> None:
        """Append `chunks` to `path`, creating it and its directories (mode 0600/0700):
        the next part of a resumable upload, which the caller checks before using."""
        ...

    def close(self) -> None:
        """End every script still running and close the connection."""
        ...


def shell_path(path: str) -> str:
    """A path as a sh word, with a leading `~/` meaning $HOME as ssh users expect."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def put_script(path: str, tag: str) -> str:
    """sh that copies stdin to `path` through a temporary name beside it and a rename, so
    a reader never sees a half-written file and a failed copy leaves nothing behind."""
    directory, _, name = path.rpartition("/")
    final = shell_path(path)
    temporary = shell_path(f"{directory}/.{name}.{tag}") if directory else shlex.quote(
        f".{name}.{tag}")
    mkdir = f"mkdir -p {shell_path(directory)} && " if directory else ""
    return (f"umask 077; t={temporary}.$$; {mkdir}cat > \"$t\" && mv -f \"$t\" {final} "
            f"|| {{ st=$?; rm -f \"$t\"; exit $st; }}")


def append_script(path: str) -> str:
    """sh that appends stdin to `path`."""
    directory = path.rpartition("/")[0]
    mkdir = f"mkdir -p {shell_path(directory)} && " if directory else ""
    return f"umask 077; {mkdir}cat >> {shell_path(path)}"


def describe_exit(status: int | None) -> str:
    """An exit status as words. The scripts fleet runs end in `exit $?`, so a command
    killed by a signal reads as 128 + its number, on every transport."""
    if status is None:
        return "did not report an exit status (the connection was lost)"
    if status < 0:
        status = 128 - status
    if 128 < status <= 128 + 64:
        number = status - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name} (exit status {status})"
    return f"exited with status {status}"


class LineSplitter:
    """Bytes in, complete lines out; a line longer than MAX_LINE is refused rather than
    buffered, so a host that never sends a newline cannot exhaust memory."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[str]:
        """The whole lines that `data` completes; the rest waits for more."""
        self._pending += data
        if b"\n" not in data:
            self._check()
            return []
        *complete, rest = bytes(self._pending).split(b"\n")
        self._pending = bytearray(rest)
        self._check()
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in complete]

    def finish(self) -> list[str]:
        """The last line when the stream ended without a newline; none when it was blank."""
        rest, self._pending = bytes(self._pending), bytearray()
        return [rest.decode("utf-8", errors="replace")] if rest.strip() else []

    def _check(self) -> None:
        if len(self._pending) > MAX_LINE:
            raise TransportError(f"{self.origin}: the agent sent a line over "
                                 f"{MAX_LINE // (1024 * 1024)} MiB without a newline; "
                                 "it is not a fleet agent's output")


def read_lines(origin: str, receive: Callable[[float], bytes | None], deadline: float,
               cancel: threading.Event) -> Iterator[str]:
    """Stdout lines from `receive` until it returns None, `deadline` passes or `cancel` is set."""
    # `receive(wait)` blocks at most `wait` seconds and returns the stdout bytes that came
    # (b"" for none yet) or None once the output has ended; each transport reads its own
    # stream there, and collects stderr on the way, so this loop owns only the timing.
    splitter = LineSplitter(origin)
    while True:
        # Checked only before a read: what a read returned is always passed on, and once
        # the output has ended its last lines are delivered even if cancel is set.
        if cancel.is_set():
            raise Cancelled(f"{origin}: interrupted")
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunTimeout(f"{origin}: timed out")
        # Short waits, so that Ctrl-C and the deadline are noticed while the host is silent.
        data = receive(min(left, POLL_S))
        if data is None:
            break
        yield from splitter.feed(data)
    yield from splitter.finish()


class StderrTail:
    """Keeps only the end of stderr: enough to say why a command failed."""

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def feed(self, data: bytes) -> None:
        """Keep `data`, dropping what is older than the last STDERR_TAIL bytes."""
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= STDERR_TAIL:
            self._size -= len(self._chunks.popleft())

    def text(self) -> str:
        """The last STDERR_TAIL bytes of stderr as text, trimmed."""
        raw = b"".join(self._chunks)[-STDERR_TAIL:]
        return raw.decode("utf-8", errors="replace").strip()


def last_lines(text: str, count: int = 5) -> str:
    """The last `count` non-blank lines of `text`, joined with " | " for one-line messages."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:])
