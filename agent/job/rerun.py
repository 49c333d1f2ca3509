"""Whose a short job figure is, settled by measuring it again (DESIGN.md, "Judging one
node"; issue 44), as agent/node/rerun.py settles the all-reduce.

A GPU's headline training step, or its headline decode at the bandwidth point, is short:

- where the records hold its variant and backend (`RECORDS_BY_SUITE`: suites 1.1.0 to
  1.3.0 on lent H100 SXM5s, 1.3.0 on a lent H200 SXM too; 1.4.0 its own on the H200,
  eager and compiled, and 1.3.0's on the H100 until its own are measured, `record`),
  under that figure by more
  than `RECORDS_MARGIN` (5%: healthy lent H100s stood within 0.5% of each other on a node
  and 1.3% across nodes), which
  catches a setting that costs a few percent (CUDA_LAUNCH_BLOCKING=1 between a training
  step's kernels);
- elsewhere, under `TRAIN_MFU_FLOOR` of its datasheet's dense bf16 peak (healthy lent
  H100s: MFU 0.46-0.49 with cuDNN, 0.44-0.47 with flash) or, for decode, under
  `DECODE_HBM_FLOOR` of its datasheet's HBM bandwidth (0.57-0.75): only what is gross
  (an allocator that frees every tensor, PYTORCH_NO_CUDA_MEMORY_CACHING=1).

Where a GPU's figure is short and the run's settings hold some that can move a job
(agent/source/settings.py: CUDA_*, cuBLAS, cuDNN, PyTorch), the job suite runs again in a
child process whose environment lacks them, on the short GPUs, with the headline backends
only and short windows (`rerun_config`): the card is still hot from the suite, and the
question is whether the settings cost the figure its floor, not its fourth digit. Each
short headline gets the rerun's figure (`rerun`), with what was taken out and what the
child ran under. On a healthy node: no rerun, no cost.

The child is agent/child.py's: the agent's own Python, told its parent's pid.
"""

import gc
import json
import sys
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent import child
from agent.job import standin
from agent.source import settings as run_settings

TRAIN_MFU_FLOOR = 0.30
DECODE_HBM_FLOOR = 0.45
# Under the records' figure of the variant and backend by more than this: the shortfall
# rule's floor for a memory copy (fleet/analysis/node/shortfall.py). Healthy lent H100s' job
# figures stood within 0.5% of each other on one node and 1.3% across nodes.
RECORDS_MARGIN = 0.05
MAX_NAMES = 64
RESULT_PREFIX = "fleet-job-rerun "
TIMEOUT_S = 300.0
# Floors by (workload, decode point): (the figure's field, the floor, what it is a share of).
Floors = Dict[Tuple[str, Optional[str]], Tuple[str, float, str]]
FLOORS: Floors = {
    ("train", None): ("mfu", TRAIN_MFU_FLOOR, "its datasheet's dense bf16 peak"),
    ("decode", "bandwidth"): ("hbm_share", DECODE_HBM_FLOOR, "its datasheet's HBM bandwidth"),
}
# What healthy lent cards gave, by suite and (variant, workload, decode point, backend):
# tokens/s. Suite 1.1.0: medians of five runs on a 4x H100 SXM5 (torch 2.11.0+cu130,
# cuDNN 9.19: bench/records/2026-11-27-h100x4-job-backends, `python bench/job_backends.py`).
# Suite 1.2.0 moved only decode's bandwidth point (128 x 8,192): its training is 1.1.0's,
# its bandwidth point five runs on a 2x H100 (bench/records/2026-11-28-h100x2-decode-8192).
# Suite 1.3.0 changed only how decode hands over GQA: its H100 training is 1.1.0's, its
# decode two runs on a lent H100; its H200 figures three runs on a lent H200 (training
# within 0.1% of five 1.2.0 runs on another H200, 2026-11-28-h200-job-figures).
RECORDS_SOURCE = "2026-11-27-h100x4-job-backends"
RECORDS_SOURCES = {"1.1.0": RECORDS_SOURCE,
                   "1.2.0": RECORDS_SOURCE + "; decode 2026-11-28-h100x2-decode-8192",
                   "1.3.0": RECORDS_SOURCE + "; decode 2026-11-28-h100-job-suite-1.3.0; "
                            "H200 2026-11-28-h200-job-suite-1.3.0"}
RECORDS_SOURCES["1.4.0"] = ("H200 2026-11-29-h200-titan-check, 2026-11-29-h200x2-job-suite-"
                            "1.4.0; H100 suite 1.3.0's (" + RECORDS_SOURCES["1.3.0"] + ")")
