"""What a report rests on, read from the store's tables once: each host's latest state,
its GPUs as found, and each GPU's measurements, reduced to per-GPU medians.

The unit of evidence is a GPU, not a run (docs/findings.md, "Comparing providers"):
every result of one GPU under one benchmark configuration becomes one number, the median
of its results' TFLOP/s, with the telemetry that explains it. Host facts (listing,
fingerprint) come from the newest document of each host in scope, judged against the
listing the inventory gave when that document was collected.

Everything is read from the tables' columns into frames, never from document bodies: a
body was validated when it was stored, and re-reading one per host cost the report most
of its time on a large store (bench/report_scale.py). The results come from their
per-GPU series (fleet/store/series.py), a few rows per GPU however many nights. Only
two things are still read from a body, and only from a few: the datasheet of each
variant (one body per variant and agent version, as the agent's catalog gave it) and why
a host without GPUs had none.

Two hosts whose documents in one probe or sweep named the same GPUs (by UUID, else
serial) are one machine listed twice, or were measured on the same cards at the same
moment: the pair is a finding of its own (`SharedHosts`), and the results both hosts
stored in that run are kept out of every measure (`Excluded`), so that no provider
statistic counts contended figures, or one card twice (fleet/analysis/listing/duplicates.py).
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from itertools import combinations
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from pydantic import ValidationError
from sqlalchemy import (
    JSON,
    Boolean,
    ColumnElement,
    Engine,
    Select,
    Text,
    and_,
    case,
    cast,
    distinct,
    func,
    or_,
    select,
    tuple_,
)

from fleet.model.document import Datasheet
from fleet.store import config as store_config
from fleet.store import series
from fleet.store.config import STACK_COLUMNS
from fleet.store.models import (
    Document,
    Fingerprint,
    Gpu,
    Host,
    HostError,
    ProbeRun,
    Provider,
    RunHost,
)
from fleet.store.query import in_chunks, no_gpu_reasons, software_stack, stored_bodies

if TYPE_CHECKING:
    AnySelect = Select[*tuple[Any, ...]]

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
        """The filters in words, for the report's header; "everything stored" without any."""
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
    card's heating, 0.2-1.2% on the lent H100s and H200: docs/harness.md, "soaked"), and
    so is the software stack (cuBLAS picks kernels by version), unless the report was
    asked to compare across stacks (then `stack` is ACROSS_STACKS).

    Its fields are fleet.store.config.CONFIG_COLUMNS and `stack`, in an order of their
    own: the order configurations sort in (tests/store/test_config_fields.py).
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
        """The configuration in words: size, dtype, mode, thermal state, L2, concurrency, stack."""
        size = f"{self.m}³" if self.m == self.n == self.k else f"{self.m}×{self.n}×{self.k}"
        return (f"{size} {self.dtype}, {self.mode}, {self.thermal}, {self.cache} L2, "
                f"{self.concurrency} (harness {self.harness_version}; {self.stack})")


@dataclass(frozen=True)
class Listing:
    """What the inventory said of a host when it was probed: expectation, price, tags."""

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
    """A host's newest document in scope, and what its listing said then; its GPUs are
    the rows of `Dataset.gpus` with its `document_id`."""

    provider: str
    host: str
    sweep: str | None
    collected_at: dt.datetime
    listing: Listing
    document_id: int
    gpu_count: int
    # The agent's words when it found no GPU (read from the body of such documents only).
    no_gpu_reason: str | None = None


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
    # The relative standard deviation of one result of this GPU between runs, as its
    # results' repeat intervals were built from (agent/timing/repeat.py: the variant's spread,
    # the GPU's history, the run's own wander; the median over its results); None where
    # no result carries one (cool-start results, stores before 0012).
    repeat_sd: float | None = None

    @property
    def name(self) -> str:
        """The GPU as the report names it: host and index."""
        return f"{self.host} GPU {self.gpu_index}"


@dataclass(frozen=True)
class Excluded:
    """A GPU whose results the comparison left out, and why."""

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
# Why a contended result is left out (fleet/analysis/contention.py says what was seen).
CONTENDED_REASON = ("measured beside another process on the GPU, or on a GPU already "
                    "busy (see its contention finding)")

# Besides the fingerprint table's own columns, `Dataset.gpus` has these.
GPU_FRAME_EXTRA = ("provider", "host", "collected_at", "software_stack")
# Fingerprint columns the report never reads: each GPU's health counters are its own JSON
# text (the energy counter alone differs on every card), which a frame of 80,000 GPUs
# would decode and hold one by one; the verdict and its reasons are read.
GPU_FRAME_UNREAD = ("health_counters",)


def _no_gpus() -> pd.DataFrame:
    return pd.DataFrame(columns=[*GPU_FRAME_EXTRA, *(
        c.name for c in Fingerprint.__table__.columns if c.name not in GPU_FRAME_UNREAD)])


