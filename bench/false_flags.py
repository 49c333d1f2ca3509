"""How often the comparisons that take one result per host flag a difference that is not
there, before and after they weigh the cards' repeat intervals (issue #31), and how often
they still find one that is.

Every fleet is constructed: all GPUs of a variant have the same true level (700 TFLOP/s),
and each result is that level times a draw of the run-to-run wander measured on the lent
cards, each card's own five soaked runs (bench/RESULTS.md "Repeat intervals"; the
catalog in agent/timing/repeat.py pools more records than these):

- H100 SXM5: relative sd 0.495% (soaked, bench/records/2026-11-25-h100-soak-*);
- H200 SXM: 0.268% (bench/records/2026-11-25-h200-soak-*);
- an H100 that switches operating point: in 30% of runs it lands on the point 2.3% lower
  (the two points of bench/records/2026-11-23-harness-1.1.0.md), beside the 0.495%, and
  its results state a repeat sd of 1.15% (the mixture's: sqrt(0.3 x 0.7) x 2.3% with the
  0.495% makes 1.16%);
- for stragglers also a node whose GPU 0 alone wanders with sd 2% (and says so), the
  others steady H100s: the case the new rule is for.

The cases, each over `--trials` draws:

(a) stragglers: nodes of 8 GPUs, one result each, each GPU its own draw; a false flag is a
    node with any straggler; detection is GPU 0 found when it is truly 4% slower;
(b) provider gaps with one host a side: two providers of one 8-GPU host each, the host's
    GPUs sharing one draw of the wander plus 0.1% of their own; a false flag is a gap
    called either way; detection is the 3% slower provider called slower;
(c) regressions: one GPU with 5-10 past nights (uniform) and tonight, each night a draw;
    a false flag is a regression tonight; detection is tonight truly 4% lower.

"old" is the same code with every stored repeat sd 0, which makes the repeat margin 0:
the rule as it was. For gaps both run with `min_hosts` 1: the default (2) never calls one
host a side, so there the old and new rates are both 0. The gaps' bootstrap takes 1,000
resamples (GapOptions.resamples; the report takes 4,000) to keep the run under a minute.

    python bench/false_flags.py --out bench/records/2026-11-26-repeat-intervals/false-flags.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.analysis.compare import GapOptions
from fleet.analysis.dataset import Config, Dataset, GpuMeasure, Scope
from fleet.analysis.matmul.gaps import compare_providers
from fleet.analysis.matmul.stragglers import find_stragglers
from fleet.analysis.sweep.history import GpuState, HostNight, Night, compare_night

LEVEL = 700.0
GPUS = 8
GPU_NOISE = 0.001  # per GPU beside its host's shared draw, case (b)
STRAGGLER = 0.04
GAP = 0.03
REGRESSION = 0.04
PAST_NIGHTS = (5, 10)
GAP_OPTIONS = GapOptions(min_hosts=1, resamples=1000)
WHEN = dt.datetime(2026, 11, 26, 3, 0, tzinfo=dt.UTC)
CONFIG = Config("bf16", 8192, 8192, 8192, "sustained", "cold", "concurrent", "1.4.0",
                "soaked", "torch 2.9.0, CUDA 12.8, cuBLAS 12.8")
LABEL = "bf16 8192x8192x8192 sustained soaked cold-L2 concurrent harness 1.4.0"


@dataclass(frozen=True)
class Wander:
    """A card's run-to-run wander: normal with relative sd `sd`, and in `low_share` of
    runs on an operating point `low_drop` lower; `stated` is the repeat sd its results
    carry."""

    name: str
    sd: float
    stated: float
    variant: str = "H100-SXM5-80GB"
    low_share: float = 0.0
    low_drop: float = 0.0

    def draw(self, rng: np.random.Generator, size: int) -> NDArray[np.float64]:
        """`size` relative factors, one a run."""
        factor: NDArray[np.float64] = 1.0 + rng.normal(0.0, self.sd, size)
        if self.low_share:
            factor *= 1.0 - self.low_drop * (rng.random(size) < self.low_share)
        return factor


H100 = Wander("H100 SXM5", 0.00495, 0.00495)
H200 = Wander("H200 SXM", 0.00268, 0.00268, "H200-SXM-141GB")
SWITCHING = Wander("H100, 2 points", 0.00495, 0.0115, low_share=0.3, low_drop=0.023)
WANDERING = Wander("GPU 0 wanders 2%", 0.02, 0.02)  # stragglers only: one card of a node
WANDERS = (H100, H200, SWITCHING)


@dataclass(frozen=True)
class Row:
    """One case and wander: how often each rule flagged, in `trials` draws apiece."""

    case: str
    wander: str
    stated_sd: float
    trials: int
    true_difference: float
    old_false: int
    new_false: int
    old_detected: int
    new_detected: int

    def rates(self) -> tuple[float, float, float, float]:
        """The four counts as shares of the trials."""
        return (self.old_false / self.trials, self.new_false / self.trials,
                self.old_detected / self.trials, self.new_detected / self.trials)


def _measure(provider: str, host: str, index: int, tflops: float, sd: float,
             variant: str) -> GpuMeasure:
    return GpuMeasure(
        provider=provider, host=host, gpu=f"{provider}/{host}/{index}", gpu_index=index,
        variant=variant, config=CONFIG, tflops=tflops, results=1, sm_clock_mhz=1980.0,
        power_w=690.0, power_capped_share=1.0, power_limit_w=700.0,
        driver_version="580.159.04", virtualization_mode="passthrough", flags=(),
        first=WHEN, last=WHEN, repeat_sd=sd)


def _dataset(measures: list[GpuMeasure]) -> Dataset:
    return Dataset(Scope(), (), (), tuple(measures), (), 1, WHEN, WHEN)


def _node_wanders(wander: Wander) -> list[Wander]:
    """Each GPU's wander in a straggler node: GPU 0 alone differs in the WANDERING case."""
    return [wander] + [H100 if wander is WANDERING else wander] * (GPUS - 1)


