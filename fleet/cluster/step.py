"""One step between nodes, run for real: `python -m agent cluster` started on each of the
step's nodes at once over the transports the probe uses, each node's `fleet-cluster/1`
event read and validated (fleet/model/cluster.py), and the step's one result.

All or nothing: the first node that fails (its agent says so, exits without a report,
its connection drops, the step's deadline passes) stops the others, so that no node waits
in a collective for a peer that is gone, and the step's result is its error with no
figures. The nodes' figures must agree: each iteration's time is max-reduced over every
rank of every node, so two nodes reporting different figures ran two different things,
and that is an error too, not a figure.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from agent.network import perftest
from fleet.errors import FleetError
from fleet.inventory import Target
from fleet.model.cluster import ClusterReport
from fleet.model.step import (
    Launcher,
    NicFigure,
    NodeNics,
    NodeTransport,
    PortCounters,
    StepFigure,
    StepKind,
    StepResult,
)
from fleet.payload import Payload, launch_agent
from fleet.transport.base import (
    Cancelled,
    Process,
    RunTimeout,
    Transport,
    describe_exit,
    last_lines,
)

MAX_LINE = 4 << 20  # a report with 20 samples a figure is a few KB; a flood is not one
EXIT_WAIT_S = 10.0
# Past the agent's own timeout: its ranks' start (torch's import, CUDA, NCCL) and the
# transport's latency. The agent stops itself first and says why; this only catches an
# agent that cannot.
GRACE_S = 60.0
# The whole cluster's step runs four collectives on to 16 GiB, each size held to 30 s by
# the agent (agent/cluster/rank.py SIZE_BUDGET_S): a degraded fabric's sweep may take this
# much more than a pair's before the controller calls it hung.
WHOLE_EXTRA_S = 240.0
# What a pair's per-NIC test may add: eight ports (an 8-GPU node's rails), each at its
# worst, the other side waited for and then its run to its limit (agent/network/
# perftest.py bounds each); a node of more ports that all wait that long is stopped as
# the step's timeout.
NIC_EXTRA_S = 8 * (perftest.WAIT_S + perftest.DURATION_S + perftest.MARGIN_S)
AGREE = 1e-6  # relative: the same floats, printed by two nodes' json

Observer = Callable[[str, str], None]  # (host, message)


@dataclass(frozen=True)
class StepNode:
    """A node fleet holds a connection to, and the python that has torch there."""

    target: Target
    transport: Transport
    python: str | None  # fleet's runtime; None: the inventory's `python:`


@dataclass(frozen=True)
class StepSpec:
    """What the controller asks of one step. `hosts[0]` hosts the rendezvous."""

    cluster: str
    step_id: str
    kind: StepKind
    round: int | None
    hosts: tuple[str, ...]
    address: str
    port: int
    ranks_per_node: int
    timeout_s: float
    algo: str | None = None
    interface: str | None = None
    sizes: str | None = None
    backend: str = "auto"
    # The whole cluster's sweep (the agent's --whole): every collective, larger buffers.
    whole: bool = False
    # Through the cluster's Slurm (fleet/cluster/slurm.py), or fleet's SSH connections.
    launcher: Launcher = "ssh"
    # A pair's per-NIC RDMA test after its collectives (the agent's --nic-test).
    nic_test: bool = False

    @property
    def budget_s(self) -> float:
        """How long the controller waits for the step's reports before stopping it."""
        return (self.timeout_s + GRACE_S + (WHOLE_EXTRA_S if self.whole else 0.0)
                + (NIC_EXTRA_S if self.nic_test else 0.0))


