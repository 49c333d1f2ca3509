"""What a report rests on, read from the store once: each host's latest state and each
GPU's measurements, reduced to per-GPU medians.

The unit of evidence is a GPU, not a run (DESIGN.md, "Comparing providers honestly"):
every result of one GPU under one benchmark configuration becomes one number, the median
of its results' TFLOP/s, with the telemetry that explains it. Host facts (listing,
fingerprint) come from the newest document of each host in scope, judged against the
listing the inventory gave when that document was collected.

Two hosts whose documents in one probe or sweep named the same GPUs (by UUID, else
serial) are one machine listed twice, or were measured on the same cards at the same
moment: the pair is a finding of its own (`SharedHosts`), and the results both hosts
stored in that run are kept out of every measure (`Excluded`), so that no provider
statistic counts contended figures, or one card twice (fleet/analysis/duplicates.py).
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import combinations
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, Select, Text, cast, select

from fleet.document import AgentDocument, read_stored
from fleet.store.ingest import variant_of
from fleet.store.models import (
    BenchmarkResult,
    Document,
    Fingerprint,
    Gpu,
    Host,
    HostError,
    ProbeRun,
    Provider,
    RunHost,
)
from fleet.store.query import in_chunks, software_stack

if TYPE_CHECKING:
    AnySelect = Select[*tuple[Any, ...]]

POWER_CAP_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
# The stack of a Config when the report compares across software stacks (--across-stacks):
# each GPU's own stack is then a difference a gap lists, not a reason to split.
ACROSS_STACKS = "any software stack"


@dataclass(frozen=True)
class Scope:
    """The report's filters. Times compare with when the agent collected."""

    sweep: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    providers: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    runs: tuple[int, ...] = ()  # probe runs, by id (the report at the end of a probe)

    def describe(self) -> str:
        parts = []
        if self.runs:
            parts.append("probe run " + ", ".join(map(str, self.runs)))
        if self.sweep:
            parts.append(f"sweep {self.sweep}")
        if self.since:
            parts.append(f"since {self.since:%Y-%m-%d %H:%M} UTC")
        if self.until:
            parts.append(f"until {self.until:%Y-%m-%d %H:%M} UTC")
        if self.providers:
            parts.append("providers " + ", ".join(self.providers))
        if self.variants:
            parts.append("variants " + ", ".join(self.variants))
        return "; ".join(parts) or "everything stored"


@dataclass(frozen=True, order=True)
class Config:
    """A benchmark configuration: results under different ones are never compared.

    The thermal state is part of it (a soaked figure and a cool-start one differ by the
    card's heating, 0.2-1.2% on the lent H100s and H200: DESIGN.md, "Thermal soak"), and
    so is the software stack (cuBLAS picks kernels by version), unless the report was
    asked to compare across stacks (then `stack` is ACROSS_STACKS).
    """

    dtype: str
    m: int
    n: int
    k: int
    mode: str
    cache: str
    concurrency: str
    harness_version: str
    thermal: str  # "soaked" or "cool-start" (every result before harness 1.3)
    stack: str  # fleet.store.query.software_stack, or ACROSS_STACKS

    @property
    def label(self) -> str:
        size = f"{self.m}³" if self.m == self.n == self.k else f"{self.m}×{self.n}×{self.k}"
        return (f"{size} {self.dtype}, {self.mode}, {self.thermal}, {self.cache} L2, "
                f"{self.concurrency} (harness {self.harness_version}; {self.stack})")


@dataclass(frozen=True)
class Listing:
    expect: dict[str, Any] | None
    price_per_gpu_hour: float | None
    currency: str | None
    tags: tuple[str, ...]

    @property
    def label(self) -> str:
        """What was bought, in the listing's words: "H100 SXM5 80GB", "A100 80GB"..."""
        expect = self.expect or {}
        if expect.get("variant"):
            return str(expect["variant"])
        words = [str(expect[key]) for key in ("family", "form_factor") if expect.get(key)]
        if expect.get("memory_gb"):
            words.append(f"{expect['memory_gb']}GB")
        return " ".join(words) or "not listed"

    @property
    def names_hardware(self) -> bool:
        """Whether the listing says what was bought (variant, family, form factor or
        memory): listings that say only a GPU count or a power limit are not one offer,
        and hosts under them are not grouped as one."""
        expect = self.expect or {}
        return any(expect.get(key) for key in ("variant", "family", "form_factor",
                                               "memory_gb"))


@dataclass(frozen=True)
class HostState:
    """A host's newest document in scope, and what its listing said then."""

    provider: str
    host: str
    sweep: str | None
    collected_at: dt.datetime
    document: AgentDocument
    listing: Listing


