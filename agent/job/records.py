"""What a job figure is called short under: the records of healthy lent cards by suite,
variant and backend, else a share of the datasheet (issue 44). The agent's rerun reads it
(agent/rerun/job.py), and so do the controller's verdict on a rerun
(fleet/analysis/job/whose.py) and the report's bands (fleet/report/bands.py), so that one
table calls a figure short everywhere.

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
"""

from typing import Any, Dict, Optional, Tuple

from agent.job import standin

TRAIN_MFU_FLOOR = 0.30
DECODE_HBM_FLOOR = 0.45
# Under the records' figure of the variant and backend by more than this: the shortfall
# rule's floor for a memory copy (fleet/analysis/node/shortfall.py). Healthy lent H100s' job
# figures stood within 0.5% of each other on one node and 1.3% across nodes.
RECORDS_MARGIN = 0.05
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
                            "1.4.0, 2026-11-29-h200-compiled-decode; H100 suite 1.3.0's ("
                            + RECORDS_SOURCES["1.3.0"] + ")")
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
    # One run, decode compiled at the bandwidth point (2026-11-29-h200-compiled-decode).
    ("H200-SXM-141GB", "decode", "bandwidth", "cudnn/compiled"): 29_076.0,
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
