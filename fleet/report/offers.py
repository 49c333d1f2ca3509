"""The report's first screen (issue 56, "The first screen decides"): each offer, one
provider's GPUs of one variant, in one line: what it is (as found against what was
listed), what a GPU-hour buys (the matmul's TFLOP/s, training and decode tokens/s, what a
million tokens cost), its GPUs' health, and the verdict with its one reason.

    lines = offer_lines(OfferInput(...), listed)

The verdict is read from the findings the report lists (`Report.listed()`: the one list
`counts`, `--fail-on` and the metrics read), each placed with the offers it is about
(`placed`): any the provider answers for -> "dispute", naming the first; else any the
renter's to fix -> "yours to fix"; else any not settled -> "not settled"; else "buy", or
"no price to compare" where the offer has no price (and "not settled" where nothing of it
was measured: nothing against an offer never benchmarked is no reason to buy it). A
finding names its host first ("h100x2-e GPU 1 ...") or its variant ("beta is 3.1% slower
than alpha on H100 SXM5 80GB"); one that names neither (a listing hiding two variants, a
cluster's fabric) is about every offer of its provider.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from fleet.analysis.dataset import Config, HostState
from fleet.analysis.health.cards import NOT_READ, UNWELL
from fleet.analysis.job.cost import JobRow
from fleet.analysis.job.figures import JobConfig
from fleet.analysis.listing.found import FoundHost
from fleet.analysis.listing.mismatches import Mismatch
from fleet.analysis.matmul.cost import CostRow
from fleet.words import counted

if TYPE_CHECKING:
    from fleet.findings.finding import Finding

K = TypeVar("K")
R = TypeVar("R")

# A verdict and the side whose findings decide it, worst first.
VERDICTS = (("dispute", "provider"), ("yours to fix", "renter"), ("not settled", "unsettled"))
BUY, NO_PRICE = "buy", "no price to compare"
# The verdicts in the order a buyer reads a list of offers: what to act on first.
ORDER = ("dispute", "yours to fix", "not settled", BUY, NO_PRICE)


@dataclass(frozen=True)
class OfferInput:
    """What the offers are read from: the report's own tables."""

    found: Sequence[FoundHost]
    hosts: Sequence[HostState]
    mismatches: Sequence[Mismatch]
    cost: Sequence[CostRow]
    jobs: Sequence[JobRow]
    # Each job configuration key's decode point ("bandwidth", "latency"), None for training.
    points: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class OfferFinding:
    """A finding about an offer: its side, its place on that side's list (1 first), its
    kind and its title."""

    side: str  # provider, renter, unsettled
    number: int
    kind: str
    title: str

    @property
    def anchor(self) -> str:
        """The id of its line in the summary."""
        return f"finding-{self.side}-{self.number}"


@dataclass(frozen=True)
class HostListed:
    """One host of an offer: its GPUs of the variant, and what it was listed as."""

    host: str
    gpus: int
    listed: str  # the listing's words, "" for none
    as_listed: bool | None  # None: no listing to hold it to
    health: str = ""  # its GPUs of the variant by verdict: "1 degraded, 1 healthy"
    unwell: int = 0