@dataclass(frozen=True)
class HostFailure:
    """A host whose newest attempt in scope sent no document."""

    provider: str
    host: str
    sweep: str | None
    when: dt.datetime
    stage: str
    message: str


@dataclass(frozen=True)
class GpuMeasure:
    """One GPU under one configuration: the median of its results, and what explains it."""

    provider: str
    host: str
    gpu: str  # stable across probes: the store's GPU identity
    gpu_index: int
    variant: str
    config: Config
    tflops: float
    results: int
    sm_clock_mhz: float | None
    power_w: float | None
    power_capped_share: float | None  # share of telemetry samples under a power cap
    power_limit_w: float | None
    driver_version: str | None
    virtualization_mode: str | None
    flags: tuple[str, ...]
    first: dt.datetime
    last: dt.datetime
    # Soaked results: medians over the GPU's results of the level of the first 20 s of
    # load and of the drop from it to the soaked level (1 - soaked / first 20 s).
    first_20s_tflops: float | None = None
    drop: float | None = None
    # Under load: the soak's median while measuring, else the telemetry's hottest sample.
    temperature_c: float | None = None
    stack: str = ""  # the software stack(s) the GPU's results were measured on

    @property
    def name(self) -> str:
        return f"{self.host} GPU {self.gpu_index}"


@dataclass(frozen=True)
class Excluded:
    provider: str
    host: str
    gpu_index: int
    variant: str
    results: int
    reason: str


@dataclass(frozen=True)
class SharedHosts:
    """Two hosts (`host` the first by name) that answered with the same GPUs in one
    probe or sweep run; `gpus` are "uuid:..." or "serial:...", empty when anonymized."""

    provider: str
    host: str
    other_provider: str
    other_host: str
    gpu_count: int
    gpus: tuple[str, ...]
    runs: tuple[int, ...]


# Why a shared host's results are left out; it names no host, so that an anonymized
# report can keep it as it is.
SHARED_REASON = ("measured in a run where another host answered with the same GPUs "
                 "(see its duplicate finding)")


@dataclass(frozen=True)
class Dataset:
    scope: Scope
    hosts: tuple[HostState, ...]
    failures: tuple[HostFailure, ...]
    measures: tuple[GpuMeasure, ...]
    excluded: tuple[Excluded, ...]
    runs: int
    first: dt.datetime | None
    last: dt.datetime | None
    shared: tuple[SharedHosts, ...] = ()


FLAG_COLUMNS = ("power_capped", "thermal_throttled", "hw_slowdown", "contended",
                "not_steady", "clocks_locked", "not_soaked")


def _where_runs(stmt: AnySelect, scope: Scope) -> AnySelect:
    if scope.sweep is not None:
        stmt = stmt.where(ProbeRun.sweep == scope.sweep)
    if scope.providers:
        stmt = stmt.where(Provider.name.in_(scope.providers))
    if scope.runs:
        stmt = stmt.where(ProbeRun.id.in_(scope.runs))
    return stmt


def _within(when: dt.datetime, scope: Scope) -> bool:
    return ((scope.since is None or when >= scope.since)
            and (scope.until is None or when <= scope.until))


def _listing(row: Any) -> Listing:
    return Listing(row.expect, row.price_per_gpu_hour, row.currency, tuple(row.tags or ()))


