"""The probe summary's matmul cell (fleet/cli/probe_display.py `tflops_cell`): the GPUs a
median rests on, of those the run measured, not of every GPU fingerprinted."""

from __future__ import annotations

import copy
import json
from typing import Any

from fleet.cli.probe_display import tflops_cell
from fleet.model.document import parse_document
from tests.conftest import ROOT

REAL = ROOT / "tests" / "fixtures" / "jobs" / "h200x2-held-oom" / "document.json"


def _document(data: dict[str, Any]) -> str:
    return tflops_cell(parse_document(data, "doc"))


def test_the_matmul_cell_counts_the_gpus_the_run_measured() -> None:
    data = json.loads(REAL.read_text())
    assert _document(data).endswith(" (2 GPUs)")
    # `--gpus 0`: GPU 1 fingerprinted, never asked for a matmul: not a missing figure.
    asked = copy.deepcopy(data)
    asked["benchmarks"] = [b for b in asked["benchmarks"] if b["gpu_index"] == 0]
    assert " of " not in _document(asked) and "GPUs" not in _document(asked)
    # GPU 1's matmul failed: counted, not dropped from the note.
    failed = copy.deepcopy(asked)
    failed["errors"].append({"stage": "benchmark", "gpu": 1, "message": "CUDA error"})
    assert _document(failed).endswith(" (1 of 2 GPUs)")
