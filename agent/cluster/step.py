"""`python -m agent cluster`: this node's part of one cluster step (docs/cluster.md, "Between
the nodes"). Start the node's ranks (agent/cluster/rank.py), pass on their progress, watch
that none dies or stalls, and report one `cluster` event: the figures, or why there are
none.

The ranks are `python -c` children of the agent's own Python, importing the agent from
where it was loaded, as the node's all-reduce's are (agent/node/collective.py); their
stdout and stderr (NCCL's log among them) go to files, never pipes, so that a rank never
blocks on a full pipe while its peers wait on it in a collective. They hold a pipe on
stdin from this command and exit when it closes: whatever ends the command, SIGKILL
included, ends them too.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent import __version__
from agent.cluster import nccl_log, rank
from agent.network import counters, perftest
from agent.node import collective

SCHEMA = "fleet-cluster/1"
DEFAULT_TIMEOUT_S = 120.0
# The ranks' own timeout (the store's, gloo's, NCCL's watchdog) is the one that should
# fire, with torch's reason; this command kills them only if they say nothing for that
# long and this much more: a hung CUDA call, a rank stuck in NCCL's bootstrap. A rank
# says something at least every iteration done (rank.Reporter.tick), so a long phase of
# large sizes over a slow network is no silence.
GRACE_S = 30.0
POLL_S = 0.1
# INIT and ENV name each channel's transport and the settings read from the environment
# (as in the node's all-reduce); NET adds the network, its plugin and its NICs.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV"}
# A log this large is no NCCL INFO log of a few collectives; the rest is not read.
MAX_LOG_BYTES = 8 << 20
EXIT_OK = 0
EXIT_FAILED = rank.EXIT_FAILED

Emit = Callable[[Dict[str, Any]], None]


@dataclass
class Config:
    """One node's part of a step, as `python -m agent cluster`'s options say it."""

    address: str
    port: int
    nodes: int
    node_rank: int
    ranks_per_node: int
    backend: str = "auto"  # auto, nccl or gloo
    algo: Optional[str] = None
    interface: Optional[str] = None
    sizes: Optional[List[int]] = None  # None: rank.DEFAULT_SIZES for the backend
    # The collectives, in order: rank.PAIR_OPS unless asked (`--ops`, or `whole`).
    ops: Tuple[str, ...] = rank.PAIR_OPS
    # The whole cluster's step: its sizes rank.WHOLE_SIZES where `sizes` is None.
    whole: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    step_id: str = ""
    stop_on_eof: bool = False
    warmup: int = rank.WARMUP
    iterations: int = rank.ITERATIONS
    grace_s: float = GRACE_S
    # Where the RDMA ports' counters are read (agent/network/counters.py): the host's
    # sysfs; a test's copy of one.
    sysfs_root: str = "/"
    # After a pair's ranks: each active RDMA port against the other node's, with
    # perftest's ib_write_bw (agent/network/perftest.py), for this long each.
    nic_test: bool = False
    nic_duration_s: float = perftest.DURATION_S

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node


def gloo_interface(form: str, names: Sequence[str]) -> Optional[str]:
    """The interface gloo should use for NCCL_SOCKET_IFNAME's `form` among this host's
    interface `names`: gloo takes one exact name (or a list it round-robins, which every
    node would need the same length of), NCCL prefixes, `=` exact names, `^` exclusions."""
    exclude = form.startswith("^")
    body = form[1:] if exclude else form
    exact = body.startswith("=")
    parts = [p for p in (body[1:] if exact else body).split(",") if p]
    chosen = [n for n in names
              if any(n == p if exact else n.startswith(p) for p in parts) != exclude]
    return chosen[0] if chosen else None


def rank_environment(cfg: Config, environ: Dict[str, str]) -> Dict[str, str]:
    """The ranks' environment: the renter's own, NCCL's INFO log, and the step's settings."""
    env = dict(environ)
    env.update(NCCL_DEBUG_ENV)
    # The log must reach the ranks' own files to be read; where it goes moves no figure.
    env.pop("NCCL_DEBUG_FILE", None)
    # torchelastic's agent store would make every rank a client of a store nobody hosts.
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    # A collective that waits past the timeout aborts the communicator and ends the rank
    # (1 = TearDown), rather than leaving it waiting for a peer that is gone.
    env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    if cfg.algo:
        env["NCCL_ALGO"] = cfg.algo
    if cfg.interface:
        env["NCCL_SOCKET_IFNAME"] = cfg.interface
        try:
            names = [name for _, name in socket.if_nameindex()]
        except OSError:
            names = []
        gloo = gloo_interface(cfg.interface, names)
        if gloo:
            env["GLOO_SOCKET_IFNAME"] = gloo
    return env


# nccl-tests' bus bandwidth factor of each collective over n ranks (src/<op>.cu's GetBw
# at a0b82b2, NCCL_TESTS_VERSION 2.19.6; tests/fixtures/nccl-tests/busbw.cu keeps them and
# tests/agent/cluster/test_busbw.py reads them): busbw = size / time x the factor, the
# size being the whole buffer (the one reduced, the one gathered, the one scattered from,
# each rank's send buffer of an all-to-all). A pair's ranks run all_reduce and all_gather
# (rank.PAIR_OPS), the whole cluster's all four (rank.OPS).
BUSBW_FACTORS: Dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


def figure(row: Dict[str, Any]) -> Dict[str, Any]:
    """A figure of the event from a rank's row (per-iteration ms, max-reduced over the
    world), by nccl-tests' definitions (its doc/PERFORMANCE.md): algbw = size / time; an
    all_reduce's busbw = algbw x 2(n-1)/n, an all_gather's = algbw x (n-1)/n, n ranks.
    time_us, algbw_gbs and busbw_gbs are the median iteration's (of an even count, the
    slower of the middle two: one iteration that ran, so the three agree exactly)."""
    n = int(row["ranks"])
    factor = BUSBW_FACTORS[row["op"]](n)
    size = int(row["size_bytes"])
    ms = [float(t) for t in row["ms"] if float(t) > 0]
    if not ms:
        raise ValueError(f"{row['op']} of {size} bytes: no iteration took any time")
    samples = [size / (t / 1e3) / 1e9 * factor for t in ms]
    median_ms = statistics.median_high(ms)
    algbw = size / (median_ms / 1e3) / 1e9
    return {
        "op": row["op"], "size_bytes": size, "dtype": row["dtype"], "ranks": n,
        "warmup": int(row["warmup"]), "iterations": int(row["iterations"]),
        "checked": bool(row["checked"]),
        "time_us": _figure(median_ms * 1e3),
        "algbw_gbs": _figure(algbw),
        "busbw_gbs": _figure(algbw * factor),
        "busbw_min_gbs": _figure(min(samples)),
        "busbw_max_gbs": _figure(max(samples)),
        "samples_busbw_gbs": [_figure(s) for s in samples],
    }


def _figure(value: float) -> float:
    # Six significant digits, not decimals: gloo on a CPU moves 0.01 GB/s, InfiniBand 50.
    return float(f"{value:.6g}")


@dataclass
class _Rank:
    """One local rank as this command sees it: its process and what it has said."""

    local: int
    rank: int
    proc: "subprocess.Popen[bytes]"
    messages: str
    out: str
    err: str
    offset: int = 0
    pending: str = ""
    joined: bool = False
    said: List[Dict[str, Any]] = field(default_factory=list)

    def read(self) -> List[Dict[str, Any]]:
        """The JSON lines written since the last read."""
        with open(self.messages, "r", encoding="utf-8", errors="replace") as f:
            f.seek(self.offset)
            text = f.read(1 << 20)
            self.offset = f.tell()
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        new = []
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                new.append(message)
        self.said.extend(new)
        return new

    def log(self) -> str:
        parts = []
        for path in (self.out, self.err):
            with open(path, "rb") as f:
                parts.append(f.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
        return "\n".join(parts)

    def tail(self) -> str:
        with open(self.err, "rb") as f:
            f.seek(max(0, os.path.getsize(self.err) - 16384))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
        return " | ".join(lines[-3:])[-600:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()


class _Stop:
    """Why the command was told to stop, by stdin's end (--stop-on-eof) or a signal."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()


