"""False disputes counted (issue 44, item 5): every case of the corpus (bench/corpus/
manifest.json: real documents of lent nodes and constructed ones, each labelled with the
party that made its fault) judged by fleet as a buyer's one-node probe is judged, and
each outcome set against the label.

Each case goes through fleet's own path alone: its document written as a file, stored by
`fleet.Store.ingest` (what `fleet ingest` calls) into a new temporary SQLite store, and
the report built by `fleet.Store.report` (what `fleet report` calls). A finding *names*
the fault when its title, cause or details name one of the case's `expect` units ("GPU 3"
also in "GPUs 1, 3" and in a pair 0-3; "pair 0-3" either way round; "all-reduce"). Where
the report has an `unsettled` list (issue 44, item 1: a short figure never re-measured
without the settings that can move it), its findings are read too.

Per case, against its label (a finding whose title holds one of the case's
`provider_also` words, a provider's fault of another figure the document also shows, is
left out of its What to dispute):

- **none** (a healthy run): any finding under What to dispute is a false dispute;
- **renter**: any finding under What to dispute is a false dispute (the run holds no fault
  of the provider's); else the fault is called the renter's, unsettled, or not named;
- **provider**: a finding under What to dispute naming the fault is a hit; else it is a
  missed dispute: the renter's (a renter finding naming it: really the provider's),
  unsettled, or not named at all.

    python bench/false_disputes.py [--only NAME ...] [--out bench/corpus/outcomes.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import whose_corpus  # noqa: E402

from fleet.api import Store  # noqa: E402

LABELS = ("none", "renter", "provider")
OUT = REPO / "bench" / "corpus" / "outcomes.json"


def _gpu_named(text: str, gpu: str) -> bool:
    """Whether `text` names GPU `gpu`: "GPU 3", "GPUs 1, 3 and 5", "GPU 3 matmul", or a
    pair with it at either end ("pair 0-3", "pairs 1-3, 2-3")."""
    if re.search(rf"\bGPU {gpu}\b", text):
        return True
    for listed in re.findall(r"\bGPUs ([\d, and]+)", text):
        if gpu in re.findall(r"\d+", listed):
            return True
    return bool(re.search(rf"\bpairs? [\d\-, and]*\b({gpu}-\d+|\d+-{gpu})\b", text))


def names(text: str, unit: str) -> bool:
    """Whether a finding's `text` names `unit` ("GPU 3", "pair 0-3", "all-reduce")."""
    if unit == "all-reduce":
        return "all-reduce" in text.lower()
    if unit.startswith("pair "):
        a, b = unit.removeprefix("pair ").split("-")
        return bool(re.search(rf"\b({a}-{b}|{b}-{a})\b", text))
    if unit.startswith("GPU "):
        return _gpu_named(text, unit.removeprefix("GPU "))
    raise ValueError(f"unknown unit {unit!r}: GPU N, pair A-B or all-reduce")


def _text(finding: Any) -> str:
    parts = [getattr(finding, a, None) for a in ("title", "cause")]
    return " | ".join([str(p) for p in parts if p] + [str(d) for d in
                                                      getattr(finding, "details", ()) or ()])


def _naming(findings: Iterable[Any], expect: Sequence[str]) -> list[str]:
    return [f.title for f in findings if any(names(_text(f), u) for u in expect)]


@dataclass(frozen=True)
class Outcome:
    """One case as fleet judged it: its label, what each side was told, and the verdict."""

    name: str
    label: str
    made: str  # "real" or "constructed"
    expect: tuple[str, ...]
    dispute: tuple[str, ...]  # every provider finding's title
    dispute_naming: tuple[str, ...]  # those naming an expected unit
    renter_naming: tuple[str, ...]
    unsettled_naming: tuple[str, ...]
    verdict: str
    # Disputes of the platform's own on other figures (the case's `provider_also`): set
    # apart from the case's verdict, and counted, never dropped.
    platform: tuple[str, ...] = ()

    @property
    def false_dispute(self) -> bool:
        return self.label in ("none", "renter") and bool(self.dispute)

    @property
    def missed(self) -> bool:
        return self.label == "provider" and not self.dispute_naming


def verdict(label: str, dispute: Sequence[str], dispute_naming: Sequence[str],
            renter_naming: Sequence[str], unsettled_naming: Sequence[str]) -> str:
    """The case's verdict by its label (the module's words)."""
    if label in ("none", "renter") and dispute:
        return "false dispute"
    if label == "none":
        return "clean"
    if label == "renter":
        return ("renter's" if renter_naming else "unsettled" if unsettled_naming
                else "not named")
    if dispute_naming:
        return "hit"
    return ("missed: told the renter" if renter_naming
            else "missed: unsettled" if unsettled_naming else "missed: not named")


