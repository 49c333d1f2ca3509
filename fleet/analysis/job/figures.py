"""The job suite's figures (issue 37): what each GPU does with a real job's step, beside
what the matmul of the same GPU in the same run promised, and the finding when a GPU
falls further below its variant on the job than on the matmul.

Built from the store's job frame (fleet/store/job.py, `frame`: one row per job result)
and the soaked matmul figure of the same GPU in the same run (MATMUL_COLUMNS, chosen by
the caller: fleet/report/job.py). As with the matmul (fleet/analysis/dataset.py) the GPU
is the unit: every result of one GPU under one job configuration becomes one figure, the
median of its results. A result measured beside another process (`contended`), one whose
load never settled (`not_soaked`) or one whose stack failed its float32 check is left
out of every median, stated in `JobExcluded`, as the matmul's are; a contended one also
raises its node's contention finding, the renter's to fix (fleet/analysis/contention.py,
from `contended_results`), and takes its GPU's other results of the same run with it.

**The job's shortfall** (`find_job_shortfalls`). For each GPU of a training
configuration and variant (never across either), both figures as shares of the same
GPUs' medians: job share = its tokens/s / the median tokens/s, matmul share = its soaked
matmul TFLOP/s in the same runs / the median of those. A card whose matmul is 1% under
its crowd should give a job about 1% under too; one whose job falls much further has
something the matmul does not load: its cooling under a longer, hotter load, its memory
(a step moves activations and optimizer state the GEMM keeps in L2), or its host (the
step launches hundreds of kernels and waits on the CPU between them).

Called when all three hold:
- matmul share - job share is more than 3 points. A share carries its card's run-to-run
  wander: 0.57% sd for a soaked H100 matmul (agent/timing/repeat.py); the job's own, pooled
  over seven lent H100s (agent/timing/repeat.py JOB_SPREADS), is 0.07-0.35%, and is taken to be
  as large as the matmul's, the wider. The difference of two shares of one card then
  moves by at most sqrt(2) x 0.57 = 0.8 points sd, and 3 points is nearly four of them: the
  straggler rule's 3%, on the same scale;
- the job share is at least 3% under the median: a card whose matmul runs 5% above its
  crowd and its job 1% above has lost nothing a buyer disputes;
- the GPU's standing (job share / matmul share) is more than four robust standard
  deviations (1.4826 x MAD, floored at 0.5%) below the other GPUs' of the configuration:
  the spread half of the straggler's rule (fleet/analysis/matmul/stragglers.py, `below_others`),
  so that a crowd whose jobs scatter more than 0.8 points (hosts of different CPUs under
  one variant) demands more before one of its cards is named.
Three GPUs at least, with a matmul figure in the same runs: with two, nothing says which
one fell. Simulated (tests/analysis/test_job.py), sixteen GPUs on four hosts, job and
matmul each 0.5% sd GPU to GPU: no finding on 200 healthy crowds; a card whose job fell
5% with its matmul whole found on 197 of 200, one at 4% on 156. On a lent 4x H100's
real runs (`python bench/job_flags.py`: four healthy runs and a fifth with GPU 2 shared,
each beside the same node's soaked matmul): no finding in 38 healthy GPU judgements, the
nearest 0.9 points and 2.5 robust sd from the line; GPU 2, shared for real, named on
both backends once the agent's sighting was taken out of its document.

Its likely cause, from what the GPU did while its step fell, in this order:
- "cooling": its SM clock under the job more than 2% under the configuration's median,
  and that deficit is at least half the points the job fell beyond its matmul (a training
  step at the power cap runs at its clock). A card hotter than its crowd is not enough:
  healthy, GPU 2 of a lent 4x H100 ran 7-8 C over its crowd's median at a clock 0.9-1.8%
  under theirs, run after run (bench/records/2026-11-26-h100x4-jobs);
- "host": its decode holds (within 3 points of its matmul's share), or it has no decode
  figure to tell by. Decode replays a CUDA graph a step and waits on nothing the host
  does; the training step launches hundreds of kernels from the CPU;
- "memory": its decode, which reads HBM and barely computes, falls more than 3 points
  further than its matmul and further than its training step;
- "shared": both fall, decode no further than training, at its full clock: the GPU's
  time goes elsewhere, as to a process the agent could not see (another container, a
  time-sliced neighbour). On the 4x H100, another user's matmuls at ~30% duty on GPU 2,
  with the agent's sighting taken out of the document, read exactly so: training at
  77.5% of the median, decode at 81.6%, the clock 2.2% under; with the sighting kept,
  the result is contended and the renter's (`python bench/job_flags.py`).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from fleet.analysis.compare import below_others
from fleet.analysis.contention import JOINED
from fleet.analysis.job import whose as job_whose
from fleet.words import counted

# The matmul figure a job result is set beside: the soaked TFLOP/s of the same GPU in the
# same run (`run_id`) and dtype, one row at most per (provider, host, run_id, gpu_index,
# dtype), and the matmul configuration it was measured under, in words.
MATMUL_COLUMNS = ("provider", "host", "run_id", "gpu_index", "dtype", "matmul_tflops",
                  "matmul_config")
PAIR_KEYS = ("provider", "host", "run_id", "gpu_index", "dtype")

# Why a job result is left out, first that applies.
SHARED_REASON = ("measured in a run where another host answered with the same GPUs (see "
                 "its duplicate finding)")
WRONG_REASON = "failed its check against float32: it timed a wrong answer"
CONTENDED_REASON = ("measured beside another process on the GPU, or on a GPU already "
                    "busy: the renter's to clear, then measure again")
NOT_SOAKED_REASON = ("not soaked: throughput and temperature had not settled when the "
                     "soak's cap came")

Cause = Literal["cooling", "memory", "host", "shared"]
# The likely cause and who acts on it: the provider, whose node it is.
CAUSE_WORDS: dict[str, str] = {
    "cooling": "cooling: its clock fell under the job; ask the provider to check the "
               "node's airflow and the GPU's heatsink",
    "memory": "memory: its decode falls further still, and decode reads HBM; ask the "
              "provider to check the card's memory (its health counters, a swap)",
    "host": "host: its decode, which the host does not feed, holds; the step waits on the "
            "CPU; ask the provider what CPU the host has and whether it is shared",
    "shared": "shared: training and decode both fall at full clock, as when another "
              "process takes the GPU's time; check nvidia-smi on the host (other "
              "containers too), then ask the provider whether the GPU is shared",
}


def _suite(version: str) -> str:
    """The suite's major.minor, as the configuration key has it."""
    return ".".join(version.split(".")[:2])


