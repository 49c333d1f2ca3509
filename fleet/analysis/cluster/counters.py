"""What each node's RDMA error counters say of a cluster run (issue 57): a port whose link
went down while the steps ran (`link_downed` rose: a flap) is the provider's fault
whatever the figures, since a job across nodes stalls or fails on it; other error
counters that rose (bad symbols, recoveries, packets dropped or refused: Linux
drivers/infiniband/core/sysfs.c's PortCounters) name the NIC and port at fault where the
node was in a step judged short, and are said, not disputed, where every step it was in
passed: a cable or transceiver going bad counts errors before it costs bandwidth.

Pure: the stored steps and the pair verdicts in, findings out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fleet.analysis.cluster.verdicts import ClusterFinding, PairVerdict
from fleet.model.step import StepResult
from fleet.words import counted

FLAP = "link_downed"
SOURCE = ("each node's /sys/class/infiniband/DEV/ports/N/counters before and after each "
          "step (Linux drivers/infiniband/core/sysfs.c, the IBA PortCounters); a flap as "
          "Azure's node health checks count them (azurehpc-health-checks, "
          "azure_ib_link_flapping.nhc)")


def _summed(steps: Iterable[StepResult]) -> dict[str, dict[str, dict[str, int]]]:
    """host -> port -> counter -> its rises over every step."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    for step in steps:
        for node in step.counters:
            for port, counter, rise in node.rose:
                mine = found.setdefault(node.host, {}).setdefault(port, {})
                mine[counter] = mine.get(counter, 0) + rise
    return found


def _short_steps(host: str, pairs: Sequence[PairVerdict],
                 short_wholes: Sequence[StepResult]) -> list[str]:
    """The steps the host was in that were judged short (a pair under its line, or the
    whole cluster's)."""
    said = [p.step_id for p in pairs
            if host in p.hosts and p.passed is False and p.busbw_gbs is not None]
    said += [s.step_id for s in short_wholes if host in s.hosts]
    return said


def counter_findings(cluster: str, steps: Sequence[StepResult],
                     pairs: Sequence[PairVerdict],
                     short_wholes: Sequence[StepResult]) -> list[ClusterFinding]:
    """A link-flap fault for each port whose link went down during the steps, and a
    port-errors finding for each node whose ports counted other errors: a fault naming
    the ports where the node was in a step judged short, else information."""
    found: list[ClusterFinding] = []
    ids = tuple(s.step_id for s in steps if any(n.rose for n in s.counters))
    for host, ports in sorted(_summed(steps).items()):
        flaps = {port: c[FLAP] for port, c in ports.items() if c.get(FLAP)}
        for port, times in sorted(flaps.items()):
            found.append(ClusterFinding(
                cluster, "link-flap", "fault", "provider", (host,),
                f"{host}: {port}'s link went down {counted(times, 'time')} during the steps",
                f"link_downed rose by {times} on {host}'s {port} between the reads before "
                "and after the steps; "
                + _words(ports[port], skip=FLAP),
                "Ask the provider to replace or reseat the cable and transceiver of this "
                "port and to check its switch port: a link that goes down under load "
                "stalls every job across nodes on it.", SOURCE, ids))
        erred = {port: c for port, c in ports.items() if any(
            k != FLAP and v for k, v in c.items())}
        if not erred:
            continue
        short = _short_steps(host, pairs, short_wholes)
        where = "; ".join(f"{port}: {_words(c, skip=FLAP)}" for port, c in sorted(erred.items()))
        if short:
            found.append(ClusterFinding(
                cluster, "port-errors", "fault", "provider", (host,),
                f"{host}: {', '.join(sorted(erred))} counted errors in its short steps",
                f"{where}; in {counted(len(short), 'step')} judged short: "
                f"{', '.join(short)}",
                "Ask the provider to check these ports' cables, transceivers and switch "
                "ports (the counters name them): the short figures ran over them.",
                SOURCE, ids))
        else:
            found.append(ClusterFinding(
                cluster, "port-errors", "info", None, (host,),
                f"{host}: {', '.join(sorted(erred))} counted errors at full rate",
                f"{where}; every step it was in passed or was not judged",
                "Watch these ports on the next runs: a cable or transceiver going bad "
                "counts errors before it costs bandwidth.", SOURCE, ids))
    return found


def _words(rises: dict[str, int], skip: str) -> str:
    said = [f"{name} +{rise:,}" for name, rise in sorted(rises.items()) if name != skip]
    return ", ".join(said) if said else "no other counter rose"
