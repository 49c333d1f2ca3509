"""A sweep against its own past: regressions, configuration changes, health news, new
mismatches, hosts gone or new, and the TFLOP/s series the report charts.

Pure functions over `Night`s (one sweep run each, read from the store by
`fleet.analysis.sweep.nights.read_nights`), returning dataclasses; nothing here touches a database.

The regression rule (a GPU slower than its own past beyond its own measured noise):
for one GPU and one benchmark configuration, take its per-night medians over the previous
`window` nights (at least `min_history` of them, else no verdict). With `centre` their
median and `noise` = 1.4826 x their MAD (the MAD scaled to a standard deviation for normal
data, robust to the odd bad night), tonight is a regression when

    tonight < centre - max(k x noise, min_relative x centre)

k = 4 keeps a GPU's normal night-to-night wobble out (a GPU's repeat spread on the H100 and
H200 we measured was 0.6-1.5%, bench/RESULTS.md); `min_relative` = 3% keeps a GPU whose
past nights happened to agree to 0.1% from alarming on a 0.5% dip that no buyer cares
about. `min_history` = 5: the lent H100s settle at one of two operating points up to ~4%
apart from one run to the next (bench/records/2026-11-23-harness-1.1.0.md, "Why the misses": card
B at 665.5 TFLOP/s in one and 693.9 in the other). Three nights all on the upper point
are common, and give a tight median and MAD that the first night on the lower point falls
under by more than 3%; five make it likelier that both points have shown, and where the
lower one makes up a good share of the nights the MAD carries it. Where it has shown on
fewer than half of them the MAD (which by design ignores up to half the values) does
not, and such a night can still read as a regression, which is why every result carries
its operating point (clock and power) beside it. A regression that lasts is reported
every night it lasts, marked new only on the night it began (nights the GPU was not
measured, a host that failed or a fingerprint-only night, neither begin nor end it); once
most of the window is slow, slow is the GPU's new normal.

And tonight must also fall below the centre by more than repeat runs of the card could
(issue #31): by more than t975(dof) x sqrt((pi/2) x sd_past^2 / n + sd_tonight^2) x centre,
with sd a night's stored relative run-to-run sd (its results' `repeat_sd`, else the
variant's measured spread; agent/timing/repeat.py), sd_past the median over the n past nights
(pi/2: the centre is their median, not their mean), and dof what agent/timing/repeat.py gives a
card with those n nights of history (the variant's spread worth the dof it was measured
over, pooled with n - 1). A steady card's margin (1.4% on an H100 at its 0.57%, five
nights) is under the
3%; a card that states a repeat sd of 2% (one switching between operating points)
needs a drop of 5.3% before it alarms.

Configuration changes and mismatches compare a host with its own newest earlier night on
which it stored a document (a night it failed has nothing to compare); hosts gone or new
compare with the previous sweep's hosts.

Health news compares a GPU with the same card on that same earlier night: a verdict that
changed (healthy -> degraded, or back after a reset), an action that changed (none ->
reset: what to ask the provider for), and each counter of HEALTH_NEWS that
rose. Those count harm: ECC errors, remapped rows, retired pages, PCIe replays, and time
the clocks were held down for temperature or reliability. Counters that rise with use
alone (energy, time at the power cap: every night's benchmark adds to them) are never
news; a volatile counter that fell was reset with the driver, which is no news either; a
night stored without health counters (an older agent) compares with nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.timing import repeat, stats
from fleet.findings.kinds import NEWS_KINDS

MAD_TO_SIGMA = 1.4826
# Variance of the median of many independent normal values over that of their mean.
MEDIAN_VARIANCE = math.pi / 2
# Fingerprint columns whose change between two nights is news to the buyer.
CONFIG_FIELDS = ("uuid", "variant", "driver_version", "cuda_driver_version", "vbios_version",
                 "power_limit_w", "max_sm_clock_mhz", "max_mem_clock_mhz", "memory_total_mib",
                 "virtualization_mode", "mig_enabled", "ecc_enabled", "pcie_gen_max",
                 "pcie_width_max", "nvlink_links_active")
# Read off the night's results rather than the fingerprint: the software stack (torch,
# CUDA runtime, cuBLAS) the GPU was measured on. A new image's stack is a change on the
# night it arrived, beside any regression it brings, rather than a new series that would
# need five nights of history before it could regress.
RESULT_FIELDS = ("software_stack",)
# The host's limits and the versions a provider patches (fleet/store/host_storage.py's
# columns): a change between two nights is news too (issue 58).
HOST_FIELDS = ("cpus_available", "memory_available_mib", "shm_bytes", "memlock_bytes",
               "governor", "container_toolkit", "fabric_manager")
POWER_TOLERANCE_W = 1.0  # NVML reports milliwatts; a rounding wobble is no change
# The kinds of news a night can have, as the registry orders them (fleet/findings/kinds.py).
FAIL_KINDS = NEWS_KINDS
# Health counters (as fleet/store/ingest.py stores them) whose rise is news, in the order
# told; and the throttle reasons (throttle_<reason>_ns) whose time is. NVML names its
# reasons "thermal", "reliability", "power", "sync_boost", ...: any reason naming heat or
# reliability counts, so that a driver's "hw_thermal" does too.
HEALTH_NEWS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate",
               "ecc_corrected_volatile", "ecc_corrected_aggregate", "remapped_uncorrectable",
               "remapped_correctable", "remapped_pending", "remapped_failure",
               "retired_double_bit", "retired_single_bit", "retired_pending", "pcie_replays")
THROTTLE_NEWS = ("thermal", "reliability")


@dataclass(frozen=True)
class RegressionRule:
    """When a GPU has regressed: `k` times the noise and `min_relative` below its median."""

    k: float = 4.0
    min_relative: float = 0.03
    min_history: int = 5  # see the module's docstring: two operating points ~4% apart
    window: int = 10


@dataclass(frozen=True)
class GpuState:
    """One GPU on one night: its fingerprint's compared fields and its TFLOP/s."""

    index: int
    uuid: str | None
    variant: str
    config: Mapping[str, Any]
    tflops: Mapping[str, float] = field(default_factory=dict)  # benchmark label -> median
    health: str | None = None  # the verdict; None: stored without health counters
    counters: Mapping[str, Any] | None = None  # the stored health counters
    # benchmark label -> median relative run-to-run sd of its results (their repeat
    # intervals'); a label missing: none stored (cool-start, older rows)
    repeat_sd: Mapping[str, float] = field(default_factory=dict)
    action: str | None = None  # what the buyer asks for (issue 36); None: not said

    @property
    def key(self) -> str:
        """The GPU's key across nights: its UUID, else its index."""
        return f"uuid:{self.uuid}" if self.uuid else f"index:{self.index}"


