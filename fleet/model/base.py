"""The shapes every part of the agent document shares: bounded strings and numbers, the
strict base model, and the few records the matmul, node and job results all carry
(per-run times, telemetry, a soak's verdict, a process seen on a GPU).

A host is not trusted: unknown fields are refused, strings and lists are bounded, and
numbers must be finite (fleet/model/document.py says why).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Text = Annotated[str, StringConstraints(max_length=512)]
LongText = Annotated[str, StringConstraints(max_length=4096)]
Name = Annotated[str, StringConstraints(max_length=128)]
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
MHz = Annotated[int, Field(ge=0, le=100_000)]
Watts = Annotated[float, Field(ge=0, le=100_000)]
Verdict = Literal["yes", "no", "unknown"]


class Strict(BaseModel):
    """A model that rejects unknown fields and non-finite numbers, and is immutable."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


Ms = Annotated[float, Field(ge=0, le=1e7)]
Seconds = Annotated[float, Field(ge=0, le=1e6)]
Share = Annotated[float, Field(ge=0, le=1)]


class Statistics(Strict):
    """Per-run kernel times in milliseconds; the 95% interval is that of the median."""

    runs: Annotated[int, Field(ge=1, le=1_000_000)]
    median_ms: Ms
    trimmed_mean_ms: Ms
    mean_ms: Ms
    min_ms: Ms
    max_ms: Ms
    stdev_ms: Ms
    cv: Annotated[float, Field(ge=0, le=100)]
    ci95_low_ms: Ms
    ci95_high_ms: Ms


class TelemetrySummary(Strict):
    """What the GPU's clocks, power and temperature did while it was measured."""

    samples: Count
    sm_clock_mhz_median: Annotated[float, Field(ge=0, le=1e5)] | None
    mem_clock_mhz_median: Annotated[float, Field(ge=0, le=1e5)] | None
    power_w_median: Watts | None
    temperature_c_max: Annotated[float, Field(ge=-100, le=300)] | None
    reason_shares: dict[Name, Share] = Field(max_length=32)


TFlops = Annotated[float, Field(ge=0, le=1e6)]
Celsius = Annotated[float, Field(ge=-100, le=300)]


class SoakVerdict(Strict):
    """A continuous load judged by agent/timing/soak.py's rule, the matmul's and the job suite's
    alike: whether and when throughput and temperature stopped moving."""

    # Both stopped moving before the cap; False: the cap ended the wait (flag not_soaked).
    soaked: bool
    # Seconds of load before the measurement began (the soak itself, and the wait for
    # the node's other GPUs), and when this GPU's test first passed (None: never).
    seconds: Seconds
    settled_s: Seconds | None
    cap_s: Seconds
    # The curve's window, and the trailing span the slope test fits.
    window_s: Annotated[float, Field(gt=0, le=1e4)]
    span_s: Annotated[float, Field(gt=0, le=1e4)]
    # The test: |throughput change fitted over the span| / level at most this...
    throughput_tolerance: Annotated[float, Field(ge=0, le=1)]
    # ...and |temperature change fitted over the span| at most this many degrees.
    temperature_tolerance_c: Annotated[float, Field(ge=0, le=100)]
    # What the last judged span showed (None: no span was judged).
    throughput_change: Annotated[float, Field(ge=-10, le=10)] | None
    temperature_change_c: Annotated[float, Field(ge=-300, le=300)] | None


GBps = Annotated[float, Field(ge=0, le=1e7)]


class SeenProcess(Strict):
    """A process the agent saw on a GPU around a figure, with its owner where /proc shows
    it (agent/timing/contention.py): `own` is whether it runs as the agent's own user."""

    pid: Annotated[int, Field(ge=0, le=2**31)]
    uid: Annotated[int, Field(ge=0, le=2**32)] | None = None
    user: Annotated[str, StringConstraints(max_length=64)] | None = None
    own: bool | None = None
