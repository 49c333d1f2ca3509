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
from typing import Any

import pandas as pd
from sqlalchemy import Engine

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
from fleet.analysis.matmul.gaps import Comparison, GapOptions, compare_providers
from fleet.analysis.matmul.integrity import find_corruption
from fleet.analysis.matmul.stragglers import Straggler, StragglerOptions, find_stragglers
from fleet.analysis.node.whose import RunSetting, run_settings, suspects_by_provider, unsettled_gap
from fleet.analysis.node.whose import anonymized as anonymized_settings
from fleet.report.bands import Unit, job_units, matmul_units
from fleet.report.charts import RowChart, crowd_medians, offer_chart, side_by_side
from fleet.report.cluster import ClusterSection, cluster_hosts, cluster_runs, cluster_section
from fleet.report.job import JobOptions, JobSection, job_section, read_jobs
from fleet.report.network import NetworkSection, network_section
from fleet.report.node import NodeOptions, NodeSection, node_section
from fleet.report.not_measured import NotMeasuredSection, not_measured_section
from fleet.report.offers import OfferInput, OfferLine, offer_lines
from fleet.report.timeline import History, history_pairs, sweep_history
from fleet.store.settings import read_settings
from fleet.words import counted

FINDING_KINDS = ("mismatch", "gap", "cooling", "drift", "straggler", "regression",
                 "duplicate", "health", "hostlink", "peer", "shortfall", "contention",
                 "corruption", "job_shortfall", "network", "not_measured")


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
class Finding:
    """One line of the summary, and what is folded beneath it.

    The line is `title` (what, where, how far off: "gpu-03 GPU 3: 53% below the rest of
    its node on the matmul") and `cause`, the likely cause in a few words where one was
    seen ("another process on the GPU"). Beneath it, `evidence` (what the finding rests
    on, in words) and `details`, its items one a line (each outlying figure, each
    difference), which `evidence` does not repeat.
    """

    kind: str  # one of FINDING_KINDS
    provider: str
    title: str
    evidence: str
    cause: str | None = None
    details: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A list given for `details` (a 6-tuple built elsewhere) is kept as a tuple: the
        # finding stays hashable and frozen.
        object.__setattr__(self, "details", tuple(self.details))

    @classmethod
    def of(cls, found: Finding | tuple[Any, ...]) -> Finding:
        """A finding from a Finding, or from (kind, provider, title, evidence) with or
        without (cause, details) after them."""
        if isinstance(found, Finding):
            return found
        if len(found) not in (4, 6):
            raise ValueError(f"a finding is 4 or 6 values, not {len(found)}: {found!r}")
        return cls(*found)


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
    dispute: tuple[Finding, ...]
    # What the renter's own side disturbed, said apart (DESIGN.md, "Judging one node").
    renter: tuple[Finding, ...]
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
    # GPUs that computed wrong under load (fleet/analysis/integrity.py), also in `dispute`.
    corruption: tuple[Finding, ...] = ()
    # The job suite's figures, their cost per million tokens, findings and synchronous
    # figures (issue 37).
    job: JobSection = field(default_factory=JobSection)
    # Findings measured under settings that can move them and never measured again
    # without them (fleet/analysis/whose.py), and health verdicts of a rule since withdrawn
    # that their documents cannot be judged again by (fleet/analysis/older_rule.py): out of
    # `dispute` and `renter`, shown apart.
    unsettled: tuple[Finding, ...] = ()
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

    def listed(self) -> tuple[tuple[str, Finding], ...]:
        """Every finding the report lists, with its side ("provider": What to dispute;
        "renter": Yours to fix; "unsettled": Not settled): the one list that `counts`,
        `--fail-on`, the findings line and the metrics read, so that none of them can
        count a finding the others leave out."""
        return (tuple(("provider", f) for f in self.dispute)
                + tuple(("renter", f) for f in self.renter)
                + tuple(("unsettled", f) for f in self.unsettled))

    def counts(self) -> dict[str, int]:
        """Findings per kind, on every side, as `--fail-on` reads them: each listed
        finding once, and each GPU slower than its own past on the sweep's newest night
        (listed in the sweep's history, not as a finding)."""
        found = Counter(f.kind for _, f in self.listed())
        found["regression"] += self.regressions
        kinds = (*FINDING_KINDS, *sorted(set(found) - set(FINDING_KINDS)))
        return {kind: found[kind] for kind in kinds}

    def findings_line(self) -> str:
        """"job_shortfall 4 (yours to fix 4), gap 1": each kind found, by its `--fail-on`
        name, with the sides that are not the provider's; "none" where nothing was."""
        sides = Counter((f.kind, side) for side, f in self.listed())
        words = {"renter": "yours to fix", "unsettled": "not settled"}
        said = []
        for kind, n in self.counts().items():
            if not n:
                continue
            apart = [f"{words[side]} {sides[kind, side]}" for side in words
                     if sides[kind, side]]
            said.append(f"{kind} {n}" + (f" ({', '.join(apart)})" if apart else ""))
        return ", ".join(said) or "none"


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


