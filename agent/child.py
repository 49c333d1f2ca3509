"""A measurement again in a child process whose environment lacks the run's settings that
can move it (issue 44): the job (agent/job/rerun.py), the soaked matmul
(agent/matmul/rerun.py), a memory copy (agent/node/memory_rerun.py).

The child is `python -c` of the agent's own Python importing the agent from where it was
loaded, as the all-reduce's ranks are (agent/node/collective.py `agent_root`). It is told
its parent's pid (`PARENT_ENV`), so that the parent's CUDA context, idle on the same GPUs,
is not taken for another user's process, and so that it never reruns in turn. It answers
on one line of its stdout, after a prefix its caller names, with the names of the
settings' families it ran under: the evidence that it ran without them.
"""

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from agent.node import collective
from agent.source import settings as run_settings
from agent.timing.contention import PARENT_ENV

Answer = Tuple[Optional[Dict[str, Any]], Optional[str], float]


def run(entry: str, spec: Dict[str, Any], without: Sequence[str], prefix: str,
        timeout_s: float, environ: Optional[Dict[str, str]] = None) -> Answer:
    """Start `entry` ("package.module:function", called with [json of `spec`]) in a child
    without the settings named in `without`: (its answer, None, wall seconds), or (None,
    why it failed, wall seconds)."""
    module, _, function = entry.partition(":")
    env = run_settings.without(dict(os.environ if environ is None else environ), without)
    env[PARENT_ENV] = str(os.getpid())
    boot = (f"import sys; sys.path.insert(0, sys.argv[1]); from {module} import {function}; "
            f"sys.exit({function}(sys.argv[2:]))")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", boot, collective.agent_root(),
                               json.dumps(spec)], env=env, capture_output=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:4000], time.monotonic() - started
    wall = round(time.monotonic() - started, 3)
    lines = [line[len(prefix):] for line in done.stdout.decode("utf-8", "replace").splitlines()
             if line.startswith(prefix)]
    if done.returncode != 0 or not lines:
        said = " | ".join(done.stderr.decode("utf-8", "replace").strip().splitlines()[-3:])
        return None, f"the rerun exited {done.returncode}: {said[-600:]}", wall
    answer: Dict[str, Any] = json.loads(lines[-1])
    answer["ran_with"] = [n for n in answer.get("ran_with") or []
                          if run_settings.storable(n)]
    return answer, None, wall


def reply(prefix: str, answer: Dict[str, Any]) -> None:
    """The child's answer on one line, with the settings' names it ran under."""
    ran_with = sorted(n for n in os.environ if run_settings.family_of(n) is not None)
    print(prefix + json.dumps({**answer, "ran_with": ran_with}), flush=True)


def in_child() -> bool:
    """Whether this process is a rerun's child: it never reruns in turn."""
    return PARENT_ENV in os.environ