@dataclass(frozen=True)
class HostNight:
    """One host on one night: whether it was stored, its GPUs, and its mismatches."""

    provider: str
    host: str
    status: str  # "stored" or "failed"
    gpus: tuple[GpuState, ...] = ()
    mismatches: tuple[str, ...] | None = None  # None: nothing listed, or no document
    # The host's limits and versions (HOST_FIELDS, from host_limits: issue 58); None: a
    # document without them, which says nothing of a change.
    limits: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        """The host's key across nights: provider/host."""
        return f"{self.provider}/{self.host}"


@dataclass(frozen=True)
class Night:
    """One sweep run: its id, start, and its hosts by provider/host."""

    run_id: int
    started_at: dt.datetime
    hosts: Mapping[str, HostNight]  # by provider/host


@dataclass(frozen=True)
class Regression:
    """A GPU measured below its past nights' median by more than the rule allows."""

    provider: str
    host: str
    gpu_index: int
    gpu_uuid: str | None
    benchmark: str
    tflops: float
    baseline: float  # median of the past nights
    threshold: float  # below this is a regression
    noise: float  # 1.4826 x MAD of the past nights
    repeat_margin: float  # relative: how far below the baseline repeat runs could fall
    past_nights: int
    began_run_id: int
    began_at: dt.datetime
    new: bool  # began tonight

    @property
    def drop(self) -> float:
        """How far below its baseline the GPU is: 0.1 is 10% below."""
        return 1.0 - self.tflops / self.baseline

    def describe(self) -> str:
        """One line for the buyer: the GPU, its TFLOP/s, the drop, and since when."""
        since = "" if self.new else f" (since run #{self.began_run_id})"
        return (f"{self.provider}/{self.host} GPU {self.gpu_index}: {self.tflops:.1f} TFLOP/s, "
                f"{self.drop:.1%} below its median {self.baseline:.1f} of {self.past_nights} "
                f"nights (threshold {self.threshold:.1f}, noise {self.noise:.2f}, repeat "
                f"margin {self.repeat_margin:.1%}){since}")