def _below(share: float) -> str:
    """A shortfall in a title: whole percent from 10% up, a tenth below ("53%", "3.5%")."""
    return f"{share:.0%}" if share >= 0.095 else f"{share:.1%}"


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


def _unsettled_gaps(gaps: list[Comparison], suspected: dict[str, tuple[RunSetting, ...]]
                    ) -> list[tuple[str, str, str, str, str | None, tuple[str, ...]]]:
    found = []
    for gap in gaps:
        whose = unsettled_gap(gap.slower, f"{gap.group} matmuls", suspected[gap.slower])
        found.append(("gap", gap.slower,
                      f"{gap.slower} is {gap.gap:.1%} slower than {gap.faster} on {gap.group}",
                      f"{gap.config.label}: {gap.evidence}", whose.words, whose.suspects))
    return found


def _dispute(mismatches: list[Mismatch], mixed: list[MixedListing], gaps: list[Comparison],
             cooling: list[CoolingComparison], stragglers: list[Straggler],
             drift: list[Drift]) -> list[Finding]:
    found = [Finding("mismatch", m.provider, f"{m.host}: listed {m.listed}, found {m.found}",
                     "the host's newest document against its listing (the inventory's "
                     "expect when it was probed)" + (
                         f"; not checked: {'; '.join(m.unchecked)}" if m.unchecked else ""),
                     details=m.problems) for m in mismatches]
    found += [Finding("mismatch", m.provider,
                      f"listing {m.listed}: {len(m.variants)} variants behind it",
                      "hosts ordered under one listing carry different variants: the next "
                      "order may get any of them",
                      details=tuple(f"{variant} on {counted(gpus, 'GPU')} of "
                                    f"{counted(hosts, 'host')}"
                                    for variant, gpus, hosts in m.variants)) for m in mixed]
    for gap in gaps:
        # explain() names only what can slow a matmul, the operating point (power limit,
        # SM clock, power drawn) first: the first it names is the likely cause.
        differs = tuple(f"{d.what}: {d.slower} on {gap.slower}, {d.faster} on {gap.faster}"
                        for d in gap.differences)
        first = gap.differences[0] if gap.differences else None
        found.append(Finding(
            "gap", gap.slower,
            f"{gap.slower} is {gap.gap:.1%} slower than {gap.faster} on {gap.group}",
            f"{gap.config.label}: {gap.evidence}" + (
                ". What differs:" if differs else
                ". No difference in fingerprint or telemetry explains it"),
            cause=None if first is None else f"{first.what} {first.slower} vs {first.faster}",
            details=differs))
    for c in cooling:
        # Each side's figures a line; the differences and their tests stay the evidence.
        sides = (c.hotter.describe(), c.cooler.describe())
        tests = c.evidence.removeprefix(f"{sides[0]}; {sides[1]}. ")
        found.append(Finding(
            "cooling", c.hotter.provider,
            f"{c.hotter.provider}'s {c.variant} run {c.temperature_difference_c:.1f} °C "
            f"hotter than {c.cooler.provider}'s and lose {c.drop_difference * 100:.2f} "
            "points more once soaked",
            f"{c.config.label}, at the same power cap: {tests[:1].lower()}{tests[1:]}",
            details=sides))
    found += [Finding("straggler", s.provider,
                      f"{s.host} GPU {s.gpu_index}: {_below(s.deficit)} below the rest of its "
                      "node on the matmul", f"{s.config.label}: {s.evidence}")
              for s in stragglers]
    # Of drift, what costs throughput: a power limit below the datasheet's, or below
    # what the rest of the variant runs at (once per provider and value).
    said: set[tuple[str, str, str]] = set()
    for d in sorted(drift, key=lambda d: d.reference != "datasheet"):
        if d.attribute not in ("power limit", "power limit below datasheet"):
            continue
        for outlier in d.outliers:
            key = (d.variant, outlier.provider, outlier.value)
            if key in said or (d.reference != "datasheet" and
                               _watts(outlier.value) >= _watts(d.usual)):
                continue
            said.add(key)
            datasheet = d.reference == "datasheet"
            usual = "the datasheet's" if datasheet else "the variant's usual"
            found.append(Finding(
                "drift", outlier.provider,
                f"{d.variant}: power limit {outlier.value} on "
                f"{counted(outlier.gpus, 'GPU')}, below {usual} {d.usual}",
                (f"datasheet default {d.usual}" if datasheet else
                 f"{d.usual} on {d.usual_gpus} of {counted(d.total_gpus, 'GPU')} of the "
                 "variant") + f"; {outlier.value} on {counted(outlier.gpus, 'GPU')} of "
                f"{outlier.provider}, on {counted(len(outlier.hosts), 'host')}:",
                details=outlier.hosts))
    return found


