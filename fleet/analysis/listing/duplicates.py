"""Two inventory hosts that answered with the same GPUs: one machine listed twice.

The same cards (by UUID, else by serial) answering for two hosts of one run is a finding,
not a deduplication: the inventory names one address twice, or a provider sells one node
as two listings, and when both were benchmarked at the same moment their figures were
measured on contended cards. Each host keeps its own stored answer; the pair is shown with
the shared identities until the user removes one of the two hosts from the inventory,
which is what "choosing" one of them means (the next run then has no pair).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleet.model.document import AgentDocument


@dataclass(frozen=True)
class SharedGpus:
    """Two hosts of one run (`first` listed before `second`) and the GPU identities both
    reported, each as "uuid:..." or "serial:..."."""

    first: str
    second: str
    identities: tuple[str, ...]


def gpu_identities(document: AgentDocument) -> set[str]:
    """The cards a document speaks for. A card without UUID or serial (some vGPU guests)
    cannot be told from another of the same model, so it names no card."""
    found = set()
    for gpu in document.gpus:
        if gpu.uuid:
            found.add(f"uuid:{gpu.uuid}")
        elif gpu.serial:
            found.add(f"serial:{gpu.serial}")
    for result in document.benchmarks:
        if result.gpu_uuid:
            found.add(f"uuid:{result.gpu_uuid}")
    return found


def shared_gpus(hosts: Iterable[tuple[str, AgentDocument | None]]) -> list[SharedGpus]:
    """Every pair of hosts, in listing order, whose documents name a card in common."""
    seen: list[tuple[str, set[str]]] = []
    pairs = []
    for key, document in hosts:
        if document is None:
            continue
        mine = gpu_identities(document)
        for other, theirs in seen:
            common = mine & theirs
            if common:
                pairs.append(SharedGpus(other, key, tuple(sorted(common))))
        seen.append((key, mine))
    return pairs


def same_gpus_note(pair: SharedGpus, host: str) -> str:
    """What the summary says beside one host of a pair."""
    other = pair.second if host == pair.first else pair.first
    return f"same GPUs as {other} ({', '.join(pair.identities)})"
