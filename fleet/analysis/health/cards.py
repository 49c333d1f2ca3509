"""Cards that are failing, or have been: the health finding.

The verdict is drawn on the host, by the rule in agent/health/card.py, from the counters the
driver keeps (ECC errors, remapped rows or retired pages, PCIe replays and the link
under load, throttle time by reason); every document carries that rule in words
(`Health.rule`). The report does not judge again: it names every GPU whose verdict is
not healthy, with the reasons the agent gave.

    health = fleet_health(data.gpus)

- `failing` and `degraded`: one finding per GPU, each with its reasons and the action the
  agent's verdict asks of the provider (issue 36): nothing, a reset, a drain and reset, or
  a replacement (NVIDIA's RMA criteria). Stored before the action was judged: none said.
- `unknown` (the driver could not tell): one finding per provider, naming its hosts and
  the reasons given. The driver's silence comes from how the provider set the card up (a
  vGPU guest sees no ECC or remap counters; a driver too old for them), so it is the same
  on every GPU of the provider's image: per GPU, it would be one fact repeated a thousand
  times in a large fleet and bury the failing cards; per host, still hundreds. Per
  provider it is said once, and still names every host it rests on, which is what a
  buyer takes to the provider.
- `not read` (stored by an agent older than the health counters): counted, shown in the
  fleet as found, never a finding and never healthy: the fix is ours (probe again with
  this agent), not the provider's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from agent.health.card import LINK_REASON
from fleet.words import counted

NOT_READ = "not read"
UNWELL = ("failing", "degraded")  # worst first
# The agent's actions (agent/health/card.py ACTIONS) as the report asks for them.
ASKS = {"reset": "ask the provider to reset it",
        "drain_and_reset": "ask the provider to drain the node and reset it",
        "replace": "ask the provider to replace it"}
# Named in a finding about a provider's unknown health; the rest are counted.
HOSTS_NAMED = 8


@dataclass(frozen=True)
class UnwellGpu:
    """A GPU whose verdict is failing or degraded, and why."""

    provider: str
    host: str
    gpu_index: int
    variant: str
    verdict: str  # "failing" or "degraded"
    reasons: tuple[str, ...]
    action: str | None = None  # agent/health/card.py ACTIONS; None: stored without one

    @property
    def ask(self) -> str | None:
        """What to ask the provider for, in words; None where nothing is asked."""
        return ASKS.get(self.action or "")

    @property
    def evidence(self) -> str:
        """The agent's reasons, as one line."""
        return "; ".join(self.reasons) if self.reasons else "the agent gave no reason"


@dataclass(frozen=True)
class UnknownHealth:
    """A provider's GPUs whose driver could not tell whether they are well."""

    provider: str
    gpus: int
    hosts: tuple[str, ...]  # sorted
    reasons: tuple[str, ...]  # the distinct reasons given, most GPUs first

    @property
    def evidence(self) -> str:
        """Which hosts, and what the agent said of them."""
        named = ", ".join(self.hosts[:HOSTS_NAMED])
        if len(self.hosts) > HOSTS_NAMED:
            named += f" and {len(self.hosts) - HOSTS_NAMED} more"
        said = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        return (f"the driver could not tell on {named}{said}; unknown is never taken for "
                "healthy")

    @property
    def title(self) -> str:
        """How many GPUs on how many hosts."""
        return (f"health unknown on {counted(self.gpus, 'GPU')} of "
                f"{counted(len(self.hosts), 'host')}")


@dataclass(frozen=True)
class HealthCounts:
    """One provider's GPUs by verdict."""

    provider: str
    healthy: int = 0
    degraded: int = 0
    failing: int = 0
    unknown: int = 0
    not_read: int = 0

    @property
    def gpus(self) -> int:
        """Every GPU of the provider in the fleet as found."""
        return self.healthy + self.degraded + self.failing + self.unknown + self.not_read


