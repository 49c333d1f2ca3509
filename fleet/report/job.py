"""The report's job section (issue 37, "What a GPU-hour buys for a real job"): each
provider's training and decode figures per variant and job configuration beside the
matmul of the same GPUs in the same runs, the cost of a million tokens, and the job's
findings (its shortfall against the matmul, stragglers, provider gaps) and synchronous
figures.

    jobs = read_jobs(engine, scope)             # before anonymizing: real names
    section = job_section(jobs.anonymized(names), listings, gaps, stragglers)

One finding per cause: a GPU named for its job's shortfall against its matmul is not
named again as a straggler of its node on the same configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from fleet.analysis.compare import GapOptions
from fleet.analysis.dataset import Aliases, Config, Listing, Scope, SharedHosts
from fleet.analysis.job import whose as job_whose
from fleet.analysis.job.compare import (
    JobComparison,
    JobStraggler,
    JobSync,
    compare_job_providers,
    find_job_stragglers,
    job_sync_nodes,
)
from fleet.analysis.job.cost import JobRow, job_table
from fleet.analysis.job.figures import (
    MATMUL_COLUMNS,
    JobConfig,
    JobExcluded,
    JobGpu,
    JobShortfall,
    JobShortfallOptions,
    find_job_shortfalls,
    job_gpus,
    left_out,
)
from fleet.analysis.job.whose import anonymized_suspects
from fleet.analysis.matmul.stragglers import StragglerOptions
from fleet.store import series
from fleet.store.config import CONFIG_COLUMNS, STACK_COLUMNS
from fleet.store.job import frame as job_frame
from fleet.store.models import Host, Provider
from fleet.store.query import software_stack

# A finding: (kind, provider, title, evidence, cause, details), as NodeSection's.
FindingTuple = tuple[str, str, str, str, str | None, tuple[str, ...]]

# Per configuration, the report's per-GPU table lists this many GPUs (the slowest on the
# job against their matmul first); the JSON form carries every one.
GPU_ROWS = 64


@dataclass(frozen=True)
class JobOptions:
    """The job section's own rule (its stragglers and gaps take the report's options)."""

    shortfall: JobShortfallOptions = field(default_factory=JobShortfallOptions)


@dataclass(frozen=True, eq=False)  # eq=False: a frame has no single truth value
class JobInput:
    """The job results in the report's scope (fleet/store/job.py's frame) and the soaked
    matmul figure of each of their GPUs in the same run (MATMUL_COLUMNS)."""

    frame: pd.DataFrame
    matmul: pd.DataFrame
    # (provider, host, run) where another host answered with the same GPUs: left out.
    shared: frozenset[tuple[str, str, int]] = frozenset()

    def pairs(self) -> set[tuple[str, str]]:
        """Every (provider, host) the job results name: what aliases must cover."""
        return set(zip(self.frame["provider"].astype(str).tolist(),
                       self.frame["host"].astype(str).tolist(), strict=True))

    def anonymized(self, names: Aliases) -> JobInput:
        """Providers and hosts by their aliases; GPU UUIDs and what contention named
        (process names, users) dropped."""
        def hidden(rows: pd.DataFrame, extra: tuple[str, ...]) -> pd.DataFrame:
            rows = rows.copy()
            providers, hosts = rows["provider"].astype(str), rows["host"].astype(str)
            rows["host"] = [names.host(p, h) for p, h in zip(providers, hosts, strict=True)]
            rows["provider"] = [names.provider(p) for p in providers]
            for column in extra:
                rows[column] = None
            return rows
        frame = hidden(self.frame, ("gpu_uuid", "contention"))
        if "job_suspects" in frame:
            frame["job_suspects"] = frame["job_suspects"].map(anonymized_suspects)
        return JobInput(frame,
                        hidden(self.matmul, ()),
                        frozenset((names.provider(p), names.host(p, h), run)
                                  for p, h, run in self.shared))


def _matmul_config(key: tuple[Any, ...]) -> Config:
    """The matmul Config of a series key ((gpu_id, *series.KEY_COLUMNS))."""
    values = dict(zip(("gpu_id", *series.KEY_COLUMNS), key, strict=True))
    return Config(**{name: values[name] for name in CONFIG_COLUMNS},
                  stack=software_stack(*(values[name] for name in STACK_COLUMNS)))


def _matmul(engine: Engine, runs: list[int]) -> pd.DataFrame:
    """The soaked matmul figure of each GPU in each of `runs` (MATMUL_COLUMNS): correct,
    not contended, soaked; where a GPU ran several configurations of one dtype in a run,
    the sustained cold-L2 one first, then the largest (the default benchmark, 8192³)."""
    empty = pd.DataFrame({name: [] for name in MATMUL_COLUMNS})
    if not runs:
        return empty
    with engine.connect() as conn:
        found = series.read(conn, series.Filter(runs=frozenset(runs), only_gpus_of_runs=True))
        providers = dict(conn.execute(select(Provider.id, Provider.name)).all())
        hosts = dict(conn.execute(select(Host.id, Host.name)).all())
    if not len(found.records):
        return empty
    configs = [_matmul_config(key) for key in found.keys]
    failed = [bool(values[series.KEY_COLUMNS.index("correctness_failed") + 1])
              for values in found.keys]
    records, which = found.records, found.series
    usable_series = np.array([c.thermal == "soaked" and not bad
                              for c, bad in zip(configs, failed, strict=True)], dtype=bool)
    bad_flags = sum(1 << series.FLAG_COLUMNS.index(name) for name in ("contended", "not_soaked"))
    keep = usable_series[which] & ((records["flags"] & bad_flags) == 0)
    records, which = records[keep], which[keep]
    if not len(records):
        return empty
    rows = pd.DataFrame({
        "provider": [providers[i] for i in records["provider_id"].tolist()],
        "host": [hosts[i] for i in records["host_id"].tolist()],
        "run_id": records["probe_run_id"].astype("int64"),
        "gpu_index": records["gpu_index"].astype("int64"),
        "dtype": [configs[s].dtype for s in which.tolist()],
        "matmul_tflops": records["tflops"].astype(float),
        "matmul_config": [configs[s].label for s in which.tolist()],
        "_sustained": [configs[s].mode == "sustained" for s in which.tolist()],
        "_cold": [configs[s].cache == "cold" for s in which.tolist()],
        "_size": [configs[s].m * configs[s].n * configs[s].k for s in which.tolist()],
    })
    rows = rows.sort_values(["_sustained", "_cold", "_size"], ascending=False, kind="stable")
    rows = rows.drop_duplicates(["provider", "host", "run_id", "gpu_index", "dtype"])
    return rows[list(MATMUL_COLUMNS)].reset_index(drop=True)


def read_jobs(engine: Engine, scope: Scope, shared: Sequence[SharedHosts] = ()
              ) -> JobInput:
    """The job results `scope` selects, with their GPUs' matmul in the same runs; the
    runs of `shared` hosts (both of each pair) to be left out."""
    rows = job_frame(engine, since=scope.since, until=scope.until, sweep=scope.sweep)
    if scope.runs:
        rows = rows[rows["run_id"].isin(scope.runs)]
    if scope.providers:
        rows = rows[rows["provider"].astype(str).isin(scope.providers)]
    if scope.variants:
        rows = rows[rows["variant"].astype(str).isin(scope.variants)]
    rows = rows.reset_index(drop=True)
    twice = frozenset((p, h, run) for s in shared for p, h in (
        (s.provider, s.host), (s.other_provider, s.other_host)) for run in s.runs)
    return JobInput(rows, _matmul(engine, sorted(set(rows["run_id"].astype(int).tolist()))),
                    twice)


@dataclass(frozen=True)
class JobSection:
    """Everything the report shows of the job suite."""

    rows: tuple[JobRow, ...] = ()
    gpus: tuple[JobGpu, ...] = ()
    shortfalls: tuple[JobShortfall, ...] = ()
    stragglers: tuple[JobStraggler, ...] = ()
    comparisons: tuple[JobComparison, ...] = ()
    sync: tuple[JobSync, ...] = ()
    excluded: tuple[JobExcluded, ...] = ()
    options: JobOptions = field(default_factory=JobOptions)
    # Whose a short job figure is, where not the provider's (fleet/analysis/job/whose.py):
    # (provider, host, GPU index, verdict), its GPU-run's figures in `excluded`.
    whose: tuple[tuple[str, str, int, job_whose.Verdict], ...] = ()
    # (provider, configuration key, settings) whose counted figures ran under settings that
    # can move a job (fleet/analysis/job/whose.py `suspected`).
    suspected: tuple[tuple[str, str, str], ...] = ()

    def _suspects(self, comparison: JobComparison) -> str | None:
        for provider, key, settings in self.suspected:
            if (provider, key) == (comparison.slower, comparison.config.key):
                return settings
        return None

    @property
    def gaps(self) -> tuple[JobComparison, ...]:
        """The comparisons that found a systematic gap the provider answers for: not one
        whose slower side ran under settings that can move a job."""
        return tuple(c for c in self.comparisons
                     if c.systematic and self._suspects(c) is None)

    @property
    def unsettled_gaps(self) -> tuple[JobComparison, ...]:
        """Systematic gaps whose slower side ran under settings that can move a job."""
        return tuple(c for c in self.comparisons
                     if c.systematic and self._suspects(c) is not None)

    def by_config(self) -> list[tuple[JobConfig, tuple[JobRow, ...]]]:
        """The rows per configuration, training first, as the tables show them."""
        tables: dict[JobConfig, list[JobRow]] = {}
        for row in self.rows:
            tables.setdefault(row.config, []).append(row)
        return [(config, tuple(rows)) for config, rows in tables.items()]

    def laid_out(self, train: bool) -> list[tuple[JobConfig, tuple[JobRow, ...],
                                                  list[tuple[JobConfig, tuple[JobRow, ...]]]]]:
        """One workload's configurations as the report lays them out: each headline (the
        fastest backend that passed its gate) with its rows and the backends measured
        beside it, to be folded under it; a configuration with no headline of its kind
        (a suite before 1.1.0, a backend whose headline is another's) stands as its own."""
        mine = [(c, rows) for c, rows in self.by_config() if c.train == train]

        def base(c: JobConfig) -> tuple[object, ...]:
            # Not `compiled`: a compiled headline folds the eager backends beside it.
            return (c.workload, c.model, c.shape, c.dtype, c.graph,
                    c.concurrency, c.gpus_in_run, c.thermal, c.suite_version, c.stack)
        heads = [(c, rows) for c, rows in mine if c.headline]
        laid: list[tuple[JobConfig, tuple[JobRow, ...],
                         list[tuple[JobConfig, tuple[JobRow, ...]]]]] = [
            (c, rows, []) for c, rows in heads]
        home = {base(c): i for i, (c, _) in reversed(list(enumerate(heads)))}
        for c, rows in mine:
            if c.headline:
                continue
            if base(c) in home:
                laid[home[base(c)]][2].append((c, rows))
            else:
                laid.append((c, rows, []))
        return laid

    def gpus_of(self, key: str) -> tuple[JobGpu, ...]:
        """The per-GPU table's GPUs of the configuration `key`: those whose job keeps the
        least of their matmul first, at most GPU_ROWS."""
        members = [g for g in self.gpus if g.config.key == key]
        members.sort(key=lambda g: (g.kept is None, g.kept or 0.0, g.provider, g.host,
                                    g.gpu_index))
        return tuple(members[:GPU_ROWS])

    def _whose(self, party: str) -> list[FindingTuple]:
        return [("job_shortfall", provider, f"{host} GPU {gpu}: the job is short under the "
                 "run's own settings", verdict.measured, verdict.why, ())
                for provider, host, gpu, verdict in self.whose if verdict.party == party]

    def renter(self) -> list[FindingTuple]:
        """Each GPU-run whose short job a rerun without the run's settings settled as the
        renter's: said apart from what to dispute."""
        return self._whose("renter")

    def unsettled(self) -> list[FindingTuple]:
        """Each GPU-run short under settings that can move a job, never measured again
        without them: neither disputed nor the renter's, shown apart."""
        found = self._whose("unsettled")
        found += [("gap", c.slower, f"{c.slower}'s {c.config.figure} is {c.gap:.1%} lower "
                   f"than {c.faster}'s on {c.variant}", f"{c.config.label}: {c.evidence}",
                   f"{c.slower}'s figures were measured under settings that can move a job "
                   f"and not measured again without them: {self._suspects(c)}; unset them "
                   "and measure again before disputing it", ())
                  for c in self.unsettled_gaps]
        return found

    def counts(self) -> dict[str, int]:
        """Findings per `--fail-on` kind: its own, and the straggler and gap kinds it
        shares with the matmul."""
        return {"job_shortfall": len(self.shortfalls), "straggler": len(self.stragglers),
                "gap": len(self.gaps)}

    def findings(self) -> list[FindingTuple]:
        """(kind, provider, title, evidence, cause, details) of each finding."""
        found: list[FindingTuple] = [
            ("job_shortfall", s.provider, s.title, s.evidence, s.cause_words, ())
            for s in self.shortfalls]
        found += [("straggler", s.provider,
                   f"{s.host} GPU {s.gpu_index}: {_below(s.deficit)} below the rest of its "
                   f"node on the job ({s.config.figure})", f"{s.config.label}: {s.evidence}",
                   None, ()) for s in self.stragglers]
        for c in self.gaps:
            first = c.differences[0] if c.differences else None
            found.append((
                "gap", c.slower, f"{c.slower}'s {c.config.figure} is {c.gap:.1%} lower than "
                f"{c.faster}'s on {c.variant}", f"{c.config.label}: {c.evidence}",
                None if first is None else f"{first.what} {first.slower} vs {first.faster}",
                tuple(f"{d.what}: {d.slower} on {c.slower}, {d.faster} on {c.faster}"
                      for d in c.differences)))
        return found


def _below(share: float) -> str:
    return f"{share:.0%}" if share >= 0.095 else f"{share:.1%}"


def job_section(jobs: JobInput, listings: dict[tuple[str, str], Listing], gaps: GapOptions,
                stragglers: StragglerOptions, options: JobOptions | None = None
                ) -> JobSection:
    """The job section of the report: `jobs` named as the report names hosts, priced
    from `listings` ((provider, host) -> the listing the cost table uses)."""
    options = options or JobOptions()
    gpus, excluded = job_gpus(jobs.frame, jobs.matmul, jobs.shared)
    counted, _ = left_out(jobs.frame, jobs.shared)
    whose = tuple((provider, host, gpu, verdict) for (provider, host, _, gpu), verdict
                  in sorted(job_whose.verdicts(jobs.frame).items()))
    if not gpus:
        return JobSection(excluded=tuple(excluded), options=options, whose=whose)
    shortfalls = find_job_shortfalls(gpus, options.shortfall)
    named = {(s.provider, s.host, s.gpu_index, s.config) for s in shortfalls}
    slow = [s for s in find_job_stragglers(gpus, stragglers)
            if (s.provider, s.host, s.gpu_index, s.config) not in named]
    return JobSection(
        rows=tuple(job_table(gpus, listings)), gpus=tuple(gpus),
        shortfalls=tuple(shortfalls), stragglers=tuple(slow),
        comparisons=tuple(compare_job_providers(gpus, gaps)),
        sync=tuple(job_sync_nodes(gpus)), excluded=tuple(excluded), options=options,
        whose=whose, suspected=tuple(
            (p, k, t) for (p, k), t in sorted(job_whose.suspected(counted).items())))

