"""Whose a short job figure is, settled by measuring it again (docs/reruns.md; issue 44),
as agent/rerun/allreduce.py settles the all-reduce. What calls a figure short is the job's
own table (agent/job/records.py `short`).

Where a GPU's figure is short and the run's settings hold some that can move a job
(agent/source/settings.py: CUDA_*, cuBLAS, cuDNN, PyTorch), the job suite runs again in a
child process whose environment lacks them, on the short GPUs, with the headline backends
only and short windows (`rerun_config`): the card is still hot from the suite, and the
question is whether the settings cost the figure its floor, not its fourth digit. Each
short headline gets the rerun's figure (`rerun`), with what was taken out and what the
child ran under. On a healthy node: no rerun, no cost.
"""

import gc
import sys
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.job import suite as jobs
from agent.job.records import Floors, short
from agent.matmul.harness import HarnessError
from agent.rerun import child
from agent.rerun.bounds import MAX_BASIS, MAX_NAMES, TIMEOUT_S
from agent.rerun.protocol import Plan, Rerun
from agent.source import settings as run_settings


def _variant(result: Dict[str, Any], variants: Optional[Dict[int, str]]) -> Optional[str]:
    return (variants or {}).get(int(result["gpu_index"]))


def decide(results: Sequence[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           floors: Optional[Floors] = None, variants: Optional[Dict[int, str]] = None
           ) -> Optional[Dict[str, Any]]:
    """What a rerun would take out and run: {"without", "gpus", "backends", "points"};
    None where no headline is short, or no setting that can move a job may be taken out.
    Only what was short is run again: the short figures' backends (training's first: the
    child soaks on it, as the suite does) and decode points (none where only training was
    short). `variants`: each GPU index's variant label, for the records' floors."""
    shorts = [r for r in results if short(r, floors, _variant(r, variants)) is not None]
    if not shorts:
        return None
    taken = sorted({str(s["name"]) for s in run_settings.suspects(recorded, "job")
                    if run_settings.removable(s)})[:MAX_NAMES]
    if not taken:
        return None
    shorts.sort(key=lambda r: r["workload"] != "train")
    backends: List[str] = []
    for r in shorts:
        if r["attention"] not in backends:
            backends.append(str(r["attention"]))
    return {"without": taken, "gpus": sorted({int(r["gpu_index"]) for r in shorts}),
            "backends": backends,
            "points": sorted({str(r["point"]) for r in shorts if r["workload"] == "decode"}),
            # A short compiled headline is measured again compiled: its rerun's headline
            # is then the same form's.
            "compile": any(bool(r.get("compiled")) for r in shorts)}


def rerun_config(cfg: Any, backends: Sequence[str], gpus: Sequence[int],
                 compile: bool = False) -> Any:
    """The child's suite: the short figures' backends on the short GPUs, in short windows,
    compiled only where a short figure was (its cache then warm from the suite's run)."""
    if cfg.device == "cpu":
        return replace(cfg, backends=tuple(backends), gpus=None, compile=compile)
    return replace(cfg, backends=tuple(backends), gpus=list(gpus), window_s=1.0,
                   span_s=4.0, warm_span_s=4.0, cap_s=10.0, measure_s=3.0, beside_s=2.0,
                   compile=compile)


class JobRerun(Rerun):
    """The short headlines' backends, GPUs and decode points again in a child."""

    kind = "job"

    def __init__(self, results: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
                 cfg: Any, floors: Optional[Floors], variants: Optional[Dict[int, str]]
                 ) -> None:
        self.results, self.recorded, self.cfg = results, recorded, cfg
        self.floors, self.variants = floors, variants
        self.judged = [(r, short(r, floors, _variant(r, variants))) for r in results]

    def plan(self) -> Optional[Plan]:
        return decide(self.results, self.recorded, self.floors, self.variants)

    def said(self, plan: Plan) -> str:
        under = "; ".join(f"GPU {r['gpu_index']} {r['workload']}"
                          + (f" ({r['point']})" if r.get("point") else "")
                          + f" {r['tokens_per_s']:,.0f} tokens/s, {found[1]}"
                          for r, found in self.judged if found is not None)
        return f"job short ({under}): again without {', '.join(plan['without'])}"

    def spec(self, plan: Plan) -> Dict[str, Any]:
        run = rerun_config(self.cfg, plan["backends"], plan["gpus"], plan["compile"])
        return {"device": run.device, "backends": list(run.backends), "gpus": run.gpus,
                "window_s": run.window_s, "span_s": run.span_s, "cap_s": run.cap_s,
                "measure_s": run.measure_s, "beside_s": run.beside_s,
                "decode_s": run.decode_s, "cpu": run.device == "cpu",
                "points": plan["points"], "compile": run.compile}

    def release(self) -> None:
        """What the suite left in the caching allocator, handed back before the child
        needs it."""
        torch = sys.modules.get("torch")
        if torch is None:
            return
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def place(self, plan: Plan, answer: Dict[str, Any], wall: float) -> None:
        again = {(int(r["gpu_index"]), r["workload"], r.get("point")): r
                 for r in answer["jobs"] if r.get("headline")}
        for result, found in self.judged:
            other = again.get((int(result["gpu_index"]), result["workload"],
                               result.get("point")))
            if found is None or other is None:
                continue
            result["rerun"] = {
                "without": plan["without"], "floor_tokens_per_s": round(found[0], 3),
                "floor_basis": found[1][:MAX_BASIS], "tokens_per_s": other["tokens_per_s"],
                "attention": other["attention"], "mfu": other.get("mfu"),
                "hbm_share": other.get("hbm_share"),
                "contended": bool((other.get("flags") or {}).get("contended")),
                "ran_with": answer["ran_with"][:MAX_NAMES], "wall_s": wall}


def settle(results: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]], cfg: Any,
           progress: Callable[[str], None], environ: Optional[Dict[str, str]] = None,
           floors: Optional[Floors] = None, variants: Optional[Dict[int, str]] = None,
           timeout_s: float = TIMEOUT_S["job"]) -> Optional[str]:
    """Run the suite again without the settings `decide` names, where it names some, and
    put on each short headline its rerun (`rerun`). Returns why the rerun failed (the
    figures then stand alone, and the controller calls them unsettled), else None."""
    return JobRerun(results, recorded, cfg, floors, variants).settle(progress, environ,
                                                                     timeout_s)


