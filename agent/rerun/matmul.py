"""Whose a short soaked matmul is, settled by measuring it again (docs/reruns.md; issue
44), as agent/rerun/allreduce.py settles the all-reduce and agent/rerun/job.py the job.

A GPU's soaked figure is short where it falls under its floor (agent/node/floors.json
"matmul": the catalog's soaked figure of its variant and configuration less the larger
of 3% and 1.96 x the entry's sd, made by fleet/analysis/node/floors.py). The report's margin
also holds the GPU's own repeat spread, so its threshold is never above this floor: every
GPU the report calls short was measured again.

Where a short GPU ran under settings that can move a matmul (CUDA_*, cuBLAS, PyTorch:
agent/source/settings.py), the short GPUs are measured twice more by the quick protocol
(1-s windows until four agree, then 6 s): first in a child process whose environment
lacks them, then in the agent itself, with them, straight after. Both run on a card still
hot from the soak, so the pair differs by the settings, not by heat: a rerun without
them alone, on a card that had cooled, could clear the floor by the soak's own drop (1-3%
on the lent H100s) and hand the provider's shortfall to the renter. The controller
(fleet/analysis/node/whose.py `whose_matmul`) reads the pair: still short without them, the
card's; clear without them and the settings costing a measurable share, the renter's;
the settings costing nothing, the card's.

On a healthy node this costs nothing. On a short one: a child's start (torch's import,
CUDA's context: seconds) and two quick measurements of at most `max_total_s` each.
"""

import dataclasses
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.matmul import harness
from agent.node import floors
from agent.rerun import child
from agent.rerun.bounds import MAX_BASIS, MAX_NAMES, MAX_WHY, TIMEOUT_S
from agent.rerun.protocol import Plan, Rerun
from agent.source import settings as run_settings

# How the harness names runs it left out as cut short (agent/matmul/harness.py).
INTERRUPTED = "interrupted run(s) excluded"
# The entry's key as the harness's result names it.
KEY = ("dtype", "m", "n", "k", "mode", "cache", "thermal")


def floor(table: Dict[str, Any], variant: Optional[str], result: Dict[str, Any]
          ) -> Optional[Tuple[float, str]]:
    """(floor TFLOP/s, what it rests on) for a soaked result; None where nothing judges
    it (no entry for its variant and configuration: cool-start, other shapes)."""
    if variant is None:
        return None
    for entry in table.get("matmul", ()):
        if entry.get("variant") == variant and all(
                str(entry.get(k)) == str(result.get(k)) for k in KEY):
            low = float(entry["floor_tflops"])
            return low, (f"records: {float(entry['expected_tflops']):g} TFLOP/s expected of "
                         f"a healthy {variant} soaked ({len(entry.get('records', ()))} "
                         f"records), called under {low:g}")
    return None