@dataclass(frozen=True, order=True)
class JobConfig:
    """A job configuration (the frame's `config` text, `key`): figures of different ones
    are never compared. The other fields are its parts, for words."""

    workload: str  # "train" or "decode"
    model: str
    shape: str  # "4x4096 h32/8 ffn14336 b2 s4096"
    dtype: str
    attention: str
    compiled: bool
    graph: bool
    concurrency: str
    gpus_in_run: int
    thermal: str
    suite_version: str  # major.minor
    stack: str  # "torch 2.13.0+cu130, CUDA 13.0, cuDNN 91002"
    key: str
    # The fastest backend that passed its gate on its GPUs (suite 1.1.0; before, the
    # pinned backend): the figure a tuned job gets, listed first and said so. Not part of
    # the configuration: it compares and hashes as its key does.
    headline: bool = field(default=False, compare=False)

    @property
    def train(self) -> bool:
        """A training step (forward, backward, optimizer), not a decode step."""
        return self.workload == "train"

    def order(self) -> tuple[bool, bool, JobConfig]:
        """Training before decode, the headline (the fastest backend that passed its
        gate) before the backends measured beside it, then the fields' order: how the
        report lists them (a method, not a property: the JSON form writes out
        properties)."""
        return (not self.train, not self.headline, self)

    @property
    def figure(self) -> str:
        """What the configuration's figure is, in words."""
        return "training tokens/s" if self.train else "decode tokens/s"

    @property
    def label(self) -> str:
        """The configuration in words, stack included."""
        what = "Training step" if self.train else "Decode"
        how = "compiled" if self.compiled else "eager"
        if self.graph:
            how += ", CUDA graph"
        # Suite 1.1.0: the fastest backend that passed its gate; before, the pinned one.
        fastest = " (headline)" if self.headline else ""
        return (f"{what}, {self.model} {self.shape}, {self.dtype}, {self.attention} "
                f"attention{fastest}, {how}, {self.concurrency} on "
                f"{counted(self.gpus_in_run, 'GPU')}, {self.thermal} "
                f"(suite {self.suite_version}; {self.stack})")

    @property
    def not_measured(self) -> str:
        """What the job is not, in a line: a reader must not take it for a training run."""
        layers = self.shape.split("x", 1)[0]
        return (f"One model shape: {layers} layers of {self.model}'s published "
                "configuration, random weights and tokens; no data loading, no "
                "checkpoints, no gradient exchange between GPUs: each GPU's own step, "
                "not a whole model's training or serving; a million tokens here pass "
                f"through these {layers} layers, not through the whole model.")