@dataclass(frozen=True)
class ConfigChange:
    """A compared field of a host or GPU that changed since the night before."""

    provider: str
    host: str
    gpu_index: int | None  # None: the host as a whole (its GPU count)
    field: str
    before: Any
    after: Any
    since_run_id: int  # the earlier night compared with

    def describe(self) -> str:
        """One line: where, which field, before -> after."""
        where = "" if self.gpu_index is None else f" GPU {self.gpu_index}"
        return f"{self.provider}/{self.host}{where}: {self.field} {self.before} -> {self.after}"


@dataclass(frozen=True)
class HealthNews:
    """A GPU's health verdict that changed, or a health counter that rose, since the same
    card's earlier night."""

    provider: str
    host: str
    gpu_index: int
    counter: str  # "health" for the verdict, "action" for what to ask the provider for
    before: Any
    after: Any
    since_run_id: int  # the earlier night compared with

    def describe(self) -> str:
        """One line: the GPU, the counter, last night's value -> tonight's."""
        return (f"{self.provider}/{self.host} GPU {self.gpu_index}: {self.counter} "
                f"{self.before} -> {self.after}")


@dataclass(frozen=True)
class NewMismatch:
    """A mismatch with the inventory that the host did not have on its last stored night."""

    provider: str
    host: str
    problem: str

    def describe(self) -> str:
        """One line: the host and the mismatch."""
        return f"{self.provider}/{self.host}: {self.problem}"


@dataclass(frozen=True)
class Findings:
    """What one night (sweep run) shows against the nights before it."""

    run_id: int
    started_at: dt.datetime
    previous_run_id: int | None
    regressions: tuple[Regression, ...] = ()
    changes: tuple[ConfigChange, ...] = ()
    mismatches: tuple[NewMismatch, ...] = ()
    gone: tuple[str, ...] = ()
    new: tuple[str, ...] = ()
    health: tuple[HealthNews, ...] = ()

    @property
    def new_regressions(self) -> tuple[Regression, ...]:
        """The regressions that began tonight."""
        return tuple(r for r in self.regressions if r.new)

    def kinds(self) -> set[str]:
        """Which of FAIL_KINDS tonight has news of (a lasting regression is not news)."""
        found = set()
        if self.new_regressions:
            found.add("regression")
        if self.mismatches:
            found.add("mismatch")
        if self.changes:
            found.add("change")
        if self.gone:
            found.add("gone")
        if self.health:
            found.add("health")
        return found

    def as_dict(self) -> dict[str, Any]:
        """The findings as JSON-ready values: datetimes as ISO 8601 text."""
        data = asdict(self)
        data["started_at"] = self.started_at.isoformat()
        for item in data["regressions"]:
            item["began_at"] = item["began_at"].isoformat()
        return data


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


@dataclass(frozen=True)
class Measured:
    """One GPU's figure for one benchmark on one night, with its run-to-run sd."""

    tflops: float
    sd: float  # relative: the stored repeat sd, else the variant's spread
    variant: str


def _gpu_series(nights: Sequence[Night]) -> dict[tuple[str, str, str], list[Measured | None]]:
    """TFLOP/s by (host, GPU, benchmark), one slot per night (None: not measured)."""
    series: dict[tuple[str, str, str], list[Measured | None]] = {}
    for i, night in enumerate(nights):
        for host in night.hosts.values():
            for gpu in host.gpus:
                for label, value in gpu.tflops.items():
                    slots = series.setdefault((host.key, gpu.key, label), [None] * len(nights))
                    sd = gpu.repeat_sd.get(label)
                    slots[i] = Measured(value, sd if sd is not None else
                                        repeat.variant_spread(gpu.variant)[0].sd, gpu.variant)
    return series


@dataclass(frozen=True)
class Verdict:
    """Why night i is a regression: the figures of the module's rule."""

    baseline: float
    threshold: float
    noise: float
    repeat_margin: float
    nights: int


