"""What NVIDIA and PCI-SIG publish for the links a node's copies cross: HBM per variant
(agent/gpu/variants.py), NVLink per link by generation, PCIe per lane by generation.

Figures are GB/s (10^9 bytes a second) each way, as the project's reference/gpu-variants.md
("Links") gives them with its sources. Healthy copies reach about 85-90% of them (the lent
2x H200: 55.5 of 63 GB/s host to device, 394.5 of 450 GPU to GPU, 4,251 of 4,800 HBM).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

# Per lane, each way, after line coding: Gen1-2 8b/10b, Gen3-5 128b/130b, Gen6 FLIT
# (242 of 256 bytes carry data).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8,
                 5: 32 * 128 / 130 / 8, 6: 64 * 242 / 256 / 8}
PCIE_SOURCE = "PCI-SIG base specifications: GT/s a lane and line coding, each way"
# NVLink generation by architecture, and GB/s each way per link: NVLink 2 (Volta), 3
# (Ampere), 4 (Hopper) carry 25 GB/s a link each way (nvidia-smi prints 26.562 for
# Hopper's raw signalling rate); NVLink 5 (Blackwell) 50.
NVLINK_BY_ARCHITECTURE = {"Volta": (2, 25.0), "Ampere": (3, 25.0), "Hopper": (4, 25.0),
                          "Blackwell": (5, 50.0)}
NVLINK_SOURCE = ("NVIDIA product pages: NVLink {gen}, {rate:g} GB/s a link each way, "
                 "{links} links active")


def pcie_gbs(gen: Optional[int], width: Optional[int]) -> Optional[float]:
    """One way of a PCIe link of `gen` and `width` lanes; None when either is unknown."""
    if not gen or not width or gen not in PCIE_LANE_GBS:
        return None
    return round(PCIE_LANE_GBS[gen] * width, 2)


def pcie_figure(gen: Optional[int], width: Optional[int]
                ) -> Tuple[Optional[float], Optional[str]]:
    """The datasheet figure of a PCIe link and where it comes from."""
    gbs = pcie_gbs(gen, width)
    if gbs is None:
        return None, None
    return gbs, f"PCIe Gen{gen} x{width}: {PCIE_SOURCE}"


def nvlink_figure(gpu: Dict[str, Any]) -> Tuple[Optional[float], Optional[str]]:
    """Each way, the sum of a GPU's active NVLink links, and its source; None without."""
    links = int(gpu.get("nvlink_links_active") or 0)
    known = NVLINK_BY_ARCHITECTURE.get(str(gpu.get("architecture") or ""))
    if links <= 0 or known is None:
        return None, None
    gen, rate = known
    return links * rate, NVLINK_SOURCE.format(gen=gen, rate=rate, links=links)


def hbm_figure(gpu: Dict[str, Any]) -> Tuple[Optional[float], Optional[str]]:
    """The variant's memory bandwidth from the catalog, and the catalog row's source."""
    datasheet = (gpu.get("variant") or {}).get("datasheet") or {}
    gbs = datasheet.get("memory_bandwidth_gbs")
    if not gbs:
        return None, None
    label = (gpu.get("variant") or {}).get("label") or "this variant"
    return float(gbs), f"{label}: {datasheet.get('source') or 'agent/gpu/variants.py'}"
