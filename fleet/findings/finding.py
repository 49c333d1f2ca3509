"""One finding: what a rule found, against whom, whose it is to answer, and what it rests on.

    Finding("gap", "beta", "beta is 4.1% slower than alpha on H100-SXM-80GB",
            "bf16 8192^3 soaked: ...", cause="power limit 500 W vs 700 W",
            party="provider", source="fleet/analysis/matmul/gaps.py")

Every rule of fleet/report/rules.py yields these; the report lists them by `party`, and
the counts (fleet/findings/count.py) read the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Whose a finding is to answer: the provider's (What to dispute), the renter's own side
# (Yours to fix), or neither until measured again (Not settled).
Party = Literal["provider", "renter", "unsettled"]
PARTIES: tuple[Party, ...] = ("provider", "renter", "unsettled")
# How the report and the summary lines name each side.
PARTY_WORDS: dict[Party, str] = {"provider": "to dispute", "renter": "yours to fix",
                                 "unsettled": "not settled"}


@dataclass(frozen=True)
class Finding:
    """One line of the summary, and what is folded beneath it.

    The line is `title` (what, where, how far off: "gpu-03 GPU 3: 53% below the rest of
    its node on the matmul") and `cause`, the likely cause in a few words where one was
    seen ("another process on the GPU"). Beneath it, `evidence` (what the finding rests
    on, in words) and `details`, its items one a line (each outlying figure, each
    difference), which `evidence` does not repeat. `kind` is a registered kind
    (fleet/findings/kinds.py); `provider` the provider it is about; `party` whose it is to
    answer; `action` what to ask for or do, where the rule names one; `source` the rule
    that found it (the module, as docs/findings.md cites it).
    """

    kind: str
    provider: str
    title: str
    evidence: str
    cause: str | None = None
    details: tuple[str, ...] = ()
    party: Party = "provider"
    action: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        # A list given for `details` (a 6-tuple built elsewhere) is kept as a tuple: the
        # finding stays hashable and frozen.
        object.__setattr__(self, "details", tuple(self.details))

    @classmethod
    def of(cls, found: Finding | tuple[Any, ...]) -> Finding:
        """A finding from a Finding, or from (kind, provider, title, evidence) with or
        without (cause, details) after them, as the report's sections give them."""
        if isinstance(found, Finding):
            return found
        if len(found) not in (4, 6):
            raise ValueError(f"a finding is 4 or 6 values, not {len(found)}: {found!r}")
        return cls(*found)
