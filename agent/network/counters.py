"""Each RDMA port's error counters, read before and after a cluster step, so that a link
that flapped or erred while the step ran is named, NIC and port, even where it kept its
rate (issue 57).

The counters are the InfiniBand PortCounters the kernel shows under
/sys/class/infiniband/DEV/ports/N/counters/ (Linux drivers/infiniband/core/sysfs.c,
`pma_table`, the IBA's PortCounters attribute: InfiniBand and RoCE ports of mlx5 alike).
A port whose physical link went down and came back counts `link_downed`: a flap, which
Azure's node health checks look for in the kernel's log (azurehpc-health-checks,
customTests/azure_ib_link_flapping.nhc: five lost carriers in a day fail a node); the
others count bad symbols, recoveries and packets dropped or refused. Traffic counters
(`port_xmit_data`, ...) are not read: they rise on every healthy step.

A counter that went down between the reads was reset (by `perfquery -R`, a driver
reload): not a rise, and said as such. Standard library only, Python 3.8. Reads only.
"""

from __future__ import annotations

from typing import Dict, Optional

from agent.network.sysfs import entries, read

# The error counters, the flap first. Absent ones (a driver without them) are not read.
LINK_DOWNED = "link_downed"
ERROR_COUNTERS = (
    LINK_DOWNED,
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "VL15_dropped",
)
# Bounds on what a host's sysfs may make the event carry.
MAX_PORTS = 64

Counts = Dict[str, Dict[str, int]]  # "mlx5_0/1" -> counter -> value


def read_counters(root: str = "/") -> Counts:
    """Every RDMA port's error counters now: {"DEV/PORT": {counter: value}}; a port with
    none of them readable is left out."""
    found: Counts = {}
    for name in entries(root, "/sys/class/infiniband"):
        base = f"/sys/class/infiniband/{name}/ports"
        for port in entries(root, base):
            if not port.isdigit() or len(found) >= MAX_PORTS:
                continue
            values: Dict[str, int] = {}
            for counter in ERROR_COUNTERS:
                value = _count(read(root, f"{base}/{port}/counters/{counter}"))
                if value is not None:
                    values[counter] = value
            if values:
                found[f"{name}/{port}"] = values
    return found


def _count(text: Optional[str]) -> Optional[int]:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def rises(before: Counts, after: Counts) -> Dict[str, object]:
    """What rose between two reads: {"ports": ports read both times, "rose": {"DEV/PORT":
    {counter: rise}}, "reset": ["DEV/PORT counter", ...]}."""
    rose: Counts = {}
    reset = []
    both = sorted(set(before) & set(after))
    for port in both:
        for counter, value in after[port].items():
            was = before[port].get(counter)
            if was is None:
                continue
            if value < was:
                reset.append(f"{port} {counter}")
            elif value > was:
                rose.setdefault(port, {})[counter] = value - was
    return {"ports": len(both), "rose": rose, "reset": reset[:MAX_PORTS]}