def repeat_margin(past: Sequence[Measured], tonight: Measured) -> float:
    """How far below the past nights' median a repeat run of the card could fall (95%,
    relative): the module docstring's t975(dof) x sqrt((pi/2) x sd_past^2 / n + sd^2)."""
    spread, _ = repeat.variant_spread(tonight.variant)
    _, dof = repeat.pooled_sd(spread, [m.tflops for m in past])
    sd_past = _median([m.sd for m in past])
    return stats.t975(dof) * math.sqrt(MEDIAN_VARIANCE * sd_past ** 2 / len(past)
                                       + tonight.sd ** 2)


def _verdict(values: Sequence[Measured | None], i: int, rule: RegressionRule
             ) -> Verdict | None:
    """The figures when night i is a regression, else None."""
    tonight = values[i]
    if tonight is None:
        return None
    past = [v for v in values[max(0, i - rule.window):i] if v is not None]
    if len(past) < rule.min_history:
        return None
    centre = _median([m.tflops for m in past])
    noise = MAD_TO_SIGMA * _median([abs(m.tflops - centre) for m in past])
    margin = repeat_margin(past, tonight)
    threshold = centre - max(rule.k * noise, rule.min_relative * centre, margin * centre)
    return (Verdict(centre, threshold, noise, margin, len(past)) if tonight.tflops < threshold
            else None)


def _regressions(nights: Sequence[Night], i: int, rule: RegressionRule
                 ) -> tuple[Regression, ...]:
    found = []
    night = nights[i]
    for (host_key, gpu_key, label), values in sorted(_gpu_series(nights[:i + 1]).items()):
        verdict = _verdict(values, i, rule)
        if verdict is None:
            continue
        began = i
        # Back over the nights it was slow, stepping over nights it was not measured.
        earlier = began - 1
        while earlier >= 0:
            if values[earlier] is None:
                earlier -= 1
            elif _verdict(values, earlier, rule) is not None:
                began, earlier = earlier, earlier - 1
            else:
                break
        host = night.hosts[host_key]
        gpu = next(g for g in host.gpus if g.key == gpu_key)
        found.append(Regression(
            host.provider, host.host, gpu.index, gpu.uuid, label, gpu.tflops[label],
            verdict.baseline, verdict.threshold, verdict.noise, verdict.repeat_margin,
            verdict.nights, nights[began].run_id, nights[began].started_at, began == i))
    return tuple(found)


def _differs(name: str, before: Any, after: Any) -> bool:
    if name == "power_limit_w" and before is not None and after is not None:
        return bool(abs(float(before) - float(after)) > POWER_TOLERANCE_W)
    return bool(before != after)


def _config_changes(host: HostNight, earlier: HostNight, run_id: int
                    ) -> list[ConfigChange]:
    changes = []
    if len(host.gpus) != len(earlier.gpus):
        changes.append(ConfigChange(host.provider, host.host, None, "gpu_count",
                                    len(earlier.gpus), len(host.gpus), run_id))
    if host.limits is not None and earlier.limits is not None:
        changes += [ConfigChange(host.provider, host.host, None, name,
                                 earlier.limits.get(name), host.limits.get(name), run_id)
                    for name in HOST_FIELDS
                    if earlier.limits.get(name) != host.limits.get(name)]
    before = {g.index: g for g in earlier.gpus}
    for gpu in host.gpus:
        old = before.get(gpu.index)
        if old is None:
            continue
        for name in (*CONFIG_FIELDS, *RESULT_FIELDS):
            was, now = old.config.get(name), gpu.config.get(name)
            if name in RESULT_FIELDS and (was is None or now is None):
                continue  # a night without results says nothing of the stack
            if _differs(name, was, now):
                changes.append(ConfigChange(host.provider, host.host, gpu.index, name, was,
                                            now, run_id))
    return changes


def _news_counters(counters: Mapping[str, Any]) -> list[str]:
    throttled = sorted(name for name in counters
                       if name.startswith("throttle_") and name.endswith("_ns")
                       and any(word in name for word in THROTTLE_NEWS))
    return [*(name for name in HEALTH_NEWS if name in counters), *throttled]


