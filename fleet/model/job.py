"""The job suite's results in the agent document (agent/job/suite.py): one GPU's figure for
one job, a transformer's training step or decode step under one attention backend, with
what it was measured on and what it counts. Validated as the rest of the document is
(fleet/model/base.py), and against its own counts: every headline figure must follow
from the result's own times.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from fleet.model.base import (
    Celsius,
    GBps,
    LongText,
    Name,
    Seconds,
    SeenProcess,
    SoakVerdict,
    Statistics,
    Strict,
    TelemetrySummary,
    Text,
    TFlops,
)
from fleet.model.settings import SettingName

Workload = Literal["train", "decode"]
Attention = Literal["flash", "cudnn", "efficient", "math"]
# The relative tolerance a job result's derived figures must meet against the figures
# they are derived from: the agent computes them unrounded, so anything wider is an
# agent bug or an edited file, and would be ranked as if measured.
JOB_REL = 1e-6
PerSecond = Annotated[float, Field(gt=0, le=1e12)]
Flop = Annotated[float, Field(gt=0, le=1e18)]
Dim = Annotated[int, Field(ge=1, le=1 << 24)]


class JobShape(Strict):
    """The transformer stack a job runs: layers of `width`, attention heads (query and
    key/value) of `head_dim`, the feed-forward width; the batch and sequence of a step,
    and for decode the context each new token attends to (None for train)."""

    layers: Dim
    width: Dim
    heads: Dim
    kv_heads: Dim
    head_dim: Dim
    ffn: Dim
    batch: Dim
    seq: Dim
    context: Dim | None


class JobCorrectness(Strict):
    """The gate a job passed before it was timed: a small copy of the stack against a
    float32 reference (decode: the logits' relative error stands in the gradient's)."""

    passed: bool
    loss_finite: bool
    grad_max_rel_error: Annotated[float, Field(ge=0, le=1e12)] | None
    tolerance: Annotated[float, Field(ge=0, le=1)]
    shape: Text
    reference: Text


class JobFlags(Strict):
    """What may have made a job's figure unrepresentative."""

    not_soaked: bool
    contended: bool
    power_capped: bool
    thermal_throttled: bool
    hw_slowdown: bool


class JobSoak(SoakVerdict):
    """The continuous load a job's figure was measured after, as the matmul's Soak but in
    tokens a second, and without a first-20-s level (agent/timing/soak.py)."""

    temperature_c: Celsius | None
    temperature_start_c: Celsius | None
    # Seconds a bf16 matmul held the card while the job set up, so that the soak began
    # near the matmul's heat (agent/job/warm.py); None: not held (the CPU path, agents
    # before 2026-11-27, or the card had no room for it).
    warmed_s: Seconds | None = None
    # Per window from the first launch: [end s, tokens/s, deg C, SM MHz, W], -1 unknown.
    curve: list[Annotated[list[Annotated[float, Field(ge=-1, le=1e12)]],
                          Field(min_length=5, max_length=5)]] = Field(max_length=1000)


class JobProvenance(Strict):
    """The stack a job ran on: torch, the CUDA runtime and cuDNN, and the device."""

    torch_version: Name | None
    cuda_runtime_version: Name | None
    cudnn_version: Name | None
    device_name: Name | None


class JobRerun(Strict):
    """A short headline measured again in the same run, in a child process whose
    environment lacked the settings that can move a job (agent/rerun/job.py): what was
    taken out, the floor the first figure fell under (in its tokens/s, with what it
    rests on: the records' figure of the variant, or a share of the datasheet's), and
    the rerun's figure."""

    without: list[SettingName] = Field(min_length=1, max_length=64)
    floor_tokens_per_s: PerSecond
    floor_basis: Annotated[str, StringConstraints(max_length=512)]
    tokens_per_s: PerSecond
    attention: Attention
    mfu: Annotated[float, Field(ge=0, le=100)] | None = None
    hbm_share: Annotated[float, Field(ge=0, le=100)] | None = None
    # Another process was on the GPU around the rerun: it settles nothing.
    contended: bool
    # The settings' names the child ran under: the evidence it ran without them.
    ran_with: list[SettingName] = Field(default_factory=list, max_length=64)
    wall_s: Seconds

    @model_validator(mode="after")
    def _ran_without(self) -> JobRerun:
        still = sorted(set(self.without) & set(self.ran_with))
        if still:
            raise ValueError(f"the job's rerun says it ran without {', '.join(still)} and "
                             "its process ran with it")
        return self


