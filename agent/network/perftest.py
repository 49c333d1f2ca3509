"""A per-NIC RDMA bandwidth test between the two nodes of a cluster pair step, with
perftest's `ib_write_bw` (issue 57, item 4): the i-th active RDMA port of node 0 against
the i-th of node 1, one at a time, each named, with GPUDirect where the binary and the
caller allow it. The all-reduce of the pair step says how fast the pair is; this says
which NIC is slow.

How perftest behaves (linux-rdma/perftest; Debian's 4.5 observed; tests/fixtures/perftest/
has the outputs): the server takes one client and prints its report too; the client does
not retry (`Couldn't connect to H:P`, exit 1), so it is retried here while the next
port's server is not up yet; every failure exits 1; MB/sec (to 24.04) and MiB/sec (after)
are both 2^20 bytes, `--report_gbits` gives Gb/sec; `-D` reports no peak; distro builds
have no `--use_cuda`, so GPUDirect only where `--help` lists it.

One side failing before it reached the other (no device, a refused option) would leave
the other side's run paired with the next port's: the failing side stands in for it on
the TCP port (accepts, or connects, once and closes), so the i-th runs stay paired.

Every subprocess has a time limit and is killed and reaped on every path: nothing
outlives the call. Standard library only, Python 3.8.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.network import distance, sysfs

TOOL = "ib_write_bw"
NOT_INSTALLED = f"{TOOL} is not installed (Debian/Ubuntu: apt-get install perftest)"
NO_PORT = "no active RDMA port"
# 8 MiB messages, as Azure's GPUDirect check sends (azurehpc-health-checks,
# azure_ib_write_bw_gdr.nhc): large enough to reach a 400 Gb/s link's rate.
MESSAGE_SIZE = 8388608
DURATION_S = 5.0
# How long one side waits for the other: the server for its client, the client for a
# server to listen (the other node may still be ending its ranks, or testing the port
# before).
WAIT_S = 60.0
# A run, once connected, past its duration by this much (CUDA's start, the QPs' set-up,
# the reports' exchange) is killed.
MARGIN_S = 30.0
RETRY_S = 0.5
# The two sides first exchange their ports on the step's port (`_exchange`): a line
# each, this tag first, so that a stray listener (the step's store, not yet gone) is
# told apart and tried again.
TAG = "fleet-nic/1 "
LINE_S = 3.0
POLL_S = 0.05
KILL_WAIT_S = 10.0
MAX_TESTS = 32
MAX_TEXT = 300
_READ_LIMIT = 1 << 20
_LINK_LAYERS = ("InfiniBand", "Ethernet")
_UNIT_GBITS = {"Gb": 1.0, "MB": 2 ** 20 * 8 / 1e9, "MiB": 2 ** 20 * 8 / 1e9}
_HEADER = re.compile(r"BW average\[(Gb|MiB|MB)/sec\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)(?:\s+([\d.]+))?")
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")
# What perftest says when it stopped before reaching the other side.
_BEFORE_PEER = ("Did not detect devices", "No IB devices found",
                "Unable to find the Infiniband/RoCE device", "Invalid Command or flag",
                "Parser function exited with Error", "unrecognized option",
                "Unsupported memory type")

Progress = Callable[[str], None]
GpuFor = Callable[[str], Optional[int]]


def _natural(name: str) -> List[Any]:
    """"mlx5_2" before "mlx5_10"."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", name) if part]


def _rate(text: Optional[str]) -> Optional[float]:
    found = _RATE.match(text or "")
    return float(found.group(1)) if found else None


def _active(state: Optional[str]) -> bool:
    # "4: ACTIVE" in sysfs (ib_port_state_str in drivers/infiniband/core/sysfs.c)
    return (state or "").split(":")[-1].strip().upper() == "ACTIVE"


