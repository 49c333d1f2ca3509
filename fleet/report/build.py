"""`fleet report`: what the store holds, turned into the answer a buyer needs.

    report = build_report(engine, ReportOptions(scope=Scope(sweep="nightly")), "fleet.db")
    text = render(report, "html")

The report is plain data (findings with the evidence each rests on); `render` writes it as
HTML, Markdown or JSON. Nothing here prints or exits: `fleet report` does.
"""

from __future__ import annotations

import datetime as dt
import gc
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import pandas as pd
from sqlalchemy import Engine

from fleet.analysis.compare import GapOptions
from fleet.analysis.dataset import (
    Aliases,
    Config,
    Dataset,
    Excluded,
    HostFailure,
    Scope,
    SharedHosts,
    anonymize,
    load_dataset,
    named_pairs,
)
from fleet.analysis.health.cards import FleetHealth, fleet_health, told_elsewhere
from fleet.analysis.health.older_rule import judge_again
from fleet.analysis.job.figures import contended_results
from fleet.analysis.listing.drift import Drift, find_drift
from fleet.analysis.listing.found import FoundHost, fleet_as_found
from fleet.analysis.listing.mismatches import (
    Mismatch,
    MixedListing,
    find_mismatches,
    find_mixed_listings,
)
from fleet.analysis.matmul.cooling import (
    CoolingComparison,
    CoolingOptions,
    ThermalRow,
    compare_cooling,
    thermal_table,
)
from fleet.analysis.matmul.cost import CostRow, cost_table
from fleet.analysis.matmul.gaps import Comparison, compare_providers
from fleet.analysis.matmul.integrity import find_corruption
from fleet.analysis.matmul.stragglers import Straggler, StragglerOptions, find_stragglers
from fleet.analysis.node.whose import RunSetting, run_settings, suspects_by_provider
from fleet.analysis.node.whose import anonymized as anonymized_settings
from fleet.findings import count
from fleet.findings.finding import Finding
from fleet.report import rules
from fleet.report.bands import Unit, job_units, matmul_units
from fleet.report.charts import RowChart, crowd_medians, offer_chart, side_by_side
from fleet.report.cluster import ClusterSection, cluster_hosts, cluster_runs, cluster_section
from fleet.report.host_storage import HostStorageSection, host_storage_section
from fleet.report.job import JobOptions, JobSection, job_section, read_jobs
from fleet.report.network import NetworkSection, network_section
from fleet.report.node import NodeOptions, NodeSection, node_section
from fleet.report.not_measured import NotMeasuredSection, not_measured_section
from fleet.report.offers import OfferInput, OfferLine, offer_lines
from fleet.report.timeline import History, history_pairs, sweep_history
from fleet.store.settings import read_settings
from fleet.words import counted


@dataclass(frozen=True)
class ReportOptions:
    """What the report covers, whether it is anonymized, and the analyses' options."""

    scope: Scope = field(default_factory=Scope)
    anonymize: bool = False
    gaps: GapOptions = field(default_factory=GapOptions)
    stragglers: StragglerOptions = field(default_factory=StragglerOptions)
    cooling: CoolingOptions = field(default_factory=CoolingOptions)
    # Compare results of different software stacks as one configuration, each GPU's
    # stack then listed among what differs (`fleet report --across-stacks`).
    across_stacks: bool = False
    node: NodeOptions = field(default_factory=NodeOptions)  # the node suite's rules
    job: JobOptions = field(default_factory=JobOptions)  # the job suite's own rule


@dataclass(frozen=True)
class Offer:
    """The best measured offer for one variant under the headline configuration."""

    variant: str
    row: CostRow
    why: str


