"""A procurement scene stored through the real ingest path, with a known truth:

- alpha: 2 hosts x 8 H100 SXM5 near 700 TFLOP/s, 2.49 USD; alpha-01 GPU 3 is a straggler.
- beta: 2 hosts x 8 H100 SXM5, 3% slower, power limit 650 W (below the 700 W datasheet),
  SM clock 1330 MHz under load; 2.10 USD.
- gamma: listed "H100 SXM5 80GB"; gamma-01 is 8 x H100 PCIe (a mismatch, and the listing
  hides two variants), gamma-02 is SXM5 on an older driver (drift); 1.90 USD.
- delta-01 never answered.

Every result is soaked (harness 1.3.0): alpha's and gamma's GPUs near 70 °C under load
and 1% below their first 20 s, beta's (at its lower cap) near 66 °C and 0.6%. Nothing
there is a cooling finding: beta's cap differs, and gamma's SXM5 cards are one node.
`hot_hosts()` adds one: zeta, 2 hosts x 8 H100 SXM5 at alpha's 700 W cap, 10 °C hotter
and losing 2.2% from the first 20 s, 1.2% below alpha soaked (under the 2% gap
threshold: cooling evidence without a gap).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from sqlalchemy import Engine

from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.store import factory

SXM = {"variant": "H100 SXM5 80GB", "gpu_count": 8}
WHEN = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)


def _tflops(seed: str, centre: float, spread: float = 0.004) -> list[float]:
    """Eight GPUs around `centre`. With two hosts a side, Welch's test between hosts
    judges beta's 3% on four host medians; at 0.5% spread beta's gap was called on the
    median's noise (Holm p 0.045) and missed on the trimmed mean's (0.051), so the scene
    keeps its GPUs 0.4% apart, where the gap it is built around stands (0.038)."""
    rng = random.Random(seed)
    return [centre * (1.0 + rng.gauss(0.0, spread)) for _ in range(8)]


def _soak(seed: str, temperature_c: float, drop: float) -> dict[str, Any]:
    """Per-GPU temperatures under load (sd 1 °C) and drops (sd 0.1 points)."""
    rng = random.Random(f"soak/{seed}")
    return {"harness": "1.3.0",
            "gpu_temperatures": [temperature_c + rng.gauss(0.0, 1.0) for _ in range(8)],
            "gpu_drops": [drop + rng.gauss(0.0, 0.001) for _ in range(8)]}


def hosts() -> list[tuple[str, str, dict[str, Any], Listing]]:
    alpha = Listing(SXM, 2.49, "USD", ("us-east",))
    beta = Listing(SXM, 2.10, "USD", ())
    gamma = Listing(SXM, 1.90, "USD", ())
    straggling = _tflops("alpha-01", 700.0)
    straggling[3] = 630.0
    return [
        ("alpha", "alpha-01", {"gpu_tflops": straggling, **_soak("alpha-01", 70.0, 0.01)},
         alpha),
        ("alpha", "alpha-02", {"gpu_tflops": _tflops("alpha-02", 700.0),
                               **_soak("alpha-02", 70.0, 0.01)}, alpha),
        ("beta", "beta-01", {"gpu_tflops": _tflops("beta-01", 679.0), "power_limit_w": 650.0,
                             "sm_clock_mhz": 1330.0, "power_w": 649.0,
                             **_soak("beta-01", 66.0, 0.006)}, beta),
        ("beta", "beta-02", {"gpu_tflops": _tflops("beta-02", 679.0), "power_limit_w": 650.0,
                             "sm_clock_mhz": 1330.0, "power_w": 649.0,
                             **_soak("beta-02", 66.0, 0.006)}, beta),
        ("gamma", "gamma-01", {"gpu_tflops": _tflops("gamma-01", 560.0),
                               "variant": "H100 PCIe 80GB", "power_w": 349.0,
                               **_soak("gamma-01", 70.0, 0.01)}, gamma),
        ("gamma", "gamma-02", {"gpu_tflops": _tflops("gamma-02", 700.0),
                               "driver_version": "535.104.05",
                               **_soak("gamma-02", 70.0, 0.01)}, gamma),
    ]


def hot_hosts() -> list[tuple[str, str, dict[str, Any], Listing]]:
    """zeta: alpha's cards at alpha's cap, in hosts that cool worse (see the docstring)."""
    zeta = Listing(SXM, 2.30, "USD", ())
    return [("zeta", name, {"gpu_tflops": _tflops(name, 700.0 * (1.0 - 0.012)),
                            **_soak(name, 80.0, 0.022)}, zeta)
            for name in ("zeta-01", "zeta-02")]


def store_scene(engine: Engine, sweep: str = "nightly", when: dt.datetime = WHEN,
                extra: list[tuple[str, str, dict[str, Any], Listing]] | None = None) -> None:
    with Ingest(engine, RunInfo(kind="probe", sweep=sweep)) as ingest:
        for provider, host, knobs, listing in [*hosts(), *(extra or [])]:
            data = factory.document(host=host, gpus=8, collected_at=when,
                                    **{"harness": "1.3.0", **knobs})
            ingest.store(AgentDocument.model_validate(data),
                         Origin(provider, host, listing))
        ingest.record_error(Origin("delta", "delta-01", Listing(SXM, 1.50, "USD", ())),
                            "connect", "delta-01 (10.0.0.9:22): connection refused")