@dataclass
class StepRun:
    """The step as it ran: each node's validated report, and the step's error if any."""

    spec: StepSpec
    started_at: datetime
    wall_s: float = 0.0
    reports: dict[str, ClusterReport] = field(default_factory=dict)
    error: str | None = None

    def result(self) -> StepResult:
        """The step for the store and the judgement (fleet/model/step.py)."""
        spec = self.spec
        first = self.reports.get(spec.hosts[0])
        figures: tuple[StepFigure, ...] = ()
        if self.error is None and first is not None:
            figures = tuple(StepFigure(f.op, f.size_bytes, f.busbw_gbs, f.algbw_gbs, f.time_us,
                                       f.busbw_min_gbs, f.busbw_max_gbs)
                            for f in first.figures)
        transports = tuple(
            NodeTransport(host, r.transport.network, r.transport.plugin, r.transport.gdrdma,
                          tuple(r.transport.paths), tuple(r.transport.interfaces),
                          tuple(r.transport.set_by_environment), r.transport.version)
            for host in spec.hosts if (r := self.reports.get(host)) is not None)
        counted = tuple(
            PortCounters(host, c.ports, tuple((port, name, rise)
                                              for port, rises in sorted(c.rose.items())
                                              for name, rise in sorted(rises.items())),
                         tuple(c.reset))
            for host in spec.hosts
            if (r := self.reports.get(host)) is not None and (c := r.counters) is not None)
        nics = tuple(
            NodeNics(host, n.role, n.skipped, tuple(
                NicFigure(i, t.device, t.port, t.rate_gbps, t.gbps, t.gdr, t.error, t.peer)
                for i, t in enumerate(n.tests)))
            for host in spec.hosts
            if (r := self.reports.get(host)) is not None and (n := r.nics) is not None)
        backend = first.backend if first is not None else spec.backend
        return StepResult(spec.cluster, spec.step_id, spec.kind, spec.round, spec.hosts,
                          spec.ranks_per_node, backend, spec.algo, figures, transports,
                          self.error, counted, spec.launcher, nics)

    def settings(self) -> dict[str, dict[str, str]]:
        """Each node's NCCL_* and GLOO_* settings, as its agent ran the ranks."""
        return {h: dict(r.settings) for h, r in self.reports.items()}


def agent_args(spec: StepSpec, node_rank: int | None,
               slurm_nodes: Sequence[str] | None = None) -> list[str]:
    """The agent's command line for the node at `node_rank`; under srun, where every node
    runs one command line, `slurm_nodes` (the step's Slurm node names in node-rank
    order) instead, each node finding its own place."""
    place = (["--slurm-nodes", ",".join(slurm_nodes)] if slurm_nodes is not None
             else ["--node-rank", str(node_rank)])
    args = ["cluster", "--address", spec.address, "--port", str(spec.port),
            "--nodes", str(len(spec.hosts)), *place,
            "--ranks-per-node", str(spec.ranks_per_node), "--backend", spec.backend,
            "--timeout-s", f"{spec.timeout_s:g}", "--step", spec.step_id]
    if spec.algo:
        args += ["--algo", spec.algo]
    if spec.interface:
        args += ["--interface", spec.interface]
    if spec.sizes:
        args += ["--sizes", spec.sizes]
    if spec.whole:
        args += ["--whole"]
    if spec.nic_test:
        args += ["--nic-test"]
    return args


class NodeFailed(Exception):
    """A node's part of the step failed; the message names the node and the reason."""


def read_report(lines: Any, host: str, on_progress: Callable[[str], None] | None = None
                ) -> ClusterReport:
    """The node's one `cluster` event among its lines, validated; NodeFailed if none."""
    report: ClusterReport | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            raise NodeFailed(f"{host}: the agent's line {number} is over {MAX_LINE} bytes")
        try:
            event = json.loads(line)
        except ValueError:
            raise NodeFailed(f"{host}: the agent's line {number} is not JSON: "
                              f"{line[:120]!r}") from None
        kind = event.get("event") if isinstance(event, dict) else None
        if kind == "progress":
            if on_progress is not None:
                on_progress(str(event.get("message", ""))[:300])
        elif kind == "cluster":
            if report is not None:
                raise NodeFailed(f"{host}: the agent sent a second report on line {number}")
            try:
                report = ClusterReport.model_validate(event.get("cluster"))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise NodeFailed(f"{host}: the agent's report is not valid at {where}: "
                                  f"{first['msg']}") from None
        else:
            raise NodeFailed(f"{host}: the agent's line {number} has unknown event "
                              f"{str(kind)[:40]!r}")
    if report is None:
        raise NodeFailed(f"{host}: the agent ended without a report")
    return report


