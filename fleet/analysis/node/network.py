"""Findings on a node's network fingerprint (fleet/model/network.py): what a buyer of a
cluster must know before a multi-node job runs on it.

One node, on its own:
- **port down**: a fabric port (InfiniBand, RoCE, EFA) that is not Active. NCCL opens
  only ports whose state is IBV_PORT_ACTIVE (src/transport/net_ib, `ncclIbInitDevices`),
  so the GPUs that port served share the others; ibstat(8): Active means up and known to
  the subnet manager.
- **below rate**: an Active port negotiated below its expected rate: the rate the node
  was sold with (`expected_rate_gbps`), else the fastest port of the same kind on the
  same node (IB rates are discrete: 4X HDR is 200, 4X NDR 400; a port below its
  siblings is a cable, transceiver or switch port, not a different product). Azure's
  node health checks for ND H100 v5 (Azure/azurehpc-health-checks, conf/
  nd96isr_h100_v5.conf) run LBNL NHC's `check_hw_ib 400 mlx5_ibN:1` on each of the eight
  ports: a port not Active at 400 Gb/s fails. EFA ports are not judged: the efa driver
  reports a constant.
- **NIC far from its GPUs**: a fabric NIC whose nearest GPU is farther than PXB (through
  the host bridge, across host bridges, across sockets). NCCL uses GPUDirect RDMA only up
  to the distance NCCL_NET_GDR_LEVEL names, and HGX H100 boards put each NIC under the
  same PCIe switch as its GPU (PIX), as the published 8x H100 topology shows
  (tests/fixtures/network/h100-8x-ib-ndr/source.md).
- **GPUDirect RDMA off**: fabric NICs, but neither nvidia_peermem loaded nor DMA-BUF
  possible (agent/network/gdr.py): every transfer is staged through host memory.
  Where it cannot be told, an "unverified" note, never a fault.
- **no fabric NIC / fewer than sold**: a node with no fabric NIC is information (a single
  node needs none), a fault only when it was sold with some (`expected_nics`).

Across nodes of one provider and variant:
- **fewer NICs than its siblings**: fewer fabric NICs than the median of the others
  (the higher median where their count is even, so one node among two is compared with
  the other): a NIC missing from a node's PCI bus or not bound to its driver.

Core functions take and return data; nothing here prints.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from fleet.model.network import NetworkDevice, NetworkFingerprint

Severity = Literal["fault", "info"]
Rule = Literal["port-down", "below-rate", "far-nic", "gdr-off", "gdr-unverified",
               "no-fabric", "fewer-than-sold", "fewer-than-siblings"]
NEAR_LEVELS = ("PIX", "PXB")
LEVEL_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")

SOURCE_PORT = ("NCCL opens only ports in state IBV_PORT_ACTIVE (src/transport/net_ib); "
               "ibstat(8): Active = up and known to the subnet manager")
SOURCE_RATE = ("Azure's node health checks for ND H100 v5 (azurehpc-health-checks conf/"
               "nd96isr_h100_v5.conf): LBNL NHC's check_hw_ib 400 on each of the 8 ports, "
               "a port not Active at 400 Gb/s fails")
SOURCE_DISTANCE = ("nvidia-smi topo -m levels; NCCL uses GPUDirect RDMA only up to "
                   "NCCL_NET_GDR_LEVEL's distance; HGX H100 puts each NIC under its "
                   "GPU's PCIe switch (PIX)")
SOURCE_GDR = ("NVIDIA GPUDirect RDMA: the nvidia-peermem module, or DMA-BUF with Linux "
              ">= 5.12 and NVIDIA's open kernel modules (NCCL_DMABUF_ENABLE)")
SOURCE_COUNT = "the node's fabric NIC count against the count it was sold with"
SOURCE_SIBLINGS = "the node's fabric NIC count against its siblings' median"


@dataclass(frozen=True)
class NetworkExpectation:
    """What the node was sold with, where the inventory says: fabric NICs and their
    rate in Gb/s. None: not stated, and nothing is judged against it."""

    expected_nics: int | None = None
    expected_rate_gbps: float | None = None


@dataclass(frozen=True)
class NetworkFinding:
    """One finding on one node's network: what, on which devices, the evidence, what
    to do about it and what it rests on."""

    host: str
    rule: Rule
    severity: Severity
    devices: tuple[str, ...]
    title: str
    evidence: str
    action: str
    source: str


@dataclass(frozen=True)
class NodeNetwork:
    """One node's fingerprint with the provider and variant it is compared within."""

    host: str
    provider: str
    variant: str
    network: NetworkFingerprint
    # What the inventory's `expect` said of its fabric when it was probed.
    sold: NetworkExpectation = field(default_factory=NetworkExpectation)