@dataclass(frozen=True)
class OfferLine:
    """One offer in a line, and the verdict with its reason."""

    provider: str
    variant: str
    hosts: int
    gpus: int
    found: str  # "4 x H200-SXM-141GB on 1 host"
    # "as listed (H200 SXM 141GB)", "listed H100 NVL 94GB, found H100-SXM5-80GB",
    # "no listing"
    listed: str
    as_listed: bool | None  # None: no listing to hold it to
    tflops: float | None  # the matmul's median per GPU, the default benchmark
    tflops_gpus: int
    train_tokens: float | None  # the headline training step's median per GPU
    decode_tokens: float | None  # the headline decode at the bandwidth point
    train_cost: float | None  # per million tokens trained
    decode_cost: float | None  # per million tokens decoded
    pflop_cost: float | None  # per effective PFLOP-hour
    price: float | None  # per GPU-hour
    currency: str | None
    health: str  # "4 healthy", "1 degraded, 1 healthy"
    unwell: int  # GPUs failing or degraded
    verdict: str  # dispute, yours to fix, not settled, buy, no price to compare
    reason: str
    # How many of the report's findings are about it, by side (provider, renter, unsettled),
    # and each of them in the report's order.
    sides: tuple[tuple[str, int], ...] = ()
    findings: tuple[OfferFinding, ...] = ()
    host_lines: tuple[HostListed, ...] = ()
    # The id of its part of the page, by its place in the list: a host's strings never
    # make an id.
    anchor: str = ""
    # The matmul's, training's and decode's configuration: what each figure was taken at
    # (its variant's common one), or what the offer was measured at instead.
    compared: tuple[_Picked[CostRow], _Picked[JobRow], _Picked[JobRow]] | None = None

    def at(self, figure: str) -> str:
        """Words under a figure ("matmul", "train", "decode"): its configuration, or, where
        the offer was measured only at another than its variant's others, that one."""
        if self.compared is None:
            return ""
        picked = self.compared[("matmul", "train", "decode").index(figure)]
        return picked.at or (f"not comparable: measured at {picked.elsewhere}"
                             if picked.elsewhere else "")

    @property
    def verdict_class(self) -> str:
        """The verdict as a CSS class: "buy", "dispute", "fix", "unsettled", "no-price"."""
        return {"yours to fix": "fix", "not settled": "unsettled",
                NO_PRICE: "no-price"}.get(self.verdict, self.verdict)


def placed(listed: Iterable[tuple[str, Finding]], offers: Iterable[tuple[str, str]],
           host_variants: Mapping[tuple[str, str], set[str]]
           ) -> dict[tuple[str, str], list[tuple[str, Finding]]]:
    """Each (provider, variant) offer's findings, with their sides, in the report's order:
    a finding whose title begins with a host's name is about the offers of that host's
    variants; else one that names variants is about those; else every offer of its
    provider."""
    by_provider: dict[str, set[str]] = defaultdict(set)
    for provider, variant in offers:
        by_provider[provider].add(variant)
    hosts: dict[str, list[tuple[str, set[str]]]] = defaultdict(list)
    for (provider, host), variants in host_variants.items():
        hosts[provider].append((host, variants))
    for members in hosts.values():
        members.sort(key=lambda hv: -len(hv[0]))  # "gpu-10" before "gpu-1"
    found: dict[tuple[str, str], list[tuple[str, Finding]]] = defaultdict(list)
    for side, finding in listed:
        mine = by_provider.get(finding.provider, set())
        about: set[str] = set()
        for host, variants in hosts.get(finding.provider, []):
            if finding.title.startswith((f"{host}:", f"{host} ")):
                about = variants & mine
                break
        if not about:
            about = _named(finding.title, mine)
        for variant in sorted(about or mine):
            found[(finding.provider, variant)].append((side, finding))
    return found


def _named(title: str, variants: Iterable[str]) -> set[str]:
    """The variants `title` names, each where it stands in the title, not inside a longer
    variant's name ("H100 SXM5 80GB" is not named by "H100 SXM5 80GB MIG 1g.10gb")."""
    named = set()
    for variant in sorted(variants, key=len, reverse=True):
        if variant in title:
            named.add(variant)
            title = title.replace(variant, "\0")
    return named


def _health(setups: Iterable[tuple[str, int]]) -> tuple[str, int]:
    counts: Counter[str] = Counter()
    for verdict, n in setups:
        counts[verdict] += n
    order = [*UNWELL, "unknown", NOT_READ, "healthy"]
    said = [f"{counts[v]} {v}" for v in order if counts[v]]
    said += [f"{n} {v}" for v, n in counts.items() if v not in order]
    return ", ".join(said) or "not read", sum(counts[v] for v in UNWELL)


DEFAULT_MATMUL = ("bf16", 8192, "soaked", "sustained", "cold")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _job_base(c: JobConfig) -> tuple[object, ...]:
    """A job configuration less its attention backend: each offer's headline is its
    fastest backend that passed its gate, and headlines compare within one of these."""
    return (c.workload, c.model, c.shape, c.dtype, c.compiled, c.graph, c.concurrency,
            c.gpus_in_run, c.thermal, c.suite_version, c.stack)


