"""How far the next run of the same card may land: the interval a result carries.

A 20-s measurement knows its own level to ±0.02-0.2% (the within-run interval, from its
~1 s sub-windows). A reader wants something else: where the card's figure would be if
they measured again. On the lent cards a repeat minutes later moved by 0.44% RMS and up
to 2.0% (45 repeats), and several percent where a card switched operating point
(bench/RESULTS.md, "Repeat intervals"): the card wanders on time scales longer than one
run, mostly with its temperature, and a single run cannot see that. So the interval is
built from three kinds of evidence, and the widest wins:

- the variant's run-to-run spread as fleet measured it (`SPREADS`, each with the
  records it came from): the standard deviation of a soaked figure between runs of one
  card, pooled over cards;
- the GPU's own history, where it has one: its earlier soaked figures pool with the
  variant's spread, which counts as the degrees of freedom it was measured over (a scaled
  inverse chi-square update), so a card that wanders more than its variant widens its own
  interval as its nights add up, a steadier one narrows it, and history never leaves the
  interval resting on fewer degrees of freedom than the variant's spread alone;
- what the run itself shows (`wander`): how far its soaked windows moved once it had
  soaked, and how far apart the operating points it measured on are. A run that
  switched between points 2% apart says a repeat may land on either.

The next run differs from this one by two draws of the card's wander, so the half-width
is t(0.975, dof) x sqrt(2) x sigma: a prediction interval for one new run, not a
confidence interval of this one's level. Where the run's own wander sets sigma, the
normal's 1.959964 stands for t: its sigma is not a count of runs.

Standard library only, Python 3.8: the agent and fleet both import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from agent.timing import stats

# An operating point counts when it held at least this many sub-windows (as the harness's
# operating_point_switch flag counts them): a lone sub-window is the switch itself.
POINT_SUB_WINDOWS = 1.5


@dataclass(frozen=True)
class Spread:
    """A variant's run-to-run standard deviation of the soaked figure, relative to the
    figure, with its degrees of freedom and where it was measured."""

    sd: float
    dof: int
    source: str
    # The bench/records/ folders pooled, each card's deviations about its own mean
    # (bench/repeat_records.py pools them again; bench/repeat_coverage.py leaves each out).
    records: Tuple[str, ...] = ()


# Measured by fleet on lent cards, nothing changed on the GPU: soaked runs of one card,
# each a process of its own, minutes apart; the sd of the work-over-time figure about
# the card's mean, pooled over cards (`python bench/repeat_records.py` pools them again
# from the records named). Left out: repeats of harness 1.2.0 after a bench's 60-s soak,
# the card kept under load by other methods between them (no idle, not the harness's
# soak), and a harness run beside a graph reference (another method). Coverage of the
# intervals they give, each record checked with a spread pooled without it:
# bench/RESULTS.md, "Repeat intervals".
SPREADS: Dict[str, Spread] = {
    "H100-SXM5-80GB": Spread(
        0.00571, 9, "three H100 SXM5s: five soaked runs of one (1.3.0), five of another "
        "(1.4.0), `fleet probe` then `fleet bench` on a third",
        ("2026-11-25-h100-soak-1752624020993", "2026-11-26-h100-probe-bench-1753124019022",
         "2026-11-26-h100-repeat-1752824029521")),
    "H200-SXM-141GB": Spread(
        0.00188, 12, "six H200 SXMs: five soaked runs of one (1.3.0), five of another "
        "(1.4.0), four GPUs of a node measured together then alone",
        ("2026-11-25-h200-soak-1653724065387", "2026-11-26-h200-repeat-1653724033734",
         "2026-11-26-h200x4-node-probe")),
}
# The job suite's figures (agent/job/suite.py), by variant, workload and attention backend:
# soaked runs, each a process of its own, back to back, every GPU of the node at once;
# the sd of each GPU's tokens/s about its own mean pooled over the GPUs (`python
# bench/job_suite.py` lists each GPU's and pools them again). Contended and unsoaked
# results are left out. The 2x H100's runs measured 8 s, 3 s and 5 s, the others 6, 2
# and 3 s (agent/job/suite.py says what each spread alone).
JOB_RECORDS = ("2026-11-26-h100x4-jobs", "2026-11-26-h100-jobs-full",
               "2026-11-26-h100x2-jobs")
JOB_SOURCE = ("seven H100 SXM5s of three nodes (4x, 2x, 1x): 3-5 job-suite runs each, "
              "dof 21")
# Suite 1.1.0 (issue 45): five runs of a 4x H100 at once, every backend, decode at its two
# points, dof 16 (bench/job_backends.py). Training's flash and cuDNN pool them with suite
# 1.0's (GQA native and expanded run at one speed on flash: bench/RESULTS.md, "The job
# figure is the card's"); decode's points are new shapes, keyed "decode/<point>", and
# suite 1.0's decode (64 x 2,048) keeps its own.
# Suite 1.2.0 moved the bandwidth point to 128 x 8,192; its five runs on a 2x H100
# (2026-11-28-h100x2-decode-8192) moved less run to run (cuDNN 0.03%, flash 0.21%,
# efficient 0.31%) than 1.1.0's at 128 x 4,096, so 1.1.0's spreads, the wider, stand for
# both shapes' "decode/bandwidth".
BACKENDS_RECORDS = ("2026-11-27-h100x4-job-backends",)
BACKENDS_SOURCE = "four H100 SXM5s of a 4x node: five job-suite 1.1.0 runs each, dof 16"
POOLED_SOURCE = JOB_SOURCE + "; pooled with " + BACKENDS_SOURCE + ", dof 37"
JOB_SPREADS: Dict[Tuple[str, str, str], Spread] = {
    ("H100-SXM5-80GB", "train", "flash"): Spread(0.0051, 37, POOLED_SOURCE,
                                                 JOB_RECORDS + BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "train", "cudnn"): Spread(0.0046, 37, POOLED_SOURCE,
                                                 JOB_RECORDS + BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "train", "efficient"): Spread(0.0073, 14, BACKENDS_SOURCE,
                                                     BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "decode", "flash"): Spread(0.0007, 21, JOB_SOURCE, JOB_RECORDS),
    ("H100-SXM5-80GB", "decode/bandwidth", "cudnn"): Spread(0.0010, 16, BACKENDS_SOURCE,
                                                            BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "decode/bandwidth", "flash"): Spread(0.0058, 16, BACKENDS_SOURCE,
                                                            BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "decode/bandwidth", "efficient"): Spread(0.0056, 16, BACKENDS_SOURCE,
                                                                BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "decode/latency", "flash"): Spread(0.0019, 16, BACKENDS_SOURCE,
                                                          BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "decode/latency", "cudnn"): Spread(0.0022, 16, BACKENDS_SOURCE,
                                                          BACKENDS_RECORDS),
    ("H100-SXM5-80GB", "decode/latency", "efficient"): Spread(0.0057, 16, BACKENDS_SOURCE,
                                                              BACKENDS_RECORDS),
}


def job_key(workload: str, point: Optional[str]) -> str:
    """The workload as JOB_SPREADS keys it: decode by its point from suite 1.1.0."""
    return f"{workload}/{point}" if point else workload


# A variant fleet has not measured takes the widest spread it has, said so.
UNMEASURED = "no run-to-run spread measured for this variant: the widest fleet measured"


def variant_spread(variant: Optional[str], job: Optional[Tuple[str, str]] = None
                   ) -> Tuple[Spread, bool]:
    """The variant's spread and whether it was measured (False: the widest stands in); of
    the matmul, or of a job figure when `job` gives its (workload, attention)."""
    table: Mapping[Any, Spread] = SPREADS if job is None else JOB_SPREADS
    key: Any = (variant or "") if job is None else (variant or "", job[0], job[1])
    found = table.get(key)
    if found is not None:
        return found, True
    widest = max(table.values(), key=lambda s: s.sd)
    return Spread(widest.sd, widest.dof, UNMEASURED, widest.records), False


def _relative_sd(values: Sequence[float]) -> float:
    """The sample standard deviation over the mean (0 for a mean of 0). With fsum, not
    statistics.stdev, whose exact fractions cost ingest 30 µs a soaked result."""
    mean = math.fsum(values) / len(values)
    if mean <= 0:
        return 0.0
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)) / mean


def pooled_sd(spread: Spread, history: Sequence[float]) -> Tuple[float, int]:
    """The card's run-to-run sd (relative) and its dof: the variant's spread, worth the
    dof it was measured over, pooled with the GPU's earlier figures (at least two), which
    add theirs: never fewer dof than the variant's alone."""
    if len(history) < 2:
        return spread.sd, spread.dof
    own = _relative_sd(history)
    dof = spread.dof + len(history) - 1
    return math.sqrt((spread.dof * spread.sd ** 2 + (len(history) - 1) * own ** 2) / dof), dof