def ports(root: str = "/") -> List[Dict[str, Any]]:
    """Every InfiniBand or RoCE port of a device on a bus (soft-RoCE and soft-iWARP,
    which the kernel emulates over any Ethernet interface, measure nothing of the
    fabric), in natural order: {"device", "port", "link_layer", "rate_gbps", "active"};
    at most MAX_TESTS."""
    found = []
    for device in sysfs.read_rdma(root):
        if device["virtual"]:
            continue
        for port in device["ports"]:
            if port["link_layer"] in _LINK_LAYERS:
                found.append({"device": device["name"], "port": port["port"],
                              "link_layer": port["link_layer"],
                              "rate_gbps": _rate(port["rate"]),
                              "active": _active(port["state"])})
    found.sort(key=lambda d: (_natural(d["device"]), d["port"]))
    return found[:MAX_TESTS]


def devices(root: str = "/") -> List[Dict[str, Any]]:
    """The node's RDMA ports to test: the Active ones of `ports`."""
    return [p for p in ports(root) if p["active"]]


def name(port: Dict[str, Any]) -> str:
    """"mlx5_0/1": how a port is named to the other node and in the event."""
    return f"{port['device']}/{port['port']}"


def plan(first: List[Dict[str, Any]], second: List[Dict[str, Any]]
         ) -> Tuple[List[Tuple[str, str]], Dict[str, str], Dict[str, str], str]:
    """Which port of node 0 meets which of node 1, the same on both nodes: by name where
    the nodes' ports share names (an 8-rail node's mlx5_3 is on the other's mlx5_3's
    rail), else the i-th Active port with the i-th. (pairs of names, in node 0's order;
    why each Active port of node 0 is not in a pair; the same of node 1; "name" or
    "order")."""
    names = [{name(p): p for p in side} for side in (first, second)]
    active = [[n for n, p in side.items() if p["active"]] for side in names]
    left: List[Dict[str, str]] = [{}, {}]
    if set(names[0]) & set(names[1]):
        pairs = [(n, n) for n in active[0] if n in active[1]]
        for me, other in ((0, 1), (1, 0)):
            for n in active[me]:
                if n not in names[other]:
                    left[me][n] = f"the other node has no {n}"
                elif n not in active[other]:
                    left[me][n] = f"the other node's {n} is not Active"
        return pairs, left[0], left[1], "name"
    # indexed, not zip(strict=...): the agent runs on Python 3.8
    pairs = [(active[0][i], active[1][i]) for i in range(min(len(active[0]), len(active[1])))]
    for me, other in ((0, 1), (1, 0)):
        for n in active[me][len(active[other]):]:
            left[me][n] = "the other node has fewer Active ports"
    return pairs, left[0], left[1], "order"


def _line(sock: socket.socket, wait_s: float) -> Optional[Dict[str, Any]]:
    """One tagged line from `sock`, or None (another listener, garbage, silence)."""
    sock.settimeout(wait_s)
    data = b""
    try:
        while b"\n" not in data and len(data) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    text = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    if not text.startswith(TAG):
        return None
    try:
        said = json.loads(text[len(TAG):])
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def _exchange(role: str, address: str, port: int, mine: Dict[str, Any], wait_s: float,
              stop: threading.Event) -> Optional[Dict[str, Any]]:
    """Each node's ports and whether it tests, swapped over the step's port (node 0
    listens, node 1 connects, node 1 closes first so that the port is free for
    perftest's server at once); the other node's, or None after `wait_s`."""
    payload = (TAG + json.dumps(mine) + "\n").encode()
    deadline = time.monotonic() + wait_s
    if role == "client":
        while time.monotonic() < deadline and not stop.is_set():
            try:
                with socket.create_connection((address, port), timeout=LINE_S) as sock:
                    sock.sendall(payload)
                    said = _line(sock, LINE_S)
                if said is not None:
                    return said
            except OSError:
                pass
            stop.wait(RETRY_S)
        return None
    listener: Optional[socket.socket] = None
    while listener is None and time.monotonic() < deadline and not stop.is_set():
        try:
            listener = _listener(port)
        except OSError:  # the step's store, not yet gone
            stop.wait(RETRY_S)
    if listener is None:
        return None
    with listener:
        while True:
            conn = _accept(listener, deadline, stop)
            if conn is None:
                return None
            with conn:
                said = _line(conn, LINE_S)
                if said is None:
                    continue
                try:
                    conn.sendall(payload)
                    _line(conn, LINE_S)  # until node 1 has closed
                except OSError:
                    pass
                return said


