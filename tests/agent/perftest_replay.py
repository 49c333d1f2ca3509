"""A stand-in for perftest's `ib_write_bw` on the wire, for tests that run both nodes of a
pair's NIC tests on one machine with no RDMA device (agent/network/perftest.py). A test
puts a wrapper named `ib_write_bw` that runs this first on PATH.

What it does, as perftest does it for the orchestration (linux-rdma/perftest src/write_bw.c
and perftest_communication.c, as tests/fixtures/perftest/README.md records them):
- `--help`: the usage on stdout, exit 1 (perftest exits 1 on -h); `--use_cuda` listed only
  where PERFTEST_REPLAY_CUDA=1 (a CUDA build; Debian's is none).
- server (no address argument): listen on `-p PORT`, accept one client, close the
  listener (no second client can queue behind the first), exchange a line with it (a
  client gone without its line fails the run, exit 1), print
  the published server-side output (PERFTEST_REPLAY_SERVER, default
  tests/fixtures/perftest/deepops-server-mb.txt) verbatim, exit 0.
- client (an address last): connect to ADDRESS:PORT; refused, print perftest 4.5's
  "Couldn't connect" lines to stderr (perftest PR #228's published form) and exit 1; else
  read the server's line, print the published client-side output (PERFTEST_REPLAY_CLIENT,
  default gbits-bidir-cpufreq-interleaved.txt) and exit 0.
- a device listed in PERFTEST_REPLAY_BROKEN (comma-separated) fails as perftest fails
  with no device, before any connection.
Each call appends "role device port argv" as a JSON line to PERFTEST_REPLAY_LOG.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "perftest"
USAGE = """Usage:
  ib_write_bw            start a server and wait for connection
  ib_write_bw <host>     connect to server at <host>

Options:
  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)
  -p, --port=<port>  Listen on/connect to port <port> (default 18515)
"""
CUDA_USAGE = ("      --use_cuda=<cuda device id> Use CUDA specific device for GPUDirect RDMA "
              "testing\n")


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _address(argv: list[str]) -> str | None:
    takes_value = {"-d", "-i", "-p", "-D", "-s", "-n", "-q", "-x"}
    for i, arg in enumerate(argv):
        if not arg.startswith("-") and (i == 0 or argv[i - 1] not in takes_value):
            return arg
    return None


def _fixture(env: str, default: str) -> str:
    return Path(os.environ.get(env) or FIXTURES / default).read_text(encoding="utf-8")


def install(folder: Path) -> Path:
    """A wrapper named `ib_write_bw` in `folder` that runs this replay with this Python;
    put `folder` first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "ib_write_bw"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def main(argv: list[str]) -> int:
    if "--help" in argv or "-h" in argv:
        sys.stdout.write(USAGE + (CUDA_USAGE if os.environ.get("PERFTEST_REPLAY_CUDA") == "1"
                                  else ""))
        return 1
    device, port = _value(argv, "-d"), int(_value(argv, "-p") or 18515)
    address = _address(argv)
    log = os.environ.get("PERFTEST_REPLAY_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"role": "client" if address else "server", "device": device,
                                "port": port, "argv": argv, "at": time.monotonic()}) + "\n")
    if device in os.environ.get("PERFTEST_REPLAY_BROKEN", "").split(","):
        sys.stderr.write(_fixture("", "debian-4.5-no-device.stderr"))
        return 1
    if address is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("", port))
            listener.listen(1)
            conn, _ = listener.accept()
        with conn:
            try:
                conn.sendall(b"replay\n")
                said = conn.recv(64)
            except OSError:  # reset: the client closed with our line unread
                said = b""
            if not said:
                sys.stderr.write("perftest-replay: the client closed the connection\n")
                return 1
        sys.stdout.write(_fixture("PERFTEST_REPLAY_SERVER", "deepops-server-mb.txt"))
        return 0
    try:
        conn = socket.create_connection((address, port), timeout=10)
    except OSError:
        sys.stderr.write(f"Couldn't connect to {address}:{port}\nUnable to open file "
                         "descriptor for socket connection Unable to init the socket "
                         "connection\n")
        return 1
    with conn:
        try:
            said = conn.recv(64)
            conn.sendall(b"done\n")
        except OSError:
            said = b""
        if not said:
            sys.stderr.write("perftest-replay: the server closed the connection\n")
            return 1
    sys.stdout.write(_fixture("PERFTEST_REPLAY_CLIENT",
                              "gbits-bidir-cpufreq-interleaved.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
