"""How far each NIC sits from each GPU on PCI, in nvidia-smi's words: PIX (at most one
PCIe switch between them), PXB (several switches, no host bridge), PHB (through the host
bridge), NODE (between host bridges of one NUMA node), SYS (across the socket link).

NVIDIA's GPUDirect RDMA wants the GPU and NIC under one PCIe switch: traffic that climbs
to the host bridge or crosses sockets loses bandwidth, and NCCL stops using GPUDirect
RDMA beyond the distance NCCL_NET_GDR_LEVEL names (NCCL's environment documentation).

Where `nvidia-smi topo -m` lists NICs, its word is taken. Otherwise the distance is read
from the sysfs paths of the two devices, which is an approximation of what NVML does
(NVML walks the same PCI tree): both under one root bus and sharing a bridge, PIX if each
is at most one bridge below their closest common bridge, else PXB; one root bus and no
shared bridge, PHB; different root buses, NODE if sysfs puts both on one NUMA node and
SYS if on two; unknown (None) where a NUMA node is not reported. Inside a VM the PCI tree
is the hypervisor's, flattened, so both sources say what the guest sees.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def pci_chain(path: Optional[str]) -> Optional[Tuple[str, List[str]]]:
    """/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/... -> ("pci0000:00",
    ["0000:00:01.0", "0000:01:00.0"]): the root bus and the PCI functions down to the
    device; None for a path off PCI."""
    if not path:
        return None
    parts = path.split("/")
    roots = [i for i, part in enumerate(parts) if _ROOT.match(part)]
    if not roots:
        return None
    chain = []
    for part in parts[roots[0] + 1:]:
        if not _BDF.match(part):
            break
        chain.append(part)
    return (parts[roots[0]], chain) if chain else None


def sysfs_distance(gpu_path: Optional[str], nic_path: Optional[str],
                   gpu_numa: Optional[int], nic_numa: Optional[int]) -> Optional[str]:
    """The PCI distance between two devices from their sysfs paths, or None."""
    gpu, nic = pci_chain(gpu_path), pci_chain(nic_path)
    if gpu is None or nic is None:
        return None
    if gpu[0] != nic[0]:
        if gpu_numa is None or nic_numa is None:
            return None
        return "NODE" if gpu_numa == nic_numa else "SYS"
    # indexed, not zip(strict=...): the agent runs on Python 3.8
    shared = 0
    while (shared < min(len(gpu[1]), len(nic[1])) - 1
           and gpu[1][shared] == nic[1][shared]):
        shared += 1
    if shared == 0:
        return "PHB"
    # below the closest common bridge: a switch's downstream port, then the device
    below = max(len(gpu[1]) - shared, len(nic[1]) - shared)
    return "PIX" if below <= 2 else "PXB"


def nearest(distances: Dict[str, str]) -> Optional[str]:
    """The closest level among a NIC's distances to the GPUs."""
    known = [d for d in distances.values() if d in LEVELS]
    return min(known, key=LEVELS.index) if known else None
