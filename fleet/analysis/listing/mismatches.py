"""Did each host get what its listing promised, and does one listing hide several variants?

The seed's serverless platform answered four requests for "A100-80GB" with three PCIe
cards and one SXM board: each host may match a loose listing (family and memory) while
the listing as a whole delivers different hardware at one price.

Both read the fleet as found (`Dataset.gpus`, the store's fingerprint columns of each
host's newest document), not the documents themselves.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleet.analysis.dataset import Dataset
from fleet.analysis.listing.expectation import FOUND_COLUMNS, FoundGpu, check_found, stored_expect
from fleet.inventory import Expect
from fleet.words import counted

# What a listing check reads of each GPU (fleet.analysis.listing.expectation.FoundGpu).
CHECKED = ("document_id", "gpu_index", "variant", *FOUND_COLUMNS)


@dataclass(frozen=True)
class Mismatch:
    """A host whose GPUs are not what its listing says: listed, found, and each problem."""

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
        """Each variant behind the listing in words, with its GPUs and hosts."""
        return "; ".join(f"{variant} on {counted(gpus, 'GPU')} of {counted(hosts, 'host')}"
                         for variant, gpus, hosts in self.variants)


def plain(frame: pd.DataFrame, columns: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """The rows of `columns` as tuples of Python values, None where the store had NULL."""
    values = frame[list(columns)].astype(object)
    values = values.where(values.notna(), None)
    return zip(*(values[column].tolist() for column in columns), strict=True)


def _found(variants: list[str]) -> str:
    counts = Counter(variants)
    if not counts:
        return "no GPU"
    return ", ".join(f"{n} x {label}" for label, n in counts.most_common())


def find_mismatches(data: Dataset) -> list[Mismatch]:
    """Hosts whose newest document differs from the listing given when it was collected."""
    cards: dict[int, list[tuple[str, FoundGpu]]] = defaultdict(list)
    for (document_id, index, variant, label, family, form_factor, memory_gb, memory_mib,
         enforced, limit) in plain(data.gpus.sort_values(["document_id", "gpu_index"]),
                                   CHECKED):
        cards[document_id].append((variant, FoundGpu(
            int(index), label, family, form_factor, memory_gb, memory_mib, enforced or limit)))
    expects: dict[str, Expect | None] = {}
    found = []
    for host in data.hosts:
        if not host.listing.expect:
            continue
        expect = stored_expect(host.listing.expect, expects)
        if expect is None:
            continue
        gpus = cards.get(host.document_id, [])
        verdict = check_found(expect, [gpu for _, gpu in gpus], host.no_gpu_reason)
        if verdict is not None and not verdict.matches:
            found.append(Mismatch(host.provider, host.host, host.listing.label,
                                  _found([variant for variant, _ in gpus]),
                                  verdict.problems, verdict.unchecked))
    return found


def find_mixed_listings(data: Dataset) -> list[MixedListing]:
    """The listings that name hardware and yet have hosts of different variants behind them."""
    listed = {h.document_id: h.listing.label for h in data.hosts if h.listing.names_hardware}
    gpus = data.gpus[data.gpus["document_id"].isin(listed)]
    if gpus.empty:
        return []
    frame = pd.DataFrame({"provider": gpus["provider"].astype(str),
                          "listed": gpus["document_id"].map(listed),
                          "variant": gpus["variant"].astype(str),
                          "host": gpus["host"].astype(str)})
    per_variant = frame.groupby(["provider", "listed", "variant"], sort=True).agg(
        gpus=("host", "size"), hosts=("host", "nunique")).reset_index()
    mixed = []
    for (provider, label), group in per_variant.groupby(["provider", "listed"], sort=True):
        if len(group) > 1:
            # Most GPUs first, as Counter.most_common orders them (ties: first seen).
            ordered = sorted(zip(group["variant"], group["gpus"], group["hosts"],
                                 strict=True), key=lambda v: -v[1])
            mixed.append(MixedListing(str(provider), str(label), tuple(
                (str(variant), int(n), int(hosts)) for variant, n, hosts in ordered)))
    return mixed