_TRAIN_1_1: Dict[Tuple[str, str, Optional[str], str], float] = {
    ("H100-SXM5-80GB", "train", None, "cudnn"): 79_893.0,
    ("H100-SXM5-80GB", "train", None, "flash"): 75_837.0,
    ("H100-SXM5-80GB", "train", None, "efficient"): 66_499.0,
}
RECORDS_BY_SUITE: Dict[str, Dict[Tuple[str, str, Optional[str], str], float]] = {
    "1.1.0": {
        **_TRAIN_1_1,
        ("H100-SXM5-80GB", "decode", "bandwidth", "cudnn"): 30_978.0,
        ("H100-SXM5-80GB", "decode", "bandwidth", "flash"): 26_511.0,
        ("H100-SXM5-80GB", "decode", "bandwidth", "efficient"): 27_864.0,
    },
    "1.2.0": {
        **_TRAIN_1_1,
        ("H100-SXM5-80GB", "decode", "bandwidth", "cudnn"): 18_234.0,
        ("H100-SXM5-80GB", "decode", "bandwidth", "flash"): 15_071.0,
        ("H100-SXM5-80GB", "decode", "bandwidth", "efficient"): 16_052.0,
    },
    "1.3.0": {
        **_TRAIN_1_1,
        ("H100-SXM5-80GB", "decode", "bandwidth", "cudnn"): 18_676.0,
        ("H100-SXM5-80GB", "decode", "bandwidth", "flash"): 15_090.0,
        ("H100-SXM5-80GB", "decode", "bandwidth", "efficient"): 16_015.0,
        ("H200-SXM-141GB", "train", None, "cudnn"): 84_921.0,
        ("H200-SXM-141GB", "train", None, "flash"): 80_496.0,
        ("H200-SXM-141GB", "train", None, "efficient"): 68_936.0,
        ("H200-SXM-141GB", "decode", "bandwidth", "cudnn"): 26_795.0,
        ("H200-SXM-141GB", "decode", "bandwidth", "flash"): 15_843.0,
        ("H200-SXM-141GB", "decode", "bandwidth", "efficient"): 16_994.0,
    },
}
# Suite 1.4.0 (issue 55: torchtitan's forms, and a compiled figure): on lent H200s, the
# medians of four runs (one GPU alone twice, 2026-11-29-h200-titan-check; two at once,
# 2026-11-29-h200x2-job-suite-1.4.0) for training, three for decode, one compiled. Its
# H100 figures are not measured yet: 1.3.0's stand, the lower (each 1.4.0 form measured
# faster on the H200: 2026-11-29-h200-job-forms), so they call nothing short that
# 1.4.0's would not.
RECORDS_BY_SUITE["1.4.0"] = {
    **{k: v for k, v in RECORDS_BY_SUITE["1.3.0"].items() if k[0] == "H100-SXM5-80GB"},
    ("H200-SXM-141GB", "train", None, "cudnn"): 96_188.0,
    ("H200-SXM-141GB", "train", None, "flash"): 90_497.0,
    ("H200-SXM-141GB", "train", None, "efficient"): 77_434.0,
    ("H200-SXM-141GB", "train", None, "cudnn/compiled"): 100_318.0,
    ("H200-SXM-141GB", "decode", "bandwidth", "cudnn"): 27_757.0,
    ("H200-SXM-141GB", "decode", "bandwidth", "flash"): 15_655.0,
    ("H200-SXM-141GB", "decode", "bandwidth", "efficient"): 16_872.0,
}
# A compiled figure's record is keyed by its backend and "/compiled" ("cudnn/compiled");
# without one, the eager figure's of its backend judges it (`record`): compiled, a step is
# not slower.
COMPILED = "/compiled"
# The suite the agent runs, whose records judge its figures.
RECORDS_SUITE = "1.4.0"
RECORDS = RECORDS_BY_SUITE[RECORDS_SUITE]


def short(result: Dict[str, Any], floors: Optional[Floors] = None,
          variant: Optional[str] = None) -> Optional[Tuple[float, str]]:
    """(floor in tokens/s, what it rests on) where `result` is a headline figure under
    its floor; None where it is not, or nothing judges it (another decode point, no
    record and no datasheet figure). The records' figure of its variant and backend
    judges it where there is one (`variant`, its suite), else its datasheet share."""
    if not result.get("headline"):
        return None
    workload, point = str(result.get("workload")), result.get("point")
    tokens = float(result.get("tokens_per_s") or 0.0)
    expected = record(result, variant)
    if floors is None and expected is not None:
        floor = expected * (1.0 - RECORDS_MARGIN)
        if tokens >= floor:
            return None
        source = RECORDS_SOURCES[str(result.get("suite_version"))]
        form = f"{result.get('attention')}" + (" compiled" if result.get("compiled") else "")
        return floor, (f"records: {expected:,.0f} tokens/s expected of a healthy {variant} "
                       f"({form}, {source}), called under {floor:,.0f}")
    if floors is None and expected is None:
        stood_in = standin.floor(result)
        if stood_in is not None:
            return stood_in if tokens < stood_in[0] else None
    rule = (floors or FLOORS).get((workload, point))
    if rule is None:
        return None
    field, share, of = rule
    value = result.get(field)
    if value is None or float(value) <= 0 or float(value) >= share or tokens <= 0:
        return None
    # The share's floor in the figure's own tokens/s, so a rerun is judged the same way.
    return tokens * share / float(value), (f"datasheet: {field} {float(value):.3f}, under "
                                           f"{share:g} of {of}")