def _common(measured: Mapping[tuple[str, str], Sequence[K]], variant: str,
            newest: Callable[[K], tuple[object, ...]]) -> K | None:
    """The configuration the offers of `variant` are compared at: the one most of them
    were measured at, the newest (`newest`) among equals."""
    offers: Counter[K] = Counter()
    for (_, v), keys in measured.items():
        if v == variant:
            offers.update(set(keys))
    if not offers:
        return None
    return max(offers, key=lambda k: (offers[k], newest(k)))


def _newest_matmul(c: Config) -> tuple[object, ...]:
    return (_version(c.harness_version),)


def _newest_job(base: tuple[object, ...]) -> tuple[object, ...]:
    """`_job_base`'s suite, then its GPUs at once: the newer suite, the fuller node."""
    return (_version(str(base[9])), base[7])


def _job_words(c: JobConfig) -> str:
    return (f"{c.attention}{' compiled' if c.compiled else ''}, suite {c.suite_version}, "
            f"{counted(c.gpus_in_run, 'GPU')} at once")


def _matmul_words(c: Config) -> str:
    return f"harness {c.harness_version}, {c.concurrency}"


@dataclass(frozen=True)
class _Picked(Generic[R]):
    """An offer's row at its variant's common configuration, or the words of what it
    was measured at instead (`elsewhere`: "" where it was not measured at all)."""

    row: R | None
    at: str
    elsewhere: str = ""


def _pick_cost(rows: Sequence[CostRow], common: Config | None) -> _Picked[CostRow]:
    default = [r for r in rows if (r.config.dtype, r.config.m, r.config.thermal,
                                   r.config.mode, r.config.cache) == DEFAULT_MATMUL]
    mine = [r for r in default if r.config == common]
    if mine:
        best = max(mine, key=lambda r: r.gpus)
        return _Picked(best, _matmul_words(best.config))
    if default:
        return _Picked(None, "", _matmul_words(default[0].config))
    return _Picked(None, "")


def _headlines(rows: Sequence[JobRow], train: bool, points: Mapping[str, str | None]
               ) -> list[JobRow]:
    """The offer's headline training steps, or headline decodes at the bandwidth point."""
    return [r for r in rows if r.config.headline and r.config.train == train
            and (train or points.get(r.config.key) == "bandwidth")]


def _pick_job(rows: Sequence[JobRow], common: tuple[object, ...] | None) -> _Picked[JobRow]:
    mine = [r for r in rows if _job_base(r.config) == common]
    if mine:
        best = max(mine, key=lambda r: r.gpus)
        return _Picked(best, _job_words(best.config))
    if rows:
        return _Picked(None, "", _job_words(rows[0].config))
    return _Picked(None, "")


def _listed(provider: str, variant: str, hosts: Sequence[HostState],
            mismatches: Sequence[Mismatch]) -> tuple[str, bool | None]:
    """What the offer's hosts were listed as, and whether they are that."""
    labels = sorted({h.listing.label for h in hosts if h.listing.expect})
    wrong = [m for m in mismatches if m.provider == provider
             and m.host in {h.host for h in hosts}]
    if wrong:
        listed = ", ".join(sorted({m.listed for m in wrong}))
        share = "" if len(wrong) == len(hosts) else \
            f" on {len(wrong)} of {counted(len(hosts), 'host')}"
        return f"listed {listed}{share}, found {variant}", False
    if not labels:
        return "no listing", None
    return f"as listed ({', '.join(labels)})", True


