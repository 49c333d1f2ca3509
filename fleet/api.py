"""fleet as a library: open a store, probe an inventory, and read back what the store holds
as pandas DataFrames (or the report's typed findings), for notebooks and spreadsheets.

    >>> import fleet
    >>> store = fleet.Store("sqlite:///fleet.db")     # or fleet.Store(): the CLI's default
    >>> soaked = store.results(variant="H100 SXM5 80GB", since="2026-11-01")
    >>> soaked.groupby("provider", observed=True)["tflops"].median()

`Store()` opens the store the CLI would: `--db`'s URL when given, else `$FLEET_DB`, else
SQLite at `~/.local/share/fleet/fleet.db`; its repr hides any password in the URL. Every
frame's columns are described in its method's docstring (and in RESULT_COLUMNS,
FINGERPRINT_COLUMNS, NODE_COLUMNS, JOB_COLUMNS, RUN_COLUMNS, NIGHT_COLUMNS,
FINDING_COLUMNS): times are tz-aware UTC, `provider` and `variant` are categoricals,
TFLOP/s, GB/s, times and prices float64, counts that may be missing nullable Int64.

pandas is imported when the first frame is built, not with this module: the CLI's
commands go through `Store` too, and most of them never build a frame.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from sqlalchemy import Engine, and_, case, func, select

from fleet.analysis.compare import GapOptions
from fleet.analysis.dataset import Scope
from fleet.analysis.health.cards import NOT_READ
from fleet.analysis.health.not_measured import judge_failure, stored_memory
from fleet.analysis.matmul.stragglers import StragglerOptions
from fleet.analysis.sweep.nights import HISTORY_NIGHTS, read_nights
from fleet.errors import InputError
from fleet.frames import Column
from fleet.frames import columns as _columns
from fleet.frames import frame as _frame
from fleet.inventory import LoadedInventory, load_inventory
from fleet.probe.local import BenchOptions
from fleet.probe.run import Observer, ProbeOptions, ProbeReport
from fleet.report.build import Report, ReportOptions, build_report
from fleet.store.database import Location, database_errors, open_engine, resolve
from fleet.store.errors import newest_documents, read_errors
from fleet.store.job import JOB_COLUMNS
from fleet.store.job import frame as read_jobs
from fleet.store.models import (
    BenchmarkResult,
    Document,
    Fingerprint,
    Gpu,
    Host,
    ProbeRun,
    Provider,
    RunHost,
)
from fleet.store.node import NODE_COLUMNS, read_node_results
from fleet.store.query import (
    FLAGS,
    ResultFilter,
    ResultRow,
    VariantSummary,
    count_results,
    in_chunks,
    list_results,
    stored_variants,
    summarise_variants,
)
from fleet.store.schema import SchemaState, ensure_schema, inspect_schema
from fleet.store.schema import upgrade as upgrade_schema
from fleet.store.series import Repair
from fleet.store.series import repair as repair_series

if TYPE_CHECKING:
    import pandas as pd

    from fleet.store.intake import Item
    from fleet.store.prune import Pruned

__all__ = ["CLUSTER_COLUMNS", "FINDING_COLUMNS", "FINGERPRINT_COLUMNS", "NIGHT_COLUMNS",
           "NODE_COLUMNS", "RESULT_COLUMNS", "RUN_COLUMNS", "BenchOptions", "Column",
           "ProbeOptions", "ProbeReport", "Store"]

P = ParamSpec("P")
R = TypeVar("R")
When = dt.datetime | dt.date | str


_FLAG_MEANINGS = {
    "power_capped": "the card ran at its power cap for most of the measurement",
    "thermal_throttled": "the driver slowed the card for temperature",
    "hw_slowdown": "a hardware slowdown (power brake, overheating) was reported",
    "contended": "another process used the GPU while it was measured",
    "not_steady": "cool-start: warm-up never reached a steady state",
    "correctness_failed": "the product failed the float64 check: its time is no speed",
    "clocks_locked": "the SM clock was locked for the run (--lock-clocks)",
    "not_soaked": "the soak cap came before throughput and temperature settled",
}

RESULT_COLUMNS = _columns(
    ("result", "int64", "the result's id in the store"),
    ("run", "int64", "the probe, sweep or ingest run it was stored under (`fleet report --run`)"),
    ("collected_at", "datetime", "when the agent collected it"),
    ("provider", "category", "the provider the host was rented from"),
    ("host", "string", "the host's name in the inventory"),
    ("sweep", "string", "the sweep (or `--sweep` name) of its run; missing for none"),
    ("gpu_index", "int64", "the GPU's NVML index on its host"),
    ("gpu_uuid", "string", "the GPU's NVML UUID; missing where the host hides it"),
    ("variant", "category", 'the catalog\'s variant label, e.g. "H100-SXM5-80GB"'),
    ("form_factor", "string", "SXM, PCIe, NVL, vGPU... from the GPU's fingerprint"),
    ("harness_version", "string", "the harness that measured it; versions compare apart"),
    ("dtype", "string", "the matmul's data type: bf16, fp16, tf32 or fp32"),
    ("m", "int64", "the matmul's M"),
    ("n", "int64", "the matmul's N"),
    ("k", "int64", "the matmul's K"),
    ("mode", "string", '"sustained" (back to back) or "burst" (paused between runs)'),
    ("cache", "string", 'the L2 before each run: "cold", "flushed" or "warm"'),
    ("thermal", "string", '"soaked" (measured once the card stopped heating) or '
                          '"cool-start" (--quick, burst, or any harness before 1.3)'),
    ("concurrency", "string", '"concurrent" (every GPU of the node at once) or "sequential"'),
    ("tflops", "float64", "TFLOP/s: the work over the time (harness 1.4 on; the trimmed mean "
                          "run time's in 1.2-1.3); soaked: the soaked level"),
    ("repeat_low_tflops", "float64", "soaked, stored from 0012 on: where a repeat run of the "
                                     "card lands, 95%, low end"),
    ("repeat_high_tflops", "float64", "soaked: where a repeat run lands, 95%, high end"),
    ("repeat_basis", "string", 'what set the repeat interval\'s width: "variant" (its '
                               'measured spread), "history" (the GPU\'s own) or "run"'),
    ("median_ms", "float64", "the median kernel time, milliseconds"),
    ("cv", "float64", "coefficient of variation of the run times"),
    ("runs", "int64", "timed runs"),
    ("power_w_median", "float64", "median power drawn while measured, watts"),
    ("sm_clock_mhz_median", "float64", "median SM clock while measured, MHz"),
    ("temperature_load_c", "float64", "temperature under load, °C"),
    ("soak_s", "float64", "soaked: seconds of load before the measurement"),
    ("first_20s_tflops", "float64", "soaked: the level of the first 20 s of load"),
    ("soak_drop", "float64", "soaked: 1 - tflops / first_20s_tflops"),
    ("stack", "string", 'the software stack: "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2"'),
    ("price_per_gpu_hour", "float64",
     "the host's listed price per GPU-hour in its run's inventory; missing where none"),
    ("currency", "string", "the price's currency (ISO 4217); fleet converts none"),
    *((flag, "bool", meaning) for flag, meaning in _FLAG_MEANINGS.items()),
)

FINGERPRINT_COLUMNS = _columns(
    ("document", "int64", "the agent document the fingerprint came from"),
    ("run", "int64", "the run it was stored under"),
    ("collected_at", "datetime", "when the agent collected it"),
    ("provider", "category", "the provider the host was rented from"),
    ("host", "string", "the host's name in the inventory"),
    ("sweep", "string", "the sweep of its run; missing for none"),
    ("gpu_index", "int64", "the GPU's NVML index on its host"),
    ("gpu_uuid", "string", "the GPU's NVML UUID; missing where the host hides it"),
    ("name", "string", 'what NVML calls the card, e.g. "NVIDIA H100 80GB HBM3"'),
    ("serial", "string", "the board's serial number"),
    ("variant", "category", "the catalog's variant label, else what is known of the card"),
    ("family", "string", "H100, A100, ..."),
    ("form_factor", "string", "SXM, PCIe, NVL, vGPU or unknown"),
    ("memory_gb", "Int64", "the variant's memory, GB"),
    ("architecture", "string", "Hopper, Ampere, ..."),
    ("driver_version", "string", "the NVIDIA driver"),
    ("cuda_driver_version", "string", "the CUDA version the driver supports"),
    ("vbios_version", "string", "the card's VBIOS"),
    ("power_limit_w", "float64", "the power limit in force, watts"),
    ("power_limit_default_w", "float64", "the card's default power limit, watts"),
    ("max_sm_clock_mhz", "Int64", "the highest SM clock the card reports, MHz"),
    ("max_mem_clock_mhz", "Int64", "the highest memory clock, MHz"),
    ("virtualization_mode", "string", "none, passthrough, vgpu, host..."),
    ("mig_enabled", "boolean", "MIG mode on"),
    ("ecc_enabled", "boolean", "ECC on"),
    ("persistence_mode", "boolean", "persistence mode on"),
    ("pcie_gen_max", "Int64", "the PCIe generation the link can reach"),
    ("pcie_width_max", "Int64", "the PCIe width the link can reach"),
    ("nvlink_links_active", "int64", "active NVLink links"),
    ("nvlink_links_total", "Int64", "NVLink links the card has"),
    ("power_limit_enforced_w", "float64", "the power limit the driver enforces, watts"),
    ("power_limit_min_w", "float64", "the lowest power limit that may be set, watts"),
    ("power_limit_max_w", "float64", "the highest power limit that may be set, watts"),
    ("app_sm_clock_target_mhz", "Int64", "the application SM clock, MHz"),
    ("pcie_gen_current", "Int64", "the PCIe generation the link runs at"),
    ("pcie_width_current", "Int64", "the PCIe width the link runs at"),
    ("vgpu_profile", "string", "a vGPU guest's profile (RTXA6000-24Q); missing otherwise"),
    ("mig_devices", "object", 'the MIG instances\' profiles, a list ("1g.10gb", ...); '
                              "empty without MIG"),
    *((f"may_set_{setting}", "boolean",
       f"whether the tenant may change {words}: True, False, or missing where the agent "
       "could not tell") for setting, words in (
        ("application_clocks", "the application clocks"),
        ("locked_gpu_clocks", "locked GPU clocks"),
        ("locked_memory_clocks", "locked memory clocks"),
        ("power_limit", "the power limit"), ("persistence_mode", "persistence mode"),
        ("compute_mode", "the compute mode"), ("ecc", "ECC"))),
    ("health", "category", 'the card\'s health as the agent judged it from the driver\'s '
                           'counters (agent/health/card.py): "healthy", "degraded", "failing", '
                           '"unknown" (the driver could not tell), or "not read" (an agent '
                           "older than the health counters fingerprinted it)"),
    ("health_reasons", "object", "the counters that decided the verdict, in words, a list; "
                                 "empty for a healthy card and for one not read"),
    ("health_action", "string", 'what to ask the provider for (agent/health/card.py): "none", '
                                '"reset", "drain_and_reset" or "replace"; missing where the '
                                "verdict is unknown or the agent predates actions"),
)
# The fingerprint table's own columns among FINGERPRINT_COLUMNS, read as they are stored.
_STORED_FINGERPRINT = tuple(c for c in FINGERPRINT_COLUMNS[8:] if c.name not in (
    "mig_devices", "health", "health_reasons", "health_action")
    and not c.name.startswith("may_set_"))

RUN_COLUMNS = _columns(
    ("run", "int64", "the run's number (`fleet report --run N`)"),
    ("kind", "string", '"probe", "sweep" or "ingest" (documents collected by hand)'),
    ("sweep", "string", "the sweep's (or --sweep) name; missing for none"),
    ("inventory", "string", "the inventory file the run probed"),
    ("controller_version", "string", "the fleet that ran it"),
    ("agent_version", "string", "the agent payload it shipped; missing for hand ingest"),
    ("started_at", "datetime", "when it started"),
    ("ended_at", "datetime", "when its controller got to the end; missing: killed or running"),
    ("finished_at", "datetime", "when every host was settled; missing: hosts left to resume"),
    ("hosts", "int64", "hosts the run settled"),
    ("stored", "int64", "hosts that stored a document"),
    ("failed", "int64", "hosts that failed"),
    ("documents", "int64", "documents stored under the run"),
)

NIGHT_COLUMNS = _columns(
    ("run", "int64", "the night's run"),
    ("started_at", "datetime", "when the night's run started"),
    ("provider", "category", "the host's provider"),
    ("host", "string", "the host's name"),
    ("status", "string", '"stored" or "failed"'),
    ("mismatches", "string", "what differed from the listing that night, '; '-joined; "
                             "missing where nothing was listed or no document came"),
    ("gpu_index", "Int64", "the GPU's index; missing on a host's row without GPUs"),
    ("gpu_uuid", "string", "the GPU's UUID"),
    ("variant", "category", "the GPU's variant that night"),
    ("driver_version", "string", "the driver that night"),
    ("power_limit_w", "float64", "the power limit that night, watts"),
    ("benchmark", "string", "the GPU's series: configuration and harness, e.g. "
                            '"bf16 8192x8192x8192 sustained soaked cold-L2 concurrent '
                            'harness 1.3.0"; missing on a night without results'),
    ("tflops", "float64", "the GPU's median TFLOP/s in that series that night"),
)

FINDING_COLUMNS = _columns(
    ("kind", "category", "mismatch, gap, cooling, drift, straggler, regression, duplicate, "
                         "health, hostlink, peer, shortfall, contention, corruption, "
                         "job_shortfall, network, not_measured, host_limit, storage or "
                         "bulletin"),
    ("side", "category", '"provider" (what to dispute), "renter" (what the renter\'s '
                         'own side disturbed: measure again once fixed) or "unsettled" '
                         "(not settled: measure again)"),
    ("provider", "category", "the provider the finding is about"),
    ("title", "string", "what to act on, in one line: what, where, how far off"),
    ("cause", "string", "the likely cause in a few words, where one was seen ('one "
                        "machine listed twice'); missing for none"),
    ("evidence", "string", "what it rests on: GPUs, hosts, intervals, the rule"),
    ("details", "object", "the evidence's items, a list, one per line (each outlying "
                          "figure, each difference); empty for none"),
)

NOT_MEASURED_COLUMNS = _columns(
    ("provider", "category", "the provider the host was rented from"),
    ("host", "string", "the host's name in the inventory"),
    ("run_id", "int64", "the run the document was stored under"),
    ("document_id", "int64", "the document that carries the error"),
    ("collected_at", "datetime", "when the agent collected it"),
    ("gpu_index", "Int64", "the GPU the stage failed on; missing for the host's"),
    ("stage", "string", 'the agent\'s stage: "benchmark", "node", "job", ...'),
    ("party", "category", '"provider" (theirs to explain), "renter" (yours to fix), '
                          '"unsettled", or "none" (information: no GPU, a rerun that could '
                          "not run)"),
    ("cause", "string", "what the document says happened, in a line"),
    ("action", "string", "what to do about it"),
    ("source", "string", "the rule that judged it and the facts it read"),
    ("message", "string", "the agent's own words"),
)

CLUSTER_COLUMNS = _columns(
    ("cluster", "string", "the cluster (the inventory's `cluster:`)"),
    ("provider", "category", "its provider"),
    ("run_id", "string", "the cluster run the step belongs to (one `fleet cluster run` or "
                         "probe)"),
    ("started_at", "datetime", "when the step started"),
    ("step", "string", "the step's id"),
    ("kind", "string", '"cluster" (every node at once), "pair" or "suspect"'),
    ("round", "Int64", "the pair round; missing for the whole-cluster step"),
    ("hosts", "string", "the step's nodes, the rendezvous node first, space-separated"),
    ("ranks_per_node", "int64", "ranks (GPUs) each node ran"),
    ("backend", "string", '"nccl" or "gloo"'),
    ("transport", "string", "NCCL's network as its log said: \"IB GDRDMA\", \"Socket\""),
    ("all_reduce_gbs", "float64", "the all-reduce's bus bandwidth at its largest size, GB/s"),
    ("all_gather_gbs", "float64", "the all-gather's, GB/s"),
    ("reduce_scatter_gbs", "float64", "the reduce-scatter's, GB/s (the whole cluster's step "
                                      "alone)"),
    ("all_to_all_gbs", "float64", "the all-to-all's, GB/s (the whole cluster's step alone)"),
    ("expected_gbs", "float64", "what the pair's fabric should give (the lesser node's "
                                "Active ports x rate), GB/s; missing where nothing says"),
    ("share", "float64", "the judged figure over expected_gbs"),
    ("passed", "boolean", "at least 90% of expected_gbs; missing where not judged"),
    ("cause", "string", "why it is short, or the step's error"),
    ("whose", "string", '"provider", "renter" or "unsettled" for a pair that did not pass'),
    ("error", "string", "why the step failed; missing where it ran"),
)


def _describe(columns: Sequence[Column]) -> str:
    # Indented as the docstrings' examples are, so that help() shows them under "Columns:".
    return "\n".join(f"            {c.name} ({c.dtype}): {c.description}" for c in columns)


def _utc(value: When | None, what: str, end_of_day: bool = False) -> dt.datetime | None:
    """A point in time from a datetime, a date or ISO 8601 text; naive means UTC. A bare
    date ends at the end of that day where `end_of_day` (an `until`), as in the CLI."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise InputError(f"{what}={value!r} is not a date or time: give '2026-11-01', "
                             "'2026-11-01T03:00:00+00:00' or a datetime") from None
        bare = len(value.strip()) == 10
    elif isinstance(value, dt.datetime):
        # A plain datetime, also from a subclass (pandas' Timestamp), for the drivers.
        parsed = dt.datetime(value.year, value.month, value.day, value.hour, value.minute,
                             value.second, value.microsecond, value.tzinfo)
        bare = False
    else:
        parsed, bare = dt.datetime.combine(value, dt.time(0)), True
    if bare and end_of_day:
        parsed += dt.timedelta(days=1) - dt.timedelta(microseconds=1)
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def _names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _guarded(method: Callable[P, R]) -> Callable[P, R]:
    """The driver's errors as a StoreError naming the store (password hidden) and the fix."""

    @wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        store = args[0]
        assert isinstance(store, Store)
        with database_errors(store.location):
            return method(*args, **kwargs)

    return wrapper