@dataclass(frozen=True)
class JobGpu:
    """One GPU under one job configuration: the medians of its results."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    config: JobConfig
    results: int
    tokens_per_s: float
    tflops: float  # torchtitan's count
    tflops_causal: float  # attention's term halved, as Megatron counts it
    mfu: float | None
    peak_tflops: float | None  # the variant's dense datasheet figure for the dtype
    gbs: float | None  # decode
    hbm_share: float | None  # decode
    peak_memory_bytes: int | None  # the largest of its results
    # Decode: the share of the same GPU's memory copy in the same run a step read (suite
    # 1.1.0 with the node suite), beside the datasheet's `hbm_share`.
    copy_share: float | None
    temperature_c: float | None
    sm_clock_mhz: float | None
    power_w: float | None
    # The soaked matmul of the same GPU in the same runs, and the median over those runs
    # of the job's TFLOP/s over it: a ratio of achieved FLOP rates, not the model's
    # efficiency. None without a matmul figure in any of its runs.
    matmul_tflops: float | None
    kept: float | None
    first: dt.datetime
    last: dt.datetime
    matmul_config: str | None = None  # the matmul's configuration, in words

    @property
    def name(self) -> str:
        """The GPU as the report names it: host and index."""
        return f"{self.host} GPU {self.gpu_index}"


@dataclass(frozen=True)
class JobExcluded:
    """A GPU's job results left out of every figure, and why."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    workload: str
    results: int
    reason: str


def _present(value: Any) -> float | None:
    """A frame's value as a float, None where missing (NaN, NA, None)."""
    if value is None or value is pd.NA:
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _flag(column: pd.Series) -> pd.Series:
    """A boolean column, missing values False."""
    return column.astype("boolean").fillna(False).astype(bool)


def _gpu_runs(frame: pd.DataFrame) -> list[tuple[str, str, int, int]]:
    """(provider, host, run, GPU index) of each row."""
    return list(zip(frame["provider"].astype(str), frame["host"].astype(str),
                    frame["run_id"].astype(int), frame["gpu_index"].astype(int), strict=True))


def _reasons(frame: pd.DataFrame, shared: Collection[tuple[str, str, int]]
             ) -> list[tuple[pd.Series, str]]:
    """Each reason to leave a row out, with the rows it is the first reason for."""
    keys = zip(frame["provider"].astype(str), frame["host"].astype(str),
               frame["run_id"].astype(int), strict=True)
    twice = pd.Series([key in shared for key in keys], index=frame.index, dtype=bool)
    wrong = ~frame["correctness_passed"].astype("boolean").fillna(True).astype(bool) & ~twice
    flagged = _flag(frame["contended"]) & ~wrong & ~twice
    # A GPU's job results of a run are contended together: the agent flags them so, but a
    # stored document may come from an older agent, a hand edit or another tool, and a
    # GPU-run partly flagged would otherwise be told to both parties, the renter
    # (contention) and the provider (shortfall, straggler, gap). Whole, it is the renter's.
    busy = {key for key, hit in zip(_gpu_runs(frame), flagged.tolist(), strict=True) if hit}
    contended = pd.Series([key in busy for key in _gpu_runs(frame)], index=frame.index,
                          dtype=bool) & ~wrong & ~twice
    unsettled = _flag(frame["not_soaked"]) & ~wrong & ~contended & ~twice
    reasons = [(twice, SHARED_REASON), (wrong, WRONG_REASON), (contended, CONTENDED_REASON),
               (unsettled, NOT_SOAKED_REASON)]
    # Short under the run's own settings (fleet/analysis/job/whose.py): each GPU-run's
    # words, where no reason above took its rows first.
    taken = twice | wrong | contended | unsettled
    reasons += [(mask & ~taken, words) for mask, words in job_whose.masks(frame)]
    return reasons


