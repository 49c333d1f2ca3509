"""Reaching the rendezvous for real: a listener on the rendezvous host, a connection from
every other node, and rendezvous.py's go / no-go from what each node saw.

Each side is a few lines of Python's standard library passed to the host's own `python:`
with `-c`, the address and port as arguments (quoted, never put into the code): no agent,
no upload, nothing written on the hosts and nothing stored. The listener binds the address
the nodes will use; where that address is not one of the host's own (a public IP behind
the provider's NAT) it takes every address instead, as torch's TCPStore does, and says so.
It exits once every expected node has connected or after its own timeout, and the
controller stops it in any case, on failure and on Ctrl-C too, so that the port is free
for the ranks that follow.

A node fleet cannot reach over SSH sends no report, and its SSH error is kept beside the
decision; such a node would fail its own suite, so when the inventory does not name the
rendezvous host, the first host fleet reaches is chosen, as the probe would choose it.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fleet.cluster.meeting import MeetingPoint, as_reached, meeting_points
from fleet.cluster.rendezvous import Decision, Reach, Rendezvous, choose_rendezvous, decide
from fleet.cluster.slurm_check import check_slurm
from fleet.errors import ClusterError, FleetError, InputError
from fleet.inventory import LoadedInventory, Target
from fleet.inventory.clusters import Cluster
from fleet.transport import open_transport
from fleet.transport.base import (
    Cancelled,
    Process,
    RunTimeout,
    Transport,
    TransportError,
    last_lines,
)
from fleet.transport.hostkeys import KnownHosts
from fleet.transport.ssh import SshOptions, plan_ssh
from fleet.words import counted

MAX_ERROR = 200  # a node's error text is the remote's; keep a line of it

DEFAULT_TIMEOUT_S = 5.0  # a node's connection attempt
START_S = 30.0  # for the host's python to start and answer, over SSH, on a busy host
PARALLEL = 32  # nodes connecting (over SSH, then to the rendezvous) at once
MARK = "fleet-reach "  # before each answer line: a login's own output is not an answer

# On the rendezvous host: ADDRESS PORT PEERS WAIT. Python 3.8+, the agent's oldest.
LISTENER = """\
import errno, json, socket, sys, time
address, port, peers, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def say(**fields):
    print("fleet-reach " + json.dumps(fields), flush=True)
def listen(family, where):
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(where)
    server.listen(peers + 16)
    return server
note = ""
try:
    family, _, _, _, where = socket.getaddrinfo(address, port, 0, socket.SOCK_STREAM)[0]
except (socket.gaierror, UnicodeError) as exc:  # UnicodeError: a label over 63 characters
    family, where = socket.AF_INET, ("", port)
    note = "does not resolve there (%s)" % (getattr(exc, "strerror", None) or exc)
try:
    try:
        server = listen(family, where)
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise
        where, note = ("::" if family == socket.AF_INET6 else "", port), "is not its own"
        server = listen(family, where)
except OSError as exc:
    say(error="cannot listen on %s port %d: %s" % (address, port, exc.strerror or exc))
    sys.exit(1)
say(listening=where[0] or "0.0.0.0", note=note)
end, came = time.monotonic() + wait, 0
while came < peers and time.monotonic() < end:
    server.settimeout(max(end - time.monotonic(), 0.01))
    try:
        connection, peer = server.accept()
    except socket.timeout:
        break
    connection.close()
    came += 1
say(done=came)
"""

# On every other node: ADDRESS PORT TIMEOUT. The errors are the OS's own words, which
# rendezvous.py reads to name the fix.
CONNECTOR = """\
import json, socket, sys, time
address, port, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
start = time.monotonic()
try:
    socket.create_connection((address, port), wait).close()
    answer = {"reached": True, "seconds": time.monotonic() - start}
except socket.timeout:
    answer = {"reached": False, "error": "timed out after %g s" % wait}
except (socket.gaierror, UnicodeError) as exc:  # UnicodeError: a label over 63 characters
    answer = {"reached": False, "error": "cannot resolve %s: %s" % (
        address, getattr(exc, "strerror", None) or exc)}
except Exception as exc:
    answer = {"reached": False, "error": getattr(exc, "strerror", None) or str(exc)}