def _host_states(engine: Engine, scope: Scope
                 ) -> tuple[list[HostState], list[HostFailure], int]:
    stmt = _where_runs(
        select(RunHost.id, RunHost.status, RunHost.document_id, RunHost.expect,
               RunHost.price_per_gpu_hour, RunHost.currency, RunHost.tags,
               RunHost.updated_at, RunHost.probe_run_id, RunHost.host_id, Provider.name,
               Host.name.label("host"), ProbeRun.sweep, Document.collected_at)
        .join(ProbeRun, ProbeRun.id == RunHost.probe_run_id)
        .join(Host, Host.id == RunHost.host_id)
        .join(Provider, Provider.id == Host.provider_id)
        .outerjoin(Document, Document.id == RunHost.document_id), scope)
    stored_last: dict[int, Any] = {}  # host id -> its newest stored row
    tried_last: dict[int, Any] = {}  # host id -> its newest row, stored or failed
    runs: set[int] = set()
    with engine.connect() as conn:
        for row in conn.execute(stmt):
            when = _when(row)
            if not _within(when, scope):
                continue
            runs.add(row.probe_run_id)
            for newest, eligible in ((stored_last, row.status == "stored"), (tried_last, True)):
                held = newest.get(row.host_id)
                if eligible and (held is None or when > _when(held)):
                    newest[row.host_id] = row
        stored = list(stored_last.values())
        # As text, validated in one pass by pydantic: twice as fast as decoding JSON and
        # then validating the objects (bench/report_scale.py).
        bodies = {r.id: r.body
                  for ids in in_chunks([row.document_id for row in stored])
                  for r in conn.execute(select(Document.id, cast(Document.body, Text)
                                               .label("body"))
                                        .where(Document.id.in_(ids)))}
        # The report judges a host by its newest document, and says apart that its last
        # attempt failed when it did.
        failed = [row for row in tried_last.values() if row.status != "stored"]
        errors = _errors(conn, failed)
    hosts: list[HostState] = []
    failures = [HostFailure(row.name, row.host, row.sweep, row.updated_at,
                            *errors.get((row.probe_run_id, row.host_id), ("unknown", "")))
                for row in failed]
    failed_hosts = {row.host_id for row in failed}
    for row in stored:
        document = read_stored(row.document_id, bodies[row.document_id])
        if isinstance(document, AgentDocument):
            hosts.append(HostState(row.name, row.host, row.sweep, row.collected_at,
                                   document, _listing(row)))
        elif row.host_id not in failed_hosts:  # its failed attempt already speaks for it
            failures.append(HostFailure(row.name, row.host, row.sweep, row.collected_at,
                                        "stored document", document))
    hosts.sort(key=lambda h: (h.provider, h.host))
    failures.sort(key=lambda f: (f.provider, f.host))
    return hosts, failures, len(runs)


def _when(row: Any) -> dt.datetime:
    return row.collected_at if row.status == "stored" else row.updated_at  # type: ignore[no-any-return]


def _errors(conn: Any, failed: list[Any]) -> dict[tuple[int, int], tuple[str, str]]:
    if not failed:
        return {}
    stmt = (select(HostError.probe_run_id, HostError.host_id, HostError.stage,
                   HostError.message)
            .where(HostError.document_id.is_(None),
                   HostError.probe_run_id.in_({row.probe_run_id for row in failed}))
            .order_by(HostError.id))
    return {(r.probe_run_id, r.host_id): (r.stage, r.message) for r in conn.execute(stmt)}


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _stack(row: Any) -> str:
    return software_stack(row.torch_version, row.cuda_runtime_version, row.cublas_version)


def _shared_hosts(engine: Engine, scope: Scope
                  ) -> tuple[list[SharedHosts], set[tuple[int, str, str]]]:
    """Pairs of hosts whose documents of one run named a GPU in common, and every
    (run, provider, host) of such a pair. Hand ingest is left out: it may load one card's
    history from two hosts it moved between, which is no finding."""
    f, d = Fingerprint, Document
    stmt = _where_runs(
        select(d.probe_run_id, Provider.name.label("provider"), Host.name.label("host"),
               Gpu.uuid, f.serial, d.collected_at)
        .select_from(f)
        .join(d, d.id == f.document_id)
        .join(Gpu, Gpu.id == f.gpu_id)
        .join(Host, Host.id == d.host_id)
        .join(Provider, Provider.id == Host.provider_id)
        .join(ProbeRun, ProbeRun.id == d.probe_run_id)
        .where(ProbeRun.kind != "ingest"), scope)
    holders: dict[tuple[int, str], set[tuple[str, str]]] = defaultdict(set)
    with engine.connect() as conn:
        for row in conn.execute(stmt):
            card = f"uuid:{row.uuid}" if row.uuid else \
                f"serial:{row.serial}" if row.serial else None
            if card is not None and _within(row.collected_at, scope):
                holders[(row.probe_run_id, card)].add((row.provider, row.host))
    gpus: dict[tuple[tuple[str, str], tuple[str, str]], set[str]] = defaultdict(set)
    runs: dict[tuple[tuple[str, str], tuple[str, str]], set[int]] = defaultdict(set)
    contended: set[tuple[int, str, str]] = set()
    for (run_id, card), hosts in holders.items():
        for pair in combinations(sorted(hosts), 2):
            gpus[pair].add(card)
            runs[pair].add(run_id)
        if len(hosts) > 1:
            contended.update((run_id, provider, host) for provider, host in hosts)
    shared = [SharedHosts(a[0], a[1], b[0], b[1], len(cards), tuple(sorted(cards)),
                          tuple(sorted(runs[(a, b)])))
              for (a, b), cards in sorted(gpus.items())]
    return shared, contended