def left_out(frame: pd.DataFrame, shared: Collection[tuple[str, str, int]] = ()
             ) -> tuple[pd.DataFrame, list[JobExcluded]]:
    """The rows of `frame` that figures may count, and the others per GPU and reason;
    `shared` (provider, host, run) are a host's runs where another host answered with
    the same GPUs, whose matmul results the report leaves out too (dataset.py)."""
    reasons = _reasons(frame, shared)
    excluded: list[JobExcluded] = []
    for mask, reason in reasons:
        if not mask.any():
            continue
        rows = frame.loc[mask, ["provider", "host", "gpu_index", "variant", "workload"]]
        counts = rows.astype(str).value_counts(sort=False)
        excluded += [JobExcluded(p, h, int(i), v, w, int(n), reason)
                     for (p, h, i, v, w), n in zip(counts.index.tolist(), counts.tolist(),
                                                   strict=True)]
    excluded.sort(key=lambda e: (e.provider, e.host, e.gpu_index, e.workload, e.reason))
    out = pd.Series(False, index=frame.index, dtype=bool)
    for mask, _ in reasons:
        out |= mask
    return frame[~out], excluded


def contended_results(frame: pd.DataFrame, shared: Collection[tuple[str, str, int]] = ()
                      ) -> pd.DataFrame:
    """The rows of `frame` that `left_out` leaves out as contended (a result of a shared
    run, or one that failed its check, is left out for that first): the renter's
    contention, for its finding (fleet/analysis/contention.py). A row left out only with
    its GPU's flagged results of the same run is marked contended, its words saying so."""
    mask = next(m for m, reason in _reasons(frame, shared) if reason == CONTENDED_REASON)
    rows = frame[mask].copy()
    joined = ~_flag(rows["contended"])
    rows.loc[joined, "contention"] = JOINED
    rows.loc[joined, "contended"] = True
    return rows


def _config(row: Mapping[Any, Any]) -> JobConfig:
    def text(name: str) -> str:
        value = row[name]
        return "?" if value is None or value is pd.NA else str(value)
    stack = f"torch {text('torch_version')}, CUDA {text('cuda_runtime_version')}, " \
            f"cuDNN {text('cudnn_version')}"
    return JobConfig(text("workload"), text("model"), text("shape"), text("dtype"),
                     text("attention"), bool(row["compiled"]), bool(row["graph"]),
                     text("concurrency"), int(row["gpus_in_run"]), text("thermal"),
                     _suite(text("suite_version")), stack, text("config"),
                     headline=_headline(row))


def _headline(row: Mapping[Any, Any]) -> bool:
    value = row.get("headline") if hasattr(row, "get") else None
    return bool(value) if value is not None and value is not pd.NA else False


# Each per-GPU figure and how its results make it.
_MEDIANS = ("tokens_per_s", "tflops", "tflops_causal", "mfu", "peak_tflops", "gbs",
            "hbm_share", "copy_share", "temperature_c", "sm_clock_mhz", "power_w",
            "matmul_tflops", "kept")