def _health_news(host: HostNight, earlier: HostNight, run_id: int) -> list[HealthNews]:
    news = []
    before = {g.index: g for g in earlier.gpus}
    for gpu in host.gpus:
        old = before.get(gpu.index)
        if old is None or old.uuid != gpu.uuid:
            continue  # another card at that index: its counters are its own
        if old.health is not None and gpu.health is not None and old.health != gpu.health:
            news.append(HealthNews(host.provider, host.host, gpu.index, "health", old.health,
                                   gpu.health, run_id))
        # A change of what to ask the provider for is news even where the verdict held
        # (degraded for a pending remap, then degraded for a drain).
        if old.action is not None and gpu.action is not None and old.action != gpu.action:
            news.append(HealthNews(host.provider, host.host, gpu.index, "action", old.action,
                                   gpu.action, run_id))
        if old.counters is None or gpu.counters is None:
            continue
        for name in _news_counters(gpu.counters):
            was, now = old.counters.get(name), gpu.counters[name]
            if was is not None and now is not None and int(now) > int(was):
                news.append(HealthNews(host.provider, host.host, gpu.index, name, was, now,
                                       run_id))
    return news


def _last_stored(nights: Sequence[Night], i: int, key: str) -> tuple[HostNight, int] | None:
    for night in reversed(nights[:i]):
        host = night.hosts.get(key)
        if host is not None and host.status == "stored":
            return host, night.run_id
    return None


def compare_night(nights: Sequence[Night], i: int = -1,
                  rule: RegressionRule | None = None) -> Findings:
    """Night `i` (default: the newest) against the nights before it, oldest first."""
    rule = rule or RegressionRule()
    i = i % len(nights)
    night = nights[i]
    previous = nights[i - 1] if i > 0 else None
    changes: list[ConfigChange] = []
    mismatches: list[NewMismatch] = []
    health: list[HealthNews] = []
    for key, host in sorted(night.hosts.items()):
        if host.status != "stored":
            continue
        earlier = _last_stored(nights, i, key)
        if earlier is not None:
            changes += _config_changes(host, *earlier)
            health += _health_news(host, *earlier)
        before = set(earlier[0].mismatches or ()) if earlier is not None else set()
        mismatches += [NewMismatch(host.provider, host.host, problem)
                       for problem in host.mismatches or () if problem not in before]
    before_hosts = set(previous.hosts) if previous is not None else set()
    return Findings(
        night.run_id, night.started_at, previous.run_id if previous else None,
        _regressions(nights, i, rule), tuple(changes), tuple(mismatches),
        tuple(sorted(before_hosts - set(night.hosts))),
        tuple(sorted(set(night.hosts) - before_hosts)), tuple(health))


def findings_by_night(nights: Sequence[Night], rule: RegressionRule | None = None
                      ) -> list[Findings]:
    """Every night's findings, oldest first: the night each change began."""
    return [compare_night(nights, i, rule) for i in range(len(nights))]


@dataclass(frozen=True)
class SeriesPoint:
    """One GPU's (or, with gpu_index None, one provider's median) TFLOP/s on one night."""

    run_id: int
    started_at: dt.datetime
    provider: str
    host: str | None
    gpu_index: int | None
    gpu_uuid: str | None
    variant: str
    benchmark: str
    tflops: float
    gpus: int = 1  # how many GPUs a provider point is the median of


def tflops_series(nights: Sequence[Night]) -> list[SeriesPoint]:
    """Per GPU, then per provider and variant (median over its GPUs), TFLOP/s per night:
    what the report's history chart draws, beside `findings_by_night` for the changes."""
    points: list[SeriesPoint] = []
    for night in nights:
        by_provider: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for host in night.hosts.values():
            for gpu in host.gpus:
                for label, value in sorted(gpu.tflops.items()):
                    points.append(SeriesPoint(night.run_id, night.started_at, host.provider,
                                              host.host, gpu.index, gpu.uuid, gpu.variant,
                                              label, value))
                    by_provider[(host.provider, gpu.variant, label)].append(value)
        for (provider, variant, label), values in sorted(by_provider.items()):
            points.append(SeriesPoint(night.run_id, night.started_at, provider, None, None,
                                      None, variant, label, _median(values), len(values)))
    return points