def _measures(engine: Engine, scope: Scope, across_stacks: bool,
              contended: set[tuple[int, str, str]]
              ) -> tuple[list[GpuMeasure], list[Excluded]]:
    r, f = BenchmarkResult, Fingerprint
    stmt = _where_runs(
        select(r.gpu_id, r.probe_run_id, Provider.name.label("provider"),
               Host.name.label("host"),
               r.gpu_index, r.variant, r.dtype, r.m, r.n, r.k, r.mode, r.cache,
               r.concurrency, r.harness_version, r.thermal, r.torch_version,
               r.cuda_runtime_version, r.cublas_version, r.tflops, r.first_20s_tflops,
               r.soak_drop, r.temperature_load_c, r.sm_clock_mhz_median,
               r.power_w_median, r.reason_shares, r.collected_at, r.correctness_failed,
               *(getattr(r, flag) for flag in FLAG_COLUMNS),
               f.power_limit_w, f.driver_version, f.virtualization_mode)
        .join(Provider, Provider.id == r.provider_id)
        .join(Host, Host.id == r.host_id)
        .join(ProbeRun, ProbeRun.id == r.probe_run_id)
        .outerjoin(f, f.id == r.fingerprint_id), scope)
    if scope.variants:
        stmt = stmt.where(r.variant.in_(scope.variants))
    if scope.since is not None:
        stmt = stmt.where(r.collected_at >= scope.since)
    if scope.until is not None:
        stmt = stmt.where(r.collected_at <= scope.until)
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    shared: dict[tuple[str, str, int, str], int] = defaultdict(int)
    with engine.connect() as conn:
        for row in conn.execute(stmt.order_by(r.collected_at, r.id)):
            if (row.probe_run_id, row.provider, row.host) in contended:
                shared[(row.provider, row.host, row.gpu_index, row.variant)] += 1
                continue
            config = Config(row.dtype, row.m, row.n, row.k, row.mode, row.cache,
                            row.concurrency, row.harness_version, row.thermal,
                            ACROSS_STACKS if across_stacks else _stack(row))
            groups[(row.gpu_id, config, row.correctness_failed)].append(row)
    measures: list[GpuMeasure] = []
    excluded = [Excluded(*key, results, SHARED_REASON) for key, results in shared.items()]
    for (gpu_id, config, failed), rows in groups.items():
        last = rows[-1]
        if failed:
            # A result that failed the correctness gate timed a wrong answer.
            excluded.append(Excluded(last.provider, last.host, last.gpu_index, last.variant,
                                     len(rows), "failed the correctness check"))
            continue
        measures.append(GpuMeasure(
            provider=last.provider, host=last.host, gpu=str(gpu_id),
            gpu_index=last.gpu_index, variant=last.variant, config=config,
            tflops=statistics.median(row.tflops for row in rows), results=len(rows),
            sm_clock_mhz=_median(row.sm_clock_mhz_median for row in rows),
            power_w=_median(row.power_w_median for row in rows),
            power_capped_share=_median(
                sum(float((row.reason_shares or {}).get(name, 0.0))
                    for name in POWER_CAP_REASONS) for row in rows),
            power_limit_w=last.power_limit_w, driver_version=last.driver_version,
            virtualization_mode=last.virtualization_mode,
            flags=tuple(flag for flag in FLAG_COLUMNS if any(getattr(row, flag) for row in rows)),
            first=rows[0].collected_at, last=last.collected_at,
            first_20s_tflops=_median(row.first_20s_tflops for row in rows),
            drop=_median(row.soak_drop for row in rows),
            temperature_c=_median(row.temperature_load_c for row in rows),
            stack="; ".join(sorted({_stack(row) for row in rows}))))
    measures.sort(key=lambda m: (m.config, m.variant, m.provider, m.host, m.gpu_index))
    return measures, excluded


def load_dataset(engine: Engine, scope: Scope, across_stacks: bool = False) -> Dataset:
    """What the report rests on; `across_stacks` compares results of different software
    stacks as one configuration (each GPU's stack stays on its measure)."""
    hosts, failures, runs = _host_states(engine, scope)
    if scope.variants:
        hosts = [h for h in hosts if any(variant_of(g) in scope.variants
                                         for g in h.document.gpus)]
    shared, contended = _shared_hosts(engine, scope)
    measures, excluded = _measures(engine, scope, across_stacks, contended)
    times = [h.collected_at for h in hosts] + [m.last for m in measures] + \
        [m.first for m in measures]
    return Dataset(scope, tuple(hosts), tuple(failures), tuple(measures), tuple(excluded),
                   runs, min(times, default=None), max(times, default=None), tuple(shared))


