"""Where a GPU sits among the host's CPUs and memory, and running the host copies there.

On a two-socket host each GPU hangs off one socket's PCIe root. A host copy whose buffer
lives on the other socket's memory crosses the socket link as well as the GPU's, and
reads lower by an amount that depends on the platform, not the GPU. nvbandwidth binds
its thread to the GPU's CPUs (`setOptimalCpuAffinity`: nvmlDeviceSetCpuAffinity, in
its common.h) before it allocates host buffers, so that the kernel's first-touch policy
places them on the GPU's node; fleet does the same with the CPU set NVML reports
(nvmlDeviceGetCpuAffinity, read, never set through NVML) or, where NVML does not say,
the PCI device's `local_cpulist` in sysfs, and records the NUMA node and CPUs each host
copy ran from.

Standard library only, Python 3.8. Affinity is the agent's own thread's and is put back
after: nothing of the GPU or the host is changed.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, Iterator, List, Optional

from agent.source.nvml import Handle, Nvml, NvmlError

SYS_PCI = "/sys/bus/pci/devices"
_WORD_BITS = 64  # pynvml's cpuSet is an array of C unsigned longs


def sysfs_address(bus_id: Optional[str]) -> Optional[str]:
    """NVML's "00000000:06:00.0" as sysfs names it, "0000:06:00.0"; None if unparsable."""
    if not bus_id or ":" not in bus_id:
        return None
    domain, _, rest = bus_id.strip().lower().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return None


def parse_cpulist(text: str) -> List[int]:
    """"0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: List[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def cpulist(cpus: List[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8": how Linux writes a CPU set."""
    runs: List[str] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == int(runs[-1].rpartition("-")[2]) + 1:
            runs[-1] = f"{runs[-1].partition('-')[0]}-{cpu}"
        else:
            runs.append(str(cpu))
    return ",".join(runs)


def _nvml_cpus(nvml: Optional[Nvml], handle: Optional[Handle]) -> Optional[List[int]]:
    if nvml is None or handle is None:
        return None
    words = max(1, ((os.cpu_count() or 1) + _WORD_BITS - 1) // _WORD_BITS)
    try:
        mask = nvml.call(handle, "nvmlDeviceGetCpuAffinity", words)
    except (NvmlError, TypeError, ValueError):
        return None
    try:
        cpus = [w * _WORD_BITS + b for w, word in enumerate(mask)
                for b in range(_WORD_BITS) if int(word) >> b & 1]
    except (TypeError, ValueError):
        return None
    return cpus or None


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def locality(gpu: Dict[str, Any], nvml: Optional[Nvml], handle: Optional[Handle],
             sys_pci: str = SYS_PCI) -> Dict[str, Any]:
    """{"numa_node": int or None, "cpus": [..] or None, "source": "nvml" | "sysfs" | None}
    for the GPU whose fingerprint is `gpu`. A numa_node of None: the host does not say
    (a one-node host reports -1, kept as None)."""
    address = sysfs_address(gpu.get("pci_bus_id"))
    node: Optional[int] = None
    listed: Optional[List[int]] = None
    if address:
        text = _read(os.path.join(sys_pci, address, "numa_node"))
        try:
            node = int(text) if text is not None else None
        except ValueError:
            node = None
        if node is not None and node < 0:
            node = None
        text = _read(os.path.join(sys_pci, address, "local_cpulist"))
        try:
            listed = parse_cpulist(text) if text else None
        except ValueError:
            listed = None
    cpus = _nvml_cpus(nvml, handle)
    source = "nvml" if cpus else None
    if not cpus and listed:
        cpus, source = listed, "sysfs"
    return {"numa_node": node, "cpus": cpus, "source": source}


@contextlib.contextmanager
def pinned_to(cpus: Optional[List[int]]) -> Iterator[Optional[List[int]]]:
    """Run the calling thread on `cpus` (those of them it may use) for the duration; yields
    the CPUs it ran on, None where it could not be pinned (no set, no sched_setaffinity,
    or none of the GPU's CPUs allowed to this process: a container's cpuset)."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    usable = sorted(set(cpus) & before)
    if not usable:
        yield None
        return
    os.sched_setaffinity(0, usable)
    try:
        yield usable
    finally:
        os.sched_setaffinity(0, before)
