"""Which GPU variant a card is: the catalog of data-centre variants and the classifier.

"A100 80GB" on a listing may be a PCIe card, an SXM4 board or a GRID vGPU slice (seed 001,
"GPU Provider Variance"), and the name alone can hide the form factor ("NVIDIA H200" is
the SXM part; the NVL one has its own id). So the PCI device id decides, the name only
breaks ties or stands in when there is no id, and an id the catalog does not know stays
unknown rather than being guessed from a familiar-looking name.

Everything here is plain data in, plain (JSON-serialisable) data out:

    classify_variant(0x233010DE, "NVIDIA H100 80GB HBM3", "passthrough")
    -> {"family": "H100", "memory_gb": 80, "form_factor": "SXM",
        "label": "H100-SXM5-80GB", "matched_by": "pci_id", "pci_device_id": "0x233010DE",
        "vgpu_profile": None, "datasheet": {...}, "note": None}

Facts come from /work/shared/reference/gpu-variants.md (gathered 2026-11-22) and the
sources it names; each catalog row cites its own. A figure the reference marks
[unverified], or does not give, is None here: a report must never compare a measurement
with a number nobody checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple

NVIDIA_VENDOR_ID = 0x10DE
DTYPES = ("fp32", "tf32", "bf16", "fp16")
FORM_FACTORS = ("SXM", "PCIe", "NVL")
# The series letter ends every vGPU profile name (NVIDIA vGPU documentation).
VGPU_SERIES = {"C": "compute", "Q": "workstation", "B": "pc", "A": "apps"}


@dataclass(frozen=True)
class CatalogRow:
    """One variant: how NVML names it, what it is, and its datasheet figures."""

    device_id: int  # the 16-bit PCI device id, e.g. 0x2330
    names: Tuple[str, ...]  # what nvidia-smi prints, with and without "NVIDIA "
    family: str
    memory_gb: int  # nominal, as sold
    form_factor: str  # one of FORM_FACTORS
    label: str
    vgpu_board: Optional[str]  # the board prefix of this card's vGPU profiles
    default_power_w: Optional[int]
    max_sm_clock_mhz: Optional[int]
    memory_bandwidth_gbs: Optional[int]
    # Dense figures only; a read-only mapping, so it is left out of the row's hash.
    peak_tflops: Mapping[str, Optional[float]] = field(hash=False)
    source: str
    # The NVLink links the board gives every GPU, and where that is published. None where
    # it is not verified, and for cards whose links come from optional bridges (PCIe, NVL):
    # a card without its bridge is not missing links.
    nvlink_links: Optional[int] = None
    nvlink_source: Optional[str] = None


def _names(*printed: str) -> Tuple[str, ...]:
    """The names current drivers print, then the same without "NVIDIA " as older drivers
    print them (reference: "Older drivers print names without the leading NVIDIA")."""
    older = tuple(n[len("NVIDIA "):] for n in printed if n.startswith("NVIDIA "))
    return printed + older


def _tflops(
    fp32: Optional[float], tf32: Optional[float], bf16: Optional[float],
    fp16: Optional[float],
) -> Mapping[str, Optional[float]]:
    values = {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16}
    return MappingProxyType({d: None if v is None else float(v) for d, v in values.items()})


# A figure the reference marks [unverified] or does not give.
_NONE = _tflops(None, None, None, None)

# NVLink links per GPU of the SXM boards. Left None: the H100 SXM5 94GB / 64GB, H800 and
# A800 (export parts whose link count is not published where it could be checked), GH200,
# and every PCIe or NVL card (bridges are optional).
_V100_LINKS = ("nvidia.com/data-center/nvlink: A100 'increased the number of links from 6 "
               "to 12'; Dell EMC Ready Solutions for AI reference guide: 'each V100-SXM2 GPU "
               "has 6 NVLinks'; reference gpu-variants.md, Links")
_A100_LINKS = ("nvidia.com/data-center/nvlink: a single A100 supports up to 12 "
               "third-generation NVLink connections, 600 GB/s; reference gpu-variants.md, "
               "Links")
_HOPPER_LINKS = ("reference gpu-variants.md, Links: NVLink 4, 18 links a card (NVIDIA "
                 "product pages); NVIDIA developer blog 'Introducing NVIDIA HGX H100': 900 "
                 "GB/s both ways per GPU, 18 x 50")
_H200_LINKS = ("NVIDIA's MLPerf Inference v4.1 system H200-SXM-141GBx8 "
               "(mlcommons/inference_results_v4.1): '18x 4th Gen NVLink, 900GB/s'; 18 active "
               "on the real hosts (fixtures h200-sxm-x2-passthrough, h200-sxm-x4-lent)")
_B200_LINKS = ("reference gpu-variants.md, Links: NVLink 5, 18 links, 1.8 TB/s both ways "
               "(NVIDIA HGX B200 datasheet)")

# The catalog. Each row: device id, names, family, memory GB, form factor, label, vGPU board;
# then default power W, max SM MHz, memory GB/s, dense TFLOP/s (fp32, tf32, bf16, fp16);
# then the source.
#
# tf32/bf16/fp16 are dense tensor-core figures. NVIDIA's datasheets print the sparse ones
# (2:4 structured sparsity, "shown with sparsity") first, twice as large; an ordinary matmul
# can never reach those, so they never appear here. The datasheets list FP16 tensor equal to
# BF16 on every Ampere, Ada, Hopper and Blackwell part below; Volta and Turing have no
# TF32 or BF16 tensor cores, so only their FP16 figure exists.
#
# Sources, abbreviated in the rows: "pci.ids" is pciutils' pci.ids 2026.08.22; "OGKM" is the
# product-name table of NVIDIA's open-gpu-kernel-modules README (what nvidia-smi prints);
# "vGPU docs" is NVIDIA's vGPU (C-series) documentation, for the board prefixes.
CATALOG: Tuple[CatalogRow, ...] = (
    # Volta: no TF32/BF16. Power and clocks are [unverified] in the reference.
    CatalogRow(0x1DB1, _names("Tesla V100-SXM2-16GB"), "V100", 16, "SXM", "V100-SXM2-16GB",
               "V100X", None, None, 900, _tflops(15.7, None, None, 125),
               "pci.ids; vGPU docs; NVIDIA V100 datasheet", 6, _V100_LINKS),
    CatalogRow(0x1DB5, _names("Tesla V100-SXM2-32GB"), "V100", 32, "SXM", "V100-SXM2-32GB",
               "V100DX", None, None, 900, _tflops(15.7, None, None, 125),
               "pci.ids; vGPU docs; NVIDIA V100 datasheet", 6, _V100_LINKS),
    CatalogRow(0x1DB4, _names("Tesla V100-PCIE-16GB"), "V100", 16, "PCIe", "V100-PCIe-16GB",
               "V100", None, None, 900, _tflops(14, None, None, 112),
               "pci.ids; vGPU docs; NVIDIA V100 datasheet"),
    CatalogRow(0x1DB6, _names("Tesla V100-PCIE-32GB"), "V100", 32, "PCIe", "V100-PCIe-32GB",
               "V100D", None, None, 900, _tflops(14, None, None, 112),
               "pci.ids; vGPU docs; NVIDIA V100 datasheet"),
    # Turing. The max SM clock is [unverified].
    CatalogRow(0x1EB8, _names("Tesla T4"), "T4", 16, "PCIe", "T4-PCIe-16GB",
               "T4", 70, None, 320, _tflops(8.1, None, None, 65),
               "pci.ids; vGPU docs; NVIDIA T4 datasheet"),
    # Ampere. pci.ids also lists 20B1 for the 40GB PCIe card; the driver table names 20F1.
    CatalogRow(0x20F1, _names("NVIDIA A100-PCIE-40GB"), "A100", 40, "PCIe", "A100-PCIe-40GB",
               "A100", 250, 1410, 1555, _tflops(19.5, 156, 312, 312),
               "pci.ids; OGKM; vGPU docs; NVIDIA A100 datasheet (2021)"),
    CatalogRow(0x20B1, _names("NVIDIA A100-PCIE-40GB"), "A100", 40, "PCIe", "A100-PCIe-40GB",
               "A100", 250, 1410, 1555, _tflops(19.5, 156, 312, 312),
               "pci.ids; vGPU docs; NVIDIA A100 datasheet (2021)"),
    CatalogRow(0x20B5, _names("NVIDIA A100 80GB PCIe"), "A100", 80, "PCIe", "A100-PCIe-80GB",
               "A100D", 300, 1410, 1935, _tflops(19.5, 156, 312, 312),
               "pci.ids; OGKM; vGPU docs; NVIDIA A100 datasheet (2021)"),
    CatalogRow(0x20B0, _names("NVIDIA A100-SXM4-40GB"), "A100", 40, "SXM", "A100-SXM4-40GB",
               "A100X", 400, 1410, 1555, _tflops(19.5, 156, 312, 312),
               "pci.ids; OGKM; vGPU docs; NVIDIA A100 datasheet (2021)", 12, _A100_LINKS),
    # 400 W is the usual board; a 275 W one exists, which is a cap worth flagging, not a
    # different variant.
    CatalogRow(0x20B2, _names("NVIDIA A100-SXM4-80GB"), "A100", 80, "SXM", "A100-SXM4-80GB",
               "A100DX", 400, 1410, 2039, _tflops(19.5, 156, 312, 312),
               "pci.ids; OGKM; vGPU docs; NVIDIA A100 datasheet (2021)", 12, _A100_LINKS),
    # The export A100: same compute as A100 (reference: "as A100"); power and memory
    # bandwidth are not given.
    CatalogRow(0x20F3, _names("NVIDIA A800-SXM4-80GB"), "A800", 80, "SXM", "A800-SXM4-80GB",
               "A800DX", None, 1410, None, _tflops(19.5, 156, 312, 312),
               "pci.ids; OGKM; vGPU docs; NVIDIA A100 datasheet (2021)"),
    CatalogRow(0x20F5, _names("NVIDIA A800 80GB PCIe", "NVIDIA A800 80GB PCIe LC"), "A800",
               80, "PCIe", "A800-PCIe-80GB",
               "A800D", None, 1410, None, _tflops(19.5, 156, 312, 312),
               "pci.ids; OGKM; vGPU docs; NVIDIA A100 datasheet (2021)"),
    # A10 (150 W) and A10G (AWS-only, no datasheet) differ by one letter and one id. The
    # 300 W seen on A10G hosts is a provider's cap, not a published default.
    CatalogRow(0x2236, _names("NVIDIA A10"), "A10", 24, "PCIe", "A10-PCIe-24GB",
               "A10", 150, None, 600, _tflops(31.2, 62.5, 125, 125),
               "pci.ids; OGKM; vGPU docs; NVIDIA A10 datasheet"),
    CatalogRow(0x2237, _names("NVIDIA A10G"), "A10G", 24, "PCIe", "A10G-PCIe-24GB",
               None, None, None, None, _NONE,
               "pci.ids; OGKM (no NVIDIA datasheet published)"),
    # A40 and RTX A6000: the same GA102 chip, the data-centre card passive, the workstation
    # one with a fan and display outputs. Figures: NVIDIA A40 datasheet (300 W, 696 GB/s,
    # 37.4 / 74.8 / 149.7 / 149.7 dense) and RTX A6000 datasheet (300 W, 768 GB/s, 38.7 FP32;
    # its tensor figures are printed with sparsity only, so they are left None). Their
    # maximum SM clocks were not verified, so they are None too.
    CatalogRow(0x2235, _names("NVIDIA A40"), "A40", 48, "PCIe", "A40-PCIe-48GB",
               "A40", 300, None, 696, _tflops(37.4, 74.8, 149.7, 149.7),
               "pci.ids (2235 GA102GL [A40]); OGKM; vGPU docs (A40-48Q); "
               "NVIDIA A40 datasheet"),
    CatalogRow(0x2230, _names("NVIDIA RTX A6000"), "RTX-A6000", 48, "PCIe",
               "RTX-A6000-PCIe-48GB",
               "RTXA6000", 300, None, 768, _tflops(38.7, None, None, None),
               "pci.ids (2230 GA102GL [RTX A6000]); OGKM; vGPU docs (RTXA6000-24Q); "
               "NVIDIA RTX A6000 datasheet"),
    # 25B6 is one id for two products (OGKM: A16 14A9, A2 157E subsystems): the name, or a
    # vGPU profile's board prefix, decides. The reference gives no figures for either.
    CatalogRow(0x25B6, _names("NVIDIA A2"), "A2", 16, "PCIe", "A2-PCIe-16GB",
               "A2", None, None, None, _NONE,
               "pci.ids; OGKM (25B6 10DE 157E); vGPU docs; NVIDIA A2 datasheet"),
    CatalogRow(0x25B6, _names("NVIDIA A16"), "A16", 16, "PCIe", "A16-PCIe-16GB",
               "A16", None, None, None, _NONE,
               "pci.ids; OGKM (25B6 10DE 14A9); vGPU docs; NVIDIA A16 datasheet"),
    # Ada.
    CatalogRow(0x27B8, _names("NVIDIA L4"), "L4", 24, "PCIe", "L4-PCIe-24GB",
               "L4", 72, 2040, 300, _tflops(30.3, 60, 121, 121),
               "pci.ids; OGKM; vGPU docs; NVIDIA L4 datasheet"),
    CatalogRow(0x26B5, _names("NVIDIA L40"), "L40", 48, "PCIe", "L40-PCIe-48GB",
               "L40", 300, 2490, 864, _tflops(90.5, 90.5, 181, 181),
               "pci.ids; OGKM; vGPU docs; NVIDIA L40 datasheet"),
    CatalogRow(0x26B9, _names("NVIDIA L40S"), "L40S", 48, "PCIe", "L40S-PCIe-48GB",
               "L40S", 350, 2520, 864, _tflops(91.6, 183, 362, 362),
               "pci.ids; OGKM; vGPU docs; NVIDIA L40S datasheet"),
    # The workstation AD102 board; its vGPU profiles are named "RTX6000-Ada-<n>Q" (the
    # board prefix has a dash). Datasheet: 300 W, 960 GB/s, 91.1 FP32; tensor figures are
    # printed with sparsity (and FP8) only, and the SM clock is not verified: None.
    CatalogRow(0x26B1, _names("NVIDIA RTX 6000 Ada Generation"), "RTX-6000-Ada", 48, "PCIe",
               "RTX-6000-Ada-PCIe-48GB",
               "RTX6000-Ada", 300, None, 960, _tflops(91.1, None, None, None),
               "pci.ids (26B1 AD102GL [RTX 6000 Ada Generation]); OGKM; vGPU docs "
               "(NVIDIA RTX6000-Ada-1Q to -48Q); NVIDIA RTX 6000 Ada datasheet"),
    # Hopper.
    CatalogRow(0x2331, _names("NVIDIA H100 PCIe"), "H100", 80, "PCIe", "H100-PCIe-80GB",
               "H100", 350, 1755, 2000, _tflops(51, 378, 756, 756),
               "pci.ids; OGKM; vGPU docs; NVIDIA H100 datasheet"),
    # The real capture (fixtures/h100-sxm5-passthrough) confirms 0x2330, the name, 700 W
    # default (200 W minimum) and 1980 MHz.
    CatalogRow(0x2330, _names("NVIDIA H100 80GB HBM3"), "H100", 80, "SXM", "H100-SXM5-80GB",
               "H100XM", 700, 1980, 3350, _tflops(67, 495, 989, 989),
               "pci.ids; OGKM; vGPU docs; NVIDIA H100 datasheet; real capture 2026-11-22",
               18, _HOPPER_LINKS),
    # The 94GB and 64GB SXM5 boards: only ids, memory and board prefixes are known; the
    # 64GB board's nvidia-smi name is [unverified], so no name is listed for it.
    CatalogRow(0x2339, _names("NVIDIA H100"), "H100", 94, "SXM", "H100-SXM5-94GB",
               "H100XL", None, None, None, _NONE,
               "pci.ids; OGKM; vGPU docs"),
    CatalogRow(0x2337, (), "H100", 64, "SXM", "H100-SXM5-64GB",
               "H100XS", None, None, None, _NONE,
               "pci.ids; vGPU docs"),
    # H100 NVL: 350-400 W configurable (310 W caps seen), so no single default; its
    # TFLOP/s figures are [unverified].
    CatalogRow(0x2321, _names("NVIDIA H100 NVL"), "H100", 94, "NVL", "H100-NVL-94GB",
               "H100L", None, None, 3900, _NONE,
               "pci.ids; OGKM; vGPU docs; NVIDIA H100 NVL datasheet"),
    # "NVIDIA H800" is the SXM5 part; the PCIe card says so in its name. All figures are
    # [unverified].
    CatalogRow(0x2324, _names("NVIDIA H800"), "H800", 80, "SXM", "H800-SXM5-80GB",
               "H800XM", None, None, None, _NONE,
               "pci.ids; OGKM; vGPU docs"),
    CatalogRow(0x2322, _names("NVIDIA H800 PCIe"), "H800", 80, "PCIe", "H800-PCIe-80GB",
               "H800", None, None, None, _NONE,
               "pci.ids; OGKM; vGPU docs"),
    # "NVIDIA H200" is the SXM part (real capture: fixtures/h200-sxm-x2-passthrough); the
    # NVL card is 233B. Its 600 W default is given, its clock and TFLOP/s are [unverified].
    CatalogRow(0x2335, _names("NVIDIA H200"), "H200", 141, "SXM", "H200-SXM-141GB",
               "H200X", 700, 1980, 4800, _tflops(67, 495, 989, 989),
               "pci.ids; OGKM; vGPU docs; NVIDIA H200 datasheet; real capture 2026-11-22",
               18, _H200_LINKS),
    CatalogRow(0x233B, _names("NVIDIA H200 NVL"), "H200", 141, "NVL", "H200-NVL-141GB",
               "H200", 600, None, 4800, _NONE,
               "pci.ids; OGKM; vGPU docs; NVIDIA H200 datasheet"),
    # Grace Hopper: a module on NVLink-C2C, no PCIe slot, so closer to SXM than to a card;
    # the label keeps "GH200" alone rather than claim a socket. 900 W is the module's
    # (CPU, GPU and memory). OGKM names 2342 "120GB"/"480GB" (the CPU memory) and 2348
    # "144G HBM3e"; the reference's 96 or 144 GB of HBM follows.
    CatalogRow(0x2342, _names("NVIDIA GH200 480GB", "NVIDIA GH200 120GB"), "GH200", 96,
               "SXM", "GH200-96GB",
               None, 900, None, None, _NONE,
               "pci.ids; OGKM; NVIDIA GH200 datasheet"),
    CatalogRow(0x2348, _names("NVIDIA GH200 144G HBM3e"), "GH200", 144, "SXM", "GH200-144GB",
               None, 900, None, None, _NONE,
               "pci.ids; OGKM; NVIDIA GH200 datasheet"),
    # Blackwell. The datasheet rounds TF32 to 0.1 PFLOPS, hence 1100.
    CatalogRow(0x2901, _names("NVIDIA B200"), "B200", 180, "SXM", "B200-SXM-180GB",
               None, 1000, None, 7700, _tflops(75, 1100, 2250, 2250),
               "pci.ids; OGKM; NVIDIA HGX B200 datasheet", 18, _B200_LINKS),
)


def _normalise(name: str) -> str:
    return " ".join(name.split()).casefold()


def _index() -> Tuple[
    Dict[int, List[CatalogRow]], Dict[str, List[CatalogRow]], Dict[str, List[CatalogRow]]
]:
    by_id: Dict[int, List[CatalogRow]] = {}
    by_name: Dict[str, List[CatalogRow]] = {}
    by_board: Dict[str, List[CatalogRow]] = {}
    for row in CATALOG:
        by_id.setdefault(row.device_id, []).append(row)
        for name in row.names:
            by_name.setdefault(_normalise(name), []).append(row)
        if row.vgpu_board is not None:
            by_board.setdefault(row.vgpu_board.upper(), []).append(row)
    return by_id, by_name, by_board


_BY_ID, _BY_NAME, _BY_BOARD = _index()
_BY_LABEL = {row.label: row for row in CATALOG}


def _one_product(rows: List[CatalogRow]) -> Optional[CatalogRow]:
    """The product several rows describe, when they describe only one (the A100 40GB
    PCIe under 20F1 and 20B1); None when they are different products."""
    if rows and len({r.label for r in rows}) == 1:
        return rows[0]
    return None


def format_pci_device_id(raw: int) -> str:
    """NVML's pciDeviceId, `(device << 16) | vendor`, as nvidia-smi prints it:
    590352606 -> "0x233010DE"."""
    # NVML's field is an unsigned 32-bit int; a reader that took it as signed would hand
    # over a negative number with the same bits.
    if not -(1 << 31) <= raw < (1 << 32):
        raise ValueError(f"PCI device id {raw} is not a 32-bit value")
    return f"0x{raw & 0xFFFFFFFF:08X}"


def parse_pci_device_id(text: str) -> Optional[int]:
    """"0x233010DE" or "233010DE" -> 590352606; anything else -> None."""
    if not isinstance(text, str):
        return None
    digits = text.strip()
    if digits[:2].lower() == "0x":
        digits = digits[2:]
    if not re.fullmatch(r"[0-9A-Fa-f]{1,8}", digits):
        return None
    return int(digits, 16)


# <board prefix>-[<MIG slices>-]<framebuffer GB><series>, after "GRID " (older drivers) or
# "NVIDIA " (newer). A board prefix always has a digit (A100D, T4, L40S, H100XM, RTXA6000),
# which keeps physical names such as "A100-SXM4-80GB" out; it may go on with a word after a
# dash ("RTX6000-Ada", NVIDIA's prefix for the RTX 6000 Ada Generation).
_PROFILE = re.compile(
    r"(?:(?:GRID|NVIDIA)\s+)?"
    r"(?P<board>[A-Z]+[0-9]+[A-Z0-9]*(?:-[A-Z]+)*)-(?:(?P<slices>[0-9]{1,2})-)?"
    r"(?P<fb>[0-9]{1,4})(?P<series>[CQBA])",
    re.IGNORECASE,
)


def decode_vgpu_profile(name: str) -> Optional[Dict[str, Any]]:
    """A vGPU guest's name decoded, or None when the name is not a vGPU profile.

    "GRID A100D-80C" -> {"profile": "A100D-80C", "board": "A100D", "mig_slices": None,
    "framebuffer_gb": 80, "series": "C", "series_meaning": "compute",
    "physical_label": "A100-PCIe-80GB"}. "GRID A100DX-4-20C" is MIG-backed: 4 slices,
    20 GB. `physical_label` is what the board prefix names; a guest's PCI id may disagree,
    and `classify_variant` trusts the id.
    """
    if not isinstance(name, str):
        return None
    match = _PROFILE.fullmatch(name.strip())
    if match is None:
        return None
    printed = match.group("board")
    series = match.group("series").upper()
    slices = match.group("slices")
    fb = int(match.group("fb"))
    if fb == 0 or (slices is not None and int(slices) == 0):
        return None
    physical = _one_product(_BY_BOARD.get(printed.upper(), []))
    # The catalog's spelling where it knows the board ("RTX6000-Ada", not "RTX6000-ADA").
    board = physical.vgpu_board if physical is not None and physical.vgpu_board else (
        printed.upper())
    profile = f"{board}-{slices}-{fb}{series}" if slices is not None else f"{board}-{fb}{series}"
    return {
        "profile": profile,
        "board": board,
        "mig_slices": None if slices is None else int(slices),
        "framebuffer_gb": fb,
        "series": series,
        "series_meaning": VGPU_SERIES[series],
        "physical_label": None if physical is None else physical.label,
    }


def _datasheet(row: CatalogRow) -> Dict[str, Any]:
    return {
        "default_power_w": row.default_power_w,
        "max_sm_clock_mhz": row.max_sm_clock_mhz,
        "memory_bandwidth_gbs": row.memory_bandwidth_gbs,
        "peak_tflops": dict(row.peak_tflops),
        "source": row.source,
    }


def _result(
    family: Optional[str], memory_gb: Optional[int], form_factor: str, label: Optional[str],
    matched_by: str, pci_id: Optional[str], profile: Optional[Dict[str, Any]],
    row: Optional[CatalogRow], notes: List[str],
) -> Dict[str, Any]:
    return {
        "family": family,
        "memory_gb": memory_gb,
        "form_factor": form_factor,
        "label": label,
        "matched_by": matched_by,
        "pci_device_id": pci_id,
        "vgpu_profile": profile,
        "datasheet": None if row is None else _datasheet(row),
        "note": "; ".join(notes) if notes else None,
    }


def _unknown(
    pci_id: Optional[str], profile: Optional[Dict[str, Any]], notes: List[str],
) -> Dict[str, Any]:
    return _result(None, None, "unknown", None, "unknown", pci_id, profile, None, notes)


def _by_name(name: Optional[str]) -> Optional[CatalogRow]:
    if not name:
        return None
    return _one_product(_BY_NAME.get(_normalise(name), []))


def _pick_shared(
    rows: List[CatalogRow], name: Optional[str], profile: Optional[Dict[str, Any]],
) -> Tuple[Optional[CatalogRow], str]:
    """Of products sharing one id, the one the name (or the vGPU board prefix) names, and
    which of the two decided."""
    wanted = _by_name(name)
    if wanted is not None and wanted in rows:
        return wanted, "the name"
    if profile is not None:
        boards = [r for r in rows if (r.vgpu_board or "").upper() == profile["board"].upper()]
        if len(boards) == 1:
            return boards[0], "the vGPU board prefix"
    return None, ""


def _physical(
    pci_device_id: Optional[int], name: Optional[str], profile: Optional[Dict[str, Any]],
    notes: List[str],
) -> Tuple[Optional[CatalogRow], str, Optional[str]]:
    """The physical board: (row or None, matched_by, formatted id). Notes say why not."""
    if pci_device_id is None:
        if profile is not None:
            row = _one_product(_BY_BOARD.get(profile["board"].upper(), []))
            if row is None:
                notes.append(f"vGPU board {profile['board']} is not in the catalog")
            return row, "vgpu_profile", None
        row = _by_name(name)
        if row is None:
            notes.append(f"no PCI id, and the name {name!r} is not in the catalog"
                         if name else "no PCI id and no name")
        return row, "name", None
    try:
        pci_id = format_pci_device_id(pci_device_id)
    except ValueError as exc:
        notes.append(str(exc))
        return None, "unknown", None
    raw = pci_device_id & 0xFFFFFFFF
    vendor, device = raw & 0xFFFF, raw >> 16
    if vendor != NVIDIA_VENDOR_ID:
        notes.append(f"vendor 0x{vendor:04X} is not NVIDIA (0x10DE)")
        return None, "unknown", pci_id
    rows = _BY_ID.get(device, [])
    if not rows:
        # A familiar name on an unknown id is exactly the case this module exists for: a
        # new or re-badged board. Guessing from the name would hide it.
        notes.append(f"PCI id {pci_id} is not in the catalog; the name is not used to guess")
        return None, "unknown", pci_id
    if len(rows) == 1:
        row = rows[0]
        named = _by_name(name)
        if named is not None and named.label != row.label:
            notes.append(f"the name {name!r} is {named.label}'s, but PCI id {pci_id} is "
                         f"{row.label}'s: the id decides")
        return row, "pci_id", pci_id
    chosen, decider = _pick_shared(rows, name, profile)
    labels = " and ".join(r.label for r in rows)
    if chosen is None:
        notes.append(f"PCI id {pci_id} is shared by {labels} and the name {name!r} "
                     "decides neither")
        return None, "unknown", pci_id
    notes.append(f"PCI id {pci_id} is shared by {labels}; {decider} decided")
    return chosen, "name", pci_id


def classify_variant(
    pci_device_id: Optional[int], name: Optional[str], virtualization_mode: Optional[str],
) -> Dict[str, Any]:
    """What a GPU is, from NVML's pciDeviceId, its name and its virtualization mode.

    Keyed by PCI device id first and by name second; an id the catalog does not know is
    reported unknown, never guessed from the name. A vGPU guest reports the physical
    board's id and the profile as its name: the result is the slice the tenant got
    (form factor "vGPU", memory the profile's framebuffer), labelled with the physical
    board, whose datasheet it carries. A guest is a slice whatever the board: where the
    catalog does not know the id, the form factor is still "vGPU" and the label the
    profile's, with no board and no datasheet.
    """
    profile = decode_vgpu_profile(name) if name else None
    notes: List[str] = []
    row, matched_by, pci_id = _physical(pci_device_id, name, profile, notes)
    is_vgpu = virtualization_mode == "vgpu" or profile is not None
    if profile is not None and virtualization_mode not in (None, "vgpu"):
        notes.append(f"the name is a vGPU profile but NVML says {virtualization_mode}")
    if row is None:
        if profile is not None:
            # A guest is a slice whatever its board: the profile says what the tenant got.
            # The board is named only from an id the catalog knows (or, with no id at all,
            # from the profile's board prefix, which _physical tried).
            return _result(None, profile["framebuffer_gb"], "vGPU",
                           f"{profile['profile']} (vGPU)", "vgpu_profile", pci_id, profile,
                           None, notes)
        if virtualization_mode == "vgpu":
            notes.append("virtualization mode is vgpu but the name is not a vGPU profile, "
                         "and the board is not in the catalog")
            return _result(None, None, "vGPU", "vGPU (board not in the catalog)", "unknown",
                           pci_id, None, None, notes)
        return _unknown(pci_id, None, notes)
    if not is_vgpu:
        return _result(row.family, row.memory_gb, row.form_factor, row.label, matched_by,
                       pci_id, None, row, notes)
    if profile is None:
        notes.append("virtualization mode is vgpu but the name is not a vGPU profile, so "
                     "the slice's memory is not known from it")
        return _result(row.family, None, "vGPU", f"vGPU of {row.label}", matched_by, pci_id,
                       None, row, notes)
    if profile["physical_label"] != row.label:
        says = profile["physical_label"] or "a board not in the catalog"
        notes.append(f"the profile's board {profile['board']} names {says}, but PCI id "
                     f"{pci_id} is {row.label}'s: the id decides the physical board")
    label = f"{profile['profile']} (vGPU of {row.label})"
    return _result(row.family, profile["framebuffer_gb"], "vGPU", label, "vgpu_profile",
                   pci_id, profile, row, notes)


def nvlink_links(variant: Dict[str, Any]) -> Optional[int]:
    """The NVLink links the variant `classify_variant` named carries per GPU; None when the
    catalog does not say, and for a vGPU slice, which gets no board's links."""
    if variant.get("form_factor") in ("vGPU", "unknown"):
        return None
    row = _BY_LABEL.get(str(variant.get("label")))
    return None if row is None else row.nvlink_links


def catalog_rows() -> List[Dict[str, Any]]:
    """The catalog as plain data, one dict per row, for reports."""
    return [
        {
            "device_id": row.device_id,
            "pci_device_id": format_pci_device_id((row.device_id << 16) | NVIDIA_VENDOR_ID),
            "names": list(row.names),
            "family": row.family,
            "memory_gb": row.memory_gb,
            "form_factor": row.form_factor,
            "label": row.label,
            "vgpu_board": row.vgpu_board,
            **_datasheet(row),
            "nvlink_links": row.nvlink_links,
            "nvlink_source": row.nvlink_source,
        }
        for row in CATALOG
    ]
