"""What a pair's per-NIC RDMA test says (issue 57): each RDMA port of the pair's first
node tested against the second node's port of the same rank with perftest's ib_write_bw
(agent/network/perftest.py, `fleet cluster run --nic-test`). A pair's collectives say
that its link is short; this says which of its ports.

- **nic-short** (fault, the provider's): a port pair whose ib_write_bw average is under
  90% of the lesser port's rate (NVIDIA's multinode certification test passes RDMA
  between two nodes at 90% of the port link speed read from sysfs: Mellanox/
  ngc_multinode_perf). Both ports are named; a port short beside every partner it met
  is named alone, as the one at fault.
- **nic-untested** (info): a pair whose ports were not all tested, with why (no
  ib_write_bw on a node, no active RDMA port, a port with no partner, a run that failed).

Pure: the stored steps in, findings out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet.analysis.cluster.verdicts import ClusterFinding
from fleet.model.step import NicFigure, NodeNics, StepResult

PASS_SHARE = 0.90
SOURCE = ("perftest's ib_write_bw between the pair's ports of the same rank (agent/network/"
          "perftest.py); the pass line of NVIDIA's multinode certification test "
          "(Mellanox/ngc_multinode_perf): RDMA between two nodes passes at 90% of the port "
          "link speed read from sysfs")


@dataclass(frozen=True)
class PortPair:
    """One test: the first node's port against the second's, and what it gave."""

    step_id: str
    first: tuple[str, NicFigure]
    second: tuple[str, NicFigure] | None
    gbps: float | None
    rate_gbps: float | None
    why: str | None  # why there is no figure

    @property
    def share(self) -> float | None:
        if self.gbps is None or not self.rate_gbps:
            return None
        return self.gbps / self.rate_gbps


def _name(host: str, nic: NicFigure) -> str:
    return f"{host}'s {nic.device}/{nic.port}"


def port_pairs(step: StepResult) -> tuple[list[PortPair], list[str]]:
    """The step's tests paired by rank, and why any side did not test at all."""
    sides: dict[str, NodeNics] = {n.host: n for n in step.nics}
    if len(step.hosts) != 2 or not sides:
        return [], []
    a, b = step.hosts
    skipped = [f"{h}: {sides[h].skipped}" for h in (a, b)
               if h in sides and sides[h].skipped]
    if a not in sides or b not in sides or skipped:
        return [], skipped or [f"{h}: sent no NIC test" for h in (a, b) if h not in sides]
    mine, theirs = sides[a].tests, sides[b].tests
    found = []
    for i, nic in enumerate(mine):
        other = theirs[i] if i < len(theirs) else None
        # The client's average is the sender's measure, the server's the receiver's; the
        # lesser of the two is what the link carried for both.
        said = [t.gbps for t in (nic, other) if t is not None and t.gbps is not None]
        rates = [t.rate_gbps for t in (nic, other) if t is not None and t.rate_gbps]
        why = None
        if other is None:
            why = f"{b} has no port of rank {i + 1}"
        elif not said:
            why = nic.error or other.error or "no figure"
        found.append(PortPair(step.step_id, (a, nic), None if other is None else (b, other),
                              min(said) if said and other is not None else None,
                              min(rates) if rates else None, why))
    for i in range(len(mine), len(theirs)):
        found.append(PortPair(step.step_id, (b, theirs[i]), None, None, None,
                              f"{a} has no port of rank {i + 1}"))
    return found, []


def nic_findings(cluster: str, steps: Sequence[StepResult]) -> list[ClusterFinding]:
    """nic-short for each port pair under 90% of its rate (a port short beside every
    partner it met named alone), nic-untested for each pair not fully tested."""
    found: list[ClusterFinding] = []
    tested: list[PortPair] = []
    for step in steps:
        pairs, skipped = port_pairs(step)
        tested += pairs
        untested = skipped + [f"{_name(*p.first)}: {p.why}" for p in pairs if p.why]
        if untested:
            found.append(ClusterFinding(
                cluster, "nic-untested", "info", None, step.hosts,
                f"{' and '.join(step.hosts)}: {len(untested)} of the per-NIC tests did "
                "not run" if pairs else f"{' and '.join(step.hosts)}: no per-NIC test ran",
                "; ".join(untested)[:1500],
                "Install perftest (apt-get install perftest) on the nodes, check that each "
                "has its RDMA ports Active (ibstat), and run again with --nic-test.",
                SOURCE, (step.step_id,)))
    short = [p for p in tested if p.share is not None and p.share < PASS_SHARE]
    met: dict[str, list[PortPair]] = {}
    for p in tested:
        if p.share is None or p.second is None:
            continue
        for side in (p.first, p.second):
            met.setdefault(_name(*side), []).append(p)
    for p in short:
        assert p.second is not None and p.gbps is not None and p.rate_gbps is not None
        ends = [_name(*p.first), _name(*p.second)]
        alone = [e for e in ends if len(met[e]) > 1 and all(
            q.share is not None and q.share < PASS_SHARE for q in met[e])]
        at = alone[0] if len(alone) == 1 else " or ".join(ends)
        found.append(ClusterFinding(
            cluster, "nic-short", "fault", "provider",
            (p.first[0], p.second[0]),
            f"{at}: ib_write_bw {p.gbps:,.0f} Gb/s, {p.share:.0%} of its "
            f"{p.rate_gbps:,.0f} Gb/s",
            f"{ends[0]} to {ends[1]}: {p.gbps:,.1f} Gb/s average against "
            f"{p.rate_gbps:,.0f} Gb/s (the lesser port's rate), passing at "
            f"{PASS_SHARE:.0%}" + ("; GPUDirect" if p.first[1].gdr else "; host memory")
            + (f"; {at} was short beside every partner it met" if at in alone else
               "; which of the two ports cannot be told from one test: another pair "
               "with either tells"),
            "Ask the provider to check this port's cable, transceiver and switch port, "
            "and the NIC's PCIe link: the pair's collectives run over it at this pace.",
            SOURCE, (p.step_id,)))
    return found