@dataclass(frozen=True)
class Report:
    """Everything the report shows, computed: the renderers only lay it out."""

    generated_at: dt.datetime
    store: str
    scope: str
    anonymized: bool
    options: ReportOptions
    runs: int
    hosts: int
    gpus_fingerprinted: int
    gpus_measured: int
    results: int
    first: dt.datetime | None
    last: dt.datetime | None
    headline: Config | None  # the configuration with the most GPUs measured
    buy: tuple[Offer, ...]
    # Every finding the report lists, in the order of its rules (fleet/report/rules.py),
    # each with its side (`party`): the one list every count reads.
    findings: tuple[Finding, ...]
    mismatches: tuple[Mismatch, ...]
    mixed: tuple[MixedListing, ...]
    drift: tuple[Drift, ...]
    comparisons: tuple[Comparison, ...]
    thermal: tuple[ThermalRow, ...]
    cooling: tuple[CoolingComparison, ...]
    stragglers: tuple[Straggler, ...]
    cost: tuple[CostRow, ...]
    # Per variant, its providers side by side: every GPU, pair and node figure
    # (fleet/report/charts.py `side_by_side`).
    charts: tuple[RowChart, ...]
    failures: tuple[HostFailure, ...]
    excluded: tuple[Excluded, ...]
    shared: tuple[SharedHosts, ...]
    providers: tuple[str, ...]
    variants: tuple[str, ...]
    history: History | None = None  # with --sweep: the sweep's nights
    found: tuple[FoundHost, ...] = ()  # every host's GPUs as found, by provider and host
    health: FleetHealth = field(default_factory=FleetHealth)  # of the GPUs as found
    # The node suite's figures as found, its findings, and each node's synchronous figure.
    node: NodeSection = field(default_factory=NodeSection)
    # GPUs that computed wrong under load (fleet/analysis/matmul/integrity.py), also in `dispute`.
    corruption: tuple[Finding, ...] = ()
    # The job suite's figures, their cost per million tokens, findings and synchronous
    # figures (issue 37).
    job: JobSection = field(default_factory=JobSection)
    # Systematic gaps whose slower side ran under settings that can move a matmul: in
    # `unsettled`, not `dispute`.
    gaps_unsettled: tuple[Comparison, ...] = ()
    # Each host's network (fabric NICs, GPUDirect RDMA) and its findings; the faults are
    # also in `dispute` (fleet/report/network.py).
    network: NetworkSection = field(default_factory=NetworkSection)
    # The first screen (fleet/report/offers.py): each provider's GPUs of a variant in a line,
    # what it buys and its verdict, worst first; each offer's GPUs, pairs and nodes against
    # what a healthy one gives (`offer_charts`, one per offer that has figures), and every
    # figure those charts draw (`units`).
    offers: tuple[OfferLine, ...] = ()
    offer_charts: tuple[RowChart, ...] = ()
    units: tuple[Unit, ...] = ()
    # Each cluster's newest run between its nodes, judged (fleet/report/cluster.py): the
    # provider's faults also in `dispute` (kind "network"), the renter's in `renter`,
    # the unsettled in `unsettled`.
    cluster: ClusterSection = field(default_factory=ClusterSection)
    # Every error the newest documents in scope carry, judged (fleet/report/
    # not_measured.py): those with a party also in `dispute`, `renter` or `unsettled`.
    not_measured: NotMeasuredSection = field(default_factory=NotMeasuredSection)
    # Each host's limits, storage and patch state (fleet/report/host_storage.py, issue
    # 58): its findings also in `dispute`, `renter` or `unsettled` by their side.
    host_storage: HostStorageSection = field(default_factory=HostStorageSection)

    @property
    def gaps(self) -> tuple[Comparison, ...]:
        """The comparisons that found a systematic gap the provider answers for."""
        return tuple(c for c in self.comparisons
                     if c.systematic and c not in self.gaps_unsettled)

    @property
    def cooling_findings(self) -> tuple[CoolingComparison, ...]:
        """The cooling comparisons that were called."""
        return tuple(c for c in self.cooling if c.called)

    @property
    def regressions(self) -> int:
        """GPUs slower than their own past on the newest night of the sweep."""
        return 0 if self.history is None else self.history.regressed_last_night

    @property
    def dispute(self) -> tuple[Finding, ...]:
        """What to dispute: the findings the provider answers for."""
        return tuple(f for f in self.findings if f.party == "provider")

    @property
    def renter(self) -> tuple[Finding, ...]:
        """Yours to fix: what the renter's own side disturbed, said apart
        (docs/findings.md, "One node, judged on its own")."""
        return tuple(f for f in self.findings if f.party == "renter")

    @property
    def unsettled(self) -> tuple[Finding, ...]:
        """Not settled: findings measured under settings that can move them and never
        measured again without them (fleet/analysis/node/whose.py), and health verdicts of
        a rule since withdrawn that their documents cannot be judged again by
        (fleet/analysis/health/older_rule.py): shown apart."""
        return tuple(f for f in self.findings if f.party == "unsettled")

    def listed(self) -> tuple[tuple[str, Finding], ...]:
        """Every finding the report lists, with its side ("provider": What to dispute;
        "renter": Yours to fix; "unsettled": Not settled), in the order listed."""
        return tuple((f.party, f) for f in self.findings)

    def counts(self) -> dict[str, int]:
        """Findings per kind, on every side, as `--fail-on` reads them: each listed
        finding once, and each GPU slower than its own past on the sweep's newest night
        (listed in the sweep's history, not as a finding)."""
        return count.counts(self.findings, self.regressions)

    def findings_line(self) -> str:
        """"job_shortfall 4 (yours to fix 4), gap 1": each kind found, by its `--fail-on`
        name, with the sides that are not the provider's; "none" where nothing was."""
        return count.line(self.findings, self.regressions)


