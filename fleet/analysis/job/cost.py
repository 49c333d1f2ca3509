"""What a GPU-hour buys for a real job: each provider's job figures per variant and job
configuration, and what a million tokens trained or decoded costs there.

    cost per million tokens = price per GPU-hour / (tokens/s per GPU x 3600) x 10^6

at the median of per-GPU medians (what independent jobs get from each GPU-hour), and at
the synchronous figure (fleet/analysis/sync.py: each GPU counted at its node's slowest,
which a data-parallel step waits for). Prices are the cost table's
(fleet/analysis/matmul/cost.py, `listed_price`): the median listed price per GPU-hour of the
provider's hosts, one currency, none converted. Ranked within a configuration and
currency, at the median; offers without a price are listed, not ranked.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from fleet.analysis.dataset import Listing
from fleet.analysis.job.compare import sync_tokens_per_s
from fleet.analysis.job.figures import JobConfig, JobGpu
from fleet.analysis.matmul.cost import listed_price

SECONDS_PER_HOUR = 3600.0


def cost_per_million_tokens(price_per_gpu_hour: float | None, tokens_per_s: float | None
                            ) -> float | None:
    """What a million tokens cost at `tokens_per_s` per GPU; None without either."""
    if price_per_gpu_hour is None or not tokens_per_s or tokens_per_s <= 0:
        return None
    return price_per_gpu_hour / (tokens_per_s * SECONDS_PER_HOUR) * 1e6


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclass(frozen=True)
class JobRow:
    """One provider's GPUs of one variant and job configuration: figures, price, rank."""

    config: JobConfig
    provider: str
    variant: str
    gpus: int
    hosts: int
    results: int
    tokens_per_s: float  # median of per-GPU medians
    min_tokens_per_s: float
    max_tokens_per_s: float
    tflops: float  # torchtitan's count
    tflops_causal: float  # with the causal halving of attention
    mfu: float | None  # of the dense datasheet peak for the dtype
    peak_tflops: float | None
    gbs: float | None  # decode
    hbm_share: float | None  # decode
    # Decode: of the same GPUs' memory copies in the same runs (median over the GPUs).
    copy_share: float | None
    peak_memory_bytes: int | None  # the largest of its GPUs'
    # The soaked matmul of the same GPUs in the same runs, and the median over the GPUs
    # of the share of it the job keeps (job TFLOP/s / matmul TFLOP/s).
    matmul_tflops: float | None
    kept: float | None
    matmul_gpus: int  # GPUs with a matmul figure in the same runs
    sync_tokens_per_s: float | None  # each GPU at its node's slowest
    price_per_gpu_hour: float | None
    currency: str | None
    prices_note: str | None  # why no price: none listed, or several currencies
    rank: int | None = None  # 1 = cheapest million tokens in its configuration and currency
    # The matmul configuration(s) the job is set beside, in words ("; " between several).
    matmul_config: str | None = None

    @property
    def spread(self) -> float:
        """(max - min) / median across the GPUs."""
        return (self.max_tokens_per_s - self.min_tokens_per_s) / self.tokens_per_s

    @property
    def cost_per_million_tokens(self) -> float | None:
        """What a million tokens cost at the median per-GPU figure."""
        return cost_per_million_tokens(self.price_per_gpu_hour, self.tokens_per_s)

    @property
    def sync_cost_per_million_tokens(self) -> float | None:
        """What a million tokens cost a data-parallel job, each GPU at its node's slowest."""
        return cost_per_million_tokens(self.price_per_gpu_hour, self.sync_tokens_per_s)


def job_table(gpus: Sequence[JobGpu], listings: Mapping[tuple[str, str], Listing]
              ) -> list[JobRow]:
    """One row per job configuration, provider and variant measured, ranked by the cost of
    a million tokens within each configuration and currency."""
    groups: dict[tuple[JobConfig, str, str], list[JobGpu]] = defaultdict(list)
    for g in gpus:
        groups[(g.config, g.variant, g.provider)].append(g)
    rows = []
    for (config, variant, provider), members in groups.items():
        tokens = [g.tokens_per_s for g in members]
        memory = [g.peak_memory_bytes for g in members if g.peak_memory_bytes is not None]
        price, currency, note = listed_price(listings, provider, {g.host for g in members})
        rows.append(JobRow(
            config=config, provider=provider, variant=variant, gpus=len(members),
            hosts=len({g.host for g in members}), results=sum(g.results for g in members),
            tokens_per_s=statistics.median(tokens), min_tokens_per_s=min(tokens),
            max_tokens_per_s=max(tokens),
            tflops=statistics.median(g.tflops for g in members),
            tflops_causal=statistics.median(g.tflops_causal for g in members),
            mfu=_median([g.mfu for g in members]),
            peak_tflops=_median([g.peak_tflops for g in members]),
            gbs=_median([g.gbs for g in members]),
            hbm_share=_median([g.hbm_share for g in members]),
            copy_share=_median([g.copy_share for g in members]),
            peak_memory_bytes=max(memory) if memory else None,
            matmul_tflops=_median([g.matmul_tflops for g in members]),
            kept=_median([g.kept for g in members]),
            matmul_gpus=sum(g.matmul_tflops is not None for g in members),
            sync_tokens_per_s=sync_tokens_per_s(members), price_per_gpu_hour=price,
            currency=currency, prices_note=note,
            matmul_config="; ".join(sorted({g.matmul_config for g in members
                                            if g.matmul_config})) or None))
    return _ranked(rows)


def _ranked(rows: list[JobRow]) -> list[JobRow]:
    markets: dict[tuple[JobConfig, str | None], list[JobRow]] = defaultdict(list)
    for row in rows:
        markets[(row.config, row.currency)].append(row)
    ranked: list[JobRow] = []
    for (_, currency), members in markets.items():
        if currency is None:
            ranked += members
            continue
        members.sort(key=lambda r: (r.cost_per_million_tokens or float("inf"), r.provider,
                                    r.variant))
        ranked += [replace(row, rank=i + 1) for i, row in enumerate(members)]
    ranked.sort(key=lambda r: (r.config.order(), r.currency is None, r.currency or "",
                               r.cost_per_million_tokens or float("inf"), -r.tokens_per_s,
                               r.provider, r.variant))
    return ranked
