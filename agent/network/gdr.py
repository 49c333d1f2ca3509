"""Whether GPUDirect RDMA can work on this node: a NIC reading and writing GPU memory
directly, without staging through host memory.

Two mechanisms, as NVIDIA documents them:
- the peer-memory module: `nvidia_peermem`, shipped with the NVIDIA driver since R470
  (NVIDIA GPUDirect RDMA documentation, "Using nvidia-peermem"), or Mellanox's older
  out-of-tree `nv_peer_mem`. Loaded or not is read from /proc/modules.
- DMA-BUF: the RDMA stack imports GPU memory as a dma-buf, which needs Linux 5.12 or
  newer (ib_umem_dmabuf, merged in 5.12) and NVIDIA's open GPU kernel modules (NVIDIA's
  GPUDirect RDMA documentation and NCCL's NCCL_DMABUF_ENABLE: "requires ... Linux
  kernel 5.12 or higher and the NVIDIA open-source kernel modules"). Which flavour of
  the module is loaded is read from /proc/driver/nvidia/version ("Open Kernel Module").

Verdict: "on" where either mechanism is there, "off" where both are known to be absent,
"unknown" where the node does not say enough (no module list, or DMA-BUF undecidable
because the kernel is new enough but the module's flavour is not known). Whether the
renter's NCCL or libfabric then uses it is theirs to configure, and is not judged here.

Standard library only, Python 3.8.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
DMABUF_KERNEL = (5, 12)


def gdr(modules: Optional[List[str]], kernel: Optional[Tuple[int, int]],
        nvidia_module: Optional[str]) -> Dict[str, Any]:
    """{"state": "on" | "off" | "unknown", "peermem": "loaded" | "absent" | "unknown",
    "dmabuf": "possible" | "no" | "unknown", "basis": why, in a sentence}."""
    if modules is None:
        peermem = "unknown"
    else:
        peermem = "loaded" if any(m in PEERMEM_MODULES for m in modules) else "absent"
    reasons = []
    if kernel is not None and kernel < DMABUF_KERNEL:
        dmabuf = "no"
        reasons.append(f"kernel {kernel[0]}.{kernel[1]} is older than 5.12")
    elif nvidia_module == "proprietary":
        dmabuf = "no"
        reasons.append("the NVIDIA kernel module is the proprietary one")
    elif nvidia_module == "open" and kernel is not None:
        dmabuf = "possible"
        reasons.append(f"kernel {kernel[0]}.{kernel[1]} with NVIDIA's open kernel modules")
    elif kernel is None:
        dmabuf = "unknown"
        reasons.append("the kernel version is not known")
    else:
        dmabuf = "unknown"
        reasons.append(f"kernel {kernel[0]}.{kernel[1]}, but whether the NVIDIA kernel "
                       "module is the open one is not known")
    if peermem == "loaded" or dmabuf == "possible":
        state = "on"
    elif peermem == "absent" and dmabuf == "no":
        state = "off"
    else:
        state = "unknown"
    loaded = [m for m in (modules or []) if m in PEERMEM_MODULES]
    peer_text = {"loaded": f"{', '.join(loaded)} loaded",
                 "absent": "no peer-memory module loaded (nvidia_peermem, nv_peer_mem)",
                 "unknown": "loaded modules not known"}[peermem]
    basis = f"{peer_text}; DMA-BUF {dmabuf}: {reasons[0]}"
    return {"state": state, "peermem": peermem, "dmabuf": dmabuf, "basis": basis}