def _headline(data: Dataset) -> Config | None:
    gpus = Counter(m.config for m in data.measures)
    if not gpus:
        return None
    # Most GPUs first; among equals the default benchmark (bf16, sustained, soaked, cold
    # L2): the soaked figure is the one a buyer's long job gets.
    return max(sorted(gpus), key=lambda c: (gpus[c], c.dtype == "bf16", c.mode == "sustained",
                                            c.thermal == "soaked", c.cache == "cold"))


def _offers(cost: list[CostRow], headline: Config | None, gaps: list[Comparison],
            mismatches: list[Mismatch], mixed: list[MixedListing]) -> list[Offer]:
    slower = {(c.group, c.slower) for c in gaps if c.config == headline}
    by_variant: dict[str, list[CostRow]] = defaultdict(list)
    for row in cost:
        if row.config == headline:
            by_variant[row.variant].append(row)
    offers = []
    for variant, rows in sorted(by_variant.items()):
        # Prices are compared within one currency only: fleet converts none.
        by_currency: dict[str, list[CostRow]] = defaultdict(list)
        for row in rows:
            if row.cost_per_pflop_hour is not None and row.currency is not None:
                by_currency[row.currency].append(row)
        best_rows: list[tuple[CostRow, str]] = []
        for currency, priced in sorted(by_currency.items()):
            best = min(priced, key=lambda r: r.cost_per_pflop_hour or 0.0)
            others = (f" (among offers priced in {currency}; prices in other currencies "
                      "are not converted)" if len(by_currency) > 1 else "")
            best_rows.append((best, (
                f"cheapest effective PFLOP-hour: {best.cost_per_pflop_hour:.2f} "
                f"{currency} at {best.median_tflops:.1f} TFLOP/s (median of "
                f"{counted(best.gpus, 'GPU')}) for {best.price_per_gpu_hour:g} {currency} "
                f"per GPU-hour{others}")))
        if not best_rows:
            best = max(rows, key=lambda r: r.median_tflops)
            best_rows.append((best, f"fastest measured: {best.median_tflops:.1f} TFLOP/s "
                                    f"(median of {counted(best.gpus, 'GPU')}); no price listed to "
                                    "compare cost"))
        for best, why in best_rows:
            if (variant, best.provider) in slower:
                why += "; but see the systematic gap against it below"
            listed = sorted({m.listed for m in mismatches if m.provider == best.provider})
            listed += sorted({m.listed for m in mixed if m.provider == best.provider}
                             - set(listed))
            if listed:
                # What was delivered under a listing is what the next order gets too.
                why += (f"; but {best.provider} delivered other hardware than listed "
                        f"under {', '.join(listed)} (see What to dispute)")
            offers.append(Offer(variant, best, why))
    return offers


