"""The job section's layout (fleet/report/job.py `laid_out`): each headline with the
backends and forms measured beside it folded under it, so no eager backend stands under
"the fastest attention backend that passed its check" beside a compiled headline."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import cast

from fleet.analysis.job.cost import JobRow
from fleet.analysis.job.figures import JobConfig
from fleet.report.job import JobSection

EAGER = JobConfig("train", "llama3-8b", "4x4096 h32/8 ffn14336 b2 s4096", "bf16", "cudnn",
                  False, False, "every GPU at once", 2, "soaked", "1.4",
                  "torch 2.11.0+cu130", "eager-cudnn")


def _row(config: JobConfig) -> JobRow:
    return cast(JobRow, SimpleNamespace(config=config))


def test_a_compiled_headline_folds_the_eager_backends_measured_beside_it() -> None:
    compiled = replace(EAGER, compiled=True, key="compiled-cudnn", headline=True)
    flash = replace(EAGER, attention="flash", key="eager-flash")
    other_run = replace(EAGER, gpus_in_run=4, key="4-gpus", headline=True)
    section = JobSection(rows=tuple(_row(c) for c in (compiled, EAGER, flash, other_run)))
    laid = section.laid_out(train=True)
    assert [(c.key, [f.key for f, _ in folded]) for c, _, folded in laid] == [
        ("compiled-cudnn", ["eager-cudnn", "eager-flash"]), ("4-gpus", [])]
    assert "eager" in EAGER.label and "compiled" in compiled.label