def disagree(reports: Mapping[str, ClusterReport], hosts: Sequence[str]) -> str | None:
    """Why the nodes' figures are not one step's, or None where they agree."""
    first = reports[hosts[0]]
    want = {(f.op, f.size_bytes): f.busbw_gbs for f in first.figures}
    for host in hosts[1:]:
        got = {(f.op, f.size_bytes): f.busbw_gbs for f in reports[host].figures}
        if got.keys() != want.keys():
            return (f"{host} reported other collectives than {hosts[0]}: the nodes did not "
                    "run one step")
        for key, value in want.items():
            if abs(got[key] - value) > AGREE * max(abs(value), 1.0):
                return (f"{host} reported {key[0]} at {key[1]} bytes at {got[key]:g} GB/s "
                        f"where {hosts[0]} reported {value:g}: the nodes did not run one step")
    return None


def run_step(spec: StepSpec, nodes: Mapping[str, StepNode], payload: Payload,
             cancel: threading.Event, observe: Observer | None = None) -> StepRun:
    """Run `spec` on its nodes at once; every node's agent has ended when this returns."""
    run = StepRun(spec, datetime.now(UTC))
    started = time.monotonic()
    stop = threading.Event()  # this step's: set by the first failure, or by `cancel`
    failures: list[tuple[float, str]] = []
    lock = threading.Lock()
    deadline = started + spec.budget_s

    def fail(message: str) -> None:
        with lock:
            failures.append((time.monotonic(), message))
        stop.set()

    def node(rank: int, host: str) -> None:
        where = nodes[host]
        process: Process | None = None
        try:
            launched = launch_agent(where.transport, payload, where.target,
                                    agent_args(spec, rank), deadline, stop, None,
                                    where.python)
            process = launched.process
            report = read_report(launched.lines, host,
                                 (lambda m: observe(host, m)) if observe else None)
            status = process.exit_status(EXIT_WAIT_S)
            with lock:
                run.reports[host] = report
            if report.failed:
                said = "; ".join(e.message for e in report.errors) or "no figures"
                fail(f"{host}: {' '.join(said.split())[:600]}")
            elif status not in (0, None):
                fail(f"{host}: the agent exited {status} after its report")
        except Cancelled:
            if not cancel.is_set():
                fail(f"{host}: stopped, as another node of the step had failed")
        except RunTimeout:
            fail(f"{host}: no report within {spec.budget_s:g} s; stopped")
        except NodeFailed as exc:
            said = str(exc)
            if process is not None:
                status = process.exit_status(EXIT_WAIT_S)
                if status is not None and status != 0:
                    said += f": it {describe_exit(status)}"
                tail = last_lines(process.stderr_tail())
                said += f" (its stderr: {tail})" if tail else ""
            fail(said)
        except FleetError as exc:
            fail(f"{host}: {exc}")
        finally:
            if process is not None and process.exit_status(0) is None:
                process.kill()

    def relay() -> None:
        # The caller's Ctrl-C stops this step as a failure would.
        while not stop.wait(0.2):
            if cancel.is_set():
                fail("interrupted")
                return

    watcher = threading.Thread(target=relay, name="fleet-step-cancel", daemon=True)
    watcher.start()
    with ThreadPoolExecutor(len(spec.hosts), "fleet-step") as pool:
        for future in [pool.submit(node, rank, host) for rank, host in enumerate(spec.hosts)]:
            future.result()
    stop.set()
    watcher.join()
    run.wall_s = round(time.monotonic() - started, 3)
    if failures:
        # The first failure is the cause; the others are mostly "stopped" because of it.
        causes = [m for _, m in sorted(failures) if "stopped, as another node" not in m]
        run.error = (causes or [m for _, m in sorted(failures)])[0][:2000]
    elif missing := [h for h in spec.hosts if h not in run.reports]:
        run.error = f"{', '.join(missing)}: no report"
    else:
        run.error = disagree(run.reports, spec.hosts)
    return run