def _watch_stdin(stop: _Stop, stdin: int) -> None:
    def read() -> None:
        # The descriptor, not sys.stdin: a daemon thread blocked inside a buffered reader
        # aborts the interpreter's exit.
        try:
            while os.read(stdin, 4096):
                pass
        except (OSError, ValueError):
            pass
        stop.set("stopped by the controller")

    threading.Thread(target=read, name="stop-on-eof", daemon=True).start()


def _on_signals(stop: _Stop) -> Callable[[], None]:
    """SIGTERM, SIGINT and SIGHUP (an SSH channel gone) stop the step with its event
    printed, instead of ending the command without it; the undo puts them back."""
    saved: Dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)):
        if sig is None:
            continue
        # Outside the main thread signal() refuses: a caller's own handling stands.
        with contextlib.suppress(ValueError):
            saved[sig] = signal.signal(
                sig, lambda number, _frame: stop.set(
                    f"stopped by signal {signal.Signals(number).name}"))

    def undo() -> None:
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    return undo


def _start(cfg: Config, local: int, tmp: str, env: Dict[str, str]) -> _Rank:
    global_rank = cfg.node_rank * cfg.ranks_per_node + local
    paths = [os.path.join(tmp, f"rank{local}.{kind}") for kind in ("jsonl", "out", "err")]
    open(paths[0], "w").close()
    args = ["--address", cfg.address, "--port", str(cfg.port), "--rank", str(global_rank),
            "--local-rank", str(local), "--world", str(cfg.world),
            "--ranks-per-node", str(cfg.ranks_per_node), "--backend", cfg.backend,
            "--sizes", ",".join(str(s) for s in cfg.sizes or ()),
            "--ops", ",".join(cfg.ops), *(["--whole"] if cfg.whole else []),
            "--timeout-s", repr(cfg.timeout_s), "--warmup", str(cfg.warmup),
            "--iterations", str(cfg.iterations), "--messages", paths[0]]
    with open(paths[1], "wb") as out, open(paths[2], "wb") as err:
        proc = subprocess.Popen(
            rank.boot_command(sys.executable, collective.agent_root(), args),
            stdin=subprocess.PIPE, stdout=out, stderr=err, env=env, close_fds=True)
    return _Rank(local, global_rank, proc, messages=paths[0], out=paths[1], err=paths[2])


