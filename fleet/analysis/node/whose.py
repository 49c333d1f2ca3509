"""Whose a slow node figure is, settled by experiment, not by a list of causes
(docs/findings.md, "One node, judged on its own"; issue 44).

A figure found short (fleet/analysis/node/shortfall.py), or a node apart from its crowd
(fleet/analysis/node/peers.py), was measured under the run's settings (fleet/model/settings.py:
the agent's environment, the inventory's `env:`, NCCL's files). Those that can move a
figure of its kind are its suspects (agent/source/settings.py says which family moves
what, with its vendor's documentation), less what fleet keeps as found (NVLink multicast
switches: never removed, so never a suspect). Then:

- **renter**: the agent measured the figure again in the same run without its suspects
  (agent/rerun/allreduce.py, memory_rerun.py, links_rerun.py) and it was no longer short
  against the same threshold: the settings cost the difference, and they are the run's
  to unset. Said with what each cost and where it came from; never disputed.
- **provider**: no suspect was in the run, or the rerun without all of them was still
  short (every suspect named as taken out; one named in neither list, or kept because
  /etc/nccl.conf sets it too, leaves it unsettled): the node's own. It stays in "What
  to dispute", saying it was measured again.
- **unsettled**: suspects were in the run and no rerun took them all away (an older
  agent, a rerun that failed or was dropped for another process on the GPUs, a setting
  of /etc/nccl.conf NCCL reads whatever the environment says; a node apart from its
  crowd is never measured again): named with its suspects, kept out of "What to
  dispute" and shown apart, so that the next run can settle it.

A short soaked matmul is measured again as a pair (agent/rerun/matmul.py): quick on the
card still hot from the soak, without the settings and then with them, so that the pair
differs by the settings and not by heat. Still short without them: the card's. Clear
without them and the settings costing a share the pair can tell (`PAIR_COST`): the
renter's. Costing nothing (`PAIR_NOISE`): the card's, the soaked shortfall standing.

A node whose documents predate recorded settings (before 0018) is read from what its
all-reduce recorded (`nccl_settings`: its NCCL_* and CUDA_VISIBLE_DEVICES); no other
figure of such a node has suspects. A node's GPUs or pairs that stand below its own others
(fleet/analysis/node/outliers.py) ran under the same settings in the same run: a run-wide
setting does not single one out, so those stay the provider's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import pandas as pd

from agent.source import settings as families
from fleet.analysis.node.nccl import parse_settings
from fleet.analysis.node.shortfall import MatmulShortfall, MatmulUnit, Shortfall, ShortUnit
from fleet.store.matmul_rerun import StoredRerun

Party = Literal["renter", "provider", "unsettled"]
# A finding's kind of figure (fleet/analysis/node/shortfall.py FIGURES' values) as the agent's
# families name what they move.
KINDS = {"memory": "memory_copy", "host link": "host_to_device", "pairs": "peer_copy",
         "all-reduce": "allreduce"}
# What the words say of a setting fleet keeps as found.
KEPT_WHY = ("kept as found: fleet never removes NVLink multicast switches from what it "
            "starts (multicast can put a shared host's GPUs out of service)")


@dataclass(frozen=True)
class RunSetting:
    """One setting of a run, as a finding names it."""

    name: str
    value: str | None
    source: str

    @property
    def text(self) -> str:
        """"NCCL_ALGO=Tree (environment)"."""
        value = "(withheld)" if self.value is None else self.value
        return f"{self.name}={value} ({self.source})"


@dataclass(frozen=True)
class Whose:
    """Whose a finding is, and the words that say why."""

    party: Party
    words: str | None  # None: nothing to say (a provider's finding with no suspect)
    suspects: tuple[str, ...] = ()  # "NCCL_ALGO=Tree (environment)"


def run_settings(settings: pd.DataFrame, figures: pd.DataFrame
                 ) -> dict[int, tuple[RunSetting, ...]]:
    """Each document's settings that applied: from run_setting (fleet/store/settings.py)
    where the document has rows there, else what its all-reduce recorded."""
    found: dict[int, list[RunSetting]] = {}
    if not settings.empty:
        applied = settings[settings["applies"].astype("boolean").fillna(True).astype(bool)]
        for document, name, value, source in zip(
                applied["document_id"].astype(int).tolist(), applied["name"].tolist(),
                applied["value"].astype(object).tolist(), applied["source"].tolist(),
                strict=True):
            found.setdefault(int(document), []).append(RunSetting(
                str(name), value if isinstance(value, str) else None, str(source)))
    if not figures.empty and "nccl_settings" in figures:
        recorded = settings["document_id"].astype(int).unique().tolist() \
            if not settings.empty else []
        reduce = figures[(figures["kind"] == "allreduce")
                         & ~figures["document_id"].isin(recorded)]
        for document, text in zip(reduce["document_id"].astype(int).tolist(),
                                  reduce["nccl_settings"].tolist(), strict=True):
            if document in found or not isinstance(text, str):
                continue
            found[document] = [RunSetting(name, value, "the all-reduce's record")
                               for name, value in sorted(parse_settings(text).items())]
    return {d: tuple(s) for d, s in found.items()}


# A value an anonymized report may show: a plain token ("Tree", "LL128,Simple", "65536").
# Anything else (a path, a host:port, an interface list with addresses) may name the
# renter's machines, and an anonymized report hides it as it hides pids and users.
PLAIN = re.compile(r"^[A-Za-z0-9_,+-]{0,32}$")
HIDDEN = "(hidden in an anonymized report)"


def anonymized(ran: Mapping[int, tuple[RunSetting, ...]]
               ) -> dict[int, tuple[RunSetting, ...]]:
    """The settings as an anonymized report names them: a file by its kind, not its path
    ("nccl.conf", not /home/alice/.nccl.conf), and only plain values."""
    return {document: tuple(RunSetting(
        s.name, s.value if s.value is None or PLAIN.match(s.value) else HIDDEN,
        s.source.split(":", 1)[0] if s.source.startswith("nccl.conf:") else s.source)
        for s in settings) for document, settings in ran.items()}


def suspects(settings: Iterable[RunSetting], kind: str) -> tuple[RunSetting, ...]:
    """The settings that can move a figure of `kind` (the node suite's kinds, "matmul",
    "job"), less those fleet keeps as found."""
    return tuple(s for s in settings if families.moves(s.name, kind)
                 and not families.kept(s.name))


def _kept(settings: Iterable[RunSetting], kind: str) -> tuple[RunSetting, ...]:
    return tuple(s for s in settings if families.moves(s.name, kind) and families.kept(s.name))


def _listed(settings: Iterable[RunSetting]) -> str:
    return ", ".join(s.text for s in settings)


def unsettled_words(what: str, found: tuple[RunSetting, ...]) -> Whose:
    """A finding with suspects and no rerun that took them all away."""
    return Whose("unsettled",
                 f"{what} was measured under settings that can move it and not measured "
                 f"again without them: {_listed(found)}; run the agent again (it measures "
                 "a short figure again without them) or unset them, before disputing it",
                 tuple(s.text for s in found))


def _gbs(value: float) -> str:
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def whose_shortfall(shortfall: Shortfall, figures: pd.DataFrame,
                    settings: Mapping[int, tuple[RunSetting, ...]]) -> Whose:
    """Whose `shortfall` is, from its node's run settings and its figures' reruns
    (`figures`: fleet.analysis.node.figures.prepare's frame, with the `rerun_*` columns)."""
    kind = KINDS[shortfall.figure]
    node = figures[(figures["provider"] == shortfall.provider)
                   & (figures["host"] == shortfall.host)]
    documents = sorted(set(node["document_id"].astype(int).tolist()))
    ran = tuple(s for d in documents for s in settings.get(d, ()))
    found = suspects(ran, kind)
    worst = shortfall.units[0]
    what = (f"{worst.what} {_gbs(worst.gbs)} GB/s" if shortfall.figure == "all-reduce"
            else f"{shortfall.subject}")
    if kind == "allreduce":
        rows = node[(node["kind"] == "allreduce")
                    & (node["size_bytes"] == worst.config.size_bytes)]
        reran = rows[rows["rerun_gbs"].notna()] if "rerun_gbs" in rows else rows.iloc[0:0]
        if not reran.empty:
            row = reran.iloc[0]
            # The rerun's own run: its settings, not another document's of the node.
            own = settings.get(int(row["document_id"]), ran)
            return _settled(shortfall, row, own, _kept(own, kind), suspects(own, kind))
    if kind != "allreduce":
        pairs = _unit_reruns(shortfall, node)
        if pairs is not None:
            judged = []
            for unit, again in pairs:
                own = settings.get(int(again["document_id"]), ran)
                judged.append(_settled(shortfall, again, own, (), suspects(own, kind), unit))
            parties = {w.party for w in judged}
            words = "; ".join(w.words for w in judged if w.words)
            named = tuple(dict.fromkeys(n for w in judged for n in w.suspects))
            party: Party = parties.pop() if len(parties) == 1 else "unsettled"
            return Whose(party, words, () if party == "provider" else named)
    if not found:
        return Whose("provider", None)
    return unsettled_words(what, found)


def _unit_reruns(shortfall: Shortfall, node: pd.DataFrame
                 ) -> list[tuple[ShortUnit, pd.Series]] | None:
    """Each short unit's figure with its rerun (a GPU's memory or host copy, a pair's copy
    one way or both ways: agent/rerun/memory.py, links_rerun.py); None unless every
    one has one."""
    if "rerun_gbs" not in node:
        return None
    rows = node[node["rerun_gbs"].notna()]
    found = []
    for unit in shortfall.units:
        config = unit.config
        mine = rows[(rows["kind"] == config.kind) & (rows["gpu_index"] == unit.gpu_index)]
        if config.kind == "peer_copy":
            mine = mine[(mine["peer_index"] == unit.peer_index)
                        & (mine["direction"] == config.direction)]
        elif config.memory:
            mine = mine[mine["memory"] == config.memory]
        if mine.empty:
            return None
        found.append((unit, mine.iloc[0]))
    return found


def _settled(shortfall: Shortfall, row: pd.Series, ran: tuple[RunSetting, ...],
             kept: tuple[RunSetting, ...], found: tuple[RunSetting, ...],
             unit: ShortUnit | None = None) -> Whose:
    worst = shortfall.units[0] if unit is None else unit
    what = ("all-reduce" if shortfall.figure == "all-reduce"
            else f"{worst.name} {worst.what}")
    lead = "" if shortfall.figure == "all-reduce" else f"{what} "
    limit = worst.expected_gbs * shortfall.threshold
    rerun = float(row["rerun_gbs"])
    taken = str(row["rerun_without"] or "").split()
    stayed = [n for n in str(row["rerun_kept"] or "").split() if not families.kept(n)]
    by_name = {s.name: s for s in ran}
    removed = tuple(by_name.get(n, RunSetting(n, None, "the run")) for n in taken)
    under = _listed(removed)
    keeps = (f"; {_listed(kept)} {KEPT_WHY}" if kept else "")
    if rerun >= limit:
        cost = 1.0 - worst.gbs / rerun if rerun > 0 else 0.0
        it = "it" if len(removed) == 1 else "them"
        return Whose("renter",
                     f"{what} {_gbs(worst.gbs)} GB/s under {under}, {_gbs(rerun)} "
                     f"without {it}, measured again in the same run: "
                     f"{'a setting' if len(removed) == 1 else 'settings'} of the run's "
                     f"environment costing {cost:.0%}; unset {it}{keeps}",
                     tuple(s.text for s in removed))
    if stayed:
        left = tuple(by_name.get(n, RunSetting(n, None, "the run")) for n in stayed)
        return Whose("unsettled",
                     f"{what} {_gbs(worst.gbs)} GB/s, {_gbs(rerun)} measured again "
                     f"without {under}, still short; {_listed(left)} could not be taken "
                     "away (NCCL reads /etc/nccl.conf whatever the environment says): "
                     "unset it and measure again before disputing it",
                     tuple(s.text for s in left))
    # A suspect the rerun neither took out nor said it kept (past the agent's cap, or
    # an agent that did not say) may be what still held it short: not the provider's.
    named = set(taken) | set(str(row["rerun_kept"] or "").split())
    left = tuple(s for s in found if s.name not in named)
    if left:
        return Whose("unsettled",
                     f"{what} {_gbs(worst.gbs)} GB/s, {_gbs(rerun)} measured again "
                     f"without {under}, still short; it ran still under {_listed(left)}: "
                     "unset them and measure again before disputing it",
                     tuple(s.text for s in left))
    return Whose("provider",
                 f"{lead}measured again in the same run without {under}: {_gbs(rerun)} GB/s, "
                 f"still under the {_gbs(limit)} it is called short under{keeps}")


def whose_apart(provider: str, host: str, kind: str, what: str, figures: pd.DataFrame,
                settings: Mapping[int, tuple[RunSetting, ...]]) -> Whose:
    """Whose a node's figure of `kind` standing apart from its crowd is: the provider's,
    unless the run held settings that can move it (no rerun is made for it)."""
    node = figures[(figures["provider"] == provider) & (figures["host"] == host)]
    ran = tuple(s for d in sorted(set(node["document_id"].astype(int).tolist()))
                for s in settings.get(d, ()))
    found = suspects(ran, kind)
    return Whose("provider", None) if not found else unsettled_words(what, found)


# The matmul's pair (agent/rerun/matmul.py): quick figures on the hot card, without the
# settings and then with them. A settled H100 hops between operating points ~2.3% apart
# and a quick figure spans them: on lent H100s (bench/records/2026-11-28-h100-matmul-whose)
# a setting that moves nothing there (CUBLAS_WORKSPACE_CONFIG=:0:0) read -0.6% between
# the pair's halves, and CUDA_LAUNCH_BLOCKING=1 (with CUBLAS_WORKSPACE_CONFIG=:4096:8)
# cost 4.6-8.6% in three pairs. At `PAIR_COST` or more the settings cost what the pair can tell;
# within `PAIR_NOISE` they cost nothing it can see. Between, unsettled.
PAIR_COST = 0.02
PAIR_NOISE = 0.01


def _pair_words(gpu: int, rerun: StoredRerun, under: str) -> str:
    return (f"GPU {gpu} measured again quick on the hot card: {rerun.rerun_tflops:.1f} "
            f"TFLOP/s without {under}, {rerun.with_tflops:.1f} with "
            f"{'it' if len(rerun.without) == 1 else 'them'} straight after")


def _judge_pair(unit: MatmulUnit, rerun: StoredRerun, ran: tuple[RunSetting, ...]
                ) -> tuple[Party, str, tuple[str, ...]]:
    limit = unit.expected_tflops * (1.0 - unit.margin)
    by_name = {s.name: s for s in ran}
    removed = tuple(by_name.get(n, RunSetting(n, None, "the run")) for n in rerun.without)
    under = _listed(removed)
    said = _pair_words(unit.gpu_index, rerun, under)
    if rerun.contended:
        return ("unsettled", f"{said}, with another process on the GPU: it settles nothing; "
                "measure again on an idle GPU", tuple(s.text for s in removed))
    left = tuple(s for s in suspects(ran, "matmul") if s.name not in rerun.without)
    if left:
        return ("unsettled", f"{said}; it ran still under {_listed(left)}: unset them and "
                "measure again before disputing it", tuple(s.text for s in left))
    if rerun.rerun_tflops < limit:
        return ("provider", f"{said}: still under the {limit:.1f} it is called short under",
                ())
    it = "it" if len(removed) == 1 else "them"
    if rerun.cost >= PAIR_COST:
        return ("renter", f"{said}: {'a setting' if len(removed) == 1 else 'settings'} of "
                f"the run's environment costing {rerun.cost:.1%}, the GPU clearing its "
                f"{limit:.1f} without {it}; unset {it}", tuple(s.text for s in removed))
    if abs(rerun.cost) < PAIR_NOISE:
        return ("provider", f"{said}: {it} cost nothing measurable ({rerun.cost:+.1%}); the "
                "soaked shortfall is the card's", ())
    return ("unsettled", f"{said}: {it} cost {rerun.cost:+.1%}, within what the pair can "
            f"tell apart; unset {it} and measure again before disputing it",
            tuple(s.text for s in removed))


def whose_matmul(shortfall: MatmulShortfall, documents: Iterable[int],
                 settings: Mapping[int, tuple[RunSetting, ...]],
                 reruns: Iterable[StoredRerun] = ()) -> Whose:
    """Whose a node's short soaked matmul is: each short GPU's pair (the agent's rerun,
    `reruns`: newest first) settles it where every short GPU has one; without, unsettled
    where the run held settings that can move a matmul."""
    documents = list(documents)
    newest: dict[int, StoredRerun] = {}
    for rerun in reruns:
        if rerun.document_id in documents:
            newest.setdefault(rerun.gpu_index, rerun)
    what = f"GPU {', '.join(str(i) for i in shortfall.indexes)} matmul"
    if all(u.gpu_index in newest for u in shortfall.gpus):
        judged = [_judge_pair(u, newest[u.gpu_index],
                              tuple(settings.get(newest[u.gpu_index].document_id, ())))
                  for u in shortfall.gpus]
        parties = {party for party, _, _ in judged}
        words = "; ".join(w for _, w, _ in judged)
        named = tuple(dict.fromkeys(n for _, _, names in judged for n in names))
        if parties == {"renter"}:
            return Whose("renter", words, named)
        if parties == {"provider"}:
            return Whose("provider", words)
        return Whose("unsettled", words, named)
    found = suspects((s for d in documents for s in settings.get(d, ())), "matmul")
    return Whose("provider", None) if not found else unsettled_words(what, found)


@dataclass(frozen=True)
class Unsettled:
    """A finding whose party no experiment settled: shown apart, never disputed."""

    kind: str  # the finding's `--fail-on` kind: "shortfall", "peer"
    provider: str
    title: str
    evidence: str
    whose: Whose

    def finding(self) -> tuple[str, str, str, str, str | None, tuple[str, ...]]:
        """(kind, provider, title, evidence, cause, details), as the report lists one."""
        return (self.kind, self.provider, self.title, self.evidence, self.whose.words,
                self.whose.suspects)


@dataclass(frozen=True)
class Settled:
    """Node shortfalls sorted by whose they are."""

    provider: tuple[Shortfall, ...]
    renter: tuple[Shortfall, ...]
    unsettled: tuple[Unsettled, ...]


def settle_shortfalls(caused: Iterable[tuple[Shortfall, bool]], figures: pd.DataFrame,
                      settings: Mapping[int, tuple[RunSetting, ...]]) -> Settled:
    """`caused` (each shortfall with whether a cause fleet was taught, fleet/analysis/
    nccl.py, calls it the renter's) sorted by whose it is: a rerun settles it whatever
    the taught cause says; without one, a taught renter's cause stands, and otherwise a
    shortfall with suspects is unsettled."""
    provider: list[Shortfall] = []
    renter: list[Shortfall] = []
    unsettled: list[Unsettled] = []
    for shortfall, taught in caused:
        whose = whose_shortfall(shortfall, figures, settings)
        reran = whose.party == "renter" or (whose.party == "provider"
                                            and whose.words is not None)
        told = "; ".join(w for w in (shortfall.cause, whose.words) if w) or None
        if taught and not reran:
            renter.append(shortfall)  # the taught cause's words stand alone
        elif whose.party == "renter":
            renter.append(replace(shortfall, cause=told))
        elif whose.party == "provider":
            provider.append(replace(shortfall, cause=told))
        else:
            unsettled.append(Unsettled("shortfall", shortfall.provider, shortfall.title,
                                       shortfall.evidence, whose))
    return Settled(tuple(provider), tuple(renter), tuple(unsettled))


def suspects_by_provider(settings: Mapping[int, tuple[RunSetting, ...]],
                         documents: Mapping[int, str], kind: str
                         ) -> dict[str, tuple[RunSetting, ...]]:
    """Per provider, the settings of its documents' runs (`documents`: document id ->
    provider) that can move a figure of `kind`, each (name, value) once."""
    found: dict[str, dict[tuple[str, str | None], RunSetting]] = {}
    for document, provider in documents.items():
        for setting in suspects(settings.get(document, ()), kind):
            found.setdefault(provider, {}).setdefault((setting.name, setting.value), setting)
    return {p: tuple(s.values()) for p, s in found.items()}


def unsettled_gap(slower: str, what: str, found: tuple[RunSetting, ...]) -> Whose:
    """A provider gap whose slower side ran under settings that can move it: a setting of
    the run slows every GPU of it alike, so no rule within a node sees it; only the
    comparison between providers does, and there it is not the provider's to answer."""
    return Whose("unsettled",
                 f"{slower}'s {what} were measured under settings that can move them and "
                 f"not measured again without them: {_listed(found)}; unset them and "
                 "measure again before disputing it", tuple(s.text for s in found))
