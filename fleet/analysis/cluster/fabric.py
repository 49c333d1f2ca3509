"""What a node's fabric can carry between nodes: its Active fabric ports (InfiniBand,
RoCE, EFA: fleet/model/network.py), each at the rate it should run at (the fastest Active
port of its kind on the node: IB rates are discrete, and a port below its siblings is a
cable, transceiver or switch port), at most one port a rank. On HGX boards each GPU
drives the NIC under its own PCIe switch, and a node running fewer ranks than it has
ports is not promised the rest (nccl-tests #232: one H100 a node over four NICs measured
about 50 GB/s). fleet/analysis/cluster/judgement.py judges a pair against the lesser node's total.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.model.network import NetworkDevice, NetworkFingerprint


def gbs(value: float) -> str:
    """A bandwidth in GB/s, as the cluster's findings print it."""
    return f"{value:,.1f} GB/s" if value < 100 else f"{value:,.0f} GB/s"


def rate(value: float) -> str:
    """A link rate in Gb/s."""
    return f"{value:g} Gb/s"


@dataclass(frozen=True)
class NodeFabric:
    """What a node's fabric can carry for a step of `ranks` ranks a node.

    active: its Active fabric ports; counted: those the expectation counts (at most one a
    rank, fastest first); rate_gbps: per counted port, the rate it should run at (the
    fastest Active port of its kind), None where a port's rate is unknown (EFA); down:
    fabric ports not Active.
    """

    host: str
    active: tuple[NetworkDevice, ...]
    counted: tuple[str, ...]
    rates_gbps: tuple[float | None, ...]
    down: tuple[str, ...]

    @property
    def total_gbps(self) -> float | None:
        """The counted ports at their rates, Gb/s; None where a rate is unknown."""
        if not self.counted or any(r is None for r in self.rates_gbps):
            return None
        return sum(r for r in self.rates_gbps if r is not None)

    @property
    def words(self) -> str:
        """"8 x 400 Gb/s infiniband = 400 GB/s"."""
        if not self.counted:
            return f"{self.host}: no Active fabric port"
        kinds = sorted({d.kind for d in self.active if d.name in self.counted})
        rates = sorted({r for r in self.rates_gbps if r is not None})
        each = ("rate unknown" if None in self.rates_gbps or not rates
                else "/".join(rate(r) for r in rates))
        total = self.total_gbps
        said = f"{self.host}: {len(self.counted)} x {each} {'/'.join(kinds)}"
        if total is not None:
            said += f" = {gbs(total / 8)}"
        if len(self.counted) < len(self.active):
            said += f" ({len(self.counted)} of {len(self.active)} Active ports, one a rank)"
        if self.down:
            said += f"; not Active, not counted: {', '.join(self.down)}"
        return said


def node_fabric(host: str, network: NetworkFingerprint, ranks: int) -> NodeFabric | None:
    """The node's fabric for a step of `ranks` ranks a node; None where it has no fabric
    NIC at all."""
    fabric = network.fabric
    if not fabric:
        return None
    active = [d for d in fabric if d.up is True]
    down = tuple(d.name for d in fabric if d.up is not True)
    should: dict[str, float | None] = {}
    for kind in {d.kind for d in active}:
        rates = [d.rate_gbps for d in active if d.kind == kind]
        should[kind] = None if any(r is None for r in rates) else max(
            r for r in rates if r is not None)
    ranked = sorted(active, key=lambda d: -(should[d.kind] or 0.0))[:max(ranks, 0)]
    return NodeFabric(host, tuple(active), tuple(d.name for d in ranked),
                      tuple(should[d.kind] for d in ranked), down)