@dataclass
class _Outcome:
    errors: List[Dict[str, str]] = field(default_factory=list)
    rows: List[Dict[str, Any]] = field(default_factory=list)
    gpus: Dict[int, Dict[str, Any]] = field(default_factory=dict)
    backend: Optional[str] = None


def _watch(cfg: Config, ranks: List[_Rank], stop: _Stop,
           progress: Callable[[str], None]) -> _Outcome:
    """Follow the ranks until all are done, one fails, they stall, or the step is stopped."""
    outcome = _Outcome()
    stall_s = cfg.timeout_s + cfg.grace_s
    last_word = time.monotonic()
    doing = "starting the ranks"
    failed_at: Optional[float] = None
    while True:
        # The statuses before the messages: whatever a rank wrote before it exited is then
        # read in this same pass (its last figure, its reason).
        codes = [r.proc.poll() for r in ranks]
        for r in ranks:
            for message in r.read():
                last_word = time.monotonic()
                kind = message.get("kind")
                if kind == "progress" or kind == "joined":
                    r.joined = r.joined or kind == "joined"
                    doing = str(message.get("message", ""))[:200]
                    if r.local == 0:
                        progress(doing)
                elif kind == "gpu":
                    outcome.gpus[r.local] = {k: message.get(k) for k in ("index", "uuid",
                                                                           "name")}
                elif kind == "backend":
                    outcome.backend = str(message.get("backend"))
                elif kind == "figure" and r.local == 0:
                    outcome.rows.append(message)
                elif kind == "error":
                    stage = str(message.get("stage", "rank"))[:32]
                    if all(e["stage"] != stage for e in outcome.errors):
                        outcome.errors.append(
                            {"stage": stage, "message": str(message.get("message"))[:800]})
        if stop.event.is_set():
            outcome.errors = [{"stage": "stopped", "message": stop.reason}]
            return outcome
        if all(code == 0 for code in codes):
            return outcome
        now = time.monotonic()
        if any(code not in (None, 0) for code in codes):
            # The others most often fail of the same cause a moment later: a second to
            # hear their reasons, then the rest are killed.
            failed_at = failed_at or now
            if all(code is not None for code in codes) or now - failed_at > 1.0:
                for i, r in enumerate(ranks):
                    code = codes[i]
                    if code not in (None, 0) and not any(
                            m.get("kind") == "error" for m in r.said):
                        outcome.errors.append({"stage": "rank", "message": (
                            f"rank {r.rank} (local {r.local}) "
                            + (f"was killed by signal {-code}" if code is not None and code < 0
                               else f"exited {code}")
                            + f" during: {doing}: {r.tail()}")[:800]})
                        break
                return outcome
        elif now - last_word > stall_s:
            if not all(r.joined for r in ranks):
                outcome.errors.append({"stage": "rendezvous", "message": (
                    f"could not join the rendezvous {cfg.address}:{cfg.port} within "
                    f"{cfg.timeout_s:g} s: the ranks said nothing for {stall_s:g} s and "
                    "were killed")})
            else:
                outcome.errors.append({"stage": "timeout", "message": (
                    f"the ranks said nothing for {stall_s:g} s after: {doing}; killed")})
            return outcome
        stop.event.wait(POLL_S)