print("fleet-reach " + json.dumps(answer), flush=True)
"""


# On every node, the second phase: TIMEOUT then ADDRESS PORT pairs, each tried at once
# (a thread each): one answer line per meeting point, so that a node that will meet 63
# others takes one timeout, not 63.
CONNECTOR_MANY = """\
import json, socket, sys, threading, time
wait, targets = float(sys.argv[1]), sys.argv[2:]
def attempt(address, port):
    start = time.monotonic()
    try:
        socket.create_connection((address, int(port)), wait).close()
        answer = {"reached": True, "seconds": time.monotonic() - start}
    except socket.timeout:
        answer = {"reached": False, "error": "timed out after %g s" % wait}
    except (socket.gaierror, UnicodeError) as exc:
        answer = {"reached": False, "error": "cannot resolve %s: %s" % (
            address, getattr(exc, "strerror", None) or exc)}
    except Exception as exc:
        answer = {"reached": False, "error": getattr(exc, "strerror", None) or str(exc)}
    answer.update(address=address, port=int(port))
    with said:  # print writes the line and its end apart: two threads would mix them
        sys.stdout.write("fleet-reach " + json.dumps(answer) + "\\n")
        sys.stdout.flush()
said = threading.Lock()
threads = [threading.Thread(target=attempt, args=(targets[i], targets[i + 1]))
           for i in range(0, len(targets), 2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def listener_script(python: str, address: str, port: int, peers: int, wait_s: float) -> str:
    """sh that runs the listener with `python` until `peers` nodes connected or `wait_s`."""
    args = (python, "-c", LISTENER, address, str(port), str(peers), f"{wait_s:g}")
    return "exec " + " ".join(shlex.quote(a) for a in args)


def connector_many_script(python: str, points: Sequence[MeetingPoint], timeout_s: float
                          ) -> str:
    """sh that tries a TCP connection to every one of `points` at once with `python`."""
    args = [python, "-c", CONNECTOR_MANY, f"{timeout_s:g}"]
    for point in points:
        args += [point.address, str(point.port)]
    return "exec " + " ".join(shlex.quote(a) for a in args)


def connector_script(python: str, address: str, port: int, timeout_s: float) -> str:
    """sh that tries one TCP connection to address:port with `python`."""
    args = (python, "-c", CONNECTOR, address, str(port), f"{timeout_s:g}")
    return "exec " + " ".join(shlex.quote(a) for a in args)


@dataclass(frozen=True)
class Node:
    """A host of the cluster that fleet reached, its transport open, and its python."""

    transport: Transport
    python: str


@dataclass(frozen=True)
class NodeReach:
    """One row of the check: what the host did and saw."""

    host: str
    rendezvous: bool  # the listener ran here
    reached: bool | None  # None: no report (fleet could not reach the host over SSH)
    seconds: float | None = None  # the TCP connect, as the node timed it
    error: str = ""


@dataclass(frozen=True)
class ReachCheck:
    """A cluster's check: the rendezvous, each node's row, and the decision."""

    cluster: str
    rendezvous: Rendezvous
    nodes: tuple[NodeReach, ...]
    decision: Decision
    note: str = ""  # how the listener bound, where not at the address as given
    wall_s: float = 0.0
    # The pairs' meeting points other than the rendezvous, tested once every node
    # reached the rendezvous, and each node's miss of one (fleet/cluster/meeting.py).
    points: tuple[MeetingPoint, ...] = ()
    misses: tuple[Miss, ...] = ()

    # Why the cluster's Slurm cannot take its steps now (fleet/cluster/slurm_check.py);
    # None where it can, or the cluster does not go through Slurm.
    slurm: str | None = None

    @property
    def go(self) -> bool:
        """Whether every node reached the rendezvous and every meeting point, and the
        cluster's Slurm, where it has one, can take the steps."""
        return self.decision.go and not self.misses and self.slurm is None

    @property
    def message(self) -> str:
        """The decision, then why fleet could not reach a silent node, then the note;
        the meeting points' result under it."""
        lines = [self.decision.message]
        if self.decision.go and self.misses:
            points = {m.point for m in self.misses}
            said = counted(len(points), "pair meeting point")
            lines = [f"no-go, nothing was started: {said} not reached from every node "
                     "that will connect to it",
                     *(f"  {m.source}: {m.point.host}'s meeting point "
                       f"({m.point}): {' '.join(m.error.split())[:MAX_ERROR]}; "
                       f"{m.fix(self.cluster)}" for m in self.misses)]
        elif self.decision.go and self.slurm is not None:
            lines = [f"no-go, nothing was started: {self.slurm}"]
        elif self.decision.go and self.points:
            lines.append("  pairs meet at: " + ", ".join(
                f"{p.host} {p}" for p in self.points) + ": every node reaches each")
        lines += [f"  {n.host} over SSH: {' '.join(n.error.split())}"
                  for n in self.nodes if n.reached is None and n.error]
        if not self.go and self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Miss:
    """A node that could not reach another's meeting point, and the OS's words."""

    source: str
    point: MeetingPoint
    error: str

    def fix(self, cluster: str) -> str:
        """The way out, from the error's words."""
        error = self.error.lower()
        if "in use" in error:
            return (f"port {self.point.port} is taken on {self.point.host}: free it, or "
                    f"set clusters.{cluster}.rendezvous_port to a free range")
        if "resolve" in error or "no route" in error or "unreachable" in error:
            return (f"{self.source} cannot reach {self.point.address}: give "
                    f"{self.point.host} an address on the network the nodes share")
        return (f"open TCP {self.point.port} on {self.point.host} to the cluster's "
                "nodes (firewall or security group), where pairs meet")


@dataclass(frozen=True)
class ReachOptions:
    """How long a node tries, and how fleet connects to the nodes over SSH."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    connect_timeout_s: float = 10.0
    connect_retries: int = 2
    accept_new_host_keys: bool = False
    parallel: int = PARALLEL


def _answer(lines: Iterator[str]) -> dict[str, Any] | None:
    """The first answer among a script's stdout lines; None when it ended without one."""
    for line in lines:
        if line.startswith(MARK):
            with contextlib.suppress(ValueError):
                answer = json.loads(line[len(MARK):])
                if isinstance(answer, dict):
                    return answer
    return None


def _no_answer(process: Process, python: str, what: str) -> str:
    said = last_lines(process.stderr_tail(), 2)
    return f"{what}: {python} gave no answer" + (f" ({said})" if said else "")


def _stop(process: Process | None) -> None:
    if process is not None and process.exit_status(0) is None:
        process.kill()


def _attempt(host: str, node: Node, rendezvous: Rendezvous, timeout_s: float,
             cancel: threading.Event) -> NodeReach:
    """`host` tries to connect to the rendezvous; SSH failing on the way is no report."""
    process: Process | None = None
    try:
        process = node.transport.run(connector_script(
            node.python, rendezvous.address, rendezvous.port, timeout_s))
        answer = _answer(process.lines(time.monotonic() + timeout_s + START_S, cancel))
        if answer is None:
            return NodeReach(host, False, False, error=_no_answer(
                process, node.python, "the connection attempt did not run"))
        if answer.get("reached") is True:
            seconds = answer.get("seconds")
            return NodeReach(host, False, True,
                             float(seconds) if isinstance(seconds, int | float) else None)
        return NodeReach(host, False, False, error=str(answer.get("error") or ""))
    except Cancelled:
        raise
    except RunTimeout:
        return NodeReach(host, False, False, error=f"the connection attempt did not finish "
                                                   f"in {timeout_s + START_S:g} s")
    except TransportError as exc:
        return NodeReach(host, False, None, error=str(exc))
    finally:
        _stop(process)


def _listening(process: Process, python: str, rendezvous: Rendezvous,
               cancel: threading.Event) -> tuple[NodeReach, str]:
    """The listener's first answer: the rendezvous host's row, and the note."""
    host = rendezvous.host
    try:
        answer = _answer(process.lines(time.monotonic() + START_S, cancel))
    except RunTimeout:
        return NodeReach(host, True, False, error=(
            f"the listener did not start in {START_S:g} s")), ""
    except Cancelled:
        raise
    except TransportError as exc:
        return NodeReach(host, True, None, error=str(exc)), ""
    if answer is None:
        return NodeReach(host, True, False, error=_no_answer(
            process, python, "the listener did not start")), ""
    if "listening" not in answer:
        return NodeReach(host, True, False, error=str(answer.get("error") or "")), ""
    note = str(answer.get("note") or "")
    if note:
        note = (f"{rendezvous.address} {note} on {host}, so the listener took every "
                f"address ({answer['listening']}), as torch's store does; the nodes need "
                "an address of the cluster's network there (rendezvous_address)")
    return NodeReach(host, True, True), note


def _pick(cluster: Cluster, reachable: Collection[str]) -> Rendezvous:
    # A host fleet cannot reach would fail its own suite, so the probe would not choose
    # it; with too few reachable, or the inventory's own choice unreachable, the check
    # keeps the inventory's choice and names the hosts fleet could not reach.
    try:
        return choose_rendezvous(cluster, reachable)
    except ClusterError:
        return choose_rendezvous(cluster)


def _point_answers(host: str, node: Node, points: Sequence[MeetingPoint], timeout_s: float,
                   cancel: threading.Event) -> list[Miss]:
    """`host` tries every one of `points` at once: a miss for each it did not reach."""
    process: Process | None = None
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        process = node.transport.run(connector_many_script(node.python, points, timeout_s))
        lines = process.lines(time.monotonic() + timeout_s + START_S, cancel)
        while True:
            answer = _answer(lines)
            if answer is None:
                break
            answers[(str(answer.get("address")), int(answer.get("port") or 0))] = answer
        said = "" if answers else _no_answer(process, node.python,
                                             "the connection attempts did not run")
    except Cancelled:
        raise
    except RunTimeout:
        said = f"the connection attempts did not finish in {timeout_s + START_S:g} s"
    except TransportError as exc:
        said = f"over SSH: {exc}"
    finally:
        _stop(process)
    misses = []
    for point in points:
        answer = answers.get((point.address, point.port))
        if answer is None:
            misses.append(Miss(host, point, said or "no answer for it"))
        elif answer.get("reached") is not True:
            misses.append(Miss(host, point, str(answer.get("error") or "")))
    return misses


def check_points(cluster: Cluster, points: Sequence[MeetingPoint], nodes: Mapping[str, Node],
                 timeout_s: float = DEFAULT_TIMEOUT_S, parallel: int = PARALLEL,
                 cancel: threading.Event | None = None) -> list[Miss]:
    """Each of `points` listened on by its host while every other node of `nodes`
    connects to it, as a pair's ranks will: the misses. Every listener is stopped
    before this returns or raises."""
    cancel = cancel or threading.Event()
    listeners: dict[str, Process] = {}
    misses: list[Miss] = []
    wait_s = timeout_s + 2 * START_S
    try:
        for point in points:
            node = nodes[point.host]
            try:
                listeners[point.host] = node.transport.run(listener_script(
                    node.python, point.address, point.port, len(nodes) - 1, wait_s))
            except TransportError as exc:
                misses.append(Miss(point.host, point, f"cannot start its listener: {exc}"))
        for point in points:
            if point.host not in listeners:
                continue
            row, _ = _listening(listeners[point.host], nodes[point.host].python, Rendezvous(
                cluster.name, point.host, point.address, point.port, "a pair's"), cancel)
            if not row.reached:
                misses.append(Miss(point.host, point, row.error))
        with ThreadPoolExecutor(max(1, min(parallel, len(nodes))), "fleet-points") as pool:
            futures = [pool.submit(_point_answers, host, node,
                                   [p for p in points if p.host != host], timeout_s, cancel)
                       for host, node in nodes.items()]
            try:
                for future in futures:
                    misses += future.result()
            except BaseException:
                cancel.set()
                raise
    finally:
        for process in listeners.values():
            _stop(process)
    return misses


def check_reach(cluster: Cluster, nodes: Mapping[str, Node], unreachable: Mapping[str, str],
                timeout_s: float = DEFAULT_TIMEOUT_S, parallel: int = PARALLEL,
                cancel: threading.Event | None = None,
                addresses: Mapping[str, str] | None = None) -> ReachCheck:
    """Check that every node of `cluster` reaches its rendezvous, then, where
    `addresses` (each host's address as the nodes reach it: meeting.node_address) are
    given and every node reached the rendezvous, every pair's meeting point.

    `nodes` are the hosts fleet reached (open transports, by host name), `unreachable`
    the others with the reason; every host of the cluster is in one of the two. The
    listeners are stopped before this returns or raises; nothing is stored."""
    started = time.monotonic()
    cancel = cancel or threading.Event()
    missing = [h for h in cluster.hosts if h not in nodes and h not in unreachable]
    if missing:
        raise ClusterError(f"cluster {cluster.name}: no transport for {', '.join(missing)}")
    rendezvous = _pick(cluster, [h for h in cluster.hosts if h in nodes])
    others = [h for h in cluster.hosts if h in nodes and h != rendezvous.host]
    rows: dict[str, NodeReach] = {
        h: NodeReach(h, h == rendezvous.host, None, error=reason)
        for h, reason in unreachable.items() if h in cluster.hosts}
    rounds = -(-len(others) // max(parallel, 1))
    listener: Process | None = None
    note = ""
    try:
        if rendezvous.host in nodes:
            node = nodes[rendezvous.host]
            # Its own timeout only guards against fleet vanishing: fleet stops it below.
            wait_s = rounds * (timeout_s + START_S) + START_S
            try:
                listener = node.transport.run(listener_script(
                    node.python, rendezvous.address, rendezvous.port, len(others), wait_s))
            except TransportError as exc:
                rows[rendezvous.host] = NodeReach(rendezvous.host, True, None, error=str(exc))
            else:
                rows[rendezvous.host], note = _listening(listener, node.python, rendezvous,
                                                         cancel)
        # The nodes try even where the listener did not start: a refusal or a timeout
        # from each still says where the fault is.
        with ThreadPoolExecutor(max(1, min(parallel, len(others))), "fleet-reach") as pool:
            futures: dict[str, Future[NodeReach]] = {
                h: pool.submit(_attempt, h, nodes[h], rendezvous, timeout_s, cancel)
                for h in others}
            try:
                for host, future in futures.items():
                    rows[host] = future.result()
            except BaseException:
                cancel.set()
                raise
    finally:
        _stop(listener)
    reports = [Reach(r.host, bool(r.reached), r.error) for r in rows.values()
               if r.reached is not None]
    decision = decide(rendezvous, cluster.hosts, reports)
    points: list[MeetingPoint] = []
    misses: list[Miss] = []
    if decision.go and addresses is not None:
        placed = meeting_points(rendezvous, [h for h in cluster.hosts if h in nodes],
                                addresses)
        points = [p for h, p in placed.items() if h != rendezvous.host]
        if points:
            misses = check_points(cluster, points, nodes, timeout_s, parallel, cancel)
    # Where the steps go through Slurm, its own word on the nodes, from the node srun
    # starts the first step on (the rendezvous's).
    slurm: str | None = None
    if cluster.slurm is not None and decision.go and not misses and \
            rendezvous.host in nodes:
        slurm = check_slurm(cluster.name, cluster.hosts, cluster.slurm, rendezvous.host,
                            nodes[rendezvous.host].transport, cancel)
    return ReachCheck(cluster.name, rendezvous, tuple(rows[h] for h in cluster.hosts),
                      decision, note, time.monotonic() - started, tuple(points),
                      tuple(misses), slurm)


def _connect(target: Target, ssh: SshOptions, opened: list[Transport]) -> Transport:
    transport = open_transport(target, plan_ssh(target) if target.transport == "ssh"
                               else None, ssh)
    try:
        transport.connect()
    except BaseException:
        transport.close()
        raise
    opened.append(transport)  # closed by check_cluster, also where it was interrupted
    return transport


def clusters_to_check(inventory: LoadedInventory, name: str | None) -> tuple[Cluster, ...]:
    """The cluster called `name`, or every cluster; InputError when there is none."""
    if not inventory.clusters:
        raise InputError(f"{inventory.path}: no host has `cluster: NAME`, so there is no "
                         "cluster to check. Put `cluster: NAME` on a provider or its hosts "
                         "(docs/cluster.md)")
    if name is None:
        return inventory.clusters
    chosen = [c for c in inventory.clusters if c.name == name]
    if not chosen:
        names = ", ".join(c.name for c in inventory.clusters)
        raise InputError(f"{inventory.path}: no cluster {name}; it has {names}")
    return tuple(chosen)


def check_cluster(inventory: LoadedInventory, cluster: Cluster, options: ReachOptions,
                  cancel: threading.Event | None = None) -> ReachCheck:
    """Connect to the cluster's hosts, check that each reaches the rendezvous, and close."""
    cancel = cancel or threading.Event()
    targets = {t.name: t for t in inventory.targets if t.cluster == cluster.name}
    for target in targets.values():
        if target.transport == "ssh":
            plan_ssh(target)  # a mistake in ssh_config stops here, before connecting
    cluster = as_reached(cluster, targets)
    ssh = SshOptions(KnownHosts(accept_new=options.accept_new_host_keys),
                     options.connect_timeout_s, options.connect_retries, cancel)
    nodes: dict[str, Node] = {}
    unreachable: dict[str, str] = {}
    opened: list[Transport] = []
    workers = max(1, min(options.parallel, len(cluster.hosts)))
    try:
        with ThreadPoolExecutor(workers, "fleet-connect") as pool:
            futures = {h: pool.submit(_connect, targets[h], ssh, opened)
                       for h in cluster.hosts}
            try:
                for host, future in futures.items():
                    try:
                        nodes[host] = Node(future.result(), targets[host].python)
                    except FleetError as exc:
                        unreachable[host] = str(exc)
            except BaseException:
                cancel.set()
                raise
        return check_reach(cluster, nodes, unreachable, options.timeout_s, options.parallel,
                           cancel, dict(cluster.addresses))
    finally:
        for transport in opened:
            transport.close()
