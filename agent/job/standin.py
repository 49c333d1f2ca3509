"""The CPU path standing in for a GPU whose training step a setting of the run slows: the
one case the end-to-end test of what a user installs needs (tests/install/) and no CPU
makes by itself (issue 54).

A short figure is judged against a floor (agent/job/records.py: the records of the GPU's
variant, else a share of its datasheet's peak), and the CPU path has neither: it never
measures anything again. With `FLEET_CPU_STANDIN=NAME` in the agent's environment, and
only on the CPU path (`--cpu`):

- while the setting NAME is in the environment, each timed training step takes
  `COST_S` longer (a sleep inside the step), as a setting that costs a GPU's step would;
- a training step is called short at under `tokens / FLOOR_STEP_S` tokens a second, the
  floor's basis naming this stand-in.

The rerun's child runs without NAME when NAME is a setting that can move a job
(agent/source/settings.py: CUDA_*, cuBLAS, cuDNN, PyTorch), so its steps take their own
time: the renter's, as the controller then says. Both figures are real timings of the
same code; only the floor and the cost are the stand-in's. A GPU is never judged by it.
"""

import os
import re
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

ENV = "FLEET_CPU_STANDIN"
# A step of the CPU path's shape took 55-220 ms on a 2-core machine under a load of 3,
# one 1.19 s under a load of 8: under the floor's 3 s by 2.5x at the worst seen. The cost
# takes a step over it whatever the machine: a sleep is never shorter.
COST_S = 6.0
FLOOR_STEP_S = 3.0
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def setting(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The setting the stand-in makes costly; None where no stand-in is asked for."""
    name = (os.environ if environ is None else environ).get(ENV, "")
    return name if _NAME.match(name) else None


def stretched(work: Callable[[], None], environ: Optional[Mapping[str, str]] = None
              ) -> Callable[[], None]:
    """`work`, each call `COST_S` longer while the stand-in's setting is set."""
    env = os.environ if environ is None else environ
    name = setting(env)
    if name is None or name not in env:
        return work

    def step() -> None:
        work()
        time.sleep(COST_S)

    return step


def floor(result: Dict[str, Any], environ: Optional[Mapping[str, str]] = None
          ) -> Optional[Tuple[float, str]]:
    """(floor tokens/s, its basis) of a CPU-path training headline under the stand-in;
    None for anything else."""
    name = setting(environ)
    device = (result.get("provenance") or {}).get("device_name")
    if name is None or device != "cpu" or result.get("workload") != "train":
        return None
    shape = result.get("shape") or {}
    tokens = int(shape.get("batch") or 0) * int(shape.get("seq") or 0)
    if tokens <= 0:
        return None
    return tokens / FLOOR_STEP_S, (f"CPU stand-in ({ENV}={name}): a step within "
                                   f"{FLOOR_STEP_S:g} s, {name} costing {COST_S:g} s a step")