def job_gpus(frame: pd.DataFrame, matmul: pd.DataFrame | None = None,
             shared: Collection[tuple[str, str, int]] = ()
             ) -> tuple[list[JobGpu], list[JobExcluded]]:
    """Each GPU's figures per job configuration, from the job frame's rows that may count
    (`left_out`), each result set beside `matmul`'s figure of its GPU, run and dtype; and
    the GPUs whose results were left out, with why."""
    kept, excluded = left_out(frame, shared)
    if kept.empty:
        return [], excluded
    rows = pd.DataFrame({
        "provider": kept["provider"].astype(str), "host": kept["host"].astype(str),
        "run_id": kept["run_id"].astype("int64"), "gpu_index": kept["gpu_index"].astype("int64"),
        "dtype": kept["dtype"].astype(str), "variant": kept["variant"].astype(str),
        "config": kept["config"].astype(str), "collected_at": kept["collected_at"],
        **{name: pd.to_numeric(kept[name], errors="coerce").astype(float) for name in (
            "tokens_per_s", "tflops", "tflops_causal", "mfu", "peak_tflops", "gbs",
            "hbm_share", "copy_share", "peak_memory_bytes", "temperature_c", "sm_clock_mhz",
            "power_w")}})
    if matmul is not None and not matmul.empty:
        pairs = pd.DataFrame({
            "provider": matmul["provider"].astype(str), "host": matmul["host"].astype(str),
            "run_id": matmul["run_id"].astype("int64"),
            "gpu_index": matmul["gpu_index"].astype("int64"),
            "dtype": matmul["dtype"].astype(str),
            "matmul_tflops": matmul["matmul_tflops"].astype(float),
            "matmul_config": matmul["matmul_config"].astype(str)}
        ).drop_duplicates(list(PAIR_KEYS))  # the caller's first choice per GPU and run
        rows = rows.merge(pairs, on=list(PAIR_KEYS), how="left", validate="many_to_one")
    else:
        rows["matmul_tflops"] = float("nan")
        rows["matmul_config"] = None
    rows["kept"] = rows["tflops"] / rows["matmul_tflops"]
    configs = {str(c["config"]): _config(c) for c in kept.drop_duplicates("config")
               .to_dict("records")}
    groups = rows.groupby(["provider", "host", "gpu_index", "variant", "config"], sort=True)
    table = groups[list(_MEDIANS)].median()
    table["results"] = groups.size()
    table["peak_memory_bytes"] = groups["peak_memory_bytes"].max()
    table["first"] = groups["collected_at"].min()
    table["last"] = groups["collected_at"].max()
    table["matmul_config"] = groups["matmul_config"].first()  # the first not missing
    found = []
    for (provider, host, index, variant, key), values in zip(
            table.index.tolist(), table.to_dict("records"), strict=True):
        peak_memory = _present(values["peak_memory_bytes"])
        found.append(JobGpu(
            provider=provider, host=host, gpu_index=int(index), variant=variant,
            config=configs[key], results=int(values["results"]),
            tokens_per_s=float(values["tokens_per_s"]), tflops=float(values["tflops"]),
            tflops_causal=float(values["tflops_causal"]), mfu=_present(values["mfu"]),
            peak_tflops=_present(values["peak_tflops"]), gbs=_present(values["gbs"]),
            hbm_share=_present(values["hbm_share"]),
            copy_share=_present(values["copy_share"]),
            peak_memory_bytes=None if peak_memory is None else int(peak_memory),
            temperature_c=_present(values["temperature_c"]),
            sm_clock_mhz=_present(values["sm_clock_mhz"]),
            power_w=_present(values["power_w"]),
            matmul_tflops=_present(values["matmul_tflops"]), kept=_present(values["kept"]),
            matmul_config=None if values["matmul_config"] is None
            or pd.isna(values["matmul_config"]) else str(values["matmul_config"]),
            first=pd.Timestamp(values["first"]).to_pydatetime(),
            last=pd.Timestamp(values["last"]).to_pydatetime()))
    found.sort(key=lambda g: (g.config.order(), g.variant, g.provider, g.host, g.gpu_index))
    return found, excluded


@dataclass(frozen=True)
class JobShortfallOptions:
    """When a GPU's job falls further below its variant than its matmul (the module's
    docstring says why these margins)."""

    points: float = 0.03  # matmul share - job share, at least
    sigmas: float = 4.0  # robust sds of the other GPUs' standing
    sigma_floor: float = 0.005
    min_gpus: int = 3
    slower_clock: float = 0.02  # the gap rule's tolerance for the SM clock
    # The share of the job's fall beyond its matmul the clock's deficit must cover.
    clock_covers: float = 0.5


