"""The report's network section: each host's fabric NICs (or what it has instead), its
GPUDirect RDMA, and the findings on them (fleet/analysis/node/network.py), each with its
action.

    section = network_section(engine, data)

It reads the network of the hosts in the report's scope (their newest documents,
`Dataset.hosts`, named as the report names them, aliases included) from the store
(fleet/store/network.py). A fault is the provider's to answer (a port down or below
rate, a NIC far from its GPUs, GPUDirect RDMA off, fewer NICs than its siblings): it is
also a "network" finding of "What to dispute". Information (no fabric NIC on a node
sold without one, GPUDirect RDMA unverified) stays in this section.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from fleet.analysis.dataset import Dataset
from fleet.analysis.node.network import (
    NetworkExpectation,
    NetworkFinding,
    NodeNetwork,
    compare_siblings,
    judge_network,
)
from fleet.model.network import NetworkDevice, NetworkFingerprint
from fleet.store.network import LEVEL_ORDER, read_networks
from fleet.words import counted

KIND = "network"
_KIND_WORDS = {"infiniband": "InfiniBand", "roce": "RoCE", "efa": "EFA"}


@dataclass(frozen=True)
class Nic:
    """One fabric NIC as the section lists it."""

    name: str
    kind: str
    state: str
    rate: str  # "400 Gb/s (4X NDR)", "unknown"
    model: str
    firmware: str
    pci_address: str
    numa_node: str
    nearest: str  # "PIX to GPU 0", "NODE to GPUs 4, 5 (sysfs)", "not known"


@dataclass(frozen=True)
class HostNetwork:
    """One host's network: a line that says what it has, its fabric NICs, GPUDirect RDMA,
    and the findings on it, faults first."""

    provider: str
    host: str
    variant: str
    summary: str
    gdr: str  # "on", "off", "unknown", or "not in use, no fabric NIC"
    gdr_basis: str
    nics: tuple[Nic, ...]
    findings: tuple[NetworkFinding, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkSection:
    """The hosts whose newest document carries a network, and how many do not."""

    hosts: tuple[HostNetwork, ...] = ()
    unread: tuple[str, ...] = ()  # "provider host" of hosts whose document has none

    def faults(self) -> list[tuple[str, NetworkFinding]]:
        """(provider, finding) of every fault: the provider's to answer."""
        return [(h.provider, f) for h in self.hosts for f in h.findings
                if f.severity == "fault"]

    def findings(self) -> list[tuple[str, str, str, str, str | None, tuple[str, ...]]]:
        """The faults as the report's findings (build.Finding's fields), kind "network"."""
        return [(KIND, provider, f.title, f.evidence, None,
                 (f"action: {f.action}", f"rests on: {f.source}"))
                for provider, f in self.faults()]

    def count(self) -> int:
        """How many faults, as `--fail-on network` reads them."""
        return len(self.faults())


def _rate(device: NetworkDevice) -> str:
    if device.rate_gbps is None:
        return "unknown"
    lane = f" ({device.width} {device.speed})" if device.width and device.speed else ""
    return f"{device.rate_gbps:g} Gb/s{lane}"


def _nearest(device: NetworkDevice) -> str:
    if not device.gpu_distance:
        return "not known"
    level = min(device.gpu_distance.values(), key=LEVEL_ORDER.index)
    gpus = sorted(int(i) for i, lv in device.gpu_distance.items() if lv == level)
    which = f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {', '.join(map(str, gpus))}"
    source = "" if device.distance_source == "nvidia-smi topo -m" else \
        f" ({device.distance_source})"
    return f"{level} to {which}{source}"


def _gdr(network: NetworkFingerprint) -> str:
    """GPUDirect RDMA's state, as far as it matters: a node without a fabric NIC has
    nothing to use it with, whatever its modules could do."""
    return network.gdr.state if network.fabric_nics else "not in use, no fabric NIC"