class JobResult(Strict):
    """One GPU's figure for one job of the job suite (agent/job/suite.py): a transformer's
    training step or decode step under one attention backend, as tokens a second, with
    the FLOP (and for decode the bytes) a token costs, so that a GPU-hour is priced in
    the work of a real job. Compared only within its configuration (`job_config`)."""

    # `model` and `model_source` are the contract's names; pydantic reserves model_*.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True,
                              protected_namespaces=())

    suite_version: Name
    workload: Workload
    gpu_index: Annotated[int, Field(ge=0, le=1024)]
    gpu_uuid: Name | None
    # The published configuration the shapes come from, and where it is published.
    model: Name
    model_source: Annotated[str, StringConstraints(max_length=1000)]
    shape: JobShape
    # Decode's point (agent/job/transformer.py DECODE_POINTS): "bandwidth" or "latency";
    # None for training and for suites before 1.1.0 (one decode shape).
    point: Literal["bandwidth", "latency"] | None = None
    # How grouped-query attention reached the kernel: "native" (SDPA's enable_gqa),
    # "expanded" (keys and values repeated first), "grouped" (decode: a group's queries
    # as rows of one head); None before suite 1.1.0, which expanded in training.
    gqa: Literal["native", "expanded", "grouped"] | None = None
    # The fastest backend that passed its gate, of its GPU's workload and point in the
    # run: the figure a tuned job gets (None before suite 1.1.0: the pinned backend).
    headline: bool | None = None
    params: Annotated[int, Field(ge=1, le=10**13)]
    dtype: Literal["bf16", "fp32"]
    attention: Attention
    compiled: bool
    compile_s: Seconds | None
    graph: bool
    optimizer: Literal["adamw-fused", "adamw"] | None
    concurrency: Literal["concurrent", "sequential"]
    gpus_in_run: Annotated[int, Field(ge=1, le=1024)]
    thermal: Literal["soaked", "cool-start"]
    # Measured right after that soaked load on the same card, and not judged itself.
    follows: Annotated[str, StringConstraints(
        pattern=r"^(train|decode)/(flash|cudnn|efficient|math)$")] | None
    tokens_per_step: Annotated[int, Field(ge=1, le=1 << 40)]
    steps: Annotated[int, Field(ge=1, le=10_000_000)]
    seconds: Annotated[float, Field(gt=0, le=1e6)]
    tokens_per_s: PerSecond
    step_ms: Statistics
    within_run_ci95: Annotated[list[Annotated[float, Field(ge=0, le=1e12)]],
                               Field(min_length=2, max_length=2)] | None
    flop_per_token: Flop
    flop_per_token_causal: Flop
    flop_source: LongText
    tflops: TFlops
    tflops_causal: TFlops
    peak_tflops: Annotated[float, Field(gt=0, le=1e6)] | None
    peak_source: Text | None
    mfu: Annotated[float, Field(ge=0, le=100)] | None
    bytes_per_step: Annotated[int, Field(ge=1, le=1 << 50)] | None
    gbs: GBps | None
    hbm_gbs: Annotated[float, Field(gt=0, le=1e7)] | None
    hbm_source: Text | None
    hbm_share: Annotated[float, Field(ge=0, le=100)] | None
    # Decode: the same GPU's memory copy in the same run (the node suite's, bytes read
    # plus written) and the share of it the step read; None where the node suite did not
    # run or measure it.
    copy_gbs: Annotated[float, Field(gt=0, le=1e7)] | None = None
    copy_share: Annotated[float, Field(ge=0, le=100)] | None = None
    peak_memory_bytes: Annotated[int, Field(ge=0, le=1 << 50)] | None
    loss: Annotated[float, Field(ge=-1e9, le=1e9)] | None
    correctness: JobCorrectness
    flags: JobFlags
    soak: JobSoak | None
    telemetry: TelemetrySummary
    contention: list[Text] = Field(max_length=16)
    processes: list[SeenProcess] = Field(max_length=64)
    provenance: JobProvenance
    wall_s: Seconds
    # A short headline measured again without the run's settings (agent/rerun/job.py).
    rerun: JobRerun | None = None

    @model_validator(mode="after")
    def _agrees_with_itself(self) -> JobResult:
        # Every headline follows from the result's own counts and times: a result whose
        # figures do not would be priced and ranked as if measured.
        shape = self.shape
        train = self.workload == "train"
        # The loss is the soaked load's first step; a step measured after it (`follows`,
        # the other attention backend) reports none.
        needed = {"optimizer": self.optimizer,
                  **({"loss": self.loss} if self.follows is None else {})} if train else {
            "bytes_per_step": self.bytes_per_step, "gbs": self.gbs,
            "shape.context": shape.context}
        missing = [name for name, value in needed.items() if value is None]
        if missing:
            raise ValueError(f"a {self.workload} result must give {', '.join(missing)}")
        extra = {"shape.context": shape.context, "bytes_per_step": self.bytes_per_step,
                 "gbs": self.gbs, "hbm_share": self.hbm_share} if train else {
            "optimizer": self.optimizer, "loss": self.loss}
        given = [name for name, value in extra.items() if value is not None]
        if given:
            raise ValueError(f"a {self.workload} result has no {', '.join(given)}")
        tokens = shape.batch * shape.seq if train else shape.batch
        if self.tokens_per_step != tokens:
            raise ValueError(f"tokens_per_step {self.tokens_per_step} is not "
                             f"{'batch x seq' if train else 'batch'} ({tokens})")
        # A compiled job's results after the first one reuse its compile: no compile_s.
        if self.compile_s is not None and not self.compiled:
            raise ValueError("compile_s is given only for a compiled job (compiled)")
        self._derived("tokens_per_s", self.tokens_per_s,
                      self.tokens_per_step * self.steps / self.seconds,
                      "tokens_per_step x steps / seconds")
        self._derived("tflops", self.tflops, self.tokens_per_s * self.flop_per_token / 1e12,
                      "tokens_per_s x flop_per_token / 1e12")
        self._derived("tflops_causal", self.tflops_causal,
                      self.tokens_per_s * self.flop_per_token_causal / 1e12,
                      "tokens_per_s x flop_per_token_causal / 1e12")
        if self.mfu is not None and self.peak_tflops is None:
            raise ValueError("mfu is a share of peak_tflops, which is not given")
        if self.mfu is not None and self.peak_tflops is not None:
            self._derived("mfu", self.mfu, self.tflops / self.peak_tflops,
                          "tflops / peak_tflops")
        if self.gbs is not None and self.bytes_per_step is not None:
            self._derived("gbs", self.gbs, self.bytes_per_step * self.steps / self.seconds
                          / 1e9, "bytes_per_step x steps / seconds / 1e9")
        if self.hbm_share is not None and (self.gbs is None or self.hbm_gbs is None):
            raise ValueError("hbm_share is a share of hbm_gbs: gbs and hbm_gbs must be given")
        if self.hbm_share is not None and self.gbs is not None and self.hbm_gbs is not None:
            self._derived("hbm_share", self.hbm_share, self.gbs / self.hbm_gbs,
                          "gbs / hbm_gbs")
        if (self.copy_share is None) != (self.copy_gbs is None) or (
                self.copy_gbs is not None and self.gbs is None):
            raise ValueError("copy_share and copy_gbs go together, on a decode result")
        if self.copy_share is not None and self.copy_gbs is not None and self.gbs is not None:
            self._derived("copy_share", self.copy_share, self.gbs / self.copy_gbs,
                          "gbs / copy_gbs")
        if self.rerun is not None and not self.headline:
            raise ValueError("only a headline figure is measured again (rerun)")
        if self.point is not None and train:
            raise ValueError("a train result has no decode point")
        interval = self.within_run_ci95
        if interval is not None and interval[0] > interval[1]:
            raise ValueError("within_run_ci95 must be [low, high]")
        # The suite judges one load per card (train/flash); the results measured after
        # it (`follows`) ride on its soak, and a cool start has none.
        judged = self.thermal == "soaked" and self.follows is None
        if judged and self.soak is None:
            raise ValueError("a soaked result that follows no other load must carry its "
                             "soak (curve and verdict)")
        if not judged and self.soak is not None:
            raise ValueError("only a soaked result that follows no other load carries a soak")
        return self

    @staticmethod
    def _derived(name: str, value: float, expected: float, how: str) -> None:
        if not math.isclose(value, expected, rel_tol=JOB_REL):
            raise ValueError(f"{name} {value:.7g} is not {how} ({expected:.7g}): the result "
                             "contradicts its own figures; run the agent that ships with "
                             "this controller")
