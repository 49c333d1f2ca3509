"""PCIe Access Control Services on the bridges above the GPUs and fabric NICs.

With ACS's P2P Request Redirect (or Completion Redirect) on at a switch's downstream
port, a GPU's peer traffic to a NIC or GPU under the same switch goes up to the root
complex and back: NCCL's troubleshooting guide says ACS must be off on bare metal for
GPUDirect P2P and RDMA to run at full speed (in a VM it is needed, for isolation). The
ACS Control register lives in the extended configuration space (past byte 256), which
Linux shows to root only; for anyone else it reads as unknown, never as off.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Dict, List, Optional

from agent.network import sysfs

ACS_CAP_ID = 0x000D
EXTENDED_START = 0x100
# ACS Control register bits (PCIe base spec, 7.7.8.3).
BITS = (("SV", 0), ("TB", 1), ("RR", 2), ("CR", 3), ("UF", 4), ("EC", 5), ("DT", 6))
REDIRECTS = ("RR", "CR")
NVIDIA = "0x10de"
MELLANOX = "0x15b3"
MAX_BRIDGES = 64


def acs_control(config: bytes) -> Optional[Dict[str, bool]]:
    """The ACS Control bits of one function's configuration space, {"RR": True, ...};
    {} when it has no ACS capability; None when the extended space is not readable
    (256 bytes or fewer: not root)."""
    if len(config) <= EXTENDED_START:
        return None
    offset, seen = EXTENDED_START, 0
    while offset and offset + 8 <= len(config) and seen < 256:
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return {}
        if header & 0xFFFF == ACS_CAP_ID:
            (control,) = struct.unpack_from("<H", config, offset + 6)
            return {name: bool(control >> bit & 1) for name, bit in BITS}
        offset, seen = header >> 20 & 0xFFC, seen + 1
    return {}


def _is_endpoint(root: str, address: str) -> bool:
    vendor = sysfs.read(root, f"/sys/bus/pci/devices/{address}/vendor")
    klass = sysfs.read(root, f"/sys/bus/pci/devices/{address}/class") or ""
    # NVIDIA 3D/VGA controllers; Mellanox/NVIDIA networking or any InfiniBand controller.
    return ((vendor == NVIDIA and klass[:6] in ("0x0302", "0x0300"))
            or (vendor == MELLANOX and klass[:6] in ("0x0200", "0x0207"))
            or klass[:6] == "0x0207")


def _bridges_above(root: str, address: str) -> List[str]:
    path = sysfs.resolve(root, f"/sys/bus/pci/devices/{address}") or ""
    parts = [p for p in path.split("/") if sysfs.pci_address("/" + p) == p]
    return parts[:-1]  # the device's own function is last


def _read_config(root: str, address: str) -> Optional[bytes]:
    try:
        with open(os.path.join(root, f"sys/bus/pci/devices/{address}/config"), "rb") as fh:
            return fh.read(4096)
    except OSError:
        return None


def read_acs(root: str = "/") -> Dict[str, Any]:
    """{"endpoints": GPUs and NICs looked above, "bridges": [{"address", "above",
    "redirect": True/False/None, "bits"}], "readable": whether any bridge's extended
    space could be read}."""
    endpoints = [a for a in sysfs.entries(root, "/sys/bus/pci/devices") if _is_endpoint(root, a)]
    above: Dict[str, List[str]] = {}
    for endpoint in endpoints:
        for bridge in _bridges_above(root, endpoint):
            above.setdefault(bridge, []).append(endpoint)
    bridges = []
    readable = False
    for bridge in sorted(above)[:MAX_BRIDGES]:
        config = _read_config(root, bridge)
        bits = acs_control(config) if config is not None else None
        readable = readable or bits is not None
        bridges.append({
            "address": bridge, "above": sorted(above[bridge])[:16],
            "redirect": None if bits is None else any(bits.get(b) for b in REDIRECTS),
            "bits": None if bits is None else sorted(k for k, v in bits.items() if v)})
    return {"endpoints": len(endpoints), "bridges": bridges, "readable": readable}