def _rate(value: float) -> str:
    return f"{value:g} Gb/s"


def _names(devices: Sequence[NetworkDevice]) -> tuple[str, ...]:
    return tuple(d.name for d in devices)


def _ports_down(host: str, fabric: Sequence[NetworkDevice]) -> list[NetworkFinding]:
    down = [d for d in fabric if d.up is False]
    if not down:
        return []
    evidence = "; ".join(
        f"{d.name}: state {d.state or '?'}"
        + (f", physical state {d.physical_state}" if d.physical_state else "")
        for d in down)
    return [NetworkFinding(
        host, "port-down", "fault", _names(down),
        f"{host}: {len(down)} of {len(fabric)} fabric ports not active", evidence,
        "Ask the provider to bring the ports up (cable, transceiver, switch port; for "
        "InfiniBand a subnet manager that sees them): until then their GPUs' traffic "
        "shares the remaining ports.", SOURCE_PORT)]


def _below_rate(host: str, fabric: Sequence[NetworkDevice],
                expected: NetworkExpectation) -> list[NetworkFinding]:
    findings = []
    for kind in ("infiniband", "roce"):
        up = [d for d in fabric if d.kind == kind and d.up and d.rate_gbps is not None]
        if not up:
            continue
        rates = [d.rate_gbps for d in up if d.rate_gbps is not None]
        reference = expected.expected_rate_gbps or max(rates)
        basis = ("the rate it was sold with" if expected.expected_rate_gbps
                 else f"the node's fastest {kind} port")
        slow = [d for d in up if d.rate_gbps is not None and d.rate_gbps < reference]
        if not slow:
            continue
        evidence = "; ".join(
            f"{d.name} at {_rate(d.rate_gbps or 0)}"
            + (f" ({d.width} {d.speed})" if d.width and d.speed else "") for d in slow)
        findings.append(NetworkFinding(
            host, "below-rate", "fault", _names(slow),
            f"{host}: {len(slow)} {kind} port{'s' if len(slow) > 1 else ''} below "
            f"{_rate(reference)}",
            f"{evidence}; expected {_rate(reference)}, {basis}",
            "Ask the provider to check the cable or transceiver and the switch port's "
            "speed: a port at half rate halves its GPUs' share of the fabric.",
            SOURCE_RATE))
    return findings


def _far(host: str, fabric: Sequence[NetworkDevice]) -> list[NetworkFinding]:
    far = []
    for d in fabric:
        levels = [lv for lv in d.gpu_distance.values()]
        if not levels:
            continue
        nearest = min(levels, key=LEVEL_ORDER.index)
        if nearest not in NEAR_LEVELS:
            far.append((d, nearest))
    if not far:
        return []
    evidence = "; ".join(
        f"{d.name}: nearest GPU {nearest} (GPUs "
        f"{', '.join(i for i, lv in d.gpu_distance.items() if lv == nearest)}; "
        f"{d.distance_source})" for d, nearest in far)
    return [NetworkFinding(
        host, "far-nic", "fault", tuple(d.name for d, _ in far),
        f"{host}: {len(far)} fabric NIC{'s' if len(far) > 1 else ''} far from every GPU",
        evidence,
        "Ask the provider whether the NIC sits in the slot the platform intends: with no "
        "GPU under its PCIe switch its traffic crosses the host bridge or the sockets, "
        "and NCCL's default drops GPUDirect RDMA for it.", SOURCE_DISTANCE)]


