"""One step between nodes launched through the cluster's own Slurm (issue 57): srun,
started on the step's first node over fleet's connection to it, runs the agent once on
each node of the step (one task a node, `--nodelist` the step's nodes in node-rank
order), with the environment Slurm gives a job there: the node's own NCCL and network
plugin as a user's `srun` job meets them, instead of what fleet's SSH session carries.

The agent is put on every node first (the same path on each: the nodes' `cache_dir` and
the Python that runs it must agree, as a job's do), then one srun runs the step; its
tasks' lines come back through srun, each prefixed with its task number (`--label`), and
each task's `fleet-cluster/1` event is the node's report, placed by the node rank it
carries (the agent finds its own from SLURMD_NODENAME, `--slurm-nodes`). All or nothing
as over SSH: `--kill-on-bad-exit` ends every task when one fails, a task without a report
fails the step, and the controller stops srun (and with it the job step) on Ctrl-C or at
the step's deadline.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from fleet.cluster.step import (
    EXIT_WAIT_S,
    MAX_LINE,
    NodeFailed,
    Observer,
    StepNode,
    StepRun,
    StepSpec,
    agent_args,
    disagree,
    read_report,
)
from fleet.errors import ClusterError, FleetError
from fleet.inventory.model import SlurmSpec
from fleet.payload import MARKER, Payload, inventory_environment, launch_agent
from fleet.transport.base import Cancelled, RunTimeout, describe_exit, last_lines, shell_path

# srun --label: "0: line", the task number padded to the widest.
_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")
PUT_TIMEOUT_S = 120.0
PUT_PARALLEL = 32  # nodes the agent is put on at once, as the reach check connects


def _whole(text: str) -> bool:
    """Whether `text` is one JSON value (the agent prints one object a line)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _progress(text: str) -> str | None:
    """A task's progress message, where the line is one."""
    try:
        event = json.loads(text)
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("event") == "progress":
        return str(event.get("message", ""))[:300]
    return None


def slurm_names(spec: StepSpec, slurm: SlurmSpec) -> list[str]:
    """The step's nodes as Slurm names them, in node-rank order."""
    return [slurm.nodes.get(host, host) for host in spec.hosts]


def srun_script(spec: StepSpec, slurm: SlurmSpec, python: str, path: str,
                env: Mapping[str, str]) -> str:
    """sh for the step's first node: srun's check, then srun running the agent on every
    node of the step."""
    names = slurm_names(spec, slurm)
    srun = ["srun", f"--nodes={len(names)}", f"--nodelist={','.join(names)}",
            "--ntasks-per-node=1", "--label", "--kill-on-bad-exit=1", "--export=ALL",
            *([f"--partition={slurm.partition}"] if slurm.partition else []),
            *slurm.srun_options]
    args = agent_args(spec, None, names)
    assigned = [shlex.quote(f"{k}={v}") for k, v in sorted(env.items())]
    command = " ".join([*(shlex.quote(a) for a in srun), *(["env", *assigned] if assigned
                                                         else []),
                        shlex.quote(python), shell_path(path),
                        *(shlex.quote(a) for a in args)])
    return "; ".join([
        f'command -v srun >/dev/null 2>&1 || {{ echo "{MARKER}no-srun"; exit 0; }}',
        f'echo "{MARKER}run"',
        f"{command} </dev/null",
        "exit $?",
    ])


def _same(nodes: Mapping[str, StepNode], spec: StepSpec, payload: Payload
          ) -> tuple[str, str]:
    """The one Python and agent path every node of the step shares; ClusterError naming
    the settings to make equal where they differ."""
    pythons = {h: nodes[h].python or nodes[h].target.python for h in spec.hosts}
    paths = {h: payload.remote_path(nodes[h].target.cache_dir) for h in spec.hosts}
    for what, values, setting in (("Python", pythons, "python:"),
                                  ("agent's path", paths, "cache_dir:")):
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{h}: {v}" for h, v in values.items())
            raise ClusterError(
                f"cluster {spec.cluster}: srun runs one command on every node, and the "
                f"{what} differs between them ({shown}): give the cluster's hosts the same "
                f"`{setting}` (and runtime), or leave `slurm:` out to launch over SSH")
    first = spec.hosts[0]
    return pythons[first], paths[first]


