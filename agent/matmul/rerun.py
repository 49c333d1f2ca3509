"""Whose a short soaked matmul is, settled by measuring it again (DESIGN.md, "Judging one
node"; issue 44), as agent/node/rerun.py settles the all-reduce and agent/job/rerun.py
the job.

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
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent import child
from agent.source import settings as run_settings

MAX_NAMES = 64
MAX_BASIS = 512
RESULT_PREFIX = "fleet-matmul-rerun "
TIMEOUT_S = 180.0
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


def settle(results: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]], cfg: Any,
           variants: Dict[int, str], again: Callable[[Any], List[Dict[str, Any]]],
           progress: Callable[[str], None], table: Optional[Dict[str, Any]] = None,
           environ: Optional[Dict[str, str]] = None, timeout_s: float = TIMEOUT_S
           ) -> Optional[str]:
    """Measure the short GPUs again without the settings `decide` names, in a child
    process, then with them in this one (`again`: the harness on a configuration), and put
    the pair on each short result (`rerun`). Returns why it could not be done (the
    figures then stand alone, and the controller calls them unsettled), else None."""
    if child.in_child() or not cfg.soaked:
        return None
    if table is None:
        from agent.node import floors

        table = floors.load()
    plan = decide(results, recorded, table, variants)
    if plan is None:
        return None
    judged: Dict[int, Tuple[float, str]] = plan["floors"]
    under = "; ".join(f"GPU {r['gpu_index']} {float(r['tflops']):.1f} TFLOP/s under "
                      f"{judged[int(r['gpu_index'])][0]:g}" for r in results
                      if int(r["gpu_index"]) in judged)
    progress(f"matmul short ({under}): again without {', '.join(plan['without'])}, then "
             "with them")
    quick = quick_config(cfg, plan["gpus"])
    _release_gpu_memory()
    started = time.monotonic()
    report, failed, _ = child.run("agent.matmul.rerun:child_main",
                                  {"config": dataclasses.asdict(quick)}, plan["without"],
                                  RESULT_PREFIX, timeout_s, environ)
    if report is None:
        return failed
    without = {int(r["gpu_index"]): r for r in report["benchmarks"]}
    progress("matmul: the same quick measurement again with the run's settings")
    try:
        with_them = {int(r["gpu_index"]): r for r in again(quick)}
    except Exception as exc:  # the child's figures alone settle nothing
        return f"the measurement with the settings failed: {type(exc).__name__}: {exc}"[:4000]
    wall = round(time.monotonic() - started, 3)
    ran_with = report["ran_with"]
    for result in results:
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
            "ran_with": ran_with[:MAX_NAMES], "wall_s": wall}
    return None


def _release_gpu_memory() -> None:
    """What the soak left in the caching allocator, handed back before the child needs it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def child_main(argv: List[str]) -> int:
    """The rerun's child: the harness as the spec says, its results on one line."""
    from agent.collect import collect
    from agent.matmul.harness import Config

    cfg = Config(**json.loads(argv[0])["config"])
    document = collect(probe_torch=False, bench=cfg)
    child.reply(RESULT_PREFIX, {"benchmarks": document["benchmarks"],
                                "errors": document["errors"]})
    return 0 if document["benchmarks"] else 3
