"""The registry of finding kinds: every kind the report lists, `--fail-on` accepts, the
sweep tells as news and `fleet metrics` counts, once, in the order they are counted.

    kind_named("gap").where   # the rules that find it
    FINDING_KINDS             # the report's kinds, as `fleet report --fail-on` takes them
    NEWS_KINDS                # a night's news against its past, as `fleet sweep` tells it

A kind is registered here, with the rules that find it (fleet/report/rules.py walks those
rules in its order and checks every finding's kind against this registry): adding a finding
is its rule's module plus a line here and one in RULES (docs/findings.md, "Adding a
finding").
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.findings.finding import PARTIES, Party


@dataclass(frozen=True)
class Kind:
    """One kind of finding.

    name: the word `--fail-on`, the report's tags and the metrics' `kind` label use.
    what: what a finding of the kind says, in a line (`fleet report --help`, the docs).
    parties: the sides its findings can be on.
    where: the modules whose rules find it.
    report: counted by the report (`fleet report --fail-on`, `fleet metrics`).
    news: its place among a sweep's news of a night against its past (the order `fleet
        sweep --fail-on` names them in), None where the sweep's comparison never tells it.
    """

    name: str
    what: str
    parties: tuple[Party, ...]
    where: tuple[str, ...]
    report: bool = True
    news: int | None = None


KINDS: tuple[Kind, ...] = (
    Kind("mismatch", "a host delivered other hardware than its listing, or one listing "
         "hides several variants; as news, a host not as listed tonight that was before",
         ("provider",), ("fleet/analysis/listing/mismatches.py",
                         "fleet/analysis/sweep/history.py"), news=1),
    Kind("gap", "one provider's GPUs systematically slower than another's of the same "
         "variant, beyond what repeat runs explain",
         ("provider", "unsettled"), ("fleet/analysis/matmul/gaps.py",
                                     "fleet/analysis/node/gaps.py",
                                     "fleet/analysis/job/compare.py")),
    Kind("cooling", "one provider's GPUs run hotter and lose more once soaked, at the same "
         "power cap", ("provider",), ("fleet/analysis/matmul/cooling.py",)),
    Kind("drift", "a power limit below the datasheet's, or below what the rest of the "
         "variant runs at", ("provider",), ("fleet/analysis/listing/drift.py",)),
    Kind("straggler", "a GPU (or a GPU's figure) clearly below the rest of its own node",
         ("provider",), ("fleet/analysis/matmul/stragglers.py",
                         "fleet/analysis/node/outliers.py", "fleet/analysis/job/compare.py")),
    Kind("regression", "a GPU slower than its own past nights beyond its own noise (counted "
         "from the sweep's history, not listed as a finding)",
         ("provider",), ("fleet/analysis/sweep/history.py",), news=0),
    Kind("duplicate", "two inventory hosts answered with the same GPUs: one machine listed "
         "twice", ("provider",), ("fleet/analysis/listing/duplicates.py",)),
    Kind("health", "a card failing, degraded or not read, with the action to ask for; as "
         "news, a verdict, action or harm counter that changed since the night before",
         ("provider", "unsettled"), ("fleet/analysis/health/cards.py",
                                     "fleet/analysis/health/older_rule.py",
                                     "fleet/analysis/sweep/history.py"), news=4),
    Kind("hostlink", "a GPU's PCIe link running below what it should",
         ("provider",), ("fleet/analysis/node/hostlink.py",)),
    Kind("peer", "GPUs of a node sold for NVLink that cannot reach each other over it, or a "
         "node's pairs or all-reduce apart from the same variant's",
         ("provider", "unsettled"), ("fleet/analysis/node/peers.py",
                                     "fleet/analysis/node/whose.py")),
    Kind("shortfall", "a node's figure well below what a healthy node of its variant gives",
         PARTIES, ("fleet/analysis/node/shortfall.py", "fleet/analysis/node/whose.py")),
    Kind("contention", "a figure measured beside someone else's work on the GPU",
         ("renter",), ("fleet/analysis/contention.py",)),
    Kind("corruption", "a GPU that computed wrong under load",
         ("provider",), ("fleet/analysis/matmul/integrity.py",)),
    Kind("job_shortfall", "a GPU's training step or decode under the floor of its variant",
         PARTIES, ("fleet/analysis/job/figures.py", "fleet/analysis/job/whose.py")),
    Kind("network", "a node's fabric, or a step between nodes, short of what it should carry",
         PARTIES, ("fleet/analysis/node/network.py", "fleet/analysis/cluster/judgement.py")),
    Kind("not_measured", "a stage the run could not measure, with whose that is",
         PARTIES, ("fleet/analysis/health/not_measured.py",)),
    Kind("host_limit", "a limit of the host or its container a job meets (CPUs or memory "
         "per GPU, /dev/shm, locked memory, governor, IOMMU, ACS, profiling)",
         PARTIES, ("fleet/analysis/host/limits.py",)),
    Kind("storage", "a node's scratch or shared filesystem slower than listed or than its "
         "siblings, or a listed filesystem missing", PARTIES,
         ("fleet/analysis/host/storage.py",)),
    Kind("bulletin", "a driver, container toolkit or fabric manager version under one of "
         "NVIDIA's security bulletins, or the fabric manager not matching the driver",
         ("provider", "unsettled"), ("fleet/analysis/host/bulletins.py",)),
    Kind("change", "a host's configuration changed since its night before",
         ("provider",), ("fleet/analysis/sweep/history.py",), report=False, news=2),
    Kind("gone", "a host of the previous night that did not answer tonight",
         ("provider",), ("fleet/analysis/sweep/history.py",), report=False, news=3),
)

_BY_NAME = {k.name: k for k in KINDS}
if len(_BY_NAME) != len(KINDS):  # pragma: no cover - a registry edited twice
    raise RuntimeError("fleet/findings/kinds.py: a kind is registered twice")

# The report's kinds, in the order counted and said.
FINDING_KINDS: tuple[str, ...] = tuple(k.name for k in KINDS if k.report)
# The sweep's news of a night, in the order it names them.
NEWS_KINDS: tuple[str, ...] = tuple(
    k.name for k in sorted((k for k in KINDS if k.news is not None),
                           key=lambda k: k.news or 0))


def kind_named(name: str) -> Kind:
    """The registered kind `name`; KeyError naming the registry where none is."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a registered kind of finding: register it in "
                       "fleet/findings/kinds.py") from None