def _put(nodes: Mapping[str, StepNode], spec: StepSpec, payload: Payload,
         cancel: threading.Event) -> None:
    """The agent on every node of the step (uploaded where its hash is not there), the
    nodes at once; it runs there once (`--version`), as srun's tasks will run it."""
    def put(host: str) -> None:
        node = nodes[host]
        launched = launch_agent(node.transport, payload, node.target, ["--version"],
                                time.monotonic() + PUT_TIMEOUT_S, cancel, None, node.python)
        for _ in launched.lines:
            pass
        status = launched.process.exit_status(EXIT_WAIT_S)
        if status not in (0, None):
            raise ClusterError(f"{host}: the agent did not start: it {describe_exit(status)}"
                               f" ({last_lines(launched.process.stderr_tail())}); "
                               f"`fleet probe` of {host} says why (its Python, its "
                               "cache_dir), then run the cluster again")

    with ThreadPoolExecutor(min(len(spec.hosts), PUT_PARALLEL), "fleet-srun-put") as pool:
        for done in [pool.submit(put, host) for host in spec.hosts]:
            done.result()


def run_step_slurm(spec: StepSpec, nodes: Mapping[str, StepNode], payload: Payload,
                   slurm: SlurmSpec, cancel: threading.Event,
                   observe: Observer | None = None) -> StepRun:
    """Run `spec` through srun from its first node; the step as it ran, as
    fleet/cluster/step.py's `run_step` returns it over SSH."""
    run = StepRun(spec, datetime.now(UTC))
    started = time.monotonic()
    first = nodes[spec.hosts[0]]
    process = None
    try:
        python, path = _same(nodes, spec, payload)
        _put(nodes, spec, payload, cancel)
        env = inventory_environment(first.target.env)
        process = first.transport.run(srun_script(spec, slurm, python, path, env))
        lines = process.lines(started + spec.budget_s, cancel)
        said = next((line for line in lines if line.startswith(MARKER)), None)
        if said is None or said[len(MARKER):].strip() != "run":
            raise ClusterError(
                f"{spec.hosts[0]}: no srun on its PATH: install Slurm's client there, or "
                f"leave `slurm:` out of cluster {spec.cluster} to launch over SSH"
                if said is not None and said[len(MARKER):].strip() == "no-srun" else
                f"{spec.hosts[0]}: the shell did not run srun: "
                f"{last_lines(process.stderr_tail())}")
        tasks: dict[int, list[str]] = {}
        pending: dict[int, str] = {}
        for line in lines:
            found = _LABELLED.match(line)
            if found is None:
                continue  # srun's own words go to stderr; anything else is not the agent's
            # srun cuts a long line (the report, with its samples) into labelled pieces:
            # a task's pieces are joined until they make one JSON line again.
            task = int(found.group(1))
            text = pending.pop(task, "") + found.group(2)
            if not _whole(text) and len(text) < MAX_LINE:
                pending[task] = text
                continue
            tasks.setdefault(task, []).append(text)
            if observe is not None:
                said_now = _progress(text)
                if said_now:
                    observe(f"srun task {task}", said_now)
        for task, text in pending.items():
            tasks.setdefault(task, []).append(text)  # read_report says what is wrong
        status = process.exit_status(EXIT_WAIT_S)
        for task, own in sorted(tasks.items()):
            report = read_report(iter(own), f"srun task {task}")
            rank = report.step.node_rank
            if rank >= len(spec.hosts) or report.step.nodes != len(spec.hosts):
                raise ClusterError(f"srun task {task} reported node {rank} of "
                                   f"{report.step.nodes}, not one of the step's "
                                   f"{len(spec.hosts)} nodes")
            run.reports[spec.hosts[rank]] = report
        failed = [f"{h}: {'; '.join(e.message for e in r.errors) or 'no figures'}"
                  for h, r in run.reports.items() if r.failed]
        missing = [h for h in spec.hosts if h not in run.reports]
        if failed:
            run.error = " ".join(failed[0].split())[:2000]
        elif missing:
            run.error = (f"{', '.join(missing)}: no report through srun "
                         f"--nodelist={','.join(slurm_names(spec, slurm))} (it "
                         f"{describe_exit(status)}: "
                         f"{last_lines(process.stderr_tail()) or 'nothing on stderr'})")[:2000]
        else:
            run.error = disagree(run.reports, spec.hosts)
    except Cancelled:
        run.error = "interrupted"
    except RunTimeout:
        run.error = f"no report through srun within {spec.budget_s:g} s; stopped"
    except (NodeFailed, FleetError) as exc:
        run.error = str(exc)[:2000]
    finally:
        if process is not None and process.exit_status(0) is None:
            process.kill()
    run.wall_s = round(time.monotonic() - started, 3)
    return run