def record(result: Dict[str, Any], variant: Optional[str]) -> Optional[float]:
    """The records' tokens/s for `result`'s suite, variant, workload, point and backend;
    a compiled figure's own where the records hold one, else its backend's eager one."""
    table = RECORDS_BY_SUITE.get(str(result.get("suite_version")), {})
    key = (str(variant), str(result.get("workload")), result.get("point"),
           str(result.get("attention")))
    if result.get("compiled"):
        own = table.get((key[0], key[1], key[2], key[3] + COMPILED))
        if own is not None:
            return own
    return table.get(key)


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


def _release_gpu_memory() -> None:
    """What the suite left in the caching allocator, handed back before the child needs it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def settle(results: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]], cfg: Any,
           progress: Callable[[str], None], environ: Optional[Dict[str, str]] = None,
           floors: Optional[Floors] = None, variants: Optional[Dict[int, str]] = None,
           timeout_s: float = TIMEOUT_S) -> Optional[str]:
    """Run the suite again without the settings `decide` names, where it names some, and
    put on each short headline its rerun (`rerun`). Returns why the rerun failed (the
    figures then stand alone, and the controller calls them unsettled), else None."""
    # A rerun's child never reruns: what it could not take out, it cannot either.
    if child.in_child():
        return None
    plan = decide(results, recorded, floors, variants)
    if plan is None:
        return None
    judged = [(r, short(r, floors, _variant(r, variants))) for r in results]
    under = "; ".join(f"GPU {r['gpu_index']} {r['workload']}"
                      + (f" ({r['point']})" if r.get("point") else "")
                      + f" {r['tokens_per_s']:,.0f} tokens/s, {found[1]}"
                      for r, found in judged if found is not None)
    progress(f"job short ({under}): again without {', '.join(plan['without'])}")
    run = rerun_config(cfg, plan["backends"], plan["gpus"], plan["compile"])
    spec = {"device": run.device, "backends": list(run.backends), "gpus": run.gpus,
            "window_s": run.window_s, "span_s": run.span_s, "cap_s": run.cap_s,
            "measure_s": run.measure_s, "beside_s": run.beside_s,
            "decode_s": run.decode_s, "cpu": run.device == "cpu",
            "points": plan["points"], "compile": run.compile}
    _release_gpu_memory()
    report, failed, wall = child.run("agent.job.rerun:child_main", spec, plan["without"],
                                     RESULT_PREFIX, timeout_s, environ)
    if report is None:
        return failed
    again = {(int(r["gpu_index"]), r["workload"], r.get("point")): r
             for r in report["jobs"] if r.get("headline")}
    ran_with = report["ran_with"]
    for result, found in judged:
        other = again.get((int(result["gpu_index"]), result["workload"], result.get("point")))
        if found is None or other is None:
            continue
        result["rerun"] = {
            "without": plan["without"], "floor_tokens_per_s": round(found[0], 3),
            "floor_basis": found[1][:512], "tokens_per_s": other["tokens_per_s"],
            "attention": other["attention"], "mfu": other.get("mfu"),
            "hbm_share": other.get("hbm_share"),
            "contended": bool((other.get("flags") or {}).get("contended")),
            "ran_with": ran_with[:MAX_NAMES], "wall_s": wall}
    return None


def child_main(argv: List[str]) -> int:
    """The rerun's child: the job suite as the spec says, its results on one line."""
    from agent.collect import collect
    from agent.job import transformer
    from agent.job.suite import Config

    spec = json.loads(argv[0])
    cpu = bool(spec.get("cpu"))
    cfg = Config.for_cpu() if cpu else Config()
    points = transformer.CPU_DECODE_POINTS if cpu else transformer.DECODE_POINTS
    cfg = replace(cfg, backends=tuple(spec["backends"]), gpus=spec.get("gpus"),
                  window_s=float(spec["window_s"]), span_s=float(spec["span_s"]),
                  warm_span_s=float(spec["span_s"]), cap_s=float(spec["cap_s"]),
                  measure_s=float(spec["measure_s"]), beside_s=float(spec["beside_s"]),
                  decode_s=float(spec["decode_s"]), compile=bool(spec.get("compile")),
                  shapes={"decode": {p: points[p] for p in spec.get("points", points)}})
    document = collect(probe_torch=False, job=cfg)
    child.reply(RESULT_PREFIX, {"jobs": document["jobs"], "errors": document["errors"]})
    return 0 if document["jobs"] else 3