def decide(results: Sequence[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variants: Dict[int, str]) -> Optional[Dict[str, Any]]:
    """What a rerun would take out and measure: {"without", "gpus", "floors" (each short
    GPU's (floor, basis))}; None where no soaked result is short, or no setting that can
    move a matmul may be taken out."""
    short: Dict[int, Tuple[float, str]] = {}
    for result in results:
        index = int(result["gpu_index"])
        found = floor(table, variants.get(index), result)
        if found is not None and float(result.get("tflops") or 0.0) < found[0]:
            short[index] = (found[0], found[1][:MAX_BASIS])
    if not short:
        return None
    taken = sorted({str(s["name"]) for s in run_settings.suspects(recorded, "matmul")
                    if run_settings.removable(s)})[:MAX_NAMES]
    if not taken:
        return None
    return {"without": taken, "gpus": sorted(short), "floors": short}


def quick_config(cfg: Any, gpus: Sequence[int]) -> Any:
    """The pair's protocol: quick on the short GPUs, the rest of the run's configuration."""
    return dataclasses.replace(cfg, protocol="quick", gpus=list(gpus), lock_clocks_mhz=None)


def _seen_others(result: Dict[str, Any], settings_on: bool) -> bool:
    """Whether another process, or a GPU busy before it started, was seen around a
    measurement. With the settings on, runs cut short are their own doing
    (CUDA_LAUNCH_BLOCKING=1 holds the host to every launch: 91 of ~5,000 runs of a lent
    H100 ran 1.5-4x the median), not another tenant's; without them, they are not."""
    lines = [str(line) for line in result.get("contention") or ()]
    if settings_on:
        lines = [line for line in lines if INTERRUPTED not in line]
    return bool(lines)


class MatmulRerun(Rerun):
    """The short GPUs' quick matmul without the settings in a child, then with them here."""

    kind = "matmul"

    def __init__(self, results: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
                 cfg: Any, variants: Dict[int, str],
                 again: Callable[[Any], List[Dict[str, Any]]],
                 progress: Callable[[str], None], table: Dict[str, Any]) -> None:
        self.results, self.recorded, self.cfg = results, recorded, cfg
        self.variants, self.with_them, self.progress = variants, again, progress
        self.table = table

    def plan(self) -> Optional[Plan]:
        return decide(self.results, self.recorded, self.table, self.variants)

    def said(self, plan: Plan) -> str:
        judged: Dict[int, Tuple[float, str]] = plan["floors"]
        under = "; ".join(f"GPU {r['gpu_index']} {float(r['tflops']):.1f} TFLOP/s under "
                          f"{judged[int(r['gpu_index'])][0]:g}" for r in self.results
                          if int(r["gpu_index"]) in judged)
        return (f"matmul short ({under}): again without {', '.join(plan['without'])}, then "
                "with them")

    def spec(self, plan: Plan) -> Dict[str, Any]:
        return {"config": dataclasses.asdict(quick_config(self.cfg, plan["gpus"]))}

    def release(self) -> None:
        """What the soak left in the caching allocator, handed back before the child needs
        it."""
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def again(self, plan: Plan, environ: Optional[Dict[str, str]], timeout_s: float
              ) -> child.Answer:
        """Without the settings in the child, then with them in this process, straight
        after: the pair differs by the settings, not by heat."""
        started = time.monotonic()
        report, failed, _ = super().again(plan, environ, timeout_s)
        if report is None:
            return None, failed, 0.0
        self.progress("matmul: the same quick measurement again with the run's settings")
        try:
            report["with_them"] = self.with_them(quick_config(self.cfg, plan["gpus"]))
        except Exception as exc:  # the child's figures alone settle nothing
            return (None, f"the measurement with the settings failed: {type(exc).__name__}: "
                          f"{exc}"[:MAX_WHY], 0.0)
        return report, None, round(time.monotonic() - started, 3)

    def place(self, plan: Plan, answer: Dict[str, Any], wall: float) -> None:
        judged: Dict[int, Tuple[float, str]] = plan["floors"]
        without = {int(r["gpu_index"]): r for r in answer["benchmarks"]}
        with_them = {int(r["gpu_index"]): r for r in answer["with_them"]}
        for result in self.results:
            index = int(result["gpu_index"])
            first, second = without.get(index), with_them.get(index)
            if index not in judged or first is None or second is None:
                continue
            result["rerun"] = {
                "without": plan["without"], "protocol": "quick",
                "floor_tflops": judged[index][0], "floor_basis": judged[index][1],
                "tflops": round(float(first["tflops"]), 3),
                "with_tflops": round(float(second["tflops"]), 3),
                "contended": _seen_others(first, False) or _seen_others(second, True),
                "ran_with": answer["ran_with"][:MAX_NAMES], "wall_s": wall}


def settle(results: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]], cfg: Any,
           variants: Dict[int, str], again: Callable[[Any], List[Dict[str, Any]]],
           progress: Callable[[str], None], table: Optional[Dict[str, Any]] = None,
           environ: Optional[Dict[str, str]] = None,
           timeout_s: float = TIMEOUT_S["matmul"]) -> Optional[str]:
    """Measure the short GPUs again without the settings `decide` names, in a child
    process, then with them in this one (`again`: the harness on a configuration), and put
    the pair on each short result (`rerun`). Returns why it could not be done (the
    figures then stand alone, and the controller calls them unsettled), else None."""
    if child.in_child() or not cfg.soaked:
        return None
    return MatmulRerun(results, recorded, cfg, variants, again, progress,
                       floors.load() if table is None else table
                       ).settle(progress, environ, timeout_s)


@child.measures("matmul")
def measure(spec: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """The child: the harness as the spec says, on this host's GPUs."""
    cfg = harness.Config(**spec["config"])
    found: List[Dict[str, Any]]
    failed: List[Dict[str, Any]]
    nvml, gpus = child.gpus_here()
    try:
        if nvml is None and cfg.device != "cpu":
            found, failed = [], [{"stage": "benchmark",
                                  "message": "no NVIDIA GPU: nothing to benchmark"}]
        else:
            try:
                found, failed = harness.run(cfg, gpus, nvml, lambda message: None)
            except harness.HarnessError as exc:
                found, failed = [], [{"stage": "benchmark",
                                      "message": f"{exc}; fingerprinted only"}]
    finally:
        if nvml is not None:
            nvml.close()
    return {"benchmarks": found, "errors": failed}, bool(found)