@dataclass(frozen=True, eq=False)  # eq=False: a frame has no single truth value
class Dataset:
    """The report's data. `gpus` is the fleet as found: one row per GPU of each host's
    newest stored document in scope, with `provider`, `host`, `collected_at`, the
    fingerprint table's columns by their names (but GPU_FRAME_UNREAD; a health verdict
    is None where the agent read no counters), and `software_stack` (the stack that
    GPU's results in that document were measured on; missing when it had none); text
    that repeats (providers, variants, drivers...) is held as pandas categoricals.
    `datasheets` holds each variant's datasheet, as the agent's catalog gave it (none for
    vGPU slices: the board's figures are not the slice's)."""

    scope: Scope
    hosts: tuple[HostState, ...]
    failures: tuple[HostFailure, ...]
    measures: tuple[GpuMeasure, ...]
    excluded: tuple[Excluded, ...]
    runs: int
    first: dt.datetime | None
    last: dt.datetime | None
    shared: tuple[SharedHosts, ...] = ()
    gpus: pd.DataFrame = field(default_factory=_no_gpus)
    datasheets: dict[str, Datasheet] = field(default_factory=dict)


FLAG_COLUMNS = series.FLAG_COLUMNS


def _in_scope(stmt: AnySelect, scope: Scope, run_id: Any) -> AnySelect:
    """The scope's run and provider filters on `run_id` (a probe_run id column); the
    statement must join Provider."""
    if scope.sweep is not None:
        stmt = stmt.where(run_id.in_(select(ProbeRun.id).where(ProbeRun.sweep == scope.sweep)))
    if scope.providers:
        stmt = stmt.where(Provider.name.in_(scope.providers))
    if scope.runs:
        stmt = stmt.where(run_id.in_(scope.runs))
    return stmt


def _within(column: Any, scope: Scope) -> list[ColumnElement[bool]]:
    return ([column >= scope.since] if scope.since is not None else []) + (
        [column <= scope.until] if scope.until is not None else [])


def _listing(row: Any) -> Listing:
    return Listing(row.expect, row.price_per_gpu_hour, row.currency, tuple(row.tags or ()))


def _host_states(engine: Engine, scope: Scope
                 ) -> tuple[list[HostState], list[HostFailure], int]:
    """Each host's newest stored document in scope, and its newest attempt where that
    failed. The newest per host is picked in SQL (a window over the hosts' run rows, which
    carry their document's time), so that a store of many nights hands Python one or two
    rows per host."""
    when = case((RunHost.status == "stored", RunHost.collected_at),
                else_=RunHost.updated_at)
    newest = when.desc(), RunHost.id
    ranked = _in_scope(
        select(RunHost.id, RunHost.status, RunHost.probe_run_id,
               func.row_number().over(partition_by=RunHost.host_id, order_by=newest)
               .label("tried"),
               func.row_number().over(partition_by=(RunHost.host_id, RunHost.status),
                                      order_by=newest).label("kept"))
        .join(Host, Host.id == RunHost.host_id)
        .join(Provider, Provider.id == Host.provider_id)
        .where(*_within(when, scope)), scope, RunHost.probe_run_id).subquery()
    stmt = (select(ranked.c.tried, ranked.c.kept, RunHost.status, RunHost.document_id,
                   RunHost.expect, RunHost.price_per_gpu_hour, RunHost.currency,
                   RunHost.tags, RunHost.updated_at, RunHost.probe_run_id, RunHost.host_id,
                   Provider.name, Host.name.label("host"), ProbeRun.sweep,
                   Document.collected_at, Document.gpu_count)
            .join(RunHost, RunHost.id == ranked.c.id)
            .join(ProbeRun, ProbeRun.id == RunHost.probe_run_id)
            .join(Host, Host.id == RunHost.host_id)
            .join(Provider, Provider.id == Host.provider_id)
            .outerjoin(Document, Document.id == RunHost.document_id)
            .where(or_(ranked.c.tried == 1, and_(ranked.c.kept == 1,
                                                  ranked.c.status == "stored"))))
    runs = _in_scope(
        select(func.count(distinct(RunHost.probe_run_id)))
        .join(Host, Host.id == RunHost.host_id)
        .join(Provider, Provider.id == Host.provider_id)
        .where(*_within(when, scope)), scope, RunHost.probe_run_id)
    with engine.connect() as conn:
        rows = list(conn.execute(stmt))
        stored = [row for row in rows if row.status == "stored" and row.kept == 1]
        # The report judges a host by its newest document, and says apart that its last
        # attempt failed when it did.
        failed = [row for row in rows if row.status != "stored" and row.tried == 1]
        errors = _errors(conn, failed)
        reasons = no_gpu_reasons(conn, [row.document_id for row in stored
                                         if not row.gpu_count])
        run_count = int(conn.execute(runs).scalar_one())
    hosts = [HostState(row.name, row.host, row.sweep, row.collected_at, _listing(row),
                       row.document_id, row.gpu_count, reasons.get(row.document_id))
             for row in stored]
    failures = [HostFailure(row.name, row.host, row.sweep, row.updated_at,
                            *errors.get((row.probe_run_id, row.host_id), ("unknown", "")))
                for row in failed]
    hosts.sort(key=lambda h: (h.provider, h.host))
    failures.sort(key=lambda f: (f.provider, f.host))
    return hosts, failures, run_count