def _accept(sock: socket.socket, deadline: float, stop: threading.Event
            ) -> Optional[socket.socket]:
    """The next connection to listening `sock`, or None at `deadline`, on `stop` or on
    an error."""
    sock.settimeout(RETRY_S)
    while time.monotonic() < deadline and not stop.is_set():
        try:
            return sock.accept()[0]
        except socket.timeout:
            continue
        except OSError:
            return None
    return None


def gpu_near(root: str = "/") -> GpuFor:
    """A `gpu_for` for pair_test: the first GPU in PCI order under the NIC's PCIe switch
    (PIX or PXB, NCCL's default NCCL_NET_GDR_LEVEL), by its PCI-order index (CUDA's on a
    board of one GPU model); None: the NIC is tested from host memory."""
    gpus = sysfs.read_gpus(root)
    nics = {d["name"]: d for d in sysfs.read_rdma(root)}

    def near(device: str) -> Optional[int]:
        nic = nics.get(device)
        if nic is None:
            return None
        for gpu in gpus:
            level = distance.sysfs_distance(gpu["path"], nic["device_path"],
                                            gpu["numa_node"], nic["numa_node"])
            if level in ("PIX", "PXB"):
                return int(gpu["index"])
        return None
    return near


def _sig(value: float) -> float:
    return float(f"{value:.6g}")


def parse(text: str) -> Optional[Dict[str, Any]]:
    """The result under the table's header ("BW average[...]"), its last row where there
    are several (`-a`: the largest size): {"bytes", "iterations", "peak_gbps",
    "average_gbps", "msg_rate_mpps"}, bandwidths in Gb/s (10^9 bits); a peak of 0 (not
    measured: `-D`, many iterations) is None. None where no row follows a header. Lines
    that are no row (stderr merged in, a warning) are passed over."""
    factor: Optional[float] = None
    row: Optional[Dict[str, Any]] = None
    for line in text.splitlines():
        header = _HEADER.search(line)
        if header:
            factor = _UNIT_GBITS[header.group(1)]
            continue
        found = _ROW.match(line) if factor is not None else None
        if factor is None or not found:
            continue
        peak = float(found.group(3)) * factor
        row = {"bytes": int(found.group(1)), "iterations": int(found.group(2)),
               "peak_gbps": _sig(peak) if peak > 0 else None,
               "average_gbps": _sig(float(found.group(4)) * factor),
               "msg_rate_mpps": float(found.group(5)) if found.group(5) else None}
    return row


