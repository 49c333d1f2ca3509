"""The report's rules: each turns one analysis (or one section's judgements) into the
findings it lists, on one side. The report walks RULES in order and lists what each
yields, so a finding's place is its rule's place; the counts, `--fail-on`, the findings
line, the offers' verdicts and the metrics all read that one list (fleet/findings/).

    found = [f for rule in RULES for f in rule.apply(judged)]

Adding a finding is a module of analysis that judges it, its kind in
fleet/findings/kinds.py and its rule here (docs/findings.md, "Adding a finding").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from fleet.analysis.dataset import SharedHosts
from fleet.analysis.health.cards import FleetHealth
from fleet.analysis.health.older_rule import JudgedAgain
from fleet.analysis.listing.drift import Drift
from fleet.analysis.listing.mismatches import Mismatch, MixedListing
from fleet.analysis.matmul.cooling import CoolingComparison
from fleet.analysis.matmul.gaps import Comparison
from fleet.analysis.matmul.integrity import Corruption
from fleet.analysis.matmul.stragglers import Straggler
from fleet.analysis.node.whose import RunSetting, unsettled_gap
from fleet.findings.finding import Finding, Party
from fleet.findings.kinds import kind_named
from fleet.report.cluster import ClusterSection
from fleet.report.host_storage import HostStorageSection
from fleet.report.job import JobSection
from fleet.report.network import NetworkSection
from fleet.report.node import NodeSection
from fleet.report.not_measured import NotMeasuredSection
from fleet.words import counted


@dataclass(frozen=True)
class Judged:
    """Every judgement the report's rules read, computed once by fleet/report/build.py."""

    anonymized: bool
    shared: tuple[SharedHosts, ...]
    corruption: tuple[Corruption, ...]
    health: FleetHealth
    mismatches: tuple[Mismatch, ...]
    mixed: tuple[MixedListing, ...]
    gaps: tuple[Comparison, ...]  # systematic, the slower side's to answer
    gaps_unsettled: tuple[Comparison, ...]  # systematic, measured under suspect settings
    suspected: dict[str, tuple[RunSetting, ...]]  # per provider, the matmul's suspects
    cooling: tuple[CoolingComparison, ...]  # those called
    stragglers: tuple[Straggler, ...]
    drift: tuple[Drift, ...]
    again: JudgedAgain
    node: NodeSection
    job: JobSection
    network: NetworkSection
    cluster: ClusterSection
    not_measured: NotMeasuredSection
    host_storage: HostStorageSection


@dataclass(frozen=True)
class Rule:
    """One rule: its name, the side its findings are on, the kinds it may yield
    (registered in fleet/findings/kinds.py), where it is judged, and how."""

    name: str
    party: Party
    kinds: tuple[str, ...]
    source: str
    find: Callable[[Judged], Iterable[Finding | tuple[Any, ...]]]

    def apply(self, judged: Judged) -> list[Finding]:
        """The rule's findings, each on its side and naming its rule; ValueError where one
        is of a kind the rule does not declare, which would escape the counts."""
        found = []
        for item in self.find(judged):
            finding = Finding.of(item)
            if finding.kind not in self.kinds:
                raise ValueError(f"rule {self.name} (fleet/report/rules.py) found a "
                                 f"{finding.kind!r}, not among its kinds {self.kinds}: add it "
                                 "to the rule and register it in fleet/findings/kinds.py")
            found.append(replace(finding, party=self.party,
                                 source=finding.source or self.source))
        return found


def _below(share: float) -> str:
    """A shortfall in a title: whole percent from 10% up, a tenth below ("53%", "3.5%")."""
    return f"{share:.0%}" if share >= 0.095 else f"{share:.1%}"


def _watts(text: str) -> float:
    return float(text.removesuffix(" W"))


def duplicates(judged: Judged) -> list[Finding]:
    """One machine listed twice: both hosts' results are left out until one is chosen."""
    found = []
    for pair in judged.shared:
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
            details=() if judged.anonymized else pair.gpus))
    return found


