"""A GPU's host link: host-to-device and device-to-host copies, from pinned memory (what
a data loader with pinned buffers gets) and from pageable memory beside it, labelled.

The link's generation and width are read from NVML while the pinned copies run: a link
drops to a lower generation at idle, so the fingerprint's idle reading cannot tell a slot
that trained down from one resting. The datasheet figure is the link at the most the card
and slot support (a card negotiated down reads below it); the negotiated state travels
with the figure, so a reader can tell which of the two fell short.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from agent.gpu import links
from agent.node import bandwidth
from agent.source.nvml import Handle, Nvml, NvmlError

LinkState = Dict[str, Optional[int]]


def _read_link(nvml: Optional[Nvml], handle: Optional[Handle], gpu: Dict[str, Any]
               ) -> LinkState:
    state: LinkState = {"gen": None, "width": None,
                        "gen_max": gpu.get("pcie_gen_max"),
                        "width_max": gpu.get("pcie_width_max")}
    if nvml is None or handle is None:
        return state
    for key, fn in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                    ("width", "nvmlDeviceGetCurrPcieLinkWidth")):
        try:
            state[key] = int(nvml.call(handle, fn))
        except (NvmlError, TypeError, ValueError):
            state[key] = None
    return state


def measure(torch: Any, device: Any, stream: Any, gpu: Dict[str, Any],
            nvml: Optional[Nvml], handle: Optional[Handle], size: int,
            stack: bandwidth.Stack, repeats: int = bandwidth.REPEATS
            ) -> Tuple[List[Dict[str, Any]], LinkState]:
    """The four host-link figures of one GPU, and its link as it ran under the pinned copy.

    On the CPU path only the pageable pair runs, as RAM-to-RAM copies (backend "cpu"):
    the code path, not a figure of any link."""
    cuda = stream is not None
    on_device = torch.empty(size, dtype=torch.uint8, device=device).random_(0, 256)
    link = _read_link(None, None, gpu)
    results: List[Dict[str, Any]] = []
    kinds = ("pinned", "pageable") if cuda else ("pageable",)
    gbs, source = links.pcie_figure(gpu.get("pcie_gen_max"), gpu.get("pcie_width_max"))
    for memory in kinds:
        host = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned")
        host.random_(0, 256)
        for kind in ("host_to_device", "device_to_host"):
            started = time.monotonic()
            src, dst = (host, on_device) if kind == "host_to_device" else (on_device, host)

            def op(src: Any = src, dst: Any = dst) -> None:
                dst.copy_(src, non_blocking=True)
            during = None
            if memory == "pinned" and kind == "host_to_device":
                def during() -> None:
                    link.update(_read_link(nvml, handle, gpu))
            samples = bandwidth.time_op(torch, op, size, stream, repeats=repeats,
                                        during=during)
            results.append(bandwidth.figure(
                stack, kind, samples, size, "copied", "cuda" if cuda else "cpu", started,
                datasheet=(gbs, source) if cuda else (None, None),
                gpu_index=gpu.get("index"), gpu_uuid=gpu.get("uuid"), memory=memory,
                link=dict(link) if cuda else None))
    return results, link