def stragglers(wander: Wander, slow: float, trials: int, rng: np.random.Generator
               ) -> tuple[int, int]:
    """Case (a), (old, new): `trials` nodes of 8 GPUs, GPU 0 `slow` slower; with `slow`
    0 the nodes with any straggler, else the nodes whose GPU 0 is found."""
    cards = _node_wanders(wander)
    draws = np.column_stack([w.draw(rng, trials) for w in cards]) * LEVEL
    draws[:, 0] *= 1.0 - slow
    counts = []
    for stated in (0.0, None):
        data = _dataset([_measure("p", f"n{t:05d}", i, float(draws[t, i]),
                                  cards[i].stated if stated is None else stated,
                                  cards[i].variant)
                         for t in range(trials) for i in range(GPUS)])
        found = find_stragglers(data)
        counts.append(sum(s.gpu_index == 0 for s in found) if slow
                      else len({s.host for s in found}))
    return counts[0], counts[1]


def _gap_called(figures: NDArray[np.float64], stated: float, variant: str, slow: float
                ) -> bool:
    data = _dataset([_measure(p, f"{p}-00", i, float(figures[s, i]), stated, variant)
                     for s, p in enumerate("ab") for i in range(GPUS)])
    (comparison,) = compare_providers(data, GAP_OPTIONS)
    return comparison.systematic and (not slow or comparison.slower == "b")


def gaps(wander: Wander, slow: float, trials: int, rng: np.random.Generator
         ) -> tuple[int, int]:
    """Case (b), (old, new): `trials` pairs of one 8-GPU host a side, b `slow` slower;
    with `slow` 0 the gaps called either way, else those that call b slower."""
    hosts = wander.draw(rng, 2 * trials).reshape(trials, 2)
    gpus = 1.0 + rng.normal(0.0, GPU_NOISE, (trials, 2, GPUS))
    figures = LEVEL * hosts[:, :, None] * gpus
    figures[:, 1] *= 1.0 - slow
    old = [t for t in range(trials) if _gap_called(figures[t], 0.0, wander.variant, slow)]
    # The new rule is the old one and a margin (gaps.py, `judge`): it cannot call what the
    # old did not, so only the old rule's calls are judged again.
    return len(old), sum(_gap_called(figures[t], wander.stated, wander.variant, slow)
                         for t in old)


def _nights(values: Sequence[float], stated: float, variant: str) -> list[Night]:
    nights = []
    for i, value in enumerate(values):
        gpu = GpuState(0, "GPU-0", variant, {}, {LABEL: value}, repeat_sd={LABEL: stated})
        host = HostNight("p", "a", "stored", (gpu,))
        nights.append(Night(i + 1, WHEN + dt.timedelta(days=i), {"p/a": host}))
    return nights