@dataclass(frozen=True)
class Aliases:
    """How an anonymized report names providers ("Provider A"...) and hosts ("A-1"...).

    Letters and numbers are dealt at random for each report, among the providers and
    hosts of the report itself: in the names' sorted order, a reader who knows which
    providers were compared (or a vendor who knows its own hostnames) could undo them.
    Two anonymized reports therefore letter the same provider differently.
    """

    providers: dict[str, str]
    hosts: dict[tuple[str, str], str]

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Aliases:
        deal = random.SystemRandom()
        hosts_of: dict[str, set[str]] = defaultdict(set)
        for provider, host in pairs:
            hosts_of[provider].add(host)
        providers = sorted(hosts_of)
        deal.shuffle(providers)
        letters = {name: _letters(i) for i, name in enumerate(providers)}
        hosts: dict[tuple[str, str], str] = {}
        for provider, names in hosts_of.items():
            ordered = sorted(names)
            deal.shuffle(ordered)
            hosts.update({(provider, host): f"{letters[provider]}-{i + 1}"
                          for i, host in enumerate(ordered)})
        return cls({name: f"Provider {letter}" for name, letter in letters.items()}, hosts)

    def provider(self, name: str) -> str:
        return self.providers.get(name, "(hidden)")

    def host(self, provider: str, name: str) -> str:
        return self.hosts.get((provider, name), "(hidden)")


def named_pairs(data: Dataset) -> set[tuple[str, str]]:
    items: list[HostState | GpuMeasure | HostFailure | Excluded | SharedHosts] = [
        *data.hosts, *data.measures, *data.failures, *data.excluded, *data.shared]
    return {(item.provider, item.host) for item in items} | {
        (s.other_provider, s.other_host) for s in data.shared}


def _hidden_document(document: AgentDocument) -> AgentDocument:
    gpus = [gpu.model_copy(update={"uuid": None, "serial": None, "pci_bus_id": None,
                                   "board_part_number": None, "processes": []})
            for gpu in document.gpus]
    host = document.host.model_copy(update={"hostname": None, "user": None,
                                            "python_executable": None})
    # The agent's own words may name the host ("nvidia-smi not found on gpu-17.internal").
    reason = None if document.no_gpu_reason is None else "(hidden in an anonymized report)"
    return document.model_copy(update={"gpus": gpus, "host": host, "errors": [],
                                       "no_gpu_reason": reason})


_Named = TypeVar("_Named", "HostState", "HostFailure", "GpuMeasure", "Excluded")


def anonymize(data: Dataset, names: Aliases | None = None) -> Dataset:
    """Providers and hosts renamed by `names` (by default, aliases of this data's own);
    GPU serials and UUIDs, tags and failure messages (which name addresses) dropped."""
    names = names or Aliases.of(named_pairs(data))

    def by_alias(items: Iterable[_Named]) -> tuple[_Named, ...]:
        # In the data's own order, rows would follow the real names and give them away.
        return tuple(sorted(items, key=lambda item: (item.provider, item.host)))

    return Dataset(
        # Sorted: the filter's own order (often alphabetical) would hint at the names.
        scope=replace(data.scope, providers=tuple(sorted(names.provider(p)
                                                         for p in data.scope.providers))),
        hosts=by_alias(replace(h, provider=names.provider(h.provider),
                               host=names.host(h.provider, h.host),
                               document=_hidden_document(h.document),
                               listing=replace(h.listing, tags=()))
                       for h in data.hosts),
        failures=by_alias(replace(f, provider=names.provider(f.provider),
                                  host=names.host(f.provider, f.host),
                                  message="(hidden in an anonymized report)")
                          for f in data.failures),
        measures=by_alias(replace(m, provider=names.provider(m.provider),
                                  host=names.host(m.provider, m.host)) for m in data.measures),
        excluded=by_alias(replace(e, provider=names.provider(e.provider),
                                  host=names.host(e.provider, e.host)) for e in data.excluded),
        runs=data.runs, first=data.first, last=data.last,
        # UUIDs and serials name the cards: only how many the two hosts share is kept.
        shared=tuple(sorted((replace(s, provider=names.provider(s.provider),
                                     host=names.host(s.provider, s.host),
                                     other_provider=names.provider(s.other_provider),
                                     other_host=names.host(s.other_provider, s.other_host),
                                     gpus=()) for s in data.shared),
                            key=lambda s: (s.provider, s.host, s.other_provider,
                                           s.other_host))))


def _letters(i: int) -> str:
    """A, B, ... Z, AA, AB, ...: as many letters as providers."""
    text = ""
    i += 1
    while i:
        i, rest = divmod(i - 1, 26)
        text = chr(ord("A") + rest) + text
    return text
