"""Before a Slurm cluster's steps start: do Slurm's own words say its nodes can take them?
`fleet cluster check` (fleet/cluster/reach.py) asks `sinfo` on the first node for the
cluster's Slurm nodes and their state, so that a node name Slurm does not know, a node
down or drained, or one busy with other jobs (srun would wait for it past the step's
deadline) is said at the check, with the fix, not found by the first step.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Sequence

from fleet.errors import FleetError
from fleet.inventory.model import SlurmSpec
from fleet.payload import MARKER
from fleet.transport.base import Transport, last_lines

# States a step's one task a node can start in at once (sinfo's %T, lower case, a
# trailing "*" meaning not responding is kept and refused).
READY = ("idle", "mixed")
TIMEOUT_S = 30.0


def sinfo_script() -> str:
    """sh that lists Slurm's nodes and their state, one "NAME STATE" a line (every node:
    sinfo's `-n` with a name it does not know lists none of the others either)."""
    return "; ".join([
        f'command -v sinfo >/dev/null 2>&1 || {{ echo "{MARKER}no-sinfo"; exit 0; }}',
        f'echo "{MARKER}run"',
        f"sinfo -h -N -o {shlex.quote('%N %T')} </dev/null",
        "exit $?",
    ])


def check_slurm(cluster: str, hosts: Sequence[str], slurm: SlurmSpec, first: str,
                transport: Transport, cancel: threading.Event | None = None) -> str | None:
    """Why the cluster's steps cannot go through Slurm now, in sinfo's words and with
    the fix; None where every node is known and ready."""
    names = {slurm.nodes.get(h, h): h for h in hosts}
    process = transport.run(sinfo_script())
    try:
        lines = list(process.lines(time.monotonic() + TIMEOUT_S, cancel or threading.Event()))
    except FleetError as exc:
        return f"sinfo on {first} did not answer: {exc}"
    finally:
        process.exit_status(5.0)
    said = [line.strip() for line in lines]
    if f"{MARKER}no-sinfo" in said:
        return (f"{first} has no sinfo on its PATH: install Slurm's client there, or leave "
                f"`slurm:` out of cluster {cluster} to launch over SSH")
    if f"{MARKER}run" not in said:
        return f"sinfo on {first} did not run: {last_lines(process.stderr_tail())}"
    states: dict[str, set[str]] = {}
    for line in said[said.index(f"{MARKER}run") + 1:]:
        parts = line.split()
        if len(parts) == 2:
            states.setdefault(parts[0], set()).add(parts[1].lower())
    unknown = [n for n in names if n not in states]
    if unknown:
        return (f"Slurm knows no node {', '.join(unknown)} (sinfo on {first}): give "
                f"clusters.{cluster}.slurm.nodes each host's Slurm node name "
                f"({', '.join(f'{names[n]}: {n}' for n in unknown)} now)")
    busy = {n: ", ".join(sorted(s)) for n, s in states.items()
            if n in names and not any(state in READY for state in s)}
    if busy:
        return ("Slurm's nodes are not ready for a step: "
                + "; ".join(f"{n} ({names[n]}) is {state}" for n, state in busy.items())
                + ": resume them (scontrol update nodename=... state=resume) or wait for "
                  "their jobs, then check again")
    return None