def _gdr(host: str, network: NetworkFingerprint) -> list[NetworkFinding]:
    if not network.fabric:
        return []
    if network.gdr.state == "off":
        return [NetworkFinding(
            host, "gdr-off", "fault", (), f"{host}: GPUDirect RDMA off",
            network.gdr.basis,
            "Load nvidia-peermem (modprobe nvidia-peermem; shipped with the driver since "
            "R470) or run the open kernel modules on Linux 5.12 or newer for DMA-BUF; "
            "whose to fix depends on who owns the image: the provider's if it is theirs.",
            SOURCE_GDR)]
    if network.gdr.state == "unknown":
        return [NetworkFinding(
            host, "gdr-unverified", "info", (), f"{host}: GPUDirect RDMA unverified",
            network.gdr.basis,
            "Check it on the node: lsmod | grep peermem, or whether "
            "/proc/driver/nvidia/version names the open kernel module.", SOURCE_GDR)]
    return []


def _count(host: str, network: NetworkFingerprint,
           expected: NetworkExpectation) -> list[NetworkFinding]:
    have = len(network.fabric)
    want = expected.expected_nics
    if have == 0 and not want:
        return [NetworkFinding(
            host, "no-fabric", "info", (), f"{host}: no fabric NIC",
            f"no InfiniBand, RoCE or EFA device; interfaces: "
            f"{', '.join(f'{d.name} ({d.kind})' for d in network.devices) or 'none'}",
            "None for single-node work; traffic between nodes would go over TCP sockets.",
            SOURCE_COUNT)]
    if want and have < want:
        return [NetworkFinding(
            host, "fewer-than-sold", "fault", _names(network.fabric),
            f"{host}: {have} fabric NIC{'s' if have != 1 else ''}, sold with {want}",
            f"found {have}: {', '.join(_names(network.fabric)) or 'none'}",
            "Dispute with the provider: the node lacks fabric NICs it was sold with (or "
            "they are not passed through to this VM or container).", SOURCE_COUNT)]
    return []


def judge_network(host: str, network: NetworkFingerprint,
                  expected: NetworkExpectation | None = None) -> list[NetworkFinding]:
    """Findings on one node's network fingerprint, faults first."""
    expected = expected or NetworkExpectation()
    fabric = network.fabric
    findings = (_count(host, network, expected) + _ports_down(host, fabric)
                + _below_rate(host, fabric, expected) + _far(host, fabric)
                + _gdr(host, network))
    return sorted(findings, key=lambda f: f.severity != "fault")


def compare_siblings(nodes: Sequence[NodeNetwork]) -> list[NetworkFinding]:
    """Nodes with fewer fabric NICs than the median of their siblings (same provider
    and variant); a node with no sibling is not judged."""
    findings = []
    for node in nodes:
        others = [len(n.network.fabric) for n in nodes
                  if (n.provider, n.variant) == (node.provider, node.variant)
                  and n.host != node.host]
        if not others:
            continue
        have = len(node.network.fabric)
        reference = statistics.median_high(others)
        if have < reference:
            findings.append(NetworkFinding(
                node.host, "fewer-than-siblings", "fault", _names(node.network.fabric),
                f"{node.host}: {have} fabric NICs, its {node.provider} {node.variant} "
                f"siblings {reference}",
                f"{have} on {node.host}; {len(others)} sibling"
                f"{'s' if len(others) > 1 else ''}: {', '.join(map(str, sorted(others)))}",
                "Ask the provider why this node has fewer NICs than its siblings (a card "
                "missing, not seated, or not passed through).", SOURCE_SIBLINGS))
    return findings
