"""Did each host get what its listing promised, and does one listing hide several variants?

The seed's serverless platform answered four requests for "A100-80GB" with three PCIe
cards and one SXM board: each host may match a loose listing (family and memory) while
the listing as a whole delivers different hardware at one price.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from pydantic import ValidationError

from fleet.analysis.dataset import HostState
from fleet.expectation import check_expectation
from fleet.inventory import Expect
from fleet.store.ingest import variant_of
from fleet.words import counted


@dataclass(frozen=True)
class Mismatch:
    provider: str
    host: str
    listed: str
    found: str  # "8 x H100-PCIe-80GB"
    problems: tuple[str, ...]
    unchecked: tuple[str, ...]


@dataclass(frozen=True)
class MixedListing:
    """One provider's listing behind which hosts carry different variants."""

    provider: str
    listed: str
    variants: tuple[tuple[str, int, int], ...]  # (variant, GPUs, hosts), most GPUs first

    @property
    def evidence(self) -> str:
        return "; ".join(f"{variant} on {counted(gpus, 'GPU')} of {counted(hosts, 'host')}"
                         for variant, gpus, hosts in self.variants)


def found_on(host: HostState) -> str:
    counts = Counter(variant_of(gpu) for gpu in host.document.gpus)
    if not counts:
        return "no GPU"
    return ", ".join(f"{n} x {label}" for label, n in counts.most_common())


def find_mismatches(hosts: tuple[HostState, ...]) -> list[Mismatch]:
    """Hosts whose newest document differs from the listing given when it was collected."""
    found = []
    for host in hosts:
        if not host.listing.expect:
            continue
        try:
            expect = Expect.model_validate(host.listing.expect)
        except ValidationError:
            # Stored by an older fleet whose `expect` had other fields: judge nothing
            # rather than judge by half a listing.
            continue
        verdict = check_expectation(expect, host.document)
        if verdict is not None and not verdict.matches:
            found.append(Mismatch(host.provider, host.host, host.listing.label, found_on(host),
                                  verdict.problems, verdict.unchecked))
    return found


def find_mixed_listings(hosts: tuple[HostState, ...]) -> list[MixedListing]:
    gpus: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    members: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for host in hosts:
        if not host.listing.names_hardware:
            continue
        key = (host.provider, host.listing.label)
        for gpu in host.document.gpus:
            variant = variant_of(gpu)
            gpus[key][variant] += 1
            members[key][variant].add(host.host)
    mixed = []
    for key, counts in sorted(gpus.items()):
        if len(counts) > 1:
            mixed.append(MixedListing(key[0], key[1], tuple(
                (variant, n, len(members[key][variant])) for variant, n in counts.most_common())))
    return mixed