def regressions(wander: Wander, slow: float, trials: int, rng: np.random.Generator
                ) -> tuple[int, int]:
    """Case (c), (old, new): `trials` GPUs of 5-10 past nights and tonight, tonight
    `slow` lower; how many regressed tonight."""
    past = rng.integers(PAST_NIGHTS[0], PAST_NIGHTS[1] + 1, trials)
    series = [LEVEL * wander.draw(rng, int(n) + 1) for n in past]
    for values in series:
        values[-1] *= 1.0 - slow
    old, new = (sum(bool(compare_night(_nights(values.tolist(), stated,
                                               wander.variant)).new_regressions)
                    for values in series) for stated in (0.0, wander.stated))
    return old, new


Case = Callable[[Wander, float, int, np.random.Generator], tuple[int, int]]
# Each case: its name, its function, the true difference it must find, its wanders.
CASES: tuple[tuple[str, Case, float, tuple[Wander, ...]], ...] = (
    ("straggler", stragglers, STRAGGLER, (*WANDERS, WANDERING)),
    ("gap, 1 host a side", gaps, GAP, WANDERS),
    ("regression", regressions, REGRESSION, WANDERS))


def _cell(job: tuple[int, int, float, int, np.random.SeedSequence]) -> tuple[int, int]:
    case, wander, slow, trials, seed = job
    _, run, _, wanders = CASES[case]
    return run(wanders[wander], slow, trials, np.random.default_rng(seed))


def measure(trials: int = 2000, seed: int = 31, workers: int = 1) -> list[Row]:
    """Every case and wander over `trials` draws without a difference and `trials` with
    one, each on its own stream of `seed` (the figures do not depend on `workers`)."""
    cells = [(c, w, slow) for c, (_, _, difference, wanders) in enumerate(CASES)
             for w in range(len(wanders)) for slow in (0.0, difference)]
    seeds = np.random.SeedSequence(seed).spawn(len(cells))
    work = [(*cell, trials, s) for cell, s in zip(cells, seeds, strict=True)]
    if workers <= 1:
        counts = [_cell(job) for job in work]
    else:
        with ProcessPoolExecutor(workers) as pool:
            # The slow gap cells first, so that the workers end together.
            order = sorted(range(len(work)), key=lambda i: CASES[work[i][0]][1] is not gaps)
            done = dict(zip(order, pool.map(_cell, [work[i] for i in order]), strict=True))
            counts = [done[i] for i in range(len(work))]
    rows = []
    for i in range(0, len(cells), 2):
        name, _, difference, wanders = CASES[cells[i][0]]
        wander = wanders[cells[i][1]]
        rows.append(Row(name, wander.name, wander.stated, trials, difference,
                        *counts[i], *counts[i + 1]))
    return rows


def table(rows: Sequence[Row]) -> str:
    """The rows as a table of percentages, 80 columns wide; the last column is the true
    difference the detection rates are of."""
    lines = [f"{'':36}{'stated':>7}  {'false flags':^15}  {'detected':^15}",
             f"{'case':19}{'card':17}{'sd':>7}  {'old':>7} {'new':>7}  {'old':>7} {'new':>7}"
             " of"]
    for r in rows:
        old_false, new_false, old_found, new_found = (f"{100 * v:6.1f}%" for v in r.rates())
        lines.append(f"{r.case:19}{r.wander:17}{100 * r.stated_sd:6.2f}%  {old_false} "
                     f"{new_false}  {old_found} {new_found} {r.true_difference:.0%}")
    return "\n".join(line.rstrip() for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = measure(args.trials, args.seed, args.workers)
    took = time.perf_counter() - start
    print(table(rows))
    print(f"{args.trials} trials a cell, seed {args.seed}, {took:.0f} s. old: every repeat sd 0 "
          "(margin 0);\ngaps with min_hosts 1 (the default 2 calls no gap of one host a "
          "side), 1,000 resamples.")
    if args.out is not None:
        args.out.write_text(json.dumps({
            "command": "python bench/false_flags.py " + " ".join(argv or sys.argv[1:]),
            "trials": args.trials, "seed": args.seed, "seconds": round(took, 1),
            "level_tflops": LEVEL, "gpus_per_host": GPUS, "gpu_noise_gap_case": GPU_NOISE,
            "gap_options": asdict(GAP_OPTIONS),
            "wanders": [asdict(w) for w in (*WANDERS, WANDERING)],
            "rows": [{**asdict(r), **dict(zip(("old_false_rate", "new_false_rate",
                                               "old_detection", "new_detection"),
                                              r.rates(), strict=True))} for r in rows],
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