def _nic(device: NetworkDevice) -> Nic:
    return Nic(device.name, _KIND_WORDS.get(device.kind, device.kind),
               device.state or "unknown", _rate(device), device.model or "",
               device.firmware or "", device.pci_address or "",
               "" if device.numa_node is None else str(device.numa_node), _nearest(device))


def _summary(network: NetworkFingerprint) -> str:
    fabric = network.fabric
    if fabric:
        # a port not up has no rate to speak of (a disabled one says 10 Gb/s)
        groups = Counter((_KIND_WORDS[d.kind], "down" if d.up is False else _rate(d))
                         for d in fabric)
        parts = [f"{n} {kind}" + ("" if rate == "unknown" else
                                  " down" if rate == "down" else f" at {rate}")
                 for (kind, rate), n in sorted(groups.items(),
                                               key=lambda item: (-item[1], item[0]))]
        return f"{counted(len(fabric), 'fabric NIC')}: {'; '.join(parts)}"
    # What it has instead: its NICs (a PCI device, virtio's too), not loopback or bridges.
    nics = [d for d in network.devices if d.pci_address or d.kind == "ethernet"] or [
        d for d in network.devices if d.name != "lo"]
    if not nics:
        return "no fabric NIC, and no network interface listed"
    said = ", ".join(f"{d.name} ({d.kind}{', ' + d.driver if d.driver else ''})"
                     for d in nics[:8])
    more = f" and {len(nics) - 8} more" if len(nics) > 8 else ""
    return f"no fabric NIC: {said}{more} only"


def _sold(expect: Mapping[str, Any] | None) -> NetworkExpectation:
    """What the inventory's `expect` said of the host's fabric when it was probed."""
    expect = expect or {}
    nics, rate = expect.get("fabric_nics"), expect.get("fabric_rate_gbps")
    return NetworkExpectation(int(nics) if nics is not None else None,
                              float(rate) if rate is not None else None)


def _variants(data: Dataset) -> dict[int, str]:
    gpus = data.gpus
    if gpus.empty:
        return {}
    found: dict[int, Counter[str]] = {}
    for document_id, variant in zip(gpus["document_id"].tolist(),
                                    gpus["variant"].astype(str).tolist(), strict=True):
        found.setdefault(int(document_id), Counter())[variant] += 1
    return {d: counter.most_common(1)[0][0] for d, counter in found.items()}


def network_section(engine: Engine, data: Dataset) -> NetworkSection:
    """The network of every host in `data`, judged alone and against its siblings (the
    same provider's hosts of the same variant)."""
    networks = read_networks(engine, documents=[h.document_id for h in data.hosts])
    variants = _variants(data)
    nodes = [NodeNetwork(h.host, h.provider, variants.get(h.document_id, "no GPU"),
                         networks[h.document_id], _sold(h.listing.expect))
             for h in data.hosts if h.document_id in networks]
    # Siblings are one provider's (a host's name is unique within its provider only).
    siblings: dict[tuple[str, str], list[NetworkFinding]] = {}
    for provider in sorted({n.provider for n in nodes}):
        for finding in compare_siblings([n for n in nodes if n.provider == provider]):
            siblings.setdefault((provider, finding.host), []).append(finding)
    hosts = []
    for node in sorted(nodes, key=lambda n: (n.provider, n.host)):
        network = node.network
        found = (judge_network(node.host, network, node.sold)
                 + siblings.get((node.provider, node.host), []))
        hosts.append(HostNetwork(
            node.provider, node.host, node.variant, _summary(network), _gdr(network),
            network.gdr.basis, tuple(_nic(d) for d in network.fabric),
            tuple(sorted(found, key=lambda f: f.severity != "fault")), tuple(network.notes)))
    unread = tuple(sorted(f"{h.provider} {h.host}" for h in data.hosts
                          if h.document_id not in networks))
    return NetworkSection(tuple(hosts), unread)
