"""What a pair's per-NIC RDMA test says (issue 57): each RDMA port of the pair's first
node tested against the second node's port of the same name (or, where the nodes name
their ports differently, of the same rank) with perftest's ib_write_bw
(agent/network/perftest.py, `--nic-test`). A pair's collectives say that its link is
short; this says which of its ports.

- **nic-short**: a port pair whose ib_write_bw average is under 90% of the lesser port's
  rate (NVIDIA's multinode certification test passes RDMA between two nodes at 90% of
  the port link speed read from sysfs: Mellanox/ngc_multinode_perf). Both ports are
  named, or the one port short beside every other port it met (two partners at least)
  alone, once for all its steps. A fault, the provider's, where the run read and wrote GPU
  memory (GPUDirect); unsettled from host memory, which fleet does not pin to the NIC's
  NUMA node, so that the host's side of the path is not ruled out. Each port is judged at
  its own rate: a port trained down below its siblings is the fingerprint's below-rate
  finding (fleet/analysis/network/), not this one's.
- **nic-untested** (info): a pair whose ports were not all tested, with each side's
  reason (no ib_write_bw on a node, no Active RDMA port, a port with no Active namesake
  on the other node, a run that failed, a rate nothing reports).

Pure: the stored steps in, findings out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet.analysis.cluster.verdicts import ClusterFinding
from fleet.model.step import NicFigure, NodeNics, StepResult
from fleet.words import counted

PASS_SHARE = 0.90
SOURCE = ("perftest's ib_write_bw between the pair's ports (agent/network/perftest.py); the "
          "pass line of NVIDIA's multinode certification test (Mellanox/ngc_multinode_perf): "
          "RDMA between two nodes passes at 90% of the port link speed read from sysfs")

End = tuple[str, NicFigure]  # (host, its port)


@dataclass(frozen=True)
class PortPair:
    """One test: the first node's port against the second's, and what it gave."""

    step_id: str
    first: End
    second: End
    gbps: float | None
    rate_gbps: float | None

    @property
    def share(self) -> float | None:
        if self.gbps is None or not self.rate_gbps:
            return None
        return self.gbps / self.rate_gbps


def _name(end: End) -> str:
    return f"{end[0]}'s {end[1].name}"


def port_pairs(step: StepResult) -> tuple[list[PortPair], list[str], bool]:
    """The step's tests, each node 0 port with the node 1 port it met (its `peer`); what
    was not tested, with why; whether no port was tested at all (a side skipped)."""
    sides: dict[str, NodeNics] = {n.host: n for n in step.nics}
    if len(step.hosts) != 2 or not sides:
        return [], [], False
    a, b = step.hosts
    skipped = [f"{h}: {sides[h].skipped}" for h in (a, b)
               if h in sides and sides[h].skipped]
    if a not in sides or b not in sides or skipped:
        return [], skipped or [f"{h}: sent no NIC test" for h in (a, b)
                               if h not in sides], True
    theirs = {t.name: t for t in sides[b].tests}
    found: list[PortPair] = []
    untested: list[str] = []
    met: set[str] = set()
    for nic in sides[a].tests:
        other = theirs.get(nic.peer) if nic.peer is not None else None
        if other is None:
            untested.append(f"{_name((a, nic))}: {nic.error or 'no peer'}")
            continue
        met.add(other.name)
        said = [t.gbps for t in (nic, other) if t.gbps is not None]
        rates = [t.rate_gbps for t in (nic, other) if t.rate_gbps]
        pair = PortPair(step.step_id, (a, nic), (b, other),
                        # The client's average is the sender's measure, the server's the
                        # receiver's; the lesser is what the link carried for both.
                        min(said) if said else None, min(rates) if rates else None)
        if pair.gbps is None:
            why = "; ".join(f"{_name(end)}: {end[1].error}" for end in (pair.first,
                                                                         pair.second)
                            if end[1].error) or "no figure"
            untested.append(f"{_name(pair.first)} to {_name(pair.second)}: {why}")
        elif pair.rate_gbps is None:
            untested.append(f"{_name(pair.first)} to {_name(pair.second)}: "
                            f"{pair.gbps:,.1f} Gb/s, but neither port's rate is known")
        else:
            found.append(pair)
    untested += [f"{_name((b, t))}: {t.error or 'no peer'}" for t in sides[b].tests
                 if t.name not in met]
    return found, untested, False


def nic_findings(cluster: str, steps: Sequence[StepResult]) -> list[ClusterFinding]:
    """nic-short for each short port pair, or for the one port short beside every port
    it met; nic-untested for each pair not fully tested."""
    found: list[ClusterFinding] = []
    judged: list[PortPair] = []
    for step in steps:
        pairs, untested, none = port_pairs(step)
        judged += pairs
        if untested:
            found.append(ClusterFinding(
                cluster, "nic-untested", "info", None, step.hosts,
                f"{' and '.join(step.hosts)}: "
                + ("no per-NIC test ran" if none else
                   f"{counted(len(untested), 'port test')} did not run"),
                "; ".join(untested)[:1500],
                "Install perftest (apt-get install perftest) on the nodes, check that each "
                "has its RDMA ports Active (ibstat), and run again with --nic-test.",
                SOURCE, (step.step_id,)))
    partners: dict[str, set[str]] = {}
    for p in judged:
        partners.setdefault(_name(p.first), set()).add(_name(p.second))
        partners.setdefault(_name(p.second), set()).add(_name(p.first))
    short = [p for p in judged if p.share is not None and p.share < PASS_SHARE]
    shorts = {_name(end) for p in short for end in (p.first, p.second)}
    # A port short beside two or more partners, and beside every one it met, is the one
    # at fault: named alone, once, with all its short pairs.
    alone = {e for e in shorts if len(partners[e]) > 1 and all(
        p.share is not None and p.share < PASS_SHARE
        for p in judged if e in (_name(p.first), _name(p.second)))}
    for port in sorted(alone):
        mine = [p for p in short if port in (_name(p.first), _name(p.second))]
        found.append(_short(cluster, port, mine, alone=True))
    for p in short:
        if not {_name(p.first), _name(p.second)} & alone:
            found.append(_short(cluster, f"{_name(p.first)} or {_name(p.second)}", [p],
                                alone=False))
    return found


def _short(cluster: str, at: str, pairs: Sequence[PortPair], alone: bool) -> ClusterFinding:
    worst = min(pairs, key=lambda p: p.share or 0.0)
    assert worst.gbps is not None and worst.rate_gbps is not None and worst.share is not None
    gdr = all(p.first[1].gdr and p.second[1].gdr for p in pairs)
    said = "; ".join(
        f"{_name(p.first)} to {_name(p.second)}: {p.gbps:,.1f} Gb/s against "
        f"{p.rate_gbps:,.0f} Gb/s (the lesser port's rate)" for p in pairs if p.gbps)
    said += (f"; passing at {PASS_SHARE:.0%}; "
             + ("GPUDirect" if gdr else "host memory, not pinned to the NIC's NUMA node")
             + "; measured once, during fleet's steps: traffic of the renter's own on these "
               "ports is not seen")
    said += (f"; {at} was short beside every port it met"
             if alone else "; which of the two ports cannot be told from one test: "
                           "another pair with either tells")
    action = ("Measure the pair again with the nodes idle (fleet cluster run --nic-test); "
              "short again, ask the provider to check this port's cable, transceiver and "
              "switch port, and the NIC's PCIe link: the pair's collectives run over it at "
              "this pace." if gdr else
              "Measure the port again with the nodes idle and GPUDirect (a perftest built "
              "with CUDA) or pinned to the NIC's NUMA node (numactl --cpunodebind); short "
              "again, ask the "
              "provider for its cable, transceiver, switch port and PCIe link.")
    hosts = tuple(dict.fromkeys(h for p in pairs for h in (p.first[0], p.second[0])))
    return ClusterFinding(
        cluster, "nic-short", "fault", "provider" if gdr else "unsettled", hosts,
        f"{at}: ib_write_bw {worst.gbps:,.0f} Gb/s, {worst.share:.0%} of its "
        f"{worst.rate_gbps:,.0f} Gb/s", said, action, SOURCE,
        tuple(dict.fromkeys(p.step_id for p in pairs)))
