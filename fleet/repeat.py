"""The interval a repeat run falls inside, for a result as fleet holds it.

agent/timing/repeat.py builds the interval from the variant's run-to-run spread, the GPU's
earlier figures and the run's own wander; this module feeds it a validated result and
the GPU's history from the store, and says in words what set the width. Only soaked
results carry one: the variant spreads were measured soaked, and a cool-start figure
(`--quick`, burst) moves with how long the card had idled, which no spread here covers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agent.timing import repeat
from fleet.model.document import BenchmarkResult
from fleet.model.job import JobResult

# How many of the GPU's earlier figures count: a month of nights. Older ones describe a
# card that may since have been moved, re-seated or re-cooled.
HISTORY = 30


def of_result(result: BenchmarkResult, variant: str | None,
              history: Sequence[float] = ()) -> repeat.Interval | None:
    """The repeat interval of a soaked result; None for a cool-start one."""
    shown = wander_of(result)
    if shown is None:
        return None
    return repeat.interval(result.tflops, variant, shown, list(history)[-HISTORY:])


def wander_of(result: BenchmarkResult) -> float | None:
    """The run's own wander (agent/timing/repeat.py's `wander`), None for a cool-start result."""
    if result.thermal != "soaked" or result.soak is None:
        return None
    measurement = result.measurement
    return repeat.wander(
        result.soak.curve, result.soak.settled_s,
        [p.model_dump() for p in measurement.operating_points] if measurement else [],
        measurement.sub_windows if measurement else 0, result.tflops)


def history_of(records: np.ndarray, contended_bit: int) -> list[float]:
    """A series' earlier figures (fleet/store/series.py records), oldest first, without
    the contended ones (another process shared the card: not the card's wander)."""
    if not len(records):
        return []
    kept = records[(records["flags"] & contended_bit) == 0]
    figures = kept["tflops"]
    return [float(v) for v in figures[~np.isnan(figures)][-HISTORY:]]


def job_wander(result: JobResult) -> float:
    """A job figure's own wander: its soak windows' spread from the moment it soaked
    (only the load that was judged has them; a figure measured after it has none)."""
    soak = result.soak
    if soak is None:
        return 0.0
    return repeat.wander(soak.curve, soak.settled_s, [], 0, result.tokens_per_s)


def of_job(tokens_per_s: float, variant: str | None, wander: float | None,
           workload: str, attention: str, point: str | None = None) -> repeat.Interval:
    """Where a repeat run of a job figure falls (95%): the job's own run-to-run spread
    (agent/timing/repeat.py JOB_SPREADS, decode's by its point), or the run's wander where
    that is wider."""
    return repeat.interval(tokens_per_s, variant, wander or 0.0,
                           job=(repeat.job_key(workload, point), attention))


def words(value: repeat.Interval) -> str:
    """Why the interval is as wide as it is, in a line."""
    width = (value.high - value.low) / 2 / ((value.high + value.low) / 2)
    said = f"±{100 * width:.2f}% from {value.words()}"
    if value.basis == "variant" and value.source == repeat.UNMEASURED:
        said += f" ({repeat.UNMEASURED})"
    elif value.basis == "run":
        said += " (the card wandered in this run: a wide interval is the right answer)"
    return said
