"""In-memory data sets with a known truth, for the analysis alone (no store): per-GPU
medians drawn from chosen distributions, many seeds a second."""

from __future__ import annotations

import datetime as dt
import random

from fleet.analysis.dataset import Config, Dataset, GpuMeasure, Scope
from fleet.store.query import software_stack

STACK = software_stack("2.13.0+cu130", "13.0", "13.0.2")
CONFIG = Config("bf16", 8192, 8192, 8192, "sustained", "cold", "concurrent", "1.0.0",
                "cool-start", STACK)
SOAKED = Config("bf16", 8192, 8192, 8192, "sustained", "cold", "concurrent", "1.3.0",
                "soaked", STACK)
WHEN = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)


def measure(provider: str, host: str, index: int, tflops: float, *,
            variant: str = "H100-SXM5-80GB", power_limit_w: float = 700.0,
            sm_clock_mhz: float = 1410.0, driver: str = "580.159.04",
            capped: float = 1.0, config: Config = CONFIG, temperature_c: float | None = None,
            drop: float | None = None, stack: str = STACK) -> GpuMeasure:
    return GpuMeasure(
        provider=provider, host=host, gpu=f"{provider}/{host}/{index}", gpu_index=index,
        variant=variant, config=config, tflops=tflops, results=1,
        sm_clock_mhz=sm_clock_mhz, power_w=power_limit_w - 1.0, power_capped_share=capped,
        power_limit_w=power_limit_w, driver_version=driver,
        virtualization_mode="passthrough", flags=(), first=WHEN, last=WHEN,
        first_20s_tflops=None if drop is None else tflops / (1.0 - drop), drop=drop,
        temperature_c=temperature_c, stack=stack)


def provider_gpus(rng: random.Random, provider: str, centre: float, spread: float,
                  gpus: int = 8, per_host: int = 2, **facts: object) -> list[GpuMeasure]:
    """`gpus` GPUs whose medians are normal around `centre` with relative sd `spread`."""
    return [measure(provider, f"{provider}-{i // per_host:02d}", i % per_host,
                    centre * (1.0 + rng.gauss(0.0, spread)), **facts)  # type: ignore[arg-type]
            for i in range(gpus)]


def dataset(measures: list[GpuMeasure]) -> Dataset:
    return Dataset(Scope(), (), (), tuple(measures), (), 1, WHEN, WHEN)


def provider_nodes(rng: random.Random, provider: str, centre: float, spread: float,
                   hosts: int, per_host: int, node_spread: float) -> list[GpuMeasure]:
    """Like `provider_gpus`, with each node off `centre` by its own normal effect (relative
    sd `node_spread`), shared by its GPUs: cooling, power feed, operating point."""
    measures = []
    for h in range(hosts):
        node = rng.gauss(0.0, node_spread)
        measures += [measure(provider, f"{provider}-{h:02d}", i,
                             centre * (1.0 + node + rng.gauss(0.0, spread)))
                     for i in range(per_host)]
    return measures


def provider_soak(rng: random.Random, provider: str, *, hosts: int = 4, per_host: int = 2,
                  temperature_c: float = 70.0, drop: float = 0.01,
                  gpu_temperature_c: float = 2.0, node_temperature_c: float = 1.5,
                  gpu_drop: float = 0.002, node_drop: float = 0.0015,
                  power_limit_w: float = 700.0, tflops: float = 700.0) -> list[GpuMeasure]:
    """Soaked GPUs whose temperature under load and drop from the first 20 s are normal
    around `temperature_c` and `drop`, with a shared effect per node (its cooling: sd
    `node_temperature_c`, `node_drop`) and one per GPU (`gpu_temperature_c`, `gpu_drop`):
    spreads like those of the lent H100s and H200 (69-75 °C, 0.2-1.2%; docs/design.md)."""
    measures = []
    for h in range(hosts):
        node_t, node_d = rng.gauss(0.0, node_temperature_c), rng.gauss(0.0, node_drop)
        for i in range(per_host):
            gpu_drop_value = drop + node_d + rng.gauss(0.0, gpu_drop)
            measures.append(measure(
                provider, f"{provider}-{h:02d}", i, tflops * (1.0 - gpu_drop_value),
                power_limit_w=power_limit_w, config=SOAKED, drop=gpu_drop_value,
                temperature_c=temperature_c + node_t + rng.gauss(0.0, gpu_temperature_c)))
    return measures