@dataclass(frozen=True)
class JobShortfall:
    """A GPU whose training step falls further below its variant's median than its matmul
    does, with the likely cause and the figures that point at it."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    config: JobConfig
    gpus: int  # GPUs of the configuration and variant with a matmul figure
    tokens_per_s: float
    median_tokens_per_s: float
    matmul_tflops: float
    median_matmul_tflops: float
    others_standing: float  # the median standing of the other GPUs
    sigma: float  # their robust standard deviation
    cause: Cause
    temperature_c: float | None
    median_temperature_c: float | None
    sm_clock_mhz: float | None
    median_sm_clock_mhz: float | None
    decode_share: float | None  # its decode tokens/s over its variant's median

    @property
    def job_share(self) -> float:
        """Its training tokens/s over the median of its variant's GPUs."""
        return self.tokens_per_s / self.median_tokens_per_s

    @property
    def matmul_share(self) -> float:
        """Its matmul TFLOP/s over the median of the same GPUs, in the same runs."""
        return self.matmul_tflops / self.median_matmul_tflops

    @property
    def standing(self) -> float:
        """Job share over matmul share: 1 where the job falls as far as the matmul."""
        return self.job_share / self.matmul_share

    @property
    def cause_words(self) -> str:
        """The likely cause in a few words."""
        return CAUSE_WORDS[self.cause]

    @property
    def title(self) -> str:
        """The finding in a line."""
        points = (self.matmul_share - self.job_share) * 100
        return (f"{self.host} GPU {self.gpu_index}: the training step {points:.0f} points "
                f"further below its variant than the matmul ({self.job_share:.1%} of the "
                f"median against {self.matmul_share:.1%})")

    @property
    def evidence(self) -> str:
        """The figures the finding rests on, and those that point at its cause."""
        words = [
            f"{self.config.label}: {self.tokens_per_s:,.0f} tokens/s against "
            f"{self.median_tokens_per_s:,.0f}, the median of the variant's "
            f"{self.gpus} GPUs ({self.job_share:.1%}); matmul {self.matmul_tflops:.1f} "
            f"TFLOP/s in the same runs against {self.median_matmul_tflops:.1f} "
            f"({self.matmul_share:.1%}); job share / matmul share {self.standing:.3f} "
            f"against {self.others_standing:.3f} for the other GPUs "
            f"({(self.others_standing - self.standing) / self.sigma:.0f} robust standard "
            "deviations of theirs)"]
        if self.temperature_c is not None and self.median_temperature_c is not None:
            words.append(f"under the job {self.temperature_c:.0f} °C against the median "
                         f"{self.median_temperature_c:.0f} °C")
        if self.sm_clock_mhz is not None and self.median_sm_clock_mhz is not None:
            words.append(f"SM clock {self.sm_clock_mhz:,.0f} MHz against "
                         f"{self.median_sm_clock_mhz:,.0f}")
        words.append("no decode figure" if self.decode_share is None else
                     f"decode at {self.decode_share:.1%} of its variant's median")
        return "; ".join(words)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _decode_shares(gpus: Sequence[JobGpu]) -> dict[tuple[str, str, int, str, str, int],
                                                   float]:
    """Per GPU and run setup (stack, GPUs in the run): the median over its decode
    configurations of its decode tokens/s over its variant's median in each."""
    groups: dict[tuple[JobConfig, str], list[JobGpu]] = defaultdict(list)
    for g in gpus:
        if not g.config.train:
            groups[(g.config, g.variant)].append(g)
    shares: dict[tuple[str, str, int, str, str, int], list[float]] = defaultdict(list)
    for members in groups.values():
        centre = statistics.median(g.tokens_per_s for g in members)
        for g in members:
            shares[(g.provider, g.host, g.gpu_index, g.variant, g.config.stack,
                    g.config.gpus_in_run)].append(g.tokens_per_s / centre)
    return {key: statistics.median(values) for key, values in shares.items()}


@dataclass(frozen=True)
class JobStanding:
    """One GPU under one training configuration as the shortfall rule sees it: its job
    and matmul shares of its crowd's medians, and its standing against the others'."""

    gpu: JobGpu
    gpus: int  # GPUs of the configuration and variant with a matmul figure
    job_centre: float
    matmul_centre: float
    others_standing: float  # the median standing of the other GPUs
    sigma: float  # their robust standard deviation
    below: bool  # more than the rule's robust sds below them

    @property
    def job_share(self) -> float:
        """Its training tokens/s over the median of its crowd."""
        return self.gpu.tokens_per_s / self.job_centre

    @property
    def matmul_share(self) -> float:
        """Its matmul TFLOP/s over the median of the same GPUs."""
        return (self.gpu.matmul_tflops or 0.0) / self.matmul_centre

    @property
    def points(self) -> float:
        """Matmul share - job share, in points (the rule calls above its `points`)."""
        return (self.matmul_share - self.job_share) * 100

    @property
    def sigmas_below(self) -> float:
        """How many of the others' robust sds its standing is below theirs."""
        return (self.others_standing - self.job_share / self.matmul_share) / self.sigma


