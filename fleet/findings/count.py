"""Findings counted one way for every reader: the report's counts and findings line,
`--fail-on`, the sweep's night and the metrics' open findings all count the same list.

    counts(report.findings, report.regressions)["gap"]
    line(report.findings, report.regressions)  # "job_shortfall 4 (yours to fix 4), gap 1"
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from fleet.findings.finding import PARTY_WORDS, Finding
from fleet.findings.kinds import FINDING_KINDS


def counts(findings: Iterable[Finding], regressions: int = 0) -> dict[str, int]:
    """Findings per kind, on every side: each finding once, and each GPU slower than its
    own past on the sweep's newest night (the history lists those, not as findings).
    Every registered kind is a key, zeros included; a kind not registered comes after."""
    found = Counter(f.kind for f in findings)
    found["regression"] += regressions
    kinds = (*FINDING_KINDS, *sorted(set(found) - set(FINDING_KINDS)))
    return {kind: found[kind] for kind in kinds}


def line(findings: Sequence[Finding], regressions: int = 0) -> str:
    """"job_shortfall 4 (yours to fix 4), gap 1": each kind found, by its `--fail-on`
    name, with the sides that are not the provider's; "none" where nothing was."""
    sides = Counter((f.kind, f.party) for f in findings)
    said = []
    for kind, n in counts(findings, regressions).items():
        if not n:
            continue
        apart = [f"{PARTY_WORDS[side]} {sides[kind, side]}" for side in ("renter", "unsettled")
                 if sides[kind, side]]
        said.append(f"{kind} {n}" + (f" ({', '.join(apart)})" if apart else ""))
    return ", ".join(said) or "none"