def _duplicates(shared: tuple[SharedHosts, ...], anonymized: bool) -> list[Finding]:
    found = []
    for pair in shared:
        other = (pair.other_host if pair.other_provider == pair.provider
                 else f"{pair.other_provider}'s {pair.other_host}")
        cards = counted(pair.gpu_count, "GPU")
        runs = ", ".join(f"#{run}" for run in pair.runs)
        found.append(Finding(
            "duplicate", pair.provider, f"{pair.host} has the same GPUs as {other}",
            f"{cards} in common in run {runs}: one machine listed twice (an inventory "
            "mistake, or one node sold as two listings), and figures measured on both at "
            "once were contended. Both hosts' results of those runs are left out of every "
            "comparison, cost and chart until one of the two is chosen: remove the other "
            "from the inventory, and the next run probes the machine once",
            cause="one machine listed twice",
            # The GPUs in common, a line each; an anonymized report keeps only their count.
            details=() if anonymized else pair.gpus))
    return found


def _health(health: FleetHealth) -> list[Finding]:
    # The agent's reasons are few and short: they stay the evidence, a line.
    # The title asks for the agent's action ("..., ask the provider to reset it"); `cause`
    # keeps it in a word for the table (issue 36).
    found = [Finding("health", g.provider, f"{g.host} GPU {g.gpu_index} ({g.variant}) is "
                     f"{g.verdict}" + (f": {g.ask}" if g.ask else ""), g.evidence,
                     cause=g.action if g.ask else None) for g in health.unwell]
    found += [Finding("health", u.provider, u.title, u.evidence) for u in health.unknown]
    return found


def _node_findings(node: NodeSection) -> list[Finding]:
    return [Finding.of(item) for item in node.findings()]


def _watts(text: str) -> float:
    return float(text.removesuffix(" W"))


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
    # now where their documents carry what it needs (fleet/analysis/older_rule.py): every
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
    # provider's to answer until measured again without them (fleet/analysis/whose.py).
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
    corruption = [Finding.of(c.finding()) for c in find_corruption(
        engine, {h.document_id: (h.provider, h.host) for h in data.hosts})]
    network = network_section(engine, data)
    cluster = cluster_section(engine, runs, names)
    not_measured = not_measured_section(
        engine, {h.document_id: (h.provider, h.host) for h in data.hosts}, options.anonymize)
    health = told_elsewhere(fleet_health(data.gpus), {
        (issue.provider, issue.host, gpu) for issue in node.host_links
        if issue.problem == "below maximum" for gpu in issue.gpus})
    slow = frozenset((s.provider, s.host, f"GPU {s.gpu_index}") for s in stragglers)
    points = _points(jobs.frame)
    units = (matmul_units(data.measures, options.node.matmul) + list(node.units)
             + job_units(job.gpus, points))
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
        # A failing card is to be replaced before its speed matters: health comes early.
        dispute=tuple(_duplicates(data.shared, options.anonymize) + corruption + _health(health)
                      + _dispute(mismatches, mixed, gaps,
                                 [c for c in cooling if c.called], stragglers, drift)
                      + _node_findings(node)
                      + [Finding.of(item) for item in job.findings()]
                      + [Finding.of(item) for item in network.findings()]
                      + [Finding.of(item) for item in cluster.findings()]
                      + [Finding.of(item) for item in not_measured.on("provider")]),
        renter=tuple(Finding.of(item) for item in [*node.renter(), *job.renter(),
                                                   *cluster.renter(),
                                                   *not_measured.on("renter")]),
        mismatches=tuple(mismatches), mixed=tuple(mixed), drift=tuple(drift),
        comparisons=tuple(comparisons), thermal=tuple(thermal_table(data)),
        cooling=tuple(cooling), stragglers=tuple(stragglers), cost=tuple(cost),
        charts=tuple(chart for variant in sorted({u.variant for u in units})
                     if (chart := side_by_side(variant, units, slow)) is not None),
        failures=data.failures,
        excluded=data.excluded, shared=data.shared, providers=tuple(providers),
        variants=tuple(variants),
        history=history, found=tuple(fleet_as_found(data.gpus, data.measures)),
        health=health, node=node, corruption=tuple(corruption), job=job,
        gaps_unsettled=tuple(gaps_unsettled), network=network, cluster=cluster,
        not_measured=not_measured,
        unsettled=tuple(Finding.of(item) for item in [
            *(o.finding() for o in again.unsettled), *node.unsettled_findings(),
            *_unsettled_gaps(gaps_unsettled, suspected), *job.unsettled(),
            *cluster.unsettled(), *not_measured.on("unsettled")]),
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