def health(health: FleetHealth) -> list[Finding]:
    """Each failing or degraded GPU with the action to ask for, and once per provider its
    GPUs whose health the driver could not tell."""
    # The agent's reasons are few and short: they stay the evidence, a line.
    # The title asks for the agent's action ("..., ask the provider to reset it"); `cause`
    # keeps it in a word for the table (issue 36).
    found = [Finding("health", g.provider, f"{g.host} GPU {g.gpu_index} ({g.variant}) is "
                     f"{g.verdict}" + (f": {g.ask}" if g.ask else ""), g.evidence,
                     cause=g.action if g.ask else None,
                     action=g.ask or None) for g in health.unwell]
    found += [Finding("health", u.provider, u.title, u.evidence)
              for u in health.unknown]
    return found


def mismatches(judged: Judged) -> list[Finding]:
    """Hosts not as listed, and listings with several variants behind them."""
    found = [Finding("mismatch", m.provider, f"{m.host}: listed {m.listed}, found {m.found}",
                     "the host's newest document against its listing (the inventory's "
                     "expect when it was probed)" + (
                         f"; not checked: {'; '.join(m.unchecked)}" if m.unchecked else ""),
                     details=m.problems) for m in judged.mismatches]
    found += [Finding("mismatch", m.provider,
                      f"listing {m.listed}: {len(m.variants)} variants behind it",
                      "hosts ordered under one listing carry different variants: the next "
                      "order may get any of them",
                      details=tuple(f"{variant} on {counted(gpus, 'GPU')} of "
                                    f"{counted(hosts, 'host')}"
                                    for variant, gpus, hosts in m.variants))
              for m in judged.mixed]
    return found


def gaps(judged: Judged) -> list[Finding]:
    """Systematic matmul gaps between providers, with what differs."""
    found = []
    for gap in judged.gaps:
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
    return found


def unsettled_gaps(judged: Judged) -> list[Finding]:
    """Systematic matmul gaps whose slower side ran under settings that can move a matmul."""
    found = []
    for gap in judged.gaps_unsettled:
        whose = unsettled_gap(gap.slower, f"{gap.group} matmuls", judged.suspected[gap.slower])
        found.append(Finding("gap", gap.slower,
                             f"{gap.slower} is {gap.gap:.1%} slower than {gap.faster} on "
                             f"{gap.group}", f"{gap.config.label}: {gap.evidence}",
                             whose.words, whose.suspects))
    return found


def cooling(judged: Judged) -> list[Finding]:
    """A provider's GPUs hotter and losing more once soaked, at the same power cap."""
    found = []
    for c in judged.cooling:
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
    return found


def stragglers(judged: Judged) -> list[Finding]:
    """GPUs clearly below the rest of their node on the matmul."""
    return [Finding("straggler", s.provider,
                    f"{s.host} GPU {s.gpu_index}: {_below(s.deficit)} below the rest of its "
                    "node on the matmul", f"{s.config.label}: {s.evidence}")
            for s in judged.stragglers]


def drift(judged: Judged) -> list[Finding]:
    """Of drift, what costs throughput: a power limit below the datasheet's, or below what
    the rest of the variant runs at (once per provider and value)."""
    found = []
    said: set[tuple[str, str, str]] = set()
    for d in sorted(judged.drift, key=lambda d: d.reference != "datasheet"):
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


_NODE = ("shortfall", "hostlink", "peer", "straggler", "gap")
_JOB = ("job_shortfall", "straggler", "gap")
_NODE_SRC = "fleet/analysis/node/"
_JOB_SRC = "fleet/analysis/job/"
_CLUSTER_SRC = "fleet/analysis/cluster/judgement.py"
_NOT_MEASURED_SRC = "fleet/analysis/health/not_measured.py"
_HOST = ("host_limit", "storage", "bulletin")
_HOST_SRC = "fleet/analysis/host/"