def wander(curve: Sequence[Sequence[float]], settled_s: Optional[float],
           points: Sequence[Mapping[str, Any]], sub_windows: int, figure: float) -> float:
    """What the run itself shows of the card's wander, relative to the figure: the larger
    of the standard deviation of its soak windows from the moment it soaked (the curve
    runs on through the measurement) and half the distance between the operating points
    it measured on."""
    shown = 0.0
    if settled_s is not None:
        levels = [row[1] for row in curve if row[0] >= settled_s and row[1] > 0]
        if len(levels) >= 3:
            shown = _relative_sd(levels)
    held = [float(p["tflops"]) for p in points
            if float(p.get("share") or 0.0) * sub_windows >= POINT_SUB_WINDOWS
            and float(p["tflops"]) > 0]
    if len(held) >= 2 and figure > 0:
        shown = max(shown, (max(held) - min(held)) / 2.0 / figure)
    return shown


@dataclass(frozen=True)
class Interval:
    """Where a repeat run's figure should fall (95%), and what set the width."""

    low: float
    high: float
    sd: float  # relative, the sigma the width was built from
    dof: Optional[int]  # None where the run's wander set sigma: the normal quantile stood
    basis: str  # "variant", "history" or "run": which evidence was the widest
    source: str  # the variant spread's source

    def words(self) -> str:
        """The basis in a few words, for a table's note."""
        return {"variant": "the variant's run-to-run spread",
                "history": "this GPU's own night-to-night spread",
                "run": "the run's own wander"}[self.basis]


def interval(figure: float, variant: Optional[str], run_wander: float,
             history: Sequence[float] = (), job: Optional[Tuple[str, str]] = None
             ) -> Interval:
    """The 95% interval for a repeat run of a card whose run gave `figure` (a job
    figure's with `job`, its workload and attention backend)."""
    spread, _ = variant_spread(variant, job)
    card, dof = pooled_sd(spread, history)
    basis = "history" if len(history) >= 2 else "variant"
    if run_wander > card:
        # A run's wander is its own sub-windows' evidence; its dof is not a count of
        # runs, so the normal quantile (the t's limit) stands for it.
        half = stats.Z975 * math.sqrt(2.0) * run_wander
        return Interval(figure * (1.0 - half), figure * (1.0 + half), run_wander, None,
                        "run", spread.source)
    half = stats.t975(dof) * math.sqrt(2.0) * card
    return Interval(figure * (1.0 - half), figure * (1.0 + half), card, dof, basis,
                    spread.source)