def _errors(conn: Any, failed: list[Any]) -> dict[tuple[int, int], tuple[str, str]]:
    if not failed:
        return {}
    stmt = (select(HostError.probe_run_id, HostError.host_id, HostError.stage,
                   HostError.message)
            .where(HostError.document_id.is_(None),
                   HostError.probe_run_id.in_({row.probe_run_id for row in failed}))
            .order_by(HostError.id))
    return {(r.probe_run_id, r.host_id): (r.stage, r.message) for r in conn.execute(stmt)}


def _document_stacks(found: series.Read, documents: list[int]
                     ) -> dict[tuple[int, int], str]:
    """(document id, GPU index) -> the software stack(s) its results in that document
    were measured on, "; "-joined, from the results' series."""
    at = [series.KEY_COLUMNS.index(name) + 1 for name in STACK_COLUMNS]
    labels = [software_stack(*(key[i] for i in at)) for key in found.keys]
    mine = np.isin(found.records["document_id"], documents)
    pairs = pd.DataFrame({"document": found.records["document_id"][mine],
                          "gpu": found.records["gpu_index"][mine],
                          "series": found.series[mine]}).drop_duplicates()
    stacks: dict[tuple[int, int], set[str]] = defaultdict(set)
    for document, gpu, index in zip(pairs["document"].tolist(), pairs["gpu"].tolist(),
                                    pairs["series"].tolist(), strict=True):
        stacks[(document, gpu)].add(labels[index])
    return {key: "; ".join(sorted(names)) for key, names in stacks.items()}


