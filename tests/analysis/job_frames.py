"""Job frames as fleet/store/job.py's `frame` returns them (JOB_COLUMNS, typed as it
types them), built row by row from a few knobs, with the matmul frame beside them.

    rows = [job_row("alpha", "a-1", 0, "train", 79_000.0, temperature_c=70.0)]
    jobs, matmul = job_frame(rows), matmul_frame([("alpha", "a-1", 0, 700.0)])
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pandas as pd

from fleet.analysis.job.figures import MATMUL_COLUMNS
from fleet.frames import frame
from fleet.store.job import JOB_COLUMNS

WHEN = dt.datetime(2026, 11, 27, 3, 0, tzinfo=dt.UTC)
SXM = "H100 SXM5 80GB"
PCIE = "H100 PCIe 80GB"
RUN = 1
# The contract's FLOP per token of four Llama 3 8B layers (tests/store/job_factory.py).
TRAIN_FLOP = 6.0 * 872_484_864 + 12.0 * 4 * 4096 * 4096
DECODE_FLOP = 2.0 * 872_484_864 + 4.0 * 4 * 32 * 128 * 2048
STACK = "torch 2.13.0+cu130, CUDA 13.0, cuDNN 91002"


def config_key(workload: str, attention: str = "flash", gpus: int = 4) -> str:
    """A configuration key shaped as fleet/store/job.py's `config_text`."""
    shape = ("4x4096 h32/8 d128 ffn14336 b2 s4096 bf16" if workload == "train"
             else "4x4096 h32/8 d128 ffn14336 b64 ctx2048 bf16")
    optimizer = " adamw-fused" if workload == "train" else ""
    return (f"suite 1.0 {workload} llama3-8b {shape} {attention} eager{optimizer} "
            f"concurrent x{gpus} soaked; {STACK}")


def job_row(provider: str, host: str, gpu_index: int, workload: str, tokens_per_s: float,
            *, variant: str = SXM, attention: str = "flash", run_id: int = RUN,
            gpus_in_run: int = 4, temperature_c: float = 70.0, sm_clock_mhz: float = 1980.0,
            contended: bool = False, not_soaked: bool = False, correct: bool = True,
            when: dt.datetime = WHEN, **more: Any) -> dict[str, Any]:
    """One row of the job frame: `tokens_per_s` and what follows from it."""
    train = workload == "train"
    flop = TRAIN_FLOP if train else DECODE_FLOP
    tflops = tokens_per_s * flop / 1e12
    gbs = None if train else tokens_per_s / 64 * 1.9e9 / 1e9
    return {
        "result_id": 0, "provider": provider, "host": host, "run_id": run_id,
        "collected_at": when, "gpu_uuid": f"GPU-{host}-{gpu_index}", "gpu_index": gpu_index,
        "variant": variant, "suite_version": "1.0.0", "workload": workload,
        "model": "llama3-8b",
        "shape": "4x4096 h32/8 ffn14336 b2 s4096" if train else
                 "4x4096 h32/8 ffn14336 b64 ctx2048",
        "dtype": "bf16", "attention": attention, "compiled": False, "graph": False,
        "gpus_in_run": gpus_in_run, "concurrency": "concurrent", "thermal": "soaked",
        "config": config_key(workload, attention, gpus_in_run),
        "torch_version": "2.13.0+cu130", "cuda_runtime_version": "13.0",
        "cudnn_version": "91002", "tokens_per_s": tokens_per_s, "tflops": tflops,
        "tflops_causal": tokens_per_s * (flop - (6.0 * 4 * 4096 * 4096 if train else 0.0))
        / 1e12,
        "mfu": tflops / 989.0, "peak_tflops": 989.0, "gbs": gbs,
        "hbm_share": None if gbs is None else gbs / 3350.0,
        "peak_memory_bytes": 13_200_000_000 if train else 6_100_000_000,
        "within_low": 0.997 * tokens_per_s, "within_high": 1.003 * tokens_per_s,
        "soaked": (not not_soaked) if train and attention == "flash" else None,
        "not_soaked": not_soaked, "contended": contended,
        "contention": "pid 4242 (python) of user other" if contended else None,
        "temperature_c": temperature_c, "sm_clock_mhz": sm_clock_mhz, "power_w": 690.0,
        "compile_s": None, "wall_s": 52.3, "correctness_passed": correct,
        "repeat_low": 0.992 * tokens_per_s, "repeat_high": 1.008 * tokens_per_s,
        # Suite 1.0: the pinned backend (flash) was the headline; training expanded GQA.
        "headline": attention == "flash", "gqa": "expanded" if train else "grouped",
        "point": None, "copy_gbs": None, "copy_share": None,
        # No rerun (agent/rerun/job.py), no setting that could move a job.
        "rerun_tokens_per_s": None, "rerun_share": None, "rerun_floor": None,
        "rerun_without": None, "rerun_contended": None, "job_suspects": None,
        **more,
    }


def job_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The rows as the store's frame types them, result ids in order."""
    names = [c.name for c in JOB_COLUMNS]
    return frame(JOB_COLUMNS, [[*(i + 1,), *(row[n] for n in names[1:])]
                               for i, row in enumerate(rows)])


def matmul_frame(figures: Sequence[tuple[str, str, int, float]], run_id: int = RUN
                 ) -> pd.DataFrame:
    """(provider, host, GPU index, soaked TFLOP/s) of one run, bf16 8192³."""
    return pd.DataFrame([(p, h, run_id, i, "bf16", t, "8192³ bf16, sustained, soaked")
                         for p, h, i, t in figures], columns=list(MATMUL_COLUMNS))