def job_standings(gpus: Sequence[JobGpu], options: JobShortfallOptions | None = None
                  ) -> list[JobStanding]:
    """Every GPU the rule judges (a training configuration with a matmul figure, among at
    least `min_gpus` such GPUs of its variant), in configuration order."""
    options = options or JobShortfallOptions()
    groups: dict[tuple[JobConfig, str], list[JobGpu]] = defaultdict(list)
    for g in gpus:
        if g.config.train and g.matmul_tflops:
            groups[(g.config, g.variant)].append(g)
    found = []
    for _, members in sorted(groups.items(), key=lambda item: (item[0][0].order(),
                                                                 item[0][1])):
        if len(members) < options.min_gpus:
            continue
        job_centre = statistics.median(g.tokens_per_s for g in members)
        matmul_centre = statistics.median(g.matmul_tflops or 0.0 for g in members)
        standing = [(g.tokens_per_s / job_centre) / ((g.matmul_tflops or 0.0) / matmul_centre)
                    for g in members]
        for i, g in enumerate(members):
            below, centre, sigma = below_others(standing[i], standing[:i] + standing[i + 1:],
                                                0.0, options.sigmas, options.sigma_floor)
            found.append(JobStanding(g, len(members), job_centre, matmul_centre, centre,
                                     sigma, below))
    return found


def find_job_shortfalls(gpus: Sequence[JobGpu], options: JobShortfallOptions | None = None
                        ) -> list[JobShortfall]:
    """Every GPU whose training step falls further below its variant than its matmul, by
    the module docstring's rule, with its likely cause."""
    options = options or JobShortfallOptions()
    decode = _decode_shares(gpus)
    standings = job_standings(gpus, options)
    crowds: dict[tuple[JobConfig, str], list[JobGpu]] = defaultdict(list)
    for st in standings:
        crowds[(st.gpu.config, st.gpu.variant)].append(st.gpu)
    found = []
    for st in standings:
        g = st.gpu
        # Below its variant on the job by the points too: a card whose matmul runs 5%
        # above its crowd and its job 1% above has lost nothing to dispute.
        if (st.matmul_share - st.job_share <= options.points
                or st.job_share > 1.0 - options.points or not st.below):
            continue
        crowd = crowds[(g.config, g.variant)]
        temperature = _median([m.temperature_c for m in crowd])
        clock = _median([m.sm_clock_mhz for m in crowd])
        decode_share = decode.get((g.provider, g.host, g.gpu_index, g.variant,
                                   g.config.stack, g.config.gpus_in_run))
        found.append(JobShortfall(
            g.provider, g.host, g.gpu_index, g.variant, g.config, st.gpus, g.tokens_per_s,
            st.job_centre, g.matmul_tflops or 0.0, st.matmul_centre, st.others_standing,
            st.sigma, _cause(options, st.matmul_share - st.job_share, st.job_share,
                             decode_share, st.matmul_share, g.sm_clock_mhz, clock),
            g.temperature_c, temperature, g.sm_clock_mhz, clock, decode_share))
    return found


def _cause(options: JobShortfallOptions, fall: float, job_share: float,
           decode_share: float | None, matmul_share: float, sm_clock_mhz: float | None,
           median_clock_mhz: float | None) -> Cause:
    """The module docstring's causes, in its order."""
    if sm_clock_mhz is not None and median_clock_mhz:
        deficit = 1.0 - sm_clock_mhz / median_clock_mhz
        if deficit > options.slower_clock and deficit >= options.clock_covers * fall:
            return "cooling"
    if decode_share is None or matmul_share - decode_share <= options.points:
        return "host"
    return "memory" if decode_share < job_share else "shared"