def _matmul_suspects(engine: Engine, data: Dataset, anonymize: bool
                     ) -> dict[str, tuple[RunSetting, ...]]:
    """Per provider (as `data` names it), the settings of its hosts' newest runs that can
    move a matmul."""
    documents = {h.document_id: h.provider for h in data.hosts}
    if not documents:
        return {}
    ran = run_settings(read_settings(engine, documents=sorted(documents)), pd.DataFrame())
    return suspects_by_provider(anonymized_settings(ran) if anonymize else ran, documents,
                                "matmul")


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the duration, as it was after.

    A report of 80,000 GPUs builds a few hundred thousand small objects and no cycles
    worth collecting before it returns; the collector, started every 700 allocations,
    walked all of them again each time, over a second of the report at 10,000 hosts
    (bench/report_scale.py).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_report(engine: Engine, options: ReportOptions, store: str,
                 now: dt.datetime | None = None) -> Report:
    """The report on the results of `engine` that `options` select, as of `now`."""
    with _collector_paused():
        return _build(engine, options, store, now)


def _build(engine: Engine, options: ReportOptions, store: str,
           now: dt.datetime | None) -> Report:
    scope = options.scope
    data = load_dataset(engine, scope, options.across_stacks)
    jobs = read_jobs(engine, scope, data.shared)
    upto = max(scope.runs) if scope.runs else None
    runs = cluster_runs(engine, scope)
    names: Aliases | None = None
    if options.anonymize:
        pairs = named_pairs(data) | jobs.pairs() | cluster_hosts(runs)
        if scope.sweep is not None:
            pairs |= history_pairs(engine, scope.sweep, upto, scope.providers,
                                   scope.variants)
        names = Aliases.of(pairs)
        data = anonymize(data, names)
        jobs = jobs.anonymized(names)
        store = "(hidden in an anonymized report)"
    # Health verdicts of a rule the agent has since withdrawn, judged again by the rule of
    # now where their documents carry what it needs (fleet/analysis/health/older_rule.py): every
    # table and finding below reads the verdict of now.
    again = judge_again(engine, data.gpus)
    data = replace(data, gpus=again.gpus)
    history = None if scope.sweep is None else sweep_history(
        engine, scope.sweep, upto, names, scope.providers, scope.variants)
    mismatches = find_mismatches(data)
    mixed = find_mixed_listings(data)
    drift = find_drift(data)
    comparisons = compare_providers(data, options.gaps)
    # A gap whose slower side ran under settings that can move a matmul is not the
    # provider's to answer until measured again without them (fleet/analysis/node/whose.py).
    suspected = _matmul_suspects(engine, data, options.anonymize)
    gaps = [c for c in comparisons if c.systematic and c.slower not in suspected]
    gaps_unsettled = [c for c in comparisons if c.systematic and c.slower in suspected]
    cooling = compare_cooling(data, options.cooling)
    stragglers = find_stragglers(data, options.stragglers)
    cost = cost_table(data)
    headline = _headline(data)
    job = job_section(jobs, {(h.provider, h.host): h.listing for h in data.hosts},
                      options.gaps, options.stragglers, options.job)
    providers = sorted({h.provider for h in data.hosts} | {m.provider for m in data.measures}
                       | {f.provider for f in data.failures} | {g.provider for g in job.gpus})
    variants = sorted({m.variant for m in data.measures} | {
        d.variant for d in drift} | {g.variant for g in job.gpus})
    node = node_section(engine, data, options.gaps, options.node,
                        contended_results(jobs.frame, jobs.shared), options.anonymize)
    corrupted = find_corruption(engine, {h.document_id: (h.provider, h.host)
                                         for h in data.hosts})
    network = network_section(engine, data)
    cluster = cluster_section(engine, runs, names)
    host_storage = host_storage_section(engine, data)
    not_measured = not_measured_section(
        engine, {h.document_id: (h.provider, h.host) for h in data.hosts}, options.anonymize)
    health = told_elsewhere(fleet_health(data.gpus), {
        (issue.provider, issue.host, gpu) for issue in node.host_links
        if issue.problem == "below maximum" for gpu in issue.gpus})
    slow = frozenset((s.provider, s.host, f"GPU {s.gpu_index}") for s in stragglers)
    points = _points(jobs.frame)
    units = (matmul_units(data.measures, options.node.matmul) + list(node.units)
             + job_units(job.gpus, points))
    judged = rules.Judged(
        anonymized=options.anonymize, shared=data.shared, corruption=tuple(corrupted),
        health=health, mismatches=tuple(mismatches), mixed=tuple(mixed), gaps=tuple(gaps),
        gaps_unsettled=tuple(gaps_unsettled), suspected=suspected,
        cooling=tuple(c for c in cooling if c.called), stragglers=tuple(stragglers),
        drift=tuple(drift), again=again, node=node, job=job, network=network,
        cluster=cluster, not_measured=not_measured, host_storage=host_storage)
    found = rules.findings(judged)
    report = Report(
        generated_at=now or dt.datetime.now(dt.UTC), store=store,
        scope=data.scope.describe() + ("; software stacks compared as one"
                                       if options.across_stacks else ""),
        anonymized=options.anonymize,
        # The filters as given name real providers: an anonymized report keeps them aliased.
        options=replace(options, scope=data.scope) if options.anonymize else options,
        runs=data.runs, hosts=len(data.hosts),
        gpus_fingerprinted=len(data.gpus),
        gpus_measured=len({m.gpu for m in data.measures}),
        results=sum(m.results for m in data.measures), first=data.first, last=data.last,
        headline=headline, buy=tuple(_offers(cost, headline, gaps, mismatches, mixed)),
        findings=found,
        mismatches=tuple(mismatches), mixed=tuple(mixed), drift=tuple(drift),
        comparisons=tuple(comparisons), thermal=tuple(thermal_table(data)),
        cooling=tuple(cooling), stragglers=tuple(stragglers), cost=tuple(cost),
        charts=tuple(chart for variant in sorted({u.variant for u in units})
                     if (chart := side_by_side(variant, units, slow)) is not None),
        failures=data.failures,
        excluded=data.excluded, shared=data.shared, providers=tuple(providers),
        variants=tuple(variants),
        history=history, found=tuple(fleet_as_found(data.gpus, data.measures)),
        health=health, node=node,
        corruption=tuple(f for f in found if f.kind == "corruption"), job=job,
        gaps_unsettled=tuple(gaps_unsettled), network=network, cluster=cluster,
        not_measured=not_measured, host_storage=host_storage,
        units=tuple(units))
    offers = offer_lines(OfferInput(report.found, data.hosts, mismatches, cost, job.rows,
                                    points), report.listed())
    crowd = crowd_medians(units)
    return replace(report, offers=tuple(offers), offer_charts=tuple(
        chart for o in offers
        if (chart := offer_chart(o.provider, o.variant, units, crowd, slow)) is not None))


def _points(frame: pd.DataFrame) -> dict[str, str | None]:
    """Each job configuration key's decode point ("bandwidth", "latency"; None for
    training): what the charts and the first screen take decode's figure at."""
    if frame.empty or "point" not in frame:
        return {}
    return {str(key): point if isinstance(point, str) else None
            for key, point in zip(frame["config"].tolist(), frame["point"].tolist(),
                                  strict=True)}
