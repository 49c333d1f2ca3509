"""What a GPU-hour really buys: measured throughput per provider and variant, against the
datasheet and against the price.

An effective PFLOP-hour is one PFLOP/s of *measured* sustained matmul throughput for one
hour: price per GPU-hour / (median per-GPU TFLOP/s / 1000). It ranks offers by what a
training job gets for the money, where price per GPU-hour ranks them by the label.

Beside it, the synchronous figure (fleet/analysis/sync.py): each GPU counted at its node's
slowest GPU, which a data-parallel step waits for. Offers are ranked at the median.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from fleet.analysis.dataset import Config, Dataset, GpuMeasure, Listing
from fleet.analysis.sync import synchronous_tflops


@dataclass(frozen=True)
class CostRow:
    """One provider's GPUs of one variant and configuration: throughput, peak share, price, rank."""

    config: Config
    provider: str
    variant: str
    gpus: int
    hosts: int
    median_tflops: float  # median of per-GPU medians
    min_tflops: float
    max_tflops: float
    peak_tflops: float | None  # the datasheet's dense figure for this dtype
    price_per_gpu_hour: float | None  # median of the listed prices of these GPUs' hosts
    currency: str | None
    prices_note: str | None  # why no price: none listed, or several currencies
    rank: int | None  # 1 = cheapest effective PFLOP-hour in its configuration and currency
    # The median over the GPUs of their node's slowest GPU: what a data-parallel job gets.
    sync_tflops: float | None = None

    @property
    def spread(self) -> float:
        """(max - min) / median across the GPUs: how alike this provider's cards are."""
        return (self.max_tflops - self.min_tflops) / self.median_tflops

    @property
    def percent_of_peak(self) -> float | None:
        """The median throughput as a share of the datasheet's peak; None without a peak."""
        return None if not self.peak_tflops else self.median_tflops / self.peak_tflops

    @property
    def cost_per_pflop_hour(self) -> float | None:
        """What a PFLOP-hour costs at the median throughput; None without a price or throughput."""
        if self.price_per_gpu_hour is None or self.median_tflops <= 0:
            return None
        return self.price_per_gpu_hour / (self.median_tflops / 1000.0)

    @property
    def sync_cost_per_pflop_hour(self) -> float | None:
        """What a PFLOP-hour costs a data-parallel job, each GPU at its node's slowest."""
        if self.price_per_gpu_hour is None or not self.sync_tflops or self.sync_tflops <= 0:
            return None
        return self.price_per_gpu_hour / (self.sync_tflops / 1000.0)


def _peaks(data: Dataset) -> dict[tuple[str, str], float]:
    """(variant, dtype) -> datasheet dense TFLOP/s, as the agent's catalog gave it. A vGPU
    carries its physical board's datasheet, but may run on a time or MIG slice of it: the
    board's peak would understate what the slice delivers, so `Dataset.datasheets` holds
    none for vGPU slices."""
    return {(variant, dtype): value for variant, sheet in data.datasheets.items()
            for dtype, value in sheet.peak_tflops.items() if value}


def listed_price(listings: Mapping[tuple[str, str], Listing], provider: str,
                 hosts: Iterable[str]) -> tuple[float | None, str | None, str | None]:
    """(price per GPU-hour, currency, why none) of `provider`'s `hosts`: the median of
    their listed prices, in one currency only (fleet converts none); the job suite's
    cost (fleet/analysis/job/cost.py) prices tokens with it too."""
    priced = [listings[(provider, h)] for h in hosts if (provider, h) in listings
              and listings[(provider, h)].price_per_gpu_hour is not None]
    currencies = {listing.currency for listing in priced}
    if not priced:
        return None, None, "no price listed"
    if len(currencies) > 1:
        return None, None, "hosts listed in several currencies: " + ", ".join(
            sorted(c or "?" for c in currencies))
    return (statistics.median(listing.price_per_gpu_hour or 0.0 for listing in priced),
            currencies.pop(), None)


def cost_table(data: Dataset) -> list[CostRow]:
    """One cost row per configuration, provider and variant measured, ranked by PFLOP-hour."""
    listings = {(h.provider, h.host): h.listing for h in data.hosts}
    peaks = _peaks(data)
    groups: dict[tuple[Config, str, str], list[GpuMeasure]] = defaultdict(list)
    for m in data.measures:
        groups[(m.config, m.variant, m.provider)].append(m)
    rows = []
    for (config, variant, provider), gpus in groups.items():
        values = [g.tflops for g in gpus]
        hosts = sorted({g.host for g in gpus})
        price, currency, note = listed_price(listings, provider, hosts)
        rows.append(CostRow(config, provider, variant, len(gpus), len(hosts),
                            statistics.median(values), min(values), max(values),
                            peaks.get((variant, config.dtype)), price, currency, note, None,
                            synchronous_tflops(gpus)))
    return _ranked(rows)


def _ranked(rows: list[CostRow]) -> list[CostRow]:
    ranked: list[CostRow] = []
    by_market: dict[tuple[Config, str | None], list[CostRow]] = defaultdict(list)
    for row in rows:
        by_market[(row.config, row.currency)].append(row)
    for (_, currency), members in by_market.items():
        if currency is None:
            ranked += members
            continue
        members.sort(key=lambda r: r.cost_per_pflop_hour or float("inf"))
        ranked += [replace(row, rank=i + 1) for i, row in enumerate(members)]
    ranked.sort(key=lambda r: (r.config, r.currency is None, r.currency or "",
                               r.cost_per_pflop_hour or float("inf"), -r.median_tflops,
                               r.provider, r.variant))
    return ranked