def judge(case: dict[str, Any]) -> Outcome:
    """One case through fleet ingest and fleet report, alone in a new store."""
    if case["label"] not in LABELS:
        raise ValueError(f"{case['name']}: label {case['label']!r} is not one of {LABELS}")
    data = whose_corpus.read(REPO / case["path"])
    with tempfile.TemporaryDirectory() as folder:
        document = Path(folder) / "document.json"
        document.write_text(json.dumps(data))
        store = Store(f"sqlite:///{Path(folder) / 'fleet.db'}")
        counts = store.ingest([document], provider="lent", host=case["name"])
        if counts["stored"] != 1:
            raise RuntimeError(f"{case['name']}: not stored ({dict(counts)})")
        report = store.report()
        store.engine.dispose()
    expect = tuple(case.get("expect", ()))
    # What the document also holds of the provider's own on other figures (`provider_also`:
    # words of those findings' titles, e.g. a host whose pinned host copies read 81-87% of
    # the catalog in every run, the healthy one included): disputing those is no false
    # dispute of the case's fault.
    also = tuple(case.get("provider_also", ()))
    dispute = tuple(f.title for f in report.dispute
                    if not any(words in f.title for words in also))
    platform = tuple(f.title for f in report.dispute
                     if any(words in f.title for words in also))
    naming = tuple(_naming(report.dispute, expect))
    renter = tuple(_naming(report.renter, expect))
    # Issue 44's unsettled findings, where the report has them yet.
    unsettled = tuple(_naming(getattr(report, "unsettled", ()) or (), expect))
    return Outcome(case["name"], case["label"], case.get("made", "real"), expect, dispute,
                   naming, renter, unsettled,
                   verdict(case["label"], dispute, naming, renter, unsettled), platform)


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The figures the issue asks for, over `outcomes`."""
    labels = Counter(o.label for o in outcomes)
    made = Counter(o.made for o in outcomes)
    return {
        "corpus": len(outcomes), "by_label": {k: labels[k] for k in LABELS},
        "by_origin": dict(sorted(made.items())),
        "false_disputes": sum(o.false_dispute for o in outcomes),
        "false_disputes_naming_the_fault": sum(o.false_dispute and bool(o.dispute_naming)
                                               for o in outcomes),
        "missed_disputes": sum(o.missed for o in outcomes),
        "renter_findings_really_the_providers": sum(
            o.verdict == "missed: told the renter" for o in outcomes),
        "unsettled": sum(bool(o.unsettled_naming) for o in outcomes),
        "hits": sum(o.verdict == "hit" for o in outcomes),
        "platform_disputes": sum(len(o.platform) for o in outcomes),
        "platform_cases": sum(bool(o.platform) for o in outcomes),
        "renter_called_renters": sum(o.verdict == "renter's" for o in outcomes)}


def table(outcomes: Sequence[Outcome]) -> str:
    """The summary, then each case: its label, verdict and what fleet said of it."""
    s = summary(outcomes)
    labels = ", ".join(f"{k} {v}" for k, v in s["by_label"].items())
    origins = ", ".join(f"{k} {v}" for k, v in s["by_origin"].items())
    lines = [f"corpus: {s['corpus']} documents ({labels}; {origins})",
             f"false disputes (provider blamed, label renter or none): {s['false_disputes']}"
             f" ({s['false_disputes_naming_the_fault']} naming the renter's fault)",
             f"missed disputes (label provider, nothing disputed of it): {s['missed_disputes']}",
             f"  renter findings really the provider's: "
             f"{s['renter_findings_really_the_providers']}",
             f"unsettled (naming the fault): {s['unsettled']}",
             f"disputes of the platform's own on other figures (provider_also), set apart: "
             f"{s['platform_disputes']} in {s['platform_cases']} cases",
             f"provider faults disputed: {s['hits']}; renter faults told the renter: "
             f"{s['renter_called_renters']}", "",
             f"{'case':44} {'label':9} {'verdict':26} what fleet said"]
    for o in outcomes:
        said = (o.dispute[0] if o.dispute else o.renter_naming[0] if o.renter_naming
                else o.unsettled_naming[0] if o.unsettled_naming else "")
        lines.append(f"{o.name:44} {o.label:9} {o.verdict:26} {said[:110]}")
    return "\n".join(lines)


def run(only: Sequence[str] = ()) -> list[Outcome]:
    """Every case of the manifest (or those named in `only`), judged."""
    chosen = [c for c in whose_corpus.cases() if not only or c["name"] in only]
    missing = set(only) - {c["name"] for c in chosen}
    if missing:
        raise SystemExit(f"no such case in {whose_corpus.MANIFEST}: {sorted(missing)}")
    return [judge(case) for case in chosen]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=(), help="case names")
    parser.add_argument("--out", type=Path, help=f"per-case outcomes as JSON (e.g. {OUT})")
    args = parser.parse_args(argv)
    outcomes = run(args.only)
    print(table(outcomes))
    if args.out:
        args.out.write_text(json.dumps({
            "command": "python bench/false_disputes.py --out "
                       + str(args.out.relative_to(REPO) if args.out.is_absolute()
                             and args.out.is_relative_to(REPO) else args.out),
            "summary": summary(outcomes),
            "cases": [{**asdict(o), "false_dispute": o.false_dispute, "missed": o.missed}
                      for o in outcomes]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