def port_taken(address: str, port: int) -> Optional[str]:
    """Why the store cannot listen on address:port on this node (another process listens
    there), or None. Bound as torch's store binds (SO_REUSEADDR, so that the check's own
    connections in TIME_WAIT do not count) and never listened on. A port taken after
    `fleet cluster check` would otherwise take the other nodes' connections into the
    wrong listener, where they wait out the timeout (issue 57: 50 s on loopback) before
    anyone says why. Where the address is not this host's own the store takes every
    address, and so does this."""
    try:
        family, _, _, _, where = socket.getaddrinfo(address, port, 0, socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError):
        family, where = socket.AF_INET, ("", port)
    wildcard = ("::" if family == socket.AF_INET6 else "", port)
    for place in (where, wildcard):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(place)
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL and place is where:
                    continue
                if exc.errno == errno.EADDRINUSE:
                    return (f"port {port} of {address} is taken on this node: another "
                            "process listens there since the check (address already in "
                            "use); free it or set the cluster's rendezvous_port")
                return None  # torch's store says the rest in its own words
            return None
    return None


def run(cfg: Config, emit: Emit, environ: Optional[Dict[str, str]] = None,
        stdin: int = 0) -> Tuple[Dict[str, Any], int]:
    """Run this node's part of the step: the `cluster` event's body and the exit status.
    `stdin`: the descriptor whose end stops the step under --stop-on-eof."""
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    def progress(message: str) -> None:
        emit({"event": "progress", "stage": "cluster", "message": message,
              "elapsed_s": round(time.monotonic() - started, 3)})

    stop = _Stop()
    if cfg.stop_on_eof:
        _watch_stdin(stop, stdin)
    undo = _on_signals(stop)
    env = rank_environment(cfg, dict(os.environ if environ is None else environ))
    progress(f"starting {cfg.ranks_per_node} ranks of {cfg.world} "
             f"(node {cfg.node_rank} of {cfg.nodes}), meeting at {cfg.address}:{cfg.port}")
    ranks: List[_Rank] = []
    # Each RDMA port's error counters around the ranks' traffic: a link that flapped or
    # erred during the step is named, NIC and port.
    before = counters.read_counters(cfg.sysfs_root)
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-cluster-") as tmp:
            try:
                taken = port_taken(cfg.address, cfg.port) if cfg.node_rank == 0 else None
                if taken:
                    outcome = _Outcome(errors=[{"stage": "rendezvous", "message": taken}])
                else:
                    for local in range(cfg.ranks_per_node):
                        ranks.append(_start(cfg, local, tmp, env))
                    outcome = _watch(cfg, ranks, stop, progress)
            except OSError as exc:
                outcome = _Outcome(errors=[{"stage": "ranks", "message": (
                    f"could not start the ranks: {exc}")[:800]}])
            finally:
                for r in ranks:
                    r.stop()
            logs = [r.log() for r in ranks]
        # A pair's NICs, one by one, on the step's port, free now that its ranks have
        # exited; still under the signal handlers, which stop them; before the counters'
        # second read, so that the counters span their traffic too.
        nics: Optional[Dict[str, Any]] = None
        if cfg.nic_test and cfg.nodes == 2 and not cfg.whole and not outcome.errors:
            nics = perftest.pair_test(cfg.node_rank, cfg.address, cfg.port, cfg.sysfs_root,
                                      duration_s=cfg.nic_duration_s, progress=progress,
                                      gpu_for=perftest.gpu_near(cfg.sysfs_root),
                                      stop=stop.event)
    finally:
        undo()
    counted = counters.rises(before, counters.read_counters(cfg.sysfs_root))
    figures: List[Dict[str, Any]] = []
    if not outcome.errors:
        try:
            figures = [figure(row) for row in outcome.rows]
        except (KeyError, TypeError, ValueError) as exc:
            outcome.errors.append({"stage": "figures", "message": str(exc)[:800]})
            figures = []
    backend = cfg.backend if cfg.backend != "auto" else outcome.backend
    body = {
        "schema": SCHEMA,
        "agent_version": __version__,
        "hostname": socket.gethostname()[:253],
        "step": {"id": cfg.step_id or None, "nodes": cfg.nodes, "node_rank": cfg.node_rank,
                 "ranks_per_node": cfg.ranks_per_node, "world": cfg.world,
                 "address": cfg.address, "port": cfg.port},
        "backend": backend,
        "algo": cfg.algo,
        "settings": collective.settings(env, ("NCCL_", "GLOO_")),
        "gpus": [outcome.gpus[k] for k in sorted(outcome.gpus)],
        "figures": figures,
        "transport": nccl_log.transport(logs),
        "started_at": started_at,
        "wall_s": round(time.monotonic() - started, 3),
        "errors": outcome.errors,
        "counters": counted,
        "nics": nics,
    }
    return body, (EXIT_FAILED if outcome.errors else EXIT_OK)


def main(cfg: Config, emit: Emit) -> int:
    """Run the step and print its one `cluster` event, whatever happened."""
    body, status = run(cfg, emit)
    emit({"event": "cluster", "cluster": body})
    return status
