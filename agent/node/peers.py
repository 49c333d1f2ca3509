"""Each pair of a node's GPUs: whether peer access works, NVML's path between them, and
the copy bandwidth one way and both ways at once.

A node sold as NVLink-connected whose GPUs cannot reach each other (a pass-through VM
without the fabric, peer access off) sends every collective through the host: peer
access off and a PCIe-sized figure tell it. Copies are issued by torch, which enables
peer access where CUDA allows it and otherwise stages through the host, as a program on
that node would. Both ways: each GPU's copy to the other at once, each on its own
stream, timed from one start event to the later of the two finishes (bytes of both
directions over that time).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.gpu import links, nvlink
from agent.node import bandwidth
from agent.source.nvml import Handle, Nvml, NvmlError

# nvmlGpuTopologyLevel_t, as nvidia-smi topo -m names the levels.
TOPOLOGY_LEVELS = {0: "SAME", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# The paths that are known to run over PCIe (through the host or a PCIe switch).
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
P2P_STATUS_OK = 0


def topology(nvml: Optional[Nvml], first: Optional[Handle], second: Optional[Handle]
             ) -> Optional[str]:
    """"NVLINK" when NVML says the two reach each other over NVLink, else the PCIe path
    (nvidia-smi topo's PIX, PXB, PHB, NODE, SYS); None when NVML cannot tell."""
    if nvml is None or first is None or second is None:
        return None
    try:
        status = nvml.pair(first, second, "nvmlDeviceGetP2PStatus",
                           "NVML_P2P_CAPS_INDEX_NVLINK")
        if int(status) == P2P_STATUS_OK:
            return "NVLINK"
    except (NvmlError, TypeError, ValueError):
        pass
    try:
        level = int(nvml.pair(first, second, "nvmlDeviceGetTopologyCommonAncestor"))
    except (NvmlError, TypeError, ValueError):
        return None
    return TOPOLOGY_LEVELS.get(level, str(level))


def pair_datasheet(path: Optional[str], first: Dict[str, Any], second: Dict[str, Any],
                   node: Optional[Sequence[Dict[str, Any]]] = None
                   ) -> Tuple[Optional[float], Optional[str]]:
    """One way between two GPUs. Where NVML says NVLink joins them: the links that join
    the pair (agent/gpu/nvlink.py: through NVSwitch, the fewer of the two GPUs' switch links;
    direct, the links whose far end is the other GPU) x the per-link rate; where NVML did
    not say where the links go (an old driver or recording), the fewer of the two GPUs'
    active links, said to assume a switched board. The slower host link only where the
    path is known to be PCIe; None where the path is unknown. `node`: every GPU of the
    node, so that a link to a third one is known to be no link of this pair."""
    if path == "NVLINK":
        count, fabric = nvlink.pair_links(first, second, node)
        if count is None:
            figures = [links.nvlink_figure(first), links.nvlink_figure(second)]
            known = [f for f in figures if f[0] is not None]
            if not known:
                return None, None
            gbs, source = min(known, key=lambda f: float(f[0] or 0.0))
            return gbs, (f"{source}; assumed a switched board: NVML did not say where the "
                         "links go")
        if fabric is None:
            return None, None  # NVML's path says NVLink, its links say none: no figure
        return nvlink.pair_figure(count, fabric, (first, second))
    if path not in PCIE_PATHS:
        return None, None
    figures = [links.pcie_figure(g.get("pcie_gen_max"), g.get("pcie_width_max"))
               for g in (first, second)]
    known = [f for f in figures if f[0] is not None]
    if not known:
        return None, None
    gbs, source = min(known, key=lambda f: float(f[0] or 0.0))
    return gbs, f"through the host: {source}"


def _both_ways(torch: Any, streams: Tuple[Any, Any], buffers: Dict[str, Any], size: int,
               repeats: int) -> List[float]:
    first, second = streams
    src_a, dst_a, src_b, dst_b = (buffers[k] for k in ("src_a", "dst_a", "src_b", "dst_b"))

    def queue() -> None:
        # Each copy inside its source's stream alone: torch then ties it to the other
        # GPU's default stream, never to the other direction's copy, so both run at once.
        with torch.cuda.stream(first):
            dst_b.copy_(src_a, non_blocking=True)
        with torch.cuda.stream(second):
            dst_a.copy_(src_b, non_blocking=True)

    # The warm-up is the timed loop itself, its repeats discarded: on a lent 4x H200 the
    # first repeat that tied the two streams together ran both copies one after the other
    # (388 GB/s, half of the 776 that followed) after plain warm-up copies.
    marks = []
    for _ in range(bandwidth.WARMUP + repeats):
        start = torch.cuda.Event(enable_timing=True)
        done = torch.cuda.Event()
        stop = torch.cuda.Event(enable_timing=True)
        start.record(first)
        second.wait_event(start)
        queue()
        done.record(second)
        first.wait_event(done)
        stop.record(first)
        marks.append((start, stop))
    marks[-1][1].synchronize()
    return [2 * size / (a.elapsed_time(b) / 1e3) / 1e9 for a, b in marks[bandwidth.WARMUP:]]


def measure(torch: Any, pair: Tuple[Any, Any], gpus: Tuple[Dict[str, Any], Dict[str, Any]],
            handles: Tuple[Optional[Handle], Optional[Handle]], nvml: Optional[Nvml],
            size: int, stack: bandwidth.Stack, repeats: int = bandwidth.REPEATS,
            node: Optional[Sequence[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The one-way (first to second) and both-ways figures of a pair of GPUs, given as
    torch devices, their fingerprints and NVML handles (`node`: every GPU's fingerprint,
    which tells a link to a third GPU apart from an unknown one)."""
    device_a, device_b = pair
    access = bool(torch.cuda.can_device_access_peer(device_a.index, device_b.index)
                  and torch.cuda.can_device_access_peer(device_b.index, device_a.index))
    path = topology(nvml, handles[0], handles[1])
    one_way = pair_datasheet(path, gpus[0], gpus[1], node)
    joined, fabric = nvlink.pair_links(gpus[0], gpus[1], node)
    both = ((one_way[0] * 2, f"twice one way ({one_way[1]})") if one_way[0] is not None
            else (None, None))
    buffers = {
        "src_a": torch.empty(size, dtype=torch.uint8, device=device_a).random_(0, 256),
        "dst_a": torch.empty(size, dtype=torch.uint8, device=device_a),
        "src_b": torch.empty(size, dtype=torch.uint8, device=device_b).random_(0, 256),
        "dst_b": torch.empty(size, dtype=torch.uint8, device=device_b),
    }
    streams = (torch.cuda.Stream(device_a), torch.cuda.Stream(device_b))
    common = {"gpu_index": gpus[0].get("index"), "gpu_uuid": gpus[0].get("uuid"),
              "peer_index": gpus[1].get("index"), "peer_uuid": gpus[1].get("uuid"),
              "peer_access": access, "topology": path, "nvlink_links": joined,
              "nvlink_fabric": fabric}
    started = time.monotonic()
    samples = bandwidth.time_op(
        torch, lambda: buffers["dst_b"].copy_(buffers["src_a"], non_blocking=True), size,
        streams[0], repeats=repeats)
    results = [bandwidth.figure(stack, "peer_copy", samples, size, "copied, one way",
                                "cuda", started, datasheet=one_way, direction="one_way",
                                **common)]
    started = time.monotonic()
    samples = _both_ways(torch, streams, buffers, size, repeats)
    results.append(bandwidth.figure(stack, "peer_copy", samples, size,
                                    "copied each way at once, both summed (2 x size)",
                                    "cuda", started, datasheet=both, direction="both_ways",
                                    **common))
    buffers.clear()
    return results