def _gpu_frame(engine: Engine, hosts: list[HostState], found: series.Read) -> pd.DataFrame:
    """The fingerprint rows of the hosts' documents, with the stack their results in that
    document were measured on."""
    f = Fingerprint.__table__
    by_document = {h.document_id: h for h in hosts}
    ids = sorted(by_document)
    chunks: list[pd.DataFrame] = []
    stacks = _document_stacks(found, ids)
    # JSON as text, each distinct text decoded once: GPUs of a fleet repeat a handful of
    # capability verdicts and MIG layouts, and decoding one per row cost more than the
    # rest of the read.
    read = [c for c in f.columns if c.name not in GPU_FRAME_UNREAD]
    json_columns = [c.name for c in read if isinstance(c.type, JSON)]
    columns = [cast(c, Text).label(c.name) if c.name in json_columns else c for c in read]
    with engine.connect() as conn:
        for chunk in in_chunks(ids):
            rows = conn.execute(select(*columns).where(f.c.document_id.in_(chunk)))
            # No column needs SQLAlchemy's conversion but booleans (see below): the
            # driver's tuples, at a third of the cost of rows.
            chunks.append(pd.DataFrame(rows.cursor.fetchall(), columns=list(rows.keys())))
    if not chunks or all(c.empty for c in chunks):
        return _no_gpus()
    gpus = pd.concat([c for c in chunks if not c.empty], ignore_index=True)
    for name in json_columns:
        decoded = {text: json.loads(text) for text in gpus[name].dropna().unique()}
        # pandas 3 holds a column of text and NULLs as strings and NaN.
        gpus[name] = [decoded[text] if isinstance(text, str) else None for text in gpus[name]]
    for column in f.columns:
        if isinstance(column.type, Boolean):  # SQLite hands back 0 and 1
            values = gpus[column.name]
            known = values.notna()
            flags = pd.Series([None] * len(values), index=values.index, dtype=object)
            flags[known] = values[known].astype(bool)
            gpus[column.name] = flags
    owner = [by_document[i] for i in gpus["document_id"]]
    gpus.insert(0, "provider", [h.provider for h in owner])
    gpus.insert(1, "host", [h.host for h in owner])
    gpus.insert(2, "collected_at", [h.collected_at for h in owner])
    gpus["software_stack"] = [stacks.get(key) for key in zip(
        gpus["document_id"].tolist(), gpus["gpu_index"].tolist(), strict=True)]
    gpus = gpus.sort_values(["provider", "host", "gpu_index"], ignore_index=True)
    # A fleet repeats a few providers, variants and drivers over thousands of GPUs: as
    # categories, the frame of 80,000 GPUs took a third of the memory.
    for name in gpus.columns:
        values = gpus[name]
        if (pd.api.types.is_string_dtype(values) and name not in json_columns
                and values.nunique() <= len(values) // 2):
            gpus[name] = values.astype("category")
    return gpus


def _datasheets(engine: Engine, gpus: pd.DataFrame) -> dict[str, Datasheet]:
    """Each variant's datasheet, read from one body per variant and agent version: the
    catalog ships with the agent, so every card of a variant that one agent version
    fingerprinted carries the same sheet."""
    physical = gpus[gpus["form_factor"] != "vGPU"]
    if physical.empty:
        return {}
    with engine.connect() as conn:
        versions = _agent_versions(conn, physical["document_id"].unique().tolist())
        picks: dict[tuple[str, str], tuple[int, int]] = {}
        for document_id, index, variant in zip(physical["document_id"],
                                               physical["gpu_index"], physical["variant"],
                                               strict=True):
            picks.setdefault((variant, versions[document_id]), (int(document_id),
                                                                int(index)))
        wanted: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for (variant, _), (document_id, index) in sorted(picks.items()):
            wanted[document_id].append((variant, index))
        sheets: dict[str, Datasheet] = {}
        for document_id, body in stored_bodies(conn, sorted(wanted)):
            cards = {gpu.get("index"): gpu for gpu in body.get("gpus") or []}
            for variant, index in wanted[document_id]:
                sheet = ((cards.get(index) or {}).get("variant") or {}).get("datasheet")
                try:
                    if sheet is not None:
                        sheets[variant] = Datasheet.model_validate(sheet)
                except ValidationError:
                    continue  # an older catalog's sheet: no datasheet rather than half one
    return sheets


def _agent_versions(conn: Any, ids: list[int]) -> dict[int, str]:
    versions: dict[int, str] = {}
    for chunk in in_chunks(ids):
        versions.update(conn.execute(select(Document.id, Document.agent_version)
                                     .where(Document.id.in_(chunk))).all())
    return versions


def _shared_hosts(engine: Engine, scope: Scope
                  ) -> tuple[list[SharedHosts], set[tuple[int, int]]]:
    """Pairs of hosts whose documents of one run named a GPU in common, and every
    (run id, host id) of such a pair. Hand ingest is left out: it may load one card's
    history from two hosts it moved between, which is no finding. A card is its UUID
    (one `gpu` row), else its serial; SQL finds the cards held twice in a run, so that
    only those rows come back."""
    f, d = Fingerprint, Document
    base = _in_scope(
        select().select_from(f)
        .join(d, d.id == f.document_id)
        .join(Gpu, Gpu.id == f.gpu_id)
        .join(Host, Host.id == d.host_id)
        .join(Provider, Provider.id == Host.provider_id)
        .join(ProbeRun, ProbeRun.id == d.probe_run_id)
        .where(ProbeRun.kind != "ingest", *_within(d.collected_at, scope)),
        scope, d.probe_run_id)
    # The search reads every fingerprint in scope, from the index on its run, GPU and
    # host; its document only where a time bounds the scope. A GPU without a UUID is
    # keyed by its host (models.Gpu), so only a UUID's one gpu row can be held by two
    # hosts; serials are looked at only where UUID-less GPUs exist.
    lean = select().select_from(f).where(
        f.probe_run_id.in_(select(ProbeRun.id).where(ProbeRun.kind != "ingest")))
    if scope.since is not None or scope.until is not None:
        lean = lean.join(d, d.id == f.document_id).where(*_within(d.collected_at, scope))
    if scope.sweep is not None:
        lean = lean.where(f.probe_run_id.in_(select(ProbeRun.id)
                                             .where(ProbeRun.sweep == scope.sweep)))
    if scope.runs:
        lean = lean.where(f.probe_run_id.in_(scope.runs))
    if scope.providers:
        lean = lean.where(f.host_id.in_(select(Host.id).join(Provider).where(
            Provider.name.in_(scope.providers))))
    # "More than one host", both ways: PostgreSQL sorts each group for a count(DISTINCT)
    # (1.2 s over 2.4 M fingerprints, 0.5 s by min and max); SQLite's count is the
    # faster there (0.35 s against 0.5 s).
    held_twice = (func.min(f.host_id) != func.max(f.host_id)
                  if engine.dialect.name == "postgresql"
                  else func.count(distinct(f.host_id)) > 1)
    by_uuid = (lean.add_columns(f.probe_run_id, f.gpu_id)
               .group_by(f.probe_run_id, f.gpu_id).having(held_twice))
    uuid_less = select(Gpu.id).where(Gpu.uuid.is_(None))
    by_serial = (lean.add_columns(f.probe_run_id, f.serial)
                 .where(f.gpu_id.in_(uuid_less), f.serial.is_not(None))
                 .group_by(f.probe_run_id, f.serial).having(held_twice))
    holders: dict[tuple[int, str], set[tuple[str, str, int]]] = defaultdict(set)
    with engine.connect() as conn:
        twice = [tuple(row) for row in conn.execute(by_uuid)]
        any_uuid_less = conn.execute(uuid_less.limit(1)).first() is not None
        twice_serial = ([tuple(row) for row in conn.execute(by_serial)] if any_uuid_less
                        else [])
        members = base.add_columns(d.probe_run_id, Provider.name.label("provider"),
                                   Host.name.label("host"), d.host_id, Gpu.uuid, f.serial)
        for keys, column in ((twice, f.gpu_id), (twice_serial, f.serial)):
            for start in range(0, len(keys), 500):
                stmt = members.where(tuple_(d.probe_run_id, column).in_(keys[start:start + 500]))
                if column is f.serial:
                    stmt = stmt.where(Gpu.uuid.is_(None))
                for row in conn.execute(stmt):
                    card = f"uuid:{row.uuid}" if row.uuid else f"serial:{row.serial}"
                    holders[(row.probe_run_id, card)].add((row.provider, row.host,
                                                           row.host_id))
    gpus: dict[tuple[tuple[str, str], tuple[str, str]], set[str]] = defaultdict(set)
    runs: dict[tuple[tuple[str, str], tuple[str, str]], set[int]] = defaultdict(set)
    contended: set[tuple[int, int]] = set()
    for (run_id, card), held in holders.items():
        named = sorted({(provider, host) for provider, host, _ in held})
        for pair in combinations(named, 2):
            gpus[pair].add(card)
            runs[pair].add(run_id)
        if len(named) > 1:
            contended.update((run_id, host_id) for _, _, host_id in held)
    shared = [SharedHosts(a[0], a[1], b[0], b[1], len(cards), tuple(sorted(cards)),
                          tuple(sorted(runs[(a, b)])))
              for (a, b), cards in sorted(gpus.items())]
    return shared, contended


# A benchmark configuration, less the software stack: the store's configuration columns
# (fleet.store.config), in Config's field order.
CONFIG_COLUMNS = tuple(f.name for f in fields(Config)
                       if f.name in store_config.CONFIG_COLUMNS)
VALUE_COLUMNS = series.VALUE_COLUMNS
FLAG_SPACE = 1 << len(FLAG_COLUMNS)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _series_filter(conn: Any, scope: Scope) -> series.Filter:
    runs: set[int] | None = None
    if scope.sweep is not None:
        runs = set(conn.execute(select(ProbeRun.id).where(ProbeRun.sweep == scope.sweep))
                   .scalars())
    if scope.runs:
        runs = set(scope.runs) if runs is None else runs & set(scope.runs)
    providers = None if not scope.providers else frozenset(conn.execute(
        select(Provider.id).where(Provider.name.in_(scope.providers))).scalars())
    return series.Filter(
        since_us=None if scope.since is None else series.epoch_us(_aware(scope.since)),
        until_us=None if scope.until is None else series.epoch_us(_aware(scope.until)),
        runs=None if runs is None else frozenset(runs), providers=providers,
        # A probe's own report names its runs: its GPUs' series are a few of the store's.
        only_gpus_of_runs=bool(scope.runs))


def _aware(when: dt.datetime) -> dt.datetime:
    # As the store compares a naive time: taken as UTC (models.UtcDateTime).
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when


def _result_rows(found: series.Read, variants_wanted: tuple[str, ...]
                 ) -> tuple[dict[str, NDArray[Any]], list[tuple[Any, ...]],
                            list[tuple[Any, ...]], list[str]]:
    """One row per benchmark result in scope (of `variants_wanted`, or any), as arrays of
    numbers, and what the codes in `kind` stand for: (configurations, software stacks,
    variants).

    Read from the results' series (fleet/store/series.py), not the results: at 2.4 M
    results the drivers spent 8-12 s building Python objects of the rows. `kind` packs a
    result's configuration, stack, correctness, variant and flags into one integer (see
    `_measures`); the fingerprint is read for the newest result of each GPU only. Its
    document, run, host, provider and GPU index come too: the newest result of a GPU
    names its host, and those of hosts that shared GPUs are left out and counted.
    """
    at = {name: i for i, name in enumerate(series.KEY_COLUMNS, start=1)}
    wanted = np.array([not variants_wanted or key[at["variant"]] in variants_wanted
                       for key in found.keys], dtype=bool)
    used = np.zeros(len(found.keys), dtype=bool)
    used[found.series] = True
    used &= wanted
    keys = [key for key, kept in zip(found.keys, used.tolist(), strict=True) if kept]
    configs = sorted({tuple(key[at[name]] for name in CONFIG_COLUMNS) for key in keys})
    stacks = sorted({tuple(key[at[name]] for name in STACK_COLUMNS) for key in keys},
                    key=lambda s: tuple(v or "" for v in s))
    variants = sorted({key[at["variant"]] for key in keys})
    config_code = {c: i for i, c in enumerate(configs)}
    stack_code = {c: i for i, c in enumerate(stacks)}
    variant_code = {v: i for i, v in enumerate(variants)}
    stack_count, variant_count = max(1, len(stacks)), max(1, len(variants))
    # Per series, its kind less the flags (0 for series that no result in scope is of).
    base = np.array([
        (((config_code[tuple(key[at[name]] for name in CONFIG_COLUMNS)] * stack_count
           + stack_code[tuple(key[at[name]] for name in STACK_COLUMNS)]) * 2
          + int(bool(key[at["correctness_failed"]]))) * variant_count
         + variant_code[key[at["variant"]]]) if kept else 0
        for key, kept in zip(found.keys, used.tolist(), strict=True)], dtype=np.int64)
    gpu = np.array([key[0] for key in found.keys], dtype=np.int64)
    records, index = found.records, found.series
    if variants_wanted:
        keep = wanted[index]
        records, index = records[keep], index[keep]
    arrays: dict[str, NDArray[Any]] = {
        "kind": base[index] * FLAG_SPACE + records["flags"].astype(np.int64),
        "gpu_id": gpu[index], "at": records["at"],
        **{name: records[name] for name in VALUE_COLUMNS}}
    arrays.update({name: records[name] for name in
                   ("document_id", "probe_run_id", "host_id", "provider_id", "gpu_index")})
    return arrays, configs, stacks, variants


def _measures(engine: Engine, found: series.Read, gpus: pd.DataFrame, scope: Scope,
              across_stacks: bool, contended: set[tuple[int, int]]
              ) -> tuple[list[GpuMeasure], list[Excluded]]:
    rows, configs, stacks, variants = _result_rows(found, scope.variants)
    with engine.connect() as conn:
        providers = dict(conn.execute(select(Provider.id, Provider.name)).all())
        host_names = dict(conn.execute(select(Host.id, Host.name)).all())
    variant_count = max(1, len(variants))
    kind = rows["kind"]
    flag_bits = kind % FLAG_SPACE
    variant = (kind // FLAG_SPACE) % variant_count
    rest = kind // (FLAG_SPACE * variant_count)
    failed, rest = rest % 2, rest // 2
    stack, config = rest % max(1, len(stacks)), rest // max(1, len(stacks))
    # The per-row codes travel with the rows, so that leaving rows out keeps them aligned.
    rows = {**rows, "_flags": flag_bits, "_variant": variant, "_failed": failed,
            "_stack": stack, "_config": config}
    excluded: list[Excluded] = []

    def leave_out(mask: NDArray[np.bool_], reason: str) -> dict[str, NDArray[Any]]:
        """Count each GPU's results under `mask` into `excluded`; the rows without them."""
        counts = pd.DataFrame({"p": rows["provider_id"][mask], "h": rows["host_id"][mask],
                               "i": rows["gpu_index"][mask], "v": rows["_variant"][mask]}
                              ).groupby(["p", "h", "i", "v"]).size()
        held = zip(*(counts.index.get_level_values(level).tolist() for level in range(4)),
                   strict=True)
        excluded.extend(Excluded(providers[p], host_names[h], i, variants[v], n, reason)
                        for (p, h, i, v), n in zip(held, counts.tolist(), strict=True))
        excluded.sort(key=lambda e: (e.provider, e.host, e.gpu_index, e.variant))
        return {name: values[~mask] for name, values in rows.items()}

    if contended and len(kind):
        pairs = pd.MultiIndex.from_arrays([rows["probe_run_id"], rows["host_id"]])
        rows = leave_out(np.asarray(pairs.isin(list(contended))), SHARED_REASON)
    # A result measured beside another process is the renter's contention, not the
    # card's figure: out of every median, like a shared host's (docs/findings.md, "One
    # node, judged on its own"). Row by row, so that a GPU's other nights stand.
    busy = (rows["_flags"] & (1 << FLAG_COLUMNS.index("contended"))) != 0
    if busy.any():
        rows = leave_out(busy, CONTENDED_REASON)
    flag_bits, variant, failed = rows["_flags"], rows["_variant"], rows["_failed"]
    stack, config = rows["_stack"], rows["_config"]
    if not len(rows["kind"]):
        return [], excluded
    stack_key = np.zeros_like(stack) if across_stacks else stack
    # One number per group (GPU, configuration, stack, correctness), in the keys' order.
    group_key = ((rows["gpu_id"] * max(1, len(configs)) + config) * max(1, len(stacks))
                 + stack_key) * 2 + failed
    # Each group oldest result first (of one moment, by document: the order they were
    # stored in). A series (fleet/store/series.py) holds a group's results in the order
    # they were stored, so a stable sort by group alone finds runs already in order and
    # mostly leaves nothing to sort by time.
    order = np.argsort(group_key, kind="stable")
    if not _oldest_first(group_key[order], rows["at"][order], rows["document_id"][order]):
        order = np.lexsort((rows["document_id"], rows["at"], group_key))
    ordered = group_key[order]
    changed = np.ones(len(order), dtype=bool)
    changed[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(changed)
    ends = np.append(starts[1:], len(order))
    group = np.repeat(np.arange(len(starts)), ends - starts)
    medians = _medians({name: rows[name] for name in VALUE_COLUMNS}, order, starts,
                       ends - starts)
    flags = np.bitwise_or.reduceat(flag_bits[order], starts).tolist()
    stack_sets = _stacks_by_group(group, stack[order], stacks)
    last = order[ends - 1]
    newest = _fingerprint_facts(engine, gpus, rows["document_id"][last].tolist(),
                                rows["gpu_index"][last].tolist())
    value = {name: medians[name].tolist() for name in VALUE_COLUMNS}
    first_at, last_at = rows["at"][order[starts]].tolist(), rows["at"][last].tolist()
    last_variant, last_config = variant[last].tolist(), config[last].tolist()
    gpu_ids, last_failed = rows["gpu_id"][last].tolist(), failed[last].tolist()
    last_provider, last_host = rows["provider_id"][last].tolist(), rows["host_id"][last].tolist()
    last_index = rows["gpu_index"][last].tolist()
    # One Config per configuration and stack, ranked once: sorting measures by comparing
    # Config dataclasses field by field cost more than building them.
    kinds = {(c, stack_sets[g]) for g, c in enumerate(last_config)}
    made = {(c, label): Config(**dict(zip(CONFIG_COLUMNS, configs[c], strict=True)),
                               stack=ACROSS_STACKS if across_stacks else label)
            for c, label in kinds}
    rank = {config: i for i, config in enumerate(sorted(set(made.values())))}
    # A fleet's GPUs share a few flag sets and, a document's GPUs, their times.
    flag_names = {bits: tuple(flag for i, flag in enumerate(FLAG_COLUMNS) if bits & (1 << i))
                  for bits in set(flags)}
    times = {us: _EPOCH + dt.timedelta(microseconds=us) for us in {*first_at, *last_at}}
    measures: list[GpuMeasure] = []
    for g, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        limit, driver, virtualization = newest[g]
        provider, host = providers[last_provider[g]], host_names[last_host[g]]
        if last_failed[g]:
            # A result that failed the correctness gate timed a wrong answer.
            excluded.append(Excluded(provider, host, last_index[g],
                                     variants[last_variant[g]], end - start,
                                     "failed the correctness check"))
            continue
        measures.append(GpuMeasure(
            provider=provider, host=host, gpu=str(gpu_ids[g]), gpu_index=last_index[g],
            variant=variants[last_variant[g]],
            config=made[(last_config[g], stack_sets[g])],
            tflops=value["tflops"][g], results=end - start,
            sm_clock_mhz=_present(value["sm_clock_mhz_median"][g]),
            power_w=_present(value["power_w_median"][g]),
            power_capped_share=_present(value["power_cap_share"][g]),
            power_limit_w=limit, driver_version=driver, virtualization_mode=virtualization,
            flags=flag_names[flags[g]], first=times[first_at[g]], last=times[last_at[g]],
            first_20s_tflops=_present(value["first_20s_tflops"][g]),
            drop=_present(value["soak_drop"][g]),
            temperature_c=_present(value["temperature_load_c"][g]), stack=stack_sets[g],
            repeat_sd=_present(value["repeat_sd"][g])))
    measures.sort(key=lambda m: (rank[m.config], m.variant, m.provider, m.host, m.gpu_index))
    return measures, excluded


def _oldest_first(group: NDArray[np.int64], at: NDArray[np.int64],
                  ids: NDArray[Any]) -> bool:
    """Whether, within each run of equal `group`, (at, ids) never decrease."""
    same = group[1:] == group[:-1]
    later = at[1:] - at[:-1]
    return not (same & ((later < 0) | ((later == 0) & (ids[1:] < ids[:-1])))).any()


def _medians(columns: dict[str, NDArray[np.float64]], order: NDArray[np.int64],
             starts: NDArray[np.int64], sizes: NDArray[np.int64]
             ) -> dict[str, NDArray[np.float64]]:
    """Each group's median of each column, NaN left out (NaN where all are): the groups are
    `order[start:start + size]`. Groups of one size are one matrix, sorted row by row,
    where a pandas groupby over 2.4 M results took a second; the median is the mean of
    the two middle values, (a + b) / 2 as pandas and numpy take it, to the bit (and for
    an odd count (a + a) / 2, which is a)."""
    found = {name: np.empty(len(starts)) for name in columns}
    for size in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == size)
        cells = order[starts[which, None] + np.arange(size)]
        for name, values in columns.items():
            block = np.sort(values[cells], axis=1)  # NaN sorts last
            counted = size - np.isnan(block).sum(axis=1)
            rows = np.arange(len(which))
            low = block[rows, np.maximum(counted - 1, 0) // 2]
            high = block[rows, counted // 2]
            middle = (low + high) / 2
            middle[counted == 0] = np.nan
            found[name][which] = middle
    return found


def _fingerprint_facts(engine: Engine, gpus: pd.DataFrame, documents: list[int],
                       indexes: list[int]
                       ) -> list[tuple[float | None, str | None, str | None]]:
    """For each (document, GPU index): the power limit, driver and virtualization its
    fingerprint gave (None for a GPU benchmarked but not fingerprinted). Read from the
    fleet as found where it holds the document (most GPUs' newest result is of their
    host's newest document), else from the store."""
    facts: dict[tuple[int, int], tuple[float | None, str | None, str | None]] = {}
    if len(gpus):
        columns = [gpus[name].astype(object).where(gpus[name].notna(), None).tolist()
                   for name in ("power_limit_w", "driver_version", "virtualization_mode")]
        facts.update(zip(zip(gpus["document_id"].tolist(), gpus["gpu_index"].tolist(),
                             strict=True), zip(*columns, strict=True), strict=True))
    wanted = sorted({d for d, i in zip(documents, indexes, strict=True)
                     if (d, i) not in facts})
    f = Fingerprint
    with engine.connect() as conn:
        for chunk in in_chunks(wanted):
            for row in conn.execute(select(f.document_id, f.gpu_index, f.power_limit_w,
                                           f.driver_version, f.virtualization_mode)
                                    .where(f.document_id.in_(chunk))):
                facts[(row[0], row[1])] = (row[2], row[3], row[4])
    return [facts.get(pair, (None, None, None))
            for pair in zip(documents, indexes, strict=True)]


def _present(value: float) -> float | None:
    return None if value != value else value  # NaN: no result had it


def _stacks_by_group(group: NDArray[np.int64], codes: NDArray[Any],
                     stacks: list[tuple[Any, ...]]) -> list[str]:
    """Per group, "; ".join of the distinct software stacks of its results."""
    if not len(group):
        return []
    labels = [software_stack(*stack) for stack in stacks]
    pairs = pd.DataFrame({"group": group, "stack": codes}).drop_duplicates()
    # Most GPUs ran one stack: its label; the others join theirs.
    first = pairs.drop_duplicates("group").set_index("group")["stack"]
    found = [labels[int(code)] for code in first.reindex(range(int(group[-1]) + 1)).tolist()]
    sizes = pairs.groupby("group").size()
    for g in sizes[sizes > 1].index.tolist():
        codes_of = pairs.loc[pairs["group"] == g, "stack"].tolist()
        found[g] = "; ".join(sorted({labels[int(code)] for code in codes_of}))
    return found


def load_dataset(engine: Engine, scope: Scope, across_stacks: bool = False) -> Dataset:
    """What the report rests on; `across_stacks` compares results of different software
    stacks as one configuration (each GPU's stack stays on its measure)."""
    hosts, failures, runs = _host_states(engine, scope)
    with engine.connect() as conn:
        found = series.read(conn, _series_filter(conn, scope))
    gpus = _gpu_frame(engine, hosts, found)
    if scope.variants and len(gpus):
        carrying = set(gpus.loc[gpus["variant"].isin(scope.variants), "document_id"])
        hosts = [h for h in hosts if h.document_id in carrying]
        gpus = gpus[gpus["document_id"].isin(carrying)].reset_index(drop=True)
    elif scope.variants:
        hosts = []
    datasheets = _datasheets(engine, gpus) if len(gpus) else {}
    shared, contended = _shared_hosts(engine, scope)
    measures, excluded = _measures(engine, found, gpus, scope, across_stacks, contended)
    times = [h.collected_at for h in hosts] + [m.last for m in measures] + \
        [m.first for m in measures]
    return Dataset(scope, tuple(hosts), tuple(failures), tuple(measures), tuple(excluded),
                   runs, min(times, default=None), max(times, default=None), tuple(shared),
                   gpus, datasheets)


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
        """Fresh random aliases for the providers and hosts of `pairs`."""
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
        """The alias of provider `name`; "(hidden)" for one the report does not show."""
        return self.providers.get(name, "(hidden)")

    def host(self, provider: str, name: str) -> str:
        """The alias of host `name` at `provider`; "(hidden)" for one the report does not show."""
        return self.hosts.get((provider, name), "(hidden)")


def named_pairs(data: Dataset) -> set[tuple[str, str]]:
    """Every (provider, host) that `data` names anywhere, the shared hosts' others too."""
    items: list[HostState | GpuMeasure | HostFailure | Excluded | SharedHosts] = [
        *data.hosts, *data.measures, *data.failures, *data.excluded, *data.shared]
    return {(item.provider, item.host) for item in items} | {
        (s.other_provider, s.other_host) for s in data.shared}


# Columns of `Dataset.gpus` that name a card; an anonymized report drops them.
IDENTIFYING = ("serial",)


def _hidden_gpus(gpus: pd.DataFrame, names: Aliases) -> pd.DataFrame:
    hidden = gpus.copy()
    hidden["host"] = [names.host(p, h) for p, h in zip(gpus["provider"], gpus["host"],
                                                        strict=True)]
    hidden["provider"] = [names.provider(p) for p in gpus["provider"]]
    for column in IDENTIFYING:
        hidden[column] = None
    # In the store's order, rows would follow the real names and give them away.
    return hidden.sort_values(["provider", "host", "gpu_index"], ignore_index=True)


_Named = TypeVar("_Named", "HostState", "HostFailure", "GpuMeasure", "Excluded")


def anonymize(data: Dataset, names: Aliases | None = None) -> Dataset:
    """Providers and hosts renamed by `names` (by default, aliases of this data's own);
    GPU serials and UUIDs, tags, failure messages (which name addresses) and the
    agent's words on a missing GPU dropped."""
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
                               listing=replace(h.listing, tags=()),
                               # The agent's own words may name the host ("nvidia-smi not
                               # found on gpu-17.internal").
                               no_gpu_reason=None if h.no_gpu_reason is None
                               else "(hidden in an anonymized report)")
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
                                           s.other_host))),
        gpus=_hidden_gpus(data.gpus, names), datasheets=data.datasheets)


def _letters(i: int) -> str:
    """A, B, ... Z, AA, AB, ...: as many letters as providers."""
    text = ""
    i += 1
    while i:
        i, rest = divmod(i - 1, 26)
        text = chr(ord("A") + rest) + text
    return text