@dataclass(frozen=True)
class FleetHealth:
    """The fleet's health as found: the GPUs that are not well, the providers whose
    drivers could not tell, and every provider's counts."""

    unwell: tuple[UnwellGpu, ...] = ()  # failing first, then degraded; by provider, host
    unknown: tuple[UnknownHealth, ...] = ()  # one per provider
    counts: tuple[HealthCounts, ...] = ()  # by provider

    @property
    def findings(self) -> int:
        """How many health findings the report lists (what `--fail-on health` counts)."""
        return len(self.unwell) + len(self.unknown)

    @property
    def not_read(self) -> int:
        """GPUs stored without health counters."""
        return sum(c.not_read for c in self.counts)


def told_elsewhere(health: FleetHealth, named: set[tuple[str, str, int]]) -> FleetHealth:
    """`health` without the findings of GPUs degraded for nothing but a host link that ran
    below its maximum, where the host-link finding (fleet/analysis/node/hostlink.py) already
    names them by (provider, host, GPU index): one cause, one finding. They still count
    as degraded in the table."""
    kept = tuple(g for g in health.unwell
                 if not (g.verdict == "degraded" and (g.provider, g.host, g.gpu_index) in named
                         and g.reasons
                         and all(r.startswith(LINK_REASON) for r in g.reasons)))
    return replace(health, unwell=kept)


def _reasons(value: Any) -> tuple[str, ...]:
    return tuple(str(r) for r in value) if isinstance(value, list | tuple) else ()


def _actions(gpus: pd.DataFrame) -> pd.Series:
    """Each GPU's stored action (None where not stored: an older agent, or a frame built
    without the column)."""
    if "health_action" not in gpus:
        return pd.Series([None] * len(gpus), index=gpus.index, dtype=object)
    column = gpus["health_action"].astype(object)
    return column.where(column.notna(), None)


def fleet_health(gpus: pd.DataFrame) -> FleetHealth:
    """The health of `gpus` (the fleet as found, `Dataset.gpus`: provider, host,
    gpu_index, variant, health and health_reasons per GPU)."""
    if gpus.empty:
        return FleetHealth()
    present = gpus["health"].notna()
    verdicts = gpus["health"].astype(object).where(present, NOT_READ).astype(str)
    providers = gpus["provider"].astype(str)
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    for (provider, verdict), n in Counter(zip(providers.tolist(), verdicts.tolist(),
                                              strict=True)).items():
        tally[provider][verdict] += n
    # Only the GPUs named below are walked one by one: most of a fleet is healthy.
    named = verdicts.isin([*UNWELL, "unknown"]).to_numpy()
    rows = zip(providers[named].tolist(), gpus["host"][named].astype(str).tolist(),
               gpus["gpu_index"][named].astype(int).tolist(),
               gpus["variant"][named].astype(str).tolist(), verdicts[named].tolist(),
               gpus["health_reasons"][named].astype(object).tolist(),
               _actions(gpus)[named].tolist(), strict=True)
    unwell: list[UnwellGpu] = []
    unknown_gpus: dict[str, Counter[str]] = defaultdict(Counter)  # provider -> host -> GPUs
    unknown_reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for provider, host, index, variant, verdict, reasons, action in rows:
        if verdict == "unknown":
            unknown_gpus[provider][host] += 1
            unknown_reasons[provider].update(_reasons(reasons))
        else:
            unwell.append(UnwellGpu(provider, host, index, variant, verdict,
                                    _reasons(reasons), action))
    unwell.sort(key=lambda g: (UNWELL.index(g.verdict), g.provider, g.host, g.gpu_index))
    unknown = [UnknownHealth(provider, sum(hosts.values()), tuple(sorted(hosts)),
                             tuple(r for r, _ in sorted(unknown_reasons[provider].items(),
                                                        key=lambda kv: (-kv[1], kv[0]))))
               for provider, hosts in sorted(unknown_gpus.items())]
    counts = [HealthCounts(provider, c["healthy"], c["degraded"], c["failing"], c["unknown"],
                           c[NOT_READ])
              for provider, c in sorted(tally.items())]
    return FleetHealth(tuple(unwell), tuple(unknown), tuple(counts))
