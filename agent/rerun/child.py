"""A measurement again in a child process whose environment lacks the run's settings that
can move it (issue 44), for every rerun that needs one (agent/rerun/).

The child is `python -c` of the agent's own Python importing the agent from where it was
loaded, as the all-reduce's ranks are (agent/node/collective.py `agent_root`), and runs
`main`: the rerun module of its kind, and the suite's own functions that module registered
with `measures`, never the agent's whole collect. It is told its parent's pid
(`PARENT_ENV`), so that the parent's CUDA context, idle on the same GPUs, is not taken for
another user's process, and so that it never reruns in turn. It answers on one line of its
stdout, after its kind's prefix, with the names of the settings' families it ran under:
the evidence that it ran without them.
"""

import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.gpu.fingerprint import read_system
from agent.node import collective
from agent.rerun.bounds import MAX_WHY
from agent.source import settings as run_settings
from agent.source.nvml import Nvml
from agent.survey import fingerprint_all, open_source
from agent.timing.contention import PARENT_ENV

Answer = Tuple[Optional[Dict[str, Any]], Optional[str], float]
# What a kind's child measures: its spec in, (its answer, whether it measured anything) out.
Measure = Callable[[Dict[str, Any]], Tuple[Dict[str, Any], bool]]
MEASURES: Dict[str, Measure] = {}


def measures(kind: str) -> Callable[[Measure], Measure]:
    """Register what a rerun's child of `kind` measures (agent/rerun/<kind>.py)."""
    def register(measure: Measure) -> Measure:
        MEASURES[kind] = measure
        return measure
    return register


def prefix(kind: str) -> str:
    """The start of the child's answer line: the rest of its stdout is the suite's."""
    return f"fleet-{kind}-rerun "


def run(kind: str, spec: Dict[str, Any], without: Sequence[str], timeout_s: float,
        environ: Optional[Dict[str, str]] = None) -> Answer:
    """Start the child of `kind` on `spec` without the settings named in `without`: (its
    answer, None, wall seconds), or (None, why it failed, wall seconds)."""
    env = run_settings.without(dict(os.environ if environ is None else environ), without)
    env[PARENT_ENV] = str(os.getpid())
    boot = ("import sys; sys.path.insert(0, sys.argv[1]); from agent.rerun.child import main; "
            "sys.exit(main(sys.argv[2:]))")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", boot, collective.agent_root(), kind,
                               json.dumps(spec)], env=env, capture_output=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:MAX_WHY], time.monotonic() - started
    wall = round(time.monotonic() - started, 3)
    lines = [line[len(prefix(kind)):]
             for line in done.stdout.decode("utf-8", "replace").splitlines()
             if line.startswith(prefix(kind))]
    if done.returncode != 0 or not lines:
        said = " | ".join(done.stderr.decode("utf-8", "replace").strip().splitlines()[-3:])
        return None, f"the rerun exited {done.returncode}: {said[-600:]}", wall
    answer: Dict[str, Any] = json.loads(lines[-1])
    answer["ran_with"] = [n for n in answer.get("ran_with") or []
                          if run_settings.storable(n)]
    return answer, None, wall


def reply(kind: str, answer: Dict[str, Any]) -> None:
    """The child's answer on one line, with the settings' names it ran under."""
    ran_with = sorted(n for n in os.environ if run_settings.family_of(n) is not None)
    print(prefix(kind) + json.dumps({**answer, "ran_with": ran_with}), flush=True)


def in_child() -> bool:
    """Whether this process is a rerun's child: it never reruns in turn."""
    return PARENT_ENV in os.environ


def gpus_here() -> Tuple[Optional[Nvml], List[Dict[str, Any]]]:
    """This host's GPU source and its GPUs as NVML names them, as the run read them, so
    that each figure measured again carries its GPU's index and UUID. The caller closes
    the source."""
    nvml, source = open_source(None)
    if nvml is None:
        return None, []
    context = source.get("context") or {}
    euid = int(context["euid"]) if "euid" in context else os.geteuid()
    gpus, _ = fingerprint_all(nvml, read_system(nvml), euid, False,
                              live=source.get("path") is None)
    return nvml, gpus


def main(argv: List[str]) -> int:
    """The child: `argv` is its kind and its spec's JSON."""
    kind, spec = argv[0], json.loads(argv[1])
    importlib.import_module(f"agent.rerun.{kind}")
    answer, measured = MEASURES[kind](spec)
    reply(kind, answer)
    return 0 if measured else 3