@child.measures("job")
def measure(spec: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """The child: the job suite as the spec says, on this host's GPUs."""
    from agent.job import transformer  # torch's import: the child's, not the agent's

    cpu = bool(spec.get("cpu"))
    cfg = jobs.Config.for_cpu() if cpu else jobs.Config()
    points = transformer.CPU_DECODE_POINTS if cpu else transformer.DECODE_POINTS
    cfg = replace(cfg, backends=tuple(spec["backends"]), gpus=spec.get("gpus"),
                  window_s=float(spec["window_s"]), span_s=float(spec["span_s"]),
                  warm_span_s=float(spec["span_s"]), cap_s=float(spec["cap_s"]),
                  measure_s=float(spec["measure_s"]), beside_s=float(spec["beside_s"]),
                  decode_s=float(spec["decode_s"]), compile=bool(spec.get("compile")),
                  shapes={"decode": {p: points[p] for p in spec.get("points", points)}})
    found: List[Dict[str, Any]]
    failed: List[Dict[str, Any]]
    nvml, gpus = child.gpus_here()
    try:
        if nvml is None and cfg.device != "cpu":
            found, failed = [], [{"stage": "job", "message": "no NVIDIA GPU: no job to run"}]
        else:
            try:
                found, failed = jobs.run(cfg, gpus, nvml, lambda message: None)
            except HarnessError as exc:
                found, failed = [], [{"stage": "job", "message": f"{exc}; no job figure"}]
    finally:
        if nvml is not None:
            nvml.close()
    return {"jobs": found, "errors": failed}, bool(found)