def _bound(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


def reason(text: str, returncode: Optional[int]) -> str:
    """One line why a run gave no figure: perftest's own words recognised, else its last
    lines; at most MAX_TEXT characters."""
    if "Did not detect devices" in text or "No IB devices found" in text:
        return "no RDMA device detected (perftest: Did not detect devices; is the driver up?)"
    found = re.search(r"IB device (\S+) not found", text)
    if found:
        return _bound(f"IB device {found.group(1)} not found")
    found = re.search(r"Couldn't connect to (\S+?):(\d+)", text)
    if found:
        return _bound(f"couldn't connect to {found.group(1)}:{found.group(2)}: no "
                      "ib_write_bw server listened there")
    found = re.search(r"Couldn't listen to port (\d+)", text)
    if found:
        return f"couldn't listen to port {found.group(1)}: another process holds it"
    found = re.search(r"unrecognized option '([^']*)'", text)
    if found:
        return _bound(f"this {TOOL} does not know {found.group(1)}")
    if "Unsupported memory type" in text:
        return f"this {TOOL} was built without CUDA (Unsupported memory type)"
    if "Invalid Command or flag" in text:
        return f"{TOOL} refused its command line (Invalid Command or flag)"
    # the table's rules say nothing; tabs and runs of spaces are collapsed
    lines = [" ".join(line.split()) for line in text.splitlines()
             if line.strip() and not set(line.strip()) <= {"-", "*"}]
    tail = " | ".join(lines[-3:]) or "no output"
    if returncode is None:
        head = f"{TOOL} did not end"
    elif returncode < 0:
        head = f"{TOOL} was killed by signal {-returncode}"
    elif returncode == 0:
        head = f"{TOOL} gave no figure"
    else:
        head = f"{TOOL} exited {returncode}"
    return _bound(f"{head}: {tail}")


def available(timeout_s: float = 10.0) -> Dict[str, Any]:
    """{"path": where ib_write_bw is, or None; "cuda": whether it takes --use_cuda (its
    --help lists it; -h exits 1, as every perftest exit that is no test does)}."""
    path = shutil.which(TOOL)
    if path is None:
        return {"path": None, "cuda": False}
    _, out, err = _run([path, "--help"], timeout_s)
    return {"path": path, "cuda": "--use_cuda" in out + err}


def _run(argv: List[str], timeout_s: float) -> Tuple[Optional[int], str, str]:
    """A short command's exit status (None: killed at its limit), stdout and stderr."""
    proc = _Proc(argv)
    try:
        code = proc.finish(timeout_s)
        return code, proc.out(), proc.err()
    finally:
        proc.close()


class _Proc:
    """One perftest process, its output in files (a full pipe never blocks it), killed
    and reaped on close whatever happened."""

    def __init__(self, argv: List[str]) -> None:
        # closed in close(), after the process is reaped
        self.files = [tempfile.TemporaryFile() for _ in range(2)]  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=self.files[0], stderr=self.files[1],
                                         close_fds=True)
        except BaseException:
            self._close_files()
            raise
        self.started = time.monotonic()

    def finish(self, timeout_s: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        # A perftest stuck in the kernel on a broken device ignores SIGKILL until the
        # driver lets go: the step's report must not wait on it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_WAIT_S)

    def _read(self, index: int) -> str:
        handle = self.files[index]
        handle.seek(0)
        return handle.read(_READ_LIMIT).decode("utf-8", "replace")

    def out(self) -> str:
        return self._read(0)

    def err(self) -> str:
        return self._read(1)

    def _close_files(self) -> None:
        for handle in self.files:
            handle.close()

    def close(self) -> None:
        try:
            self.kill()
        finally:
            self._close_files()


def _established(port: int) -> Optional[bool]:
    """Whether a TCP connection to this host's `port` is established (a client reached
    the server), from /proc/net/tcp{,6}; None where they cannot be read. perftest's
    stdout, buffered into a file, says nothing until it exits."""
    seen = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii", errors="replace") as fh:
                lines = fh.read(_READ_LIMIT).splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "01" and \
                    fields[1].rsplit(":", 1)[-1] == f"{port:04X}":
                return True
    return False if seen else None


def _listener(port: int) -> socket.socket:
    """A socket listening on `port` of every address, IPv6 and IPv4 where it can."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("", port))
        sock.listen(1)
    except OSError:
        sock.close()
        raise
    return sock


def _stand_in_server(port: int, wait_s: float, stop: threading.Event) -> None:
    """Take and drop the client of a run whose server failed early: its next port's run
    then meets the next server."""
    try:
        sock = _listener(port)
    except OSError:
        return
    with sock:
        conn = _accept(sock, time.monotonic() + wait_s, stop)
        if conn is not None:
            conn.close()


def _stand_in_client(address: str, port: int, wait_s: float,
                     stop: threading.Event) -> None:
    """Reach and leave the server of a run whose client failed early: the next port's
    server then takes the next client."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not stop.is_set():
        try:
            socket.create_connection((address, port), timeout=RETRY_S).close()
            return
        except OSError:
            stop.wait(RETRY_S)


def _argv(path: str, nic: Dict[str, Any], port: int, duration_s: float,
          gpu: Optional[int], address: Optional[str]) -> List[str]:
    argv = [path, "-d", nic["device"], "-i", str(nic["port"]), "-p", str(port), "-F",
            "--report_gbits", "-D", str(max(1, round(duration_s))),
            "-s", str(MESSAGE_SIZE)]
    if gpu is not None:
        argv.append(f"--use_cuda={gpu}")
    if address is not None:
        argv.append(address)
    return argv


def _serve(argv: List[str], port: int, wait_s: float, run_s: float,
           stop: threading.Event) -> Tuple[Optional[int], str, str, Optional[str]]:
    """One server run: exit status, stdout, stderr, and why it was killed (None if not)."""
    proc = _Proc(argv)
    try:
        connected: Optional[float] = None
        while True:
            code = proc.proc.poll()
            if code is not None:
                return code, proc.out(), proc.err(), None
            now = time.monotonic()
            if stop.is_set():
                proc.kill()
                return None, proc.out(), proc.err(), "stopped"
            if connected is None and _established(port):
                connected = now
            if connected is None and now - proc.started > wait_s:
                proc.kill()
                return None, proc.out(), proc.err(), (
                    f"no client connected within {wait_s:g} s")
            if now - (connected or proc.started + wait_s) > run_s:
                proc.kill()
                return None, proc.out(), proc.err(), (
                    f"ran past its {run_s:g} s limit after its client connected; killed")
            stop.wait(POLL_S)
    finally:
        proc.close()


def _connect(argv: List[str], address: str, port: int, wait_s: float, run_s: float,
             stop: threading.Event) -> Tuple[Optional[int], str, str, Optional[str]]:
    """One client run, retried while no server listens: exit status, stdout, stderr, and
    why it gave up or was killed (None if it did not)."""
    deadline = time.monotonic() + wait_s
    while True:
        proc = _Proc(argv)
        try:
            while proc.proc.poll() is None and not stop.is_set() and \
                    time.monotonic() - proc.started <= run_s:
                stop.wait(POLL_S)
            code = proc.proc.poll()
            killed = None if code is not None else (
                "stopped" if stop.is_set() else f"ran past its {run_s:g} s limit; killed")
            out, err = proc.out(), proc.err()
        finally:
            proc.close()
        if killed or "Couldn't connect" not in err + out:
            return code, out, err, killed
        if time.monotonic() + RETRY_S > deadline or stop.is_set():
            return code, out, err, (
                f"no server listened on {address}:{port} within {wait_s:g} s")
        stop.wait(RETRY_S)


def _test(nic: Dict[str, Any], peer: Optional[str], gbps: Optional[float] = None,
          peak: Optional[float] = None, gdr: bool = False, seconds: float = 0.0,
          error: Optional[str] = None) -> Dict[str, Any]:
    return {"device": nic["device"][:MAX_TEXT], "port": nic["port"],
            "peer": peer, "rate_gbps": nic["rate_gbps"], "gbps": gbps, "peak_gbps": peak,
            "gdr": gdr, "seconds": round(seconds, 3),
            "error": None if error is None else _bound(error)}


def pair_test(node_rank: int, address: str, port: int, root: str = "/",
              duration_s: float = DURATION_S, timeout_s: float = WAIT_S,
              gpu_for: Optional[GpuFor] = None, progress: Optional[Progress] = None,
              margin_s: float = MARGIN_S,
              stop: Optional[threading.Event] = None) -> Dict[str, Any]:
    """This node's side of the pair's NIC tests, the `cluster` event's `nics`: node 0
    serves on `port` (the step's own, free once its ranks have exited), node 1 connects
    to `address`. First the nodes swap their ports and whether they can test
    (`_exchange`), so that a node that cannot is known at once, and both meet port to
    port as `plan` pairs them; then each pair in turn. `timeout_s`: how long one side
    waits for the other; `gpu_for(device)`: the GPU whose memory the NIC should read
    and write (GPUDirect), or None for host memory; `stop` set ends the run under way
    (killed) and the rest. {"tool", "role", "skipped", "paired_by", "tests": [{"device",
    "port", "peer", "rate_gbps", "gbps", "peak_gbps", "gdr", "seconds", "error"}]}."""
    role = "server" if node_rank == 0 else "client"
    result: Dict[str, Any] = {"tool": TOOL, "role": role, "skipped": None,
                              "paired_by": None, "tests": []}
    tool = available()
    mine = ports(root)
    if tool["path"] is None:
        result["skipped"] = NOT_INSTALLED
    elif not any(p["active"] for p in mine):
        result["skipped"] = NO_PORT
    stop = stop or threading.Event()
    said = _exchange(role, address, port, {"skipped": result["skipped"], "ports": [
        {k: p[k] for k in ("device", "port", "rate_gbps", "active")} for p in mine]},
        timeout_s, stop)
    if result["skipped"] is not None:
        return result
    if said is None:
        result["skipped"] = (f"the other node did not answer on port {port} within "
                             f"{timeout_s:g} s: its step may have failed (the step's "
                             "error says), or the port is blocked between the nodes")
        return result
    if said.get("skipped"):
        result["skipped"] = _bound(f"the other node: {said['skipped']}")
        return result
    # The other node's words, as any host's, bounded and typed before they are used.
    theirs = [{"device": p["device"][:64], "port": p["port"],
               "active": p.get("active") is True}
              for p in (said.get("ports") or [])[:MAX_TESTS] if isinstance(p, dict)
              and isinstance(p.get("device"), str) and isinstance(p.get("port"), int)]
    first, second = (mine, theirs) if role == "server" else (theirs, mine)
    pairs, left_first, left_second, result["paired_by"] = plan(first, second)
    by_name = {name(p): p for p in mine}
    left = left_first if role == "server" else left_second
    for a, b in pairs:
        if stop.is_set():
            break
        mine_name, peer = (a, b) if role == "server" else (b, a)
        nic = by_name[mine_name]
        gpu = gpu_for(nic["device"]) if gpu_for is not None and tool["cuda"] else None
        if progress is not None:
            progress(f"testing {mine_name} against the other node's {peer} with {TOOL}"
                     + (f", GPUDirect from GPU {gpu}" if gpu is not None else ""))
        argv = _argv(tool["path"], nic, port, duration_s, gpu,
                     None if role == "server" else address)
        started = time.monotonic()
        run_s = duration_s + margin_s
        if role == "server":
            code, out, err, killed = _serve(argv, port, timeout_s, run_s, stop)
        else:
            code, out, err, killed = _connect(argv, address, port, timeout_s, run_s, stop)
        figure = parse(out) if code == 0 else None
        error = None
        if figure is None:
            error = killed if killed else reason(err + "\n" + out, code)
            if any(words in err + out for words in _BEFORE_PEER):
                if role == "server":
                    _stand_in_server(port, timeout_s, stop)
                else:
                    _stand_in_client(address, port, timeout_s, stop)
        result["tests"].append(_test(
            nic, peer, figure["average_gbps"] if figure else None,
            figure["peak_gbps"] if figure else None, gpu is not None,
            time.monotonic() - started, error))
    for n, why in left.items():
        result["tests"].append(_test(by_name[n], None, error=why))
    return result