def offer_lines(given: OfferInput, listed: Sequence[tuple[str, Finding]]) -> list[OfferLine]:
    """Every offer of the fleet as found (a provider's GPUs of one variant), with what it
    buys and its verdict: by variant, and within one the worst verdict first, then the
    cheapest."""
    gpus: dict[tuple[str, str], int] = Counter()
    host_names: dict[tuple[str, str], set[str]] = defaultdict(set)
    host_variants: dict[tuple[str, str], set[str]] = defaultdict(set)
    health: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    for h in given.found:
        for s in h.setups:
            key = (h.provider, s.variant)
            gpus[key] += len(s.gpus)
            host_names[key].add(h.host)
            host_variants[(h.provider, h.host)].add(s.variant)
            health[key].append((s.health_text, len(s.gpus)))
    cost: dict[tuple[str, str], list[CostRow]] = defaultdict(list)
    for row in given.cost:
        cost[(row.provider, row.variant)].append(row)
    jobs: dict[tuple[str, str], list[JobRow]] = defaultdict(list)
    for job in given.jobs:
        jobs[(job.provider, job.variant)].append(job)
    offers = sorted(set(gpus) | set(cost) | set(jobs))
    # Each variant's offers compared at one configuration each of the matmul, training and
    # decode: a figure of another (an older suite, fewer GPUs at once, another harness) is
    # said, not ranked beside them.
    defaults = {key: [r.config for r in rows if (r.config.dtype, r.config.m, r.config.thermal,
                                                 r.config.mode, r.config.cache) == DEFAULT_MATMUL]
                for key, rows in cost.items()}
    heads = {train: {key: _headlines(rows, train, given.points) for key, rows in jobs.items()}
             for train in (True, False)}
    common = {variant: (_common(defaults, variant, _newest_matmul),
                        _common({k: [_job_base(r.config) for r in v]
                                 for k, v in heads[True].items()}, variant, _newest_job),
                        _common({k: [_job_base(r.config) for r in v]
                                 for k, v in heads[False].items()}, variant, _newest_job))
              for variant in {v for _, v in offers}}
    findings = placed(listed, offers, host_variants)
    numbers: dict[int, int] = {}
    count: Counter[str] = Counter()
    for side, finding in listed:
        count[side] += 1
        numbers[id(finding)] = count[side]
    by_host = {(h.provider, h.host): h for h in given.hosts}
    wrong = {(m.provider, m.host) for m in given.mismatches}
    lines = []
    for provider, variant in offers:
        key = (provider, variant)
        states = [by_host[(provider, name)] for name in sorted(host_names[key])
                  if (provider, name) in by_host]
        at_matmul, at_train, at_decode = common[variant]
        picked_matmul = _pick_cost(cost[key], at_matmul)
        picked_train = _pick_job(heads[True].get(key, []), at_train)
        picked_decode = _pick_job(heads[False].get(key, []), at_decode)
        matmul, train, decode = picked_matmul.row, picked_train.row, picked_decode.row
        said, as_listed = _listed(provider, variant, states, given.mismatches)
        health_text, unwell = _health(health[key])
        price = next((r.price_per_gpu_hour for r in (matmul, train, decode)
                      if r is not None and r.price_per_gpu_hour is not None), None)
        currency = next((r.currency for r in (matmul, train, decode)
                         if r is not None and r.currency is not None), None)
        n = gpus[key] or max((r.gpus for r in cost[key]), default=0)
        hosts = len(host_names[key]) or max((r.hosts for r in cost[key]), default=0)
        sides = Counter(side for side, _ in findings.get(key, []))
        per_host = Counter(name for h in given.found if h.provider == provider
                           for s in h.setups if s.variant == variant for name in
                           [h.host] * len(s.gpus))
        verdicts = {name: _health((s.health_text, len(s.gpus)) for h in given.found
                                  if (h.provider, h.host) == (provider, name)
                                  for s in h.setups if s.variant == variant)
                    for name in per_host}
        lines.append(OfferLine(
            provider, variant, hosts, n, f"{n} x {variant} on {counted(hosts, 'host')}",
            said, as_listed, None if matmul is None else matmul.median_tflops,
            0 if matmul is None else matmul.gpus,
            None if train is None else train.tokens_per_s,
            None if decode is None else decode.tokens_per_s,
            None if train is None else train.cost_per_million_tokens,
            None if decode is None else decode.cost_per_million_tokens,
            None if matmul is None else matmul.cost_per_pflop_hour, price, currency,
            health_text, unwell, "", "",
            tuple((side, sides[side]) for _, side in VERDICTS if sides[side]),
            tuple(OfferFinding(side, numbers[id(f)], f.kind, f.title)
                  for side, f in findings.get(key, [])),
            tuple(HostListed(state.host, per_host[state.host],
                             state.listing.label if state.listing.expect else "",
                             None if not state.listing.expect
                             else (provider, state.host) not in wrong,
                             *verdicts.get(state.host, ("not read", 0)))
                  for state in states),
            compared=(picked_matmul, picked_train, picked_decode)))
    return _judged(lines, findings)