# In the order the report lists them: on each side, what to act on first. A failing card
# is to be replaced before its speed matters, so health comes early.
RULES: tuple[Rule, ...] = (
    Rule("duplicates", "provider", ("duplicate",), "fleet/analysis/listing/duplicates.py",
         duplicates),
    Rule("corruption", "provider", ("corruption",), "fleet/analysis/matmul/integrity.py",
         lambda j: [c.finding() for c in j.corruption]),
    Rule("health", "provider", ("health",), "fleet/analysis/health/cards.py",
         lambda j: health(j.health)),
    Rule("mismatches", "provider", ("mismatch",), "fleet/analysis/listing/mismatches.py",
         mismatches),
    Rule("gaps", "provider", ("gap",), "fleet/analysis/matmul/gaps.py", gaps),
    Rule("cooling", "provider", ("cooling",), "fleet/analysis/matmul/cooling.py", cooling),
    Rule("stragglers", "provider", ("straggler",), "fleet/analysis/matmul/stragglers.py",
         stragglers),
    Rule("drift", "provider", ("drift",), "fleet/analysis/listing/drift.py", drift),
    Rule("node", "provider", _NODE, _NODE_SRC, lambda j: j.node.findings()),
    Rule("job", "provider", _JOB, _JOB_SRC, lambda j: j.job.findings()),
    Rule("network", "provider", ("network",), "fleet/analysis/node/network.py",
         lambda j: j.network.findings()),
    Rule("cluster", "provider", ("network",), _CLUSTER_SRC, lambda j: j.cluster.findings()),
    Rule("not measured", "provider", ("not_measured",), _NOT_MEASURED_SRC,
         lambda j: j.not_measured.on("provider")),
    Rule("host and storage", "provider", _HOST, _HOST_SRC,
         lambda j: j.host_storage.on("provider")),
    Rule("node, renter's", "renter", ("contention", "shortfall"), _NODE_SRC,
         lambda j: j.node.renter()),
    Rule("job, renter's", "renter", ("job_shortfall",), _JOB_SRC, lambda j: j.job.renter()),
    Rule("cluster, renter's", "renter", ("network",), _CLUSTER_SRC,
         lambda j: j.cluster.renter()),
    Rule("not measured, renter's", "renter", ("not_measured",), _NOT_MEASURED_SRC,
         lambda j: j.not_measured.on("renter")),
    Rule("host and storage, renter's", "renter", ("host_limit", "storage"), _HOST_SRC,
         lambda j: j.host_storage.on("renter")),
    Rule("older rule", "unsettled", ("health",), "fleet/analysis/health/older_rule.py",
         lambda j: [o.finding() for o in j.again.unsettled]),
    Rule("node, not settled", "unsettled", ("shortfall", "peer"), "fleet/analysis/node/whose.py",
         lambda j: j.node.unsettled_findings()),
    Rule("gaps, not settled", "unsettled", ("gap",), "fleet/analysis/node/whose.py",
         unsettled_gaps),
    Rule("job, not settled", "unsettled", ("job_shortfall", "gap"), "fleet/analysis/job/whose.py",
         lambda j: j.job.unsettled()),
    Rule("cluster, not settled", "unsettled", ("network",), _CLUSTER_SRC,
         lambda j: j.cluster.unsettled()),
    Rule("not measured, not settled", "unsettled", ("not_measured",), _NOT_MEASURED_SRC,
         lambda j: j.not_measured.on("unsettled")),
    Rule("host and storage, not settled", "unsettled", _HOST, _HOST_SRC,
         lambda j: j.host_storage.on("unsettled")),
)

for _rule in RULES:  # a rule whose kind is not registered would escape every count
    for _kind in _rule.kinds:
        if _rule.party not in kind_named(_kind).parties:
            raise RuntimeError(f"rule {_rule.name} (fleet/report/rules.py) finds {_kind} on "
                               f"the {_rule.party}'s side, which fleet/findings/kinds.py "
                               "does not register it on")


def findings(judged: Judged) -> tuple[Finding, ...]:
    """Every finding of every rule, in the rules' order: the provider's, the renter's,
    then those not settled."""
    return tuple(f for rule in RULES for f in rule.apply(judged))
