"""The suite table: each suite the agent runs, with its configuration, its run and its
rerun, in the order `collect` walks them (agent/collect.py).

A suite is one slice through the agent: its configuration (the harness's, the job's, the
node's `Config`), the measurement (agent/matmul/, agent/job/, agent/node/), and what
measures its short figures again without the run's settings (agent/rerun/). A new suite is
a row here and its document list (fleet-agent/1), not an edit through collect.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.job import suite as jobs
from agent.job.share import set_copy_shares
from agent.matmul import harness
from agent.node import suite as node
from agent.rerun import job as job_rerun
from agent.rerun import matmul as matmul_rerun
from agent.rerun.node import NodeReruns
from agent.source import settings as run_settings
from agent.source.nvml import Nvml

Progress = Callable[..., None]  # collect's: (stage, message, **extra)
Figures = List[Dict[str, Any]]


@dataclass
class Ran:
    """What one suite measured and what failed; `links`: each GPU's host link under load
    (the node suite's), `heated`: whether it left every card soaked and hot."""

    results: Figures = field(default_factory=list)
    errors: Figures = field(default_factory=list)
    links: Dict[int, Dict[str, Optional[int]]] = field(default_factory=dict)
    heated: bool = False


# A suite's rerun: its configuration, what its run gave, the GPUs and their source, and
# progress in; the errors of what could not be measured again out.
Again = Callable[[Any, Ran, Figures, Optional[Nvml], Progress], Figures]


@dataclass(frozen=True)
class Suite:
    """One suite: where its figures go in the document, its stage in progress and errors,
    what it says where there is no GPU, its configuration's class, how it runs, what
    measures its short figures again straight after, and what it makes of its
    configuration after the suite run just before it."""

    name: str
    key: str
    stage: str
    no_gpu: str
    config: type
    run: Callable[[Any, Figures, Optional[Nvml], Progress], Ran]
    rerun: Optional[Again]
    after: Callable[[Any, Optional["Suite"], Optional[Ran]], Any] = lambda cfg, s, r: cfg


def _variants(gpus: Figures) -> Dict[int, str]:
    """Each GPU index's variant label, as the reruns' floors are keyed."""
    return {int(g["index"]): str((g.get("variant") or {}).get("label"))
            for g in gpus if "index" in g}


def measured_again(stage: str, what: str, results: Figures,
                   settle: Callable[[], Optional[str]]) -> Figures:
    """Run a rerun's `settle`; the errors where it could not be done, every `rerun` it
    left taken off: the original figures then stand, and the controller calls them
    unsettled."""
    try:
        failed = settle()
    except Exception as exc:  # the figures stand, unsettled
        failed = f"did not run ({type(exc).__name__}: {str(exc)[:300]})"
    if failed is None:
        return []
    for result in results:
        result.pop("rerun", None)
    return [{"stage": stage, "message": f"{what}: {failed}; the original figures stand"}]


def _matmul(cfg: harness.Config, gpus: Figures, nvml: Optional[Nvml],
            progress: Progress) -> Ran:
    progress("benchmark", f"benchmarking {cfg.dtype} {cfg.m}x{cfg.n}x{cfg.k} ({cfg.mode})")
    try:
        results, failures = harness.run(cfg, gpus, nvml,
                                         lambda message: progress("benchmark", message))
    except harness.HarnessError as exc:
        return Ran([], [{"stage": "benchmark", "message": f"{exc}; fingerprinted only"}])
    # A soaked matmul that ran on every GPU left each hot: the job's shorter span
    # (agent/job/suite.py Config.warm_span_s says what it rests on).
    return Ran(results, failures,
               heated=cfg.protocol == "soaked" and bool(results) and not failures)


def _matmul_rerun(cfg: harness.Config, ran: Ran, gpus: Figures, nvml: Optional[Nvml],
                  progress: Progress) -> Figures:
    """A short soaked matmul measured again without the run's settings that can move it,
    then with them (agent/rerun/matmul.py)."""
    def again(quick: harness.Config) -> Figures:
        found, failed = harness.run(quick, gpus, nvml,
                                    lambda message: progress("benchmark", message))
        if failed:
            raise harness.HarnessError("; ".join(str(f["message"]) for f in failed)[:600])
        return found

    return measured_again(
        "benchmark", "matmul again without the run's settings", ran.results,
        lambda: matmul_rerun.settle(ran.results,
                                    run_settings.collect(os.environ, limit=None), cfg,
                                    _variants(gpus), again,
                                    lambda message: progress("benchmark", message)))


def _job(cfg: jobs.Config, gpus: Figures, nvml: Optional[Nvml], progress: Progress) -> Ran:
    progress("job", "a transformer's training step and decode on every GPU at once")
    started = time.monotonic()
    try:
        results, errors = jobs.run(cfg, gpus, nvml, lambda message: progress("job", message))
    except harness.HarnessError as exc:
        return Ran([], [{"stage": "job", "message": f"{exc}; no job figure"}])
    progress("job", f"job suite: {jobs.summary_line(results)}, {len(errors)} failed, in "
             f"{time.monotonic() - started:.1f} s")
    return Ran(results, errors)


def _job_rerun(cfg: jobs.Config, ran: Ran, gpus: Figures, nvml: Optional[Nvml],
               progress: Progress) -> Figures:
    """A short job figure measured again without the run's settings that can move it
    (agent/rerun/job.py)."""
    return measured_again(
        "job", "job again without the run's settings", ran.results,
        lambda: job_rerun.settle(ran.results, run_settings.collect(os.environ, limit=None),
                                 cfg, lambda message: progress("job", message),
                                 variants=_variants(gpus)))


def _job_after(cfg: jobs.Config, before: Optional[Suite], ran: Optional[Ran]) -> Any:
    """Straight after a soaked matmul the cards still hold its heat: the shorter span."""
    return cfg.after_matmul() if before is MATMUL and ran is not None and ran.heated else cfg


def _node(cfg: node.Config, gpus: Figures, nvml: Optional[Nvml], progress: Progress) -> Ran:
    progress("node", "measuring memory, host links, GPU pairs and the all-reduce")
    started = time.monotonic()
    outcome = run_node(cfg, gpus, nvml, lambda message: progress("node", message))
    progress("node", f"node suite: {len(outcome.results)} figures, {len(outcome.errors)} "
             f"failed, in {time.monotonic() - started:.1f} s")
    return Ran(outcome.results, outcome.errors, outcome.links)


MATMUL = Suite("matmul", "benchmarks", "benchmark", "no NVIDIA GPU: nothing to benchmark",
               harness.Config, _matmul, _matmul_rerun)
JOB = Suite("job", "jobs", "job", "no NVIDIA GPU: no job to run", jobs.Config, _job,
            _job_rerun, _job_after)
# The node's three reruns run inside the suite, at the points it says and watched as its
# figures were (agent/rerun/node.py, handed to it by `run_node`).
NODE = Suite("node", "node", "node", "no NVIDIA GPU: no node to measure", node.Config,
             _node, None)

# On GPUs the job runs straight after the matmul, while the cards still hold its heat:
# behind the node suite (25 s of transfers on a 4x H100) they had cooled 22-24 C and took
# 50-80 s of training to soak again. The node suite's transfers are not soaked figures;
# after the job they still follow a load.
SUITES: Tuple[Suite, ...] = (MATMUL, JOB, NODE)
# Without a GPU (the CPU path, or a suite that cannot run) nothing holds heat.
WITHOUT_GPU: Tuple[Suite, ...] = (MATMUL, NODE, JOB)


def run_node(cfg: node.Config, gpus: Figures, nvml: Optional[Nvml],
             progress: Callable[[str], None]) -> node.Outcome:
    """The node suite with its reruns, as collect runs it."""
    return node.run_or_fail(cfg, gpus, nvml, progress, NodeReruns())


def share_copies(documents: Dict[str, Figures]) -> None:
    """Each decode figure's share of its GPU's memory copy, once both suites have run."""
    set_copy_shares(documents.get(JOB.key, []), documents.get(NODE.key, []))