class Store:
    """A fleet store (SQLite or PostgreSQL), read back as DataFrames; see the module's
    docstring. Opened on first use, at the newest schema (an empty database gets it)."""

    def __init__(self, url: str | os.PathLike[str] | None = None) -> None:
        # Resolved now, so that a bad URL fails here; connected on first use.
        self._url = None if url is None else os.fspath(url)
        self.location: Location = resolve(self._url)
        self._engine: Engine | None = None
        self._created = False

    def __repr__(self) -> str:
        return f"Store({str(self.location)!r})"

    def __str__(self) -> str:
        return str(self.location)

    def __enter__(self) -> Store:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, the schema checked (and created in an empty database)."""
        return self.open()

    @property
    def created(self) -> bool:
        """Whether opening this store gave an empty database fleet's schema."""
        self.open()
        return self._created

    def open(self) -> Engine:
        """Connect, and bring an empty database to the newest schema; a stale one is a
        StoreError saying to run `fleet db upgrade`."""
        if self._engine is None:
            engine = open_engine(self.location)
            try:
                with database_errors(self.location):
                    self._created = ensure_schema(engine, self.location)
            except BaseException:
                engine.dispose()
                raise
            self._engine = engine
        return self._engine

    def close(self) -> None:
        """Close the store's connections; it opens again on the next use."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    # --- the database -------------------------------------------------------------------

    @contextmanager
    def _bare(self) -> Iterator[Engine]:
        """An engine that neither checks nor creates the schema (`fleet db`'s own)."""
        engine = open_engine(self.location)
        try:
            with database_errors(self.location):
                yield engine
        finally:
            engine.dispose()

    def exists(self) -> bool:
        """False for a SQLite file not there yet (nothing is created to find out); a
        server's database is taken to exist."""
        path = self.location.sqlite_path
        return path is None or path.exists()

    def schema(self) -> SchemaState:
        """The schema's revision, the newest this fleet knows, and whether the database
        has tables; creates nothing (`fleet db current`).

        Example: `fleet.Store("team.db").schema().current` is True at the newest revision.
        """
        with self._bare() as engine:
            return inspect_schema(engine)

    def upgrade(self) -> tuple[SchemaState, SchemaState]:
        """Bring the schema to this fleet's newest revision, in one transaction
        (`fleet db upgrade`); the states before and after.

        Example: `before, after = fleet.Store().upgrade()`.
        """
        with self._bare() as engine:
            before = inspect_schema(engine)
            return before, upgrade_schema(engine)

    @_guarded
    def prune_samples(self, keep_days: int) -> Pruned:
        """Empty the raw samples of results collected more than `keep_days` days ago
        (`fleet db prune`); their statistics stay.

        Example: `fleet.Store().prune_samples(30).results` results were emptied.
        """
        from fleet.store.prune import prune_samples

        return prune_samples(self.engine, keep_days)

    @_guarded
    def repair(self, check: bool = False) -> Repair:
        """Compare the per-GPU series the report reads (fleet/store/series.py) with the
        stored results and, unless `check`, rebuild them where they disagree, in one
        transaction (`fleet db repair`). Reads every result: about a minute for 2.4 million.

        Example: `fleet.Store().repair(check=True).problems` is empty where they agree.
        """
        return repair_series(self.engine, check)

    @_guarded
    def ingest(self, files: Sequence[str | os.PathLike[str]], *, provider: str = "unknown",
               host: str | None = None, sweep: str | None = None, jobs: int | None = None,
               on_item: Callable[[Item], None] | None = None,
               counts: Counter[str] | None = None) -> Counter[str]:
        """Store agent documents from files, all in one run (`fleet ingest`): each file is
        JSON lines or one JSON document, "-" standard input. A document is stored once
        however often given; a file that fails validation is rejected whole, the others
        stored. Counts by outcome ("stored", "already stored", "rejected"), also kept in
        `counts` as they come so that an interrupted caller knows them; `on_item` hears
        each file once its fate is committed.

        Example: `fleet.Store().ingest(["gpu-01.jsonl"], provider="lambda")["stored"]`.
        """
        from fleet.store.ingest import Ingest, Origin, RunInfo
        from fleet.store.intake import BATCH_DOCUMENTS, default_jobs, ingest_files

        counts = Counter() if counts is None else counts
        with Ingest(self.engine, RunInfo(sweep=sweep)) as run:
            # SQLite has one writer at a time, so a batch waits for the lock and cannot
            # deadlock; on PostgreSQL two batches holding rows the other wants do (seen in
            # tests/store/test_concurrency.py), while single documents take their locks
            # in one order (fleet/store/ingest.py).
            batch = BATCH_DOCUMENTS if self.location.is_sqlite else 1
            return ingest_files(run, [os.fspath(name) for name in files],
                                Origin(provider=provider, host=host), batch=batch,
                                jobs=jobs or default_jobs(), on_item=on_item or _ignore,
                                counts=counts)

    # --- results ------------------------------------------------------------------------

    @_guarded
    def result_filter(self, *, provider: str | None = None, variant: str | None = None,
                      host: str | None = None, since: When | None = None,
                      sweep: str | None = None, stack: str | None = None) -> ResultFilter:
        """The query layer's filter for these options; a variant is matched as listings
        spell it ("H100 SXM5 80GB" finds "H100-SXM5-80GB"), and one not stored is an
        InputError listing those that are."""
        return ResultFilter(provider=provider, host=host, since=_utc(since, "since"),
                            sweep=sweep, stack=stack or None,
                            variants=stored_variants(self.engine, _names(variant)))

    @_guarded
    def result_rows(self, where: ResultFilter, limit: int | None = None) -> list[ResultRow]:
        """Results matching `where`, newest first, as the query layer's rows (what
        `fleet results` prints): `store.result_rows(store.result_filter(host="gpu-01"), 10)`."""
        return list_results(self.engine, where, limit)

    @_guarded
    def count_results(self, where: ResultFilter) -> int:
        """How many results match `where`: `store.count_results(ResultFilter())`."""
        return count_results(self.engine, where)

    @_guarded
    def summary_rows(self, where: ResultFilter) -> list[VariantSummary]:
        """Per provider, variant and benchmark configuration, the median of per-GPU medians
        (`fleet results --summary`): `store.summary_rows(store.result_filter())`."""
        return summarise_variants(self.engine, where)

    @_guarded
    def results(self, *, provider: str | None = None, variant: str | None = None,
                host: str | None = None, since: When | None = None,
                until: When | None = None, sweep: str | None = None,
                stack: str | None = None, latest: bool = False) -> pd.DataFrame:
        """Benchmark results as a DataFrame, newest first, one row per GPU per result.

        Filters: `provider` and `host` exact, `variant` as listings spell it, `since` and
        `until` (inclusive; datetimes, dates or ISO text, naive means UTC, a bare date as
        `until` covers that day) on when the agent collected, `sweep` by name, `stack` a
        part of the software stack's label; `latest` keeps only each GPU's newest result
        under each benchmark configuration. Results of one machine listed twice are kept
        here (the report leaves them out); filter on `correctness_failed` before taking
        speeds.

        Example (per-GPU medians, then the provider's median, as the report compares):

            store = fleet.Store()
            df = store.results(variant="H100 SXM5 80GB", since="2026-11-01")
            soaked = df[(df.thermal == "soaked") & ~df.correctness_failed]
            per_gpu = soaked.groupby(["provider", "host", "gpu_index"], observed=True).tflops
            per_gpu.median().groupby("provider", observed=True).median()

        Columns:
        """
        where = self.result_filter(provider=provider, variant=variant, host=host,
                                   since=since, sweep=sweep, stack=stack)
        last = _utc(until, "until", end_of_day=True)
        rows = [row for row in list_results(self.engine, where)
                if last is None or row.collected_at <= last]
        if latest:
            rows = _newest_per_gpu(rows)
        extra = self._result_extras([row.id for row in rows])
        return _frame(RESULT_COLUMNS, (_result_record(row, extra.get(row.id)) for row in rows))

    def _result_extras(self, ids: Sequence[int]
                       ) -> dict[int, tuple[int, str | None, float | None, str | None]]:
        """Per result: its run, its GPU's form factor and its host's listed price then."""
        r = BenchmarkResult
        found: dict[int, tuple[int, str | None, float | None, str | None]] = {}
        with self.engine.connect() as conn:
            for chunk in in_chunks(sorted(ids)):
                for row in conn.execute(
                        select(r.id, r.probe_run_id, Fingerprint.form_factor,
                               RunHost.price_per_gpu_hour, RunHost.currency)
                        .outerjoin(Fingerprint, Fingerprint.id == r.fingerprint_id)
                        .outerjoin(RunHost, and_(RunHost.probe_run_id == r.probe_run_id,
                                                 RunHost.host_id == r.host_id))
                        .where(r.id.in_(chunk))):
                    found[int(row[0])] = (int(row[1]), row[2], row[3], row[4])
        return found

    @_guarded
    def node_results(self, *, provider: str | None = None, variant: str | None = None,
                     host: str | None = None, since: When | None = None,
                     until: When | None = None, sweep: str | None = None,
                     stack: str | None = None, latest: bool = False,
                     kind: str | Sequence[str] | None = None,
                     run: int | None = None) -> pd.DataFrame:
        """The node suite's figures, one row each: every GPU's memory copy and host link
        (pinned and pageable, each way), every pair's copy one way and both ways at once,
        and the node's all-reduce by size; the newest document first.

        Filters as `results`, and `kind` (one or several of "memory_copy",
        "host_to_device", "device_to_host", "peer_copy", "allreduce") and `run`; `stack`
        is a part of the stack's label ("NCCL 2.28"); `latest` keeps only each host's
        newest document with node figures. A figure compares only with figures of its
        own configuration: kind, size_bytes, direction, memory, gpus_in_run, dtype and
        stack (and suite_version) are its columns, to group by.

        Example (each provider's pinned host-to-device GB/s, per GPU, against the
        datasheet):

            node = fleet.Store().node_results(kind="host_to_device", latest=True)
            pinned = node[node.memory == "pinned"]
            (pinned.gbs / pinned.datasheet_gbs).groupby(pinned.provider, observed=True).median()

        Columns:
        """
        variants = stored_variants(self.engine, _names(variant))
        frame = read_node_results(self.engine, provider=provider, variant=variants or None,
                                  since=_utc(since, "since"),
                                  until=_utc(until, "until", end_of_day=True), kind=kind,
                                  host=host, run=run, sweep=sweep)
        if stack:
            frame = frame[frame["stack"].str.contains(stack, case=False, regex=False)]
        if latest:
            # Newest first: a host's first document is its newest.
            newest = frame.drop_duplicates(["provider_id", "host_id"])["document_id"]
            frame = frame[frame["document_id"].isin(newest)]
        return frame.reset_index(drop=True)

    @_guarded
    def jobs(self, *, provider: str | None = None, variant: str | None = None,
             host: str | None = None, since: When | None = None, until: When | None = None,
             sweep: str | None = None, stack: str | None = None, run: int | None = None,
             latest: bool = False) -> pd.DataFrame:
        """The job suite's figures, one row per GPU, workload (a transformer's training
        step or decode step) and attention backend: tokens a second, TFLOP/s and MFU, and
        for decode the GB/s read and its share of the HBM datasheet figure; the newest
        document first.

        Filters as `results`, and `run`; `stack` is a part of the configuration's stack
        ("cuDNN 91002", "torch 2.13"); `latest` keeps only each host's newest document
        with job figures. A figure compares only with figures of its own configuration:
        group by `config` (the suite's major.minor, workload, model, shape, dtype,
        attention, compile, graph, optimizer, concurrency, GPUs in the run, thermal state
        and the torch, CUDA and cuDNN stack), never across it.

        Example (each provider's training tokens a second per GPU, flash attention,
        within one configuration):

            jobs = fleet.Store().jobs(variant="H100 SXM5 80GB", latest=True)
            train = jobs[(jobs.workload == "train") & (jobs.attention == "flash")]
            train.groupby(["config", "provider"], observed=True)["tokens_per_s"].median()

        Columns:
        """
        variants = stored_variants(self.engine, _names(variant))
        frame = read_jobs(self.engine, provider=provider, variant=variants or None,
                          since=_utc(since, "since"),
                          until=_utc(until, "until", end_of_day=True), host=host, run=run,
                          sweep=sweep)
        if stack:
            stacks = frame["config"].str.rsplit("; ", n=1).str[-1]
            frame = frame[stacks.str.contains(stack, case=False, regex=False)]
        if latest:
            # A host's newest document is the one collected last.
            newest = frame.groupby(["provider", "host"], observed=True, sort=False)[
                "collected_at"].transform("max")
            frame = frame[frame["collected_at"] == newest]
        return frame.reset_index(drop=True)

    # --- fingerprints and runs ----------------------------------------------------------

    @_guarded
    def fingerprints(self, *, provider: str | None = None, variant: str | None = None,
                     host: str | None = None, since: When | None = None,
                     until: When | None = None, sweep: str | None = None,
                     latest: bool = False) -> pd.DataFrame:
        """What each GPU looked like in each stored document, newest first.

        Filters as `results` (`variant` matched as listings spell it); `latest` keeps only
        each host's newest document. `health` is a value on every row: a card fingerprinted
        before the agent read the health counters says "not read" rather than missing, so
        that counting verdicts (`value_counts`, `groupby`) never drops it or takes it for
        healthy.

        Example (which power limits each provider's H100s run at; which cards are unwell):

            fp = fleet.Store().fingerprints(variant="H100 SXM5 80GB", latest=True)
            fp.groupby("provider", observed=True).power_limit_w.value_counts()
            fp[fp.health.isin(["failing", "degraded"])][["host", "gpu_index",
                                                         "health_reasons"]]

        Columns:
        """
        f, d = Fingerprint, Document
        compared = [getattr(f, c.name) for c in _STORED_FINGERPRINT]
        stmt = (select(d.id, d.probe_run_id, d.collected_at, Provider.name, Host.name,
                       ProbeRun.sweep, f.gpu_index, Gpu.uuid, *compared, f.mig_devices,
                       f.capabilities, f.health, f.health_reasons, f.health_action)
                .select_from(f).join(d, d.id == f.document_id).join(Host, Host.id == d.host_id)
                .join(Provider, Provider.id == Host.provider_id)
                .join(ProbeRun, ProbeRun.id == d.probe_run_id).join(Gpu, Gpu.id == f.gpu_id))
        variants = stored_variants(self.engine, _names(variant))
        first, last = _utc(since, "since"), _utc(until, "until", end_of_day=True)
        for column, value in ((Provider.name, provider), (Host.name, host),
                              (ProbeRun.sweep, sweep)):
            if value is not None:
                stmt = stmt.where(column == value)
        if variants:
            stmt = stmt.where(f.variant.in_(variants))
        if first is not None:
            stmt = stmt.where(d.collected_at >= first)
        if last is not None:
            stmt = stmt.where(d.collected_at <= last)
        stmt = stmt.order_by(d.collected_at.desc(), Provider.name, Host.name, d.id.desc(),
                             f.gpu_index)
        with self.engine.connect() as conn:
            rows = [tuple(row) for row in conn.execute(stmt)]
        if latest:
            newest: dict[tuple[str, str], int] = {}
            for row in rows:  # newest first: the first document seen of a host is its newest
                newest.setdefault((row[3], row[4]), row[0])
            rows = [row for row in rows if newest[(row[3], row[4])] == row[0]]
        return _frame(FINGERPRINT_COLUMNS, (_settings(row) for row in rows))

    @_guarded
    def runs(self, *, kind: str | None = None, sweep: str | None = None) -> pd.DataFrame:
        """Every probe, sweep and ingest run, oldest first, with how its hosts ended.

        Example (the nights of the sweep "nightly" that left hosts failed):

            runs = fleet.Store().runs(sweep="nightly")
            runs[runs.failed > 0][["run", "started_at", "failed"]]

        Columns:
        """
        stmt = select(ProbeRun.id, ProbeRun.kind, ProbeRun.sweep, ProbeRun.inventory,
                      ProbeRun.controller_version, ProbeRun.agent_version,
                      ProbeRun.started_at, ProbeRun.ended_at, ProbeRun.finished_at)
        if kind is not None:
            stmt = stmt.where(ProbeRun.kind == kind)
        if sweep is not None:
            stmt = stmt.where(ProbeRun.sweep == sweep)
        stored = case((RunHost.status == "stored", 1), else_=0)
        with self.engine.connect() as conn:
            runs = conn.execute(stmt.order_by(ProbeRun.id)).all()
            hosts = {row[0]: (int(row[1]), int(row[2] or 0)) for row in conn.execute(
                select(RunHost.probe_run_id, func.count(RunHost.id), func.sum(stored))
                .group_by(RunHost.probe_run_id))}
            documents = {row[0]: int(row[1]) for row in conn.execute(
                select(Document.probe_run_id, func.count(Document.id))
                .group_by(Document.probe_run_id))}
        records = []
        for run in runs:
            settled, ok = hosts.get(run[0], (0, 0))
            records.append((*run, settled, ok, settled - ok, documents.get(run[0], 0)))
        return _frame(RUN_COLUMNS, records)

    @_guarded
    def cluster_pairs(self, *, cluster: str | None = None, provider: str | None = None,
                      latest: bool = True) -> pd.DataFrame:
        """The steps between a cluster's nodes, a row a step, judged against the fabric
        (docs/cluster.md): each cluster's newest run, or every run with `latest=False`.

        Example (the pairs that fell short, and whose they are):

            pairs = fleet.Store().cluster_pairs()
            pairs[pairs.passed == False][["cluster", "hosts", "all_reduce_gbs",
                                          "expected_gbs", "cause", "whose"]]

        Columns:
        """
        from fleet.analysis.cluster.judgement import transport_words
        from fleet.analysis.cluster.stored import judge_run
        from fleet.model.step import OPS
        from fleet.store.cluster import read_cluster_runs

        records = []
        for run in read_cluster_runs(self.engine, cluster, latest,
                                     providers=_names(provider)):
            verdicts = {v.step_id: v for v in judge_run(self.engine, run).pairs}
            for result in run.results:
                verdict = verdicts.get(result.step_id)
                largest = {op: max((f for f in result.figures if f.op == op),
                                   key=lambda f: f.size_bytes, default=None)
                           for op in OPS}
                records.append((
                    run.cluster, run.provider, run.run_id, run.started_at, result.step_id,
                    result.kind, result.round, " ".join(result.hosts),
                    result.ranks_per_node, result.backend,
                    transport_words(result),
                    *(None if f is None else f.busbw_gbs for f in largest.values()),
                    *((verdict.expected_gbs, verdict.share, verdict.passed, verdict.cause,
                       verdict.whose) if verdict else (None, None, None, None, None)),
                    result.error))
        return _frame(CLUSTER_COLUMNS, records)

    @_guarded
    def nights(self, sweep: str, limit: int = HISTORY_NIGHTS) -> pd.DataFrame:
        """The sweep's newest `limit` nights that ended, oldest first: one row per GPU and
        benchmark series a night (a host with no GPUs that night, one row).

        These are the figures regressions are judged on (fleet/analysis/sweep/history.py): a
        GPU's median per night and series. A sweep never stored is an InputError naming those
        that are.

        Example (each provider's median over the nights):

            nights = fleet.Store().nights("nightly")
            nights.pivot_table("tflops", "started_at", "provider", "median", observed=True)

        Columns:
        """
        with self.engine.connect() as conn:
            names = sorted(name for name in conn.execute(
                select(ProbeRun.sweep).where(ProbeRun.kind == "sweep").distinct()).scalars()
                if name is not None)
        if sweep not in names:
            raise InputError(f"no sweep named {sweep!r} is stored; the stored sweeps are "
                             f"{', '.join(names) or 'none yet (run `fleet sweep INVENTORY`)'}")
        records: list[tuple[Any, ...]] = []
        for night in read_nights(self.engine, sweep, limit=limit):
            for key in sorted(night.hosts):
                h = night.hosts[key]
                head = (night.run_id, night.started_at, h.provider, h.host, h.status,
                        None if h.mismatches is None else "; ".join(h.mismatches))
                if not h.gpus:
                    records.append((*head, *([None] * 7)))
                for gpu in h.gpus:
                    facts = (gpu.index, gpu.uuid, gpu.variant,
                             gpu.config.get("driver_version"), gpu.config.get("power_limit_w"))
                    series: list[tuple[str | None, float | None]] = [
                        *sorted(gpu.tflops.items())] or [(None, None)]
                    records += [(*head, *facts, label, value) for label, value in series]
        return _frame(NIGHT_COLUMNS, records)

    # --- the report ---------------------------------------------------------------------

    @_guarded
    def report(self, *, sweep: str | None = None, since: When | None = None,
               until: When | None = None, runs: int | Sequence[int] = (),
               providers: str | Sequence[str] = (), variants: str | Sequence[str] = (),
               anonymize: bool = False, gap_threshold: float = 0.02,
               straggler_threshold: float = 0.03, across_stacks: bool = False) -> Report:
        """The procurement report (`fleet report`) as its typed findings: `report.gaps`,
        `.mismatches`, `.cooling_findings`, `.stragglers`, `.drift`, `.shared`, `.cost`
        (with each offer's price of an effective PFLOP-hour), `.buy` and `.dispute`.

        Options as `fleet report`'s; `variants` matched as listings spell them.

        Example (each systematic gap, and what differs between the two providers):

            report = fleet.Store().report(since="2026-11-01", variants="H100 SXM5 80GB")
            for gap in report.gaps:
                print(gap.slower, gap.faster, f"{gap.gap:.1%}", gap.evidence)
        """
        first, last = _utc(since, "since"), _utc(until, "until", end_of_day=True)
        if first is not None and last is not None and first > last:
            raise InputError("since is after until: nothing can be in between")
        chosen = (runs,) if isinstance(runs, int) else tuple(runs)
        options = ReportOptions(
            scope=Scope(sweep=sweep, since=first, until=last, runs=tuple(sorted(set(chosen))),
                        providers=_names(providers),
                        variants=stored_variants(self.engine, _names(variants))),
            anonymize=anonymize, gaps=GapOptions(threshold=gap_threshold),
            stragglers=StragglerOptions(threshold=straggler_threshold),
            across_stacks=across_stacks)
        return build_report(self.engine, options, str(self.location))

    def findings(self, **options: Any) -> pd.DataFrame:
        """What the report says to dispute (`side` "provider"), then what the renter's own
        side disturbed (`side` "renter"), one row per finding, in its order: duplicates,
        health (each failing or degraded GPU, and once per provider its GPUs whose health
        the driver could not tell), mismatches, gaps, cooling, stragglers, and power-limit
        drift (the report's other drift and the sweep's regressions are on `report()` and
        `nights()`).

        Takes `report()`'s options. Example (the gaps against one provider):

            found = fleet.Store().findings(since="2026-11-01")
            found[(found.kind == "gap") & (found.provider == "beta")].evidence

        Columns:
        """
        report = self.report(**options)
        return _frame(FINDING_COLUMNS, ((f.kind, side, f.provider, f.title, f.cause,
                                         f.evidence, list(f.details))
                                        for side, f in report.listed()))

    @_guarded
    def not_measured(self, *, provider: str | None = None, host: str | None = None,
                     since: When | None = None, until: When | None = None,
                     sweep: str | None = None, run: int | None = None) -> pd.DataFrame:
        """What each host's newest document (among those the filters select) could not
        measure: one row per error it carries, judged (fleet/analysis/health/not_measured.py):
        out of memory because of a process the run could see is the renter's, memory in
        use with none the provider's; a GPU with a row here is not measured in that stage,
        whatever its other figures say.

        Example (the GPUs whose job failed, and whose that is):

            missed = fleet.Store().not_measured()
            missed[missed.stage == "job"][["host", "gpu_index", "party", "cause"]]

        Columns:
        """
        documents = newest_documents(self.engine, provider=provider, host=host,
                                     since=_utc(since, "since"),
                                     until=_utc(until, "until", end_of_day=True),
                                     sweep=sweep, run=run)
        records = []
        for e in read_errors(self.engine, documents):
            item = judge_failure(e.stage, e.gpu_index, e.message, stored_memory(
                e.memory_total_mib, e.memory_used_mib, e.processes))
            records.append((e.provider, e.host, e.run_id, e.document_id, e.collected_at,
                            e.gpu_index, e.stage, item.party, item.cause, item.action,
                            item.source, e.message))
        return _frame(NOT_MEASURED_COLUMNS, records)

    # --- probing ------------------------------------------------------------------------

    def probe(self, inventory: str | Path | LoadedInventory,
              options: ProbeOptions | None = None,
              observe: Observer | None = None) -> ProbeReport:
        """Probe every host of `inventory` (a file or a loaded one) into this store, as
        `fleet probe` does, printing nothing: each host's outcome is on the report's
        `hosts`, its results then in `results()`. Options default to `fleet probe`'s
        (benchmark soaked); `observe(target, stage, message)` hears progress.

        Example (fingerprint only, then what was found):

            store = fleet.Store("fleet.db")
            done = store.probe("inventory.yaml", fleet.ProbeOptions(bench=None))
            [h.target.key for h in done.failed], store.fingerprints(latest=True)
        """
        from fleet.probe.run import probe as run_probe

        loaded = (inventory if isinstance(inventory, LoadedInventory)
                  else load_inventory(Path(inventory)))
        # The probe opens the store from the same text the user gave, so it resolves as
        # `fleet probe --db` would and reports the same origin.
        return run_probe(loaded, options or ProbeOptions(bench=BenchOptions()), self._url,
                         observe)


def _json(value: Any) -> Any:
    """A JSON column as the driver gave it: decoded on PostgreSQL, text on SQLite."""
    return json.loads(value) if isinstance(value, str | bytes) else value


_VERDICTS = {"yes": True, "no": False}
_SETTINGS = tuple(c.name.removeprefix("may_set_") for c in FINGERPRINT_COLUMNS
                  if c.name.startswith("may_set_"))


def _settings(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A fingerprint row with its MIG profiles as a list, its capabilities spread out
    into one column per setting, and its health "not read" where it was not."""
    migs, capabilities = _json(row[-5]), _json(row[-4]) or {}
    return (*row[:-5], list(migs or ()),
            *(_VERDICTS.get(str(capabilities.get(name))) for name in _SETTINGS),
            row[-3] or NOT_READ, list(_json(row[-2]) or ()), row[-1])


def _ignore(item: Item) -> None:
    pass


def _newest_per_gpu(rows: list[ResultRow]) -> list[ResultRow]:
    """Each GPU's newest result under each configuration (`rows` are newest first)."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for row in rows:
        gpu = row.gpu_uuid or f"{row.provider}/{row.host}/{row.gpu_index}"
        key = (gpu, row.dtype, row.m, row.n, row.k, row.mode, row.cache, row.thermal,
               row.concurrency, row.harness_version, row.stack)
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


_ROW_FIELDS = [f.name for f in fields(ResultRow)]


def _result_record(row: ResultRow, extra: tuple[int, str | None, float | None, str | None]
                   | None) -> tuple[Any, ...]:
    run, form_factor, price, currency = extra or (None, None, None, None)
    values: dict[str, Any] = defaultdict(lambda: None, zip(_ROW_FIELDS, (
        getattr(row, name) for name in _ROW_FIELDS), strict=True))
    values.update(result=row.id, run=run, form_factor=form_factor, price_per_gpu_hour=price,
                  currency=currency)
    values.update({flag: flag in row.flags for flag in FLAGS})
    return tuple(values[c.name] for c in RESULT_COLUMNS)


# Each frame's columns, listed once, at the end of its method's docstring.
for _method, _spec in ((Store.results, RESULT_COLUMNS), (Store.fingerprints,
                                                         FINGERPRINT_COLUMNS),
                       (Store.runs, RUN_COLUMNS), (Store.nights, NIGHT_COLUMNS),
                       (Store.findings, FINDING_COLUMNS),
                       (Store.node_results, NODE_COLUMNS), (Store.jobs, JOB_COLUMNS),
                       (Store.cluster_pairs, CLUSTER_COLUMNS),
                       (Store.not_measured, NOT_MEASURED_COLUMNS)):
    _method.__doc__ = (_method.__doc__ or "").rstrip() + "\n" + _describe(_spec) + "\n"
