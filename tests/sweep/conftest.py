"""Sweep fixtures: the probe's loopback sshd hosts and workspace (tests/probe) and the
store's scratch PostgreSQL (tests/store), imported so that pytest registers them here."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from fleet.store.database import open_engine, resolve
from tests.conftest import GPU_CASES
from tests.probe.conftest import Workspace, keys, servers, workspace  # noqa: F401
from tests.store.conftest import (  # noqa: F401
    backend,
    engine,
    postgres,
    postgres_template,
    postgres_url,
    store_url,
)

# A stand-in for the host's python3 that hangs the first time it runs (while MARK is
# missing) and is python3 afterwards: a host that is mid-probe when its sweep or worker
# is killed, and answers when probed again.
HANG_ONCE = """#!/bin/sh
if [ ! -e "$FLEET_TEST_MARK" ]; then
  echo $$ > "$FLEET_TEST_MARK"
  exec sleep 600
fi
exec /usr/bin/python3 "$@"
"""


def hang_once(root: Path) -> Path:
    path = root / "hang-once.sh"
    path.write_text(HANG_ONCE)
    path.chmod(0o755)
    return path


def recording_copy(root: Path, case: str, name: str,
                   edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """A recording of `case` that a test may change between nights."""
    data = json.loads((GPU_CASES / case / "nvml-recording.json").read_text())
    if edit is not None:
        edit(data)
    path = root / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def engine_of(url: str) -> Engine:
    return open_engine(resolve(url))


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def kill_marked(*marks: Path) -> None:
    """The hung stand-ins' sleeps, which outlive the ssh session that started them."""
    for mark in marks:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(mark.read_text().strip()), signal.SIGKILL)


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def fleet_process(space: Workspace, *args: str, log: Path) -> subprocess.Popen[Any]:
    import sys

    space.home.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        return subprocess.Popen([sys.executable, "-m", "fleet.cli", *args], env=space.env(),
                                stdout=handle, stderr=subprocess.STDOUT, cwd=space.root)