def _judged(lines: list[OfferLine], findings: Mapping[tuple[str, str],
                                                      list[tuple[str, Finding]]]
            ) -> list[OfferLine]:
    judged = []
    troubled = {key for key, found in findings.items() if found}
    for line in lines:
        mine = findings.get((line.provider, line.variant), [])
        for verdict, side in VERDICTS:
            on_side = [f for s, f in mine if s == side]
            if on_side:
                first = on_side[0]
                more = f" (and {len(on_side) - 1} more)" if len(on_side) > 1 else ""
                reason = f"{first.kind}: {first.title}{more}"
                judged.append(_with(line, verdict, reason))
                break
        else:
            judged.append(_clean(line, lines, troubled))
    # By variant, the offers a buyer compares; within one, what to act on first.
    judged.sort(key=lambda o: (o.variant, ORDER.index(o.verdict), _cost_key(o), o.provider))
    return [replace(line, anchor=f"offer-{i + 1}") for i, line in enumerate(judged)]


def _cost_key(line: OfferLine) -> float:
    for value in (line.train_cost, line.decode_cost, line.pflop_cost):
        if value is not None:
            return value
    return math.inf


def _with(line: OfferLine, verdict: str, reason: str) -> OfferLine:
    return replace(line, verdict=verdict, reason=reason)


def _clean(line: OfferLine, lines: Sequence[OfferLine],
           troubled: set[tuple[str, str]]) -> OfferLine:
    """A clean offer: buy, with where its cost ranks among the variant's clean offers
    priced in its currency, and how many cheaper ones have findings against them; no
    price to compare where it has none."""
    if line.tflops is None and line.train_tokens is None and line.decode_tokens is None:
        elsewhere = [p.elsewhere for p in line.compared or () if p.elsewhere]
        if elsewhere:
            # Measured, but not where its variant's other offers were: nothing to rank.
            return _with(line, "not settled", "measured only at another configuration "
                         f"than its variant's other offers ({'; '.join(elsewhere)}): probe "
                         "it again to compare")
        # Nothing against an offer never measured is no reason to buy it.
        return _with(line, "not settled", "nothing measured: its GPUs were fingerprinted "
                                          "only; probe it without --fingerprint-only")
    if line.price is None:
        return _with(line, NO_PRICE, "nothing to dispute or fix; no price listed to compare "
                                     "(price_per_gpu_hour in the inventory)")
    for what, value in (("million training tokens", "train_cost"),
                        ("million decode tokens", "decode_cost"),
                        ("effective PFLOP-hour", "pflop_cost")):
        mine = getattr(line, value)
        if mine is None:
            continue
        rivals = [o for o in lines if o.variant == line.variant and o.currency == line.currency
                  and getattr(o, value) is not None]
        clean = sorted(getattr(o, value) for o in rivals
                       if (o.provider, o.variant) not in troubled)
        rank = clean.index(mine) + 1
        where = ("the only clean offer of its variant" if len(clean) == 1 else
                 f"the cheapest of {len(clean)} clean offers of its variant" if rank == 1 else
                 f"{_ordinal(rank)} cheapest of {len(clean)} clean offers of its variant")
        cheaper = sum(1 for o in rivals if (o.provider, o.variant) in troubled
                      and getattr(o, value) < mine)
        if cheaper:
            where += (f"; {counted(cheaper, 'cheaper offer')} "
                      f"{'has findings' if cheaper == 1 else 'have findings'} against it")
        return _with(line, BUY, f"nothing to dispute or fix; {mine:.3g} {line.currency} per "
                                f"{what}, {where}")
    return _with(line, BUY, f"nothing to dispute or fix; {line.price:g} {line.currency} per "
                            "GPU-hour")


def _ordinal(n: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(n, f"{n}th")

