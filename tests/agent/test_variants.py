"""The variant catalog and classifier, driven by tables of cases.

Adding a variant case is adding a row to CASES; each row's expectation comes from the seed
(001, "GPU Provider Variance"), the reference table (/work/shared/reference/gpu-variants.md)
or a real capture, never from running the code.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any, NamedTuple

import pytest

from agent.gpu import variants
from fleet.model.document import Variant
from tests.conftest import GPU_CASES, ROOT


class Case(NamedTuple):
    pci_device_id: int | None
    name: str | None
    virtualization: str | None
    family: str | None
    memory_gb: int | None
    form_factor: str
    label: str | None
    matched_by: str


CASES: dict[str, Case] = {
    # The seed's three providers, all sold as "A100 80GB".
    "seed-provider-a-pcie": Case(
        0x20B510DE, "NVIDIA A100 80GB PCIe", "none",
        "A100", 80, "PCIe", "A100-PCIe-80GB", "pci_id"),
    "seed-provider-b-sxm4": Case(
        0x20B210DE, "NVIDIA A100-SXM4-80GB", "passthrough",
        "A100", 80, "SXM", "A100-SXM4-80GB", "pci_id"),
    "seed-provider-c-grid": Case(
        0x20B510DE, "GRID A100D-80C", "vgpu",
        "A100", 80, "vGPU", "A100D-80C (vGPU of A100-PCIe-80GB)", "vgpu_profile"),
    # An id the catalog lacks stays unknown, however familiar the name.
    "unknown-id-familiar-name": Case(
        0x999910DE, "NVIDIA H100 80GB HBM3", "passthrough",
        None, None, "unknown", None, "unknown"),
    # A guest is a slice whatever its board (issue #20): an id the catalog lacks names no
    # board, but the form factor is vGPU and the memory the profile's.
    "unknown-id-profile-name": Case(
        0x999910DE, "GRID A100D-80C", "vgpu",
        None, 80, "vGPU", "A100D-80C (vGPU)", "vgpu_profile"),
    "unknown-id-vgpu-mode-not-a-profile": Case(
        0x999910DE, "NVIDIA Z9000", "vgpu",
        None, None, "vGPU", "vGPU (board not in the catalog)", "unknown"),
    "not-nvidia-vendor": Case(
        0x233010DF, "NVIDIA H100 80GB HBM3", None,
        None, None, "unknown", None, "unknown"),
    "nothing-known": Case(
        None, None, None,
        None, None, "unknown", None, "unknown"),
    "no-id-unknown-name": Case(
        None, "NVIDIA Z9000", None,
        None, None, "unknown", None, "unknown"),
    # No id: the name decides.
    "no-id-by-name": Case(
        None, "NVIDIA A100 80GB PCIe", None,
        "A100", 80, "PCIe", "A100-PCIe-80GB", "name"),
    "no-id-by-name-h100-sxm": Case(
        None, "NVIDIA H100 80GB HBM3", None,
        "H100", 80, "SXM", "H100-SXM5-80GB", "name"),
    "no-id-by-name-extra-spaces-and-case": Case(
        None, "  nvidia  l40s ", None,
        "L40S", 48, "PCIe", "L40S-PCIe-48GB", "name"),
    # Older drivers print names without "NVIDIA ".
    "old-driver-name-no-id": Case(
        None, "A100-SXM4-80GB", None,
        "A100", 80, "SXM", "A100-SXM4-80GB", "name"),
    "old-driver-name-h100": Case(
        None, "H100 80GB HBM3", None,
        "H100", 80, "SXM", "H100-SXM5-80GB", "name"),
    "old-driver-name-with-id": Case(
        0x20B210DE, "A100-SXM4-80GB", None,
        "A100", 80, "SXM", "A100-SXM4-80GB", "pci_id"),
    "old-driver-tesla-v100": Case(
        0x1DB510DE, "Tesla V100-SXM2-32GB", "none",
        "V100", 32, "SXM", "V100-SXM2-32GB", "pci_id"),
    # One id, two products (25B6): the name decides.
    "shared-id-a2": Case(
        0x25B610DE, "NVIDIA A2", None,
        "A2", 16, "PCIe", "A2-PCIe-16GB", "name"),
    "shared-id-a16": Case(
        0x25B610DE, "NVIDIA A16", None,
        "A16", 16, "PCIe", "A16-PCIe-16GB", "name"),
    "shared-id-a16-old-driver": Case(
        0x25B610DE, "A16", None,
        "A16", 16, "PCIe", "A16-PCIe-16GB", "name"),
    "shared-id-undecided": Case(
        0x25B610DE, "NVIDIA A40", None,
        None, None, "unknown", None, "unknown"),
    "shared-id-no-name": Case(
        0x25B610DE, None, None,
        None, None, "unknown", None, "unknown"),
    # The name alone hides the form factor; the id does not.
    "h200-sxm-by-id": Case(
        0x233510DE, "NVIDIA H200", "passthrough",
        "H200", 141, "SXM", "H200-SXM-141GB", "pci_id"),
    "h200-nvl-by-id": Case(
        0x233B10DE, "NVIDIA H200 NVL", None,
        "H200", 141, "NVL", "H200-NVL-141GB", "pci_id"),
    "h200-nvl-id-beats-sxm-name": Case(
        0x233B10DE, "NVIDIA H200", None,
        "H200", 141, "NVL", "H200-NVL-141GB", "pci_id"),
    "h800-sxm5-by-id": Case(
        0x232410DE, "NVIDIA H800", None,
        "H800", 80, "SXM", "H800-SXM5-80GB", "pci_id"),
    "h800-pcie-by-id": Case(
        0x232210DE, "NVIDIA H800 PCIe", None,
        "H800", 80, "PCIe", "H800-PCIe-80GB", "pci_id"),
    "a10-by-id": Case(
        0x223610DE, "NVIDIA A10", None,
        "A10", 24, "PCIe", "A10-PCIe-24GB", "pci_id"),
    "a10g-by-id": Case(
        0x223710DE, "NVIDIA A10G", None,
        "A10G", 24, "PCIe", "A10G-PCIe-24GB", "pci_id"),
    "a100-pcie-40gb-pciids-id": Case(
        0x20B110DE, "NVIDIA A100-PCIE-40GB", None,
        "A100", 40, "PCIe", "A100-PCIe-40GB", "pci_id"),
    "a100-pcie-40gb-driver-id": Case(
        0x20F110DE, "NVIDIA A100-PCIE-40GB", None,
        "A100", 40, "PCIe", "A100-PCIe-40GB", "pci_id"),
    "a100-pcie-40gb-name-on-two-ids": Case(
        None, "NVIDIA A100-PCIE-40GB", None,
        "A100", 40, "PCIe", "A100-PCIe-40GB", "name"),
    "h100-nvl-by-id": Case(
        0x232110DE, "NVIDIA H100 NVL", None,
        "H100", 94, "NVL", "H100-NVL-94GB", "pci_id"),
    "h100-sxm5-64gb-id-no-known-name": Case(
        0x233710DE, "NVIDIA H100", None,
        "H100", 64, "SXM", "H100-SXM5-64GB", "pci_id"),
    "gh200-144": Case(
        0x234810DE, "NVIDIA GH200 144G HBM3e", None,
        "GH200", 144, "SXM", "GH200-144GB", "pci_id"),
    # vGPU guests: the physical id, the profile as the name.
    "vgpu-new-driver-h100xm": Case(
        0x233010DE, "NVIDIA H100XM-80C", "vgpu",
        "H100", 80, "vGPU", "H100XM-80C (vGPU of H100-SXM5-80GB)", "vgpu_profile"),
    "vgpu-mig-backed": Case(
        0x20B210DE, "GRID A100DX-4-20C", "vgpu",
        "A100", 20, "vGPU", "A100DX-4-20C (vGPU of A100-SXM4-80GB)", "vgpu_profile"),
    "vgpu-workstation-series": Case(
        0x26B510DE, "NVIDIA L40-24Q", "vgpu",
        "L40", 24, "vGPU", "L40-24Q (vGPU of L40-PCIe-48GB)", "vgpu_profile"),
    "vgpu-profile-no-id": Case(
        None, "GRID A100D-40C", None,
        "A100", 40, "vGPU", "A100D-40C (vGPU of A100-PCIe-80GB)", "vgpu_profile"),
    "vgpu-profile-unknown-board-no-id": Case(
        None, "NVIDIA Z9000-16C", "vgpu",
        None, 16, "vGPU", "Z9000-16C (vGPU)", "vgpu_profile"),
    # The board prefix says SXM4, the id says PCIe: the id names the physical board.
    "vgpu-board-disagrees-with-id": Case(
        0x20B510DE, "GRID A100DX-80C", "vgpu",
        "A100", 80, "vGPU", "A100DX-80C (vGPU of A100-PCIe-80GB)", "vgpu_profile"),
    "vgpu-shared-id-board-decides": Case(
        0x25B610DE, "NVIDIA A16-4C", "vgpu",
        "A16", 4, "vGPU", "A16-4C (vGPU of A16-PCIe-16GB)", "vgpu_profile"),
    "vgpu-mode-but-physical-name": Case(
        0x20B510DE, "NVIDIA A100 80GB PCIe", "vgpu",
        "A100", None, "vGPU", "vGPU of A100-PCIe-80GB", "pci_id"),
    # Issue #20: a workstation board's profile (Q series, RTX Virtual Workstation).
    "vgpu-rtxa6000-24q": Case(
        0x223010DE, "NVIDIA RTXA6000-24Q", "vgpu",
        "RTX-A6000", 24, "vGPU", "RTXA6000-24Q (vGPU of RTX-A6000-PCIe-48GB)", "vgpu_profile"),
    "vgpu-rtx6000-ada-dashed-board": Case(
        0x26B110DE, "NVIDIA RTX6000-Ada-24Q", "vgpu",
        "RTX-6000-Ada", 24, "vGPU", "RTX6000-Ada-24Q (vGPU of RTX-6000-Ada-PCIe-48GB)",
        "vgpu_profile"),
    "vgpu-a40-48q": Case(
        0x223510DE, "NVIDIA A40-48Q", "vgpu",
        "A40", 48, "vGPU", "A40-48Q (vGPU of A40-PCIe-48GB)", "vgpu_profile"),
    "vgpu-old-driver-t4": Case(
        0x1EB810DE, "GRID T4-16Q", "vgpu",
        "T4", 16, "vGPU", "T4-16Q (vGPU of T4-PCIe-16GB)", "vgpu_profile"),
    "vgpu-old-driver-v100dx": Case(
        0x1DB510DE, "GRID V100DX-32Q", "vgpu",
        "V100", 32, "vGPU", "V100DX-32Q (vGPU of V100-SXM2-32GB)", "vgpu_profile"),
    # The board the profile names is known but the id is not: still no board named.
    "vgpu-known-board-unknown-id": Case(
        0x999910DE, "NVIDIA RTXA6000-24Q", "vgpu",
        None, 24, "vGPU", "RTXA6000-24Q (vGPU)", "vgpu_profile"),
    # A vGPU manager host sees the physical card.
    "vgpu-host-is-the-physical-board": Case(
        0x223510DE, "NVIDIA A40", "host",
        "A40", 48, "PCIe", "A40-PCIe-48GB", "pci_id"),
    "workstation-board-bare-metal": Case(
        0x223010DE, "NVIDIA RTX A6000", "none",
        "RTX-A6000", 48, "PCIe", "RTX-A6000-PCIe-48GB", "pci_id"),
    "rtx-6000-ada-old-driver-name": Case(
        None, "RTX 6000 Ada Generation", None,
        "RTX-6000-Ada", 48, "PCIe", "RTX-6000-Ada-PCIe-48GB", "name"),
    # Pass-through is an ordinary VM with the whole card, not vGPU.
    "passthrough-is-not-vgpu": Case(
        0x233010DE, "NVIDIA H100 80GB HBM3", "passthrough",
        "H100", 80, "SXM", "H100-SXM5-80GB", "pci_id"),
}


def _fields(result: dict[str, Any]) -> Case:
    return Case(
        variants.parse_pci_device_id(result["pci_device_id"])
        if result["pci_device_id"] else None,
        None, None, result["family"], result["memory_gb"], result["form_factor"],
        result["label"], result["matched_by"])


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_classify_variant(case: str) -> None:
    c = CASES[case]
    result = variants.classify_variant(c.pci_device_id, c.name, c.virtualization)
    assert _fields(result) == c._replace(name=None, virtualization=None)
    Variant.model_validate(result)  # the controller's schema accepts it
    json.dumps(result)


# Each physical board CASES names: the datasheet its source must cite, and its dense
# fp32 / tf32 / bf16 / fp16 TFLOP/s, written out from the reference table
# (/work/shared/reference/gpu-variants.md, "dense FP32 / TF32 / BF16"); fp16 is bf16 where
# the board has bf16, and V100 and T4 give FP16 only. Figures the reference marks
# [unverified] or does not give are None; so are RTX A6000's and RTX 6000 Ada's tensor
# figures, whose datasheets print only sparse or FP8 ones (see SPARSE below).
BOARDS: dict[str, tuple[str, tuple[float | None, float | None, float | None, float | None]]] = {
    "A100-PCIe-80GB": ("NVIDIA A100 datasheet", (19.5, 156.0, 312.0, 312.0)),
    "A100-PCIe-40GB": ("NVIDIA A100 datasheet", (19.5, 156.0, 312.0, 312.0)),
    "A100-SXM4-80GB": ("NVIDIA A100 datasheet", (19.5, 156.0, 312.0, 312.0)),
    "A10-PCIe-24GB": ("NVIDIA A10 datasheet", (31.2, 62.5, 125.0, 125.0)),
    "A10G-PCIe-24GB": ("no NVIDIA datasheet published", (None, None, None, None)),
    "A2-PCIe-16GB": ("NVIDIA A2 datasheet", (None, None, None, None)),
    "A16-PCIe-16GB": ("NVIDIA A16 datasheet", (None, None, None, None)),
    # NVIDIA A40 datasheet: 37.4 FP32, 74.8 | 149.6* TF32, 149.7 | 299.4* BF16.
    "A40-PCIe-48GB": ("NVIDIA A40 datasheet", (37.4, 74.8, 149.7, 149.7)),
    "RTX-A6000-PCIe-48GB": ("NVIDIA RTX A6000 datasheet", (38.7, None, None, None)),
    "RTX-6000-Ada-PCIe-48GB": ("NVIDIA RTX 6000 Ada datasheet", (91.1, None, None, None)),
    "L40-PCIe-48GB": ("NVIDIA L40 datasheet", (90.5, 90.5, 181.0, 181.0)),
    "L40S-PCIe-48GB": ("NVIDIA L40S datasheet", (91.6, 183.0, 362.0, 362.0)),
    "T4-PCIe-16GB": ("NVIDIA T4 datasheet", (8.1, None, None, 65.0)),
    "V100-SXM2-32GB": ("NVIDIA V100 datasheet", (15.7, None, None, 125.0)),
    "H100-SXM5-80GB": ("NVIDIA H100 datasheet", (67.0, 495.0, 989.0, 989.0)),
    "H100-SXM5-64GB": ("vGPU docs", (None, None, None, None)),
    "H100-NVL-94GB": ("NVIDIA H100 NVL datasheet", (None, None, None, None)),
    "H800-SXM5-80GB": ("vGPU docs", (None, None, None, None)),
    "H800-PCIe-80GB": ("vGPU docs", (None, None, None, None)),
    "H200-SXM-141GB": ("NVIDIA H200 datasheet", (67.0, 495.0, 989.0, 989.0)),
    "H200-NVL-141GB": ("NVIDIA H200 datasheet", (None, None, None, None)),
    "GH200-144GB": ("NVIDIA GH200 datasheet", (None, None, None, None)),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_known_variants_carry_their_boards_datasheet(case: str) -> None:
    c = CASES[case]
    result = variants.classify_variant(c.pci_device_id, c.name, c.virtualization)
    if c.form_factor == "unknown" or c.family is None:
        assert result["datasheet"] is None
        return
    physical = result["label"].split("vGPU of ")[-1].rstrip(")")
    assert physical in BOARDS, physical
    cites, (fp32, tf32, bf16, fp16) = BOARDS[physical]
    source = result["datasheet"]["source"]
    assert source.startswith("pci.ids") and cites in source, (physical, source)
    assert result["datasheet"]["peak_tflops"] == {
        "fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16}


def test_unknown_id_reports_the_raw_id_and_why() -> None:
    result = variants.classify_variant(0x999910DE, "NVIDIA H100 80GB HBM3", "passthrough")
    assert result["pci_device_id"] == "0x999910DE"
    assert "not in the catalog" in result["note"]


def test_vgpu_profile_and_physical_id_disagreeing_is_noted() -> None:
    result = variants.classify_variant(0x20B510DE, "GRID A100DX-80C", "vgpu")
    assert result["vgpu_profile"]["physical_label"] == "A100-SXM4-80GB"
    assert "A100DX" in result["note"] and "A100-PCIe-80GB" in result["note"]
    agreeing = variants.classify_variant(0x20B510DE, "GRID A100D-80C", "vgpu")
    assert agreeing["note"] is None


def test_name_contradicting_the_id_is_noted_and_the_id_wins() -> None:
    result = variants.classify_variant(0x233010DE, "NVIDIA H100 PCIe", None)
    assert result["label"] == "H100-SXM5-80GB"
    assert "H100-PCIe-80GB" in result["note"]


def test_seed_provider_c_guest_gets_the_physical_boards_datasheet() -> None:
    result = variants.classify_variant(0x20B510DE, "GRID A100D-80C", "vgpu")
    assert result["vgpu_profile"] == {
        "profile": "A100D-80C", "board": "A100D", "mig_slices": None, "framebuffer_gb": 80,
        "series": "C", "series_meaning": "compute", "physical_label": "A100-PCIe-80GB",
    }
    assert result["datasheet"]["default_power_w"] == 300
    assert result["datasheet"]["memory_bandwidth_gbs"] == 1935


RECORDINGS = {
    # case folder: expected per GPU (family, memory_gb, form_factor, label)
    "h100-sxm5-passthrough": ("H100", 80, "SXM", "H100-SXM5-80GB"),
    "h200-sxm-x2-passthrough": ("H200", 141, "SXM", "H200-SXM-141GB"),
}
NVML_VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host", 4: "host"}


@pytest.mark.parametrize("case", list(RECORDINGS))
def test_real_recordings(case: str) -> None:
    recording = json.loads((GPU_CASES / case / "nvml-recording.json").read_text())
    assert recording["devices"]
    for device in recording["devices"]:
        pci = device["nvmlDeviceGetPciInfo_v3"]
        result = variants.classify_variant(
            pci["pciDeviceId"], device["nvmlDeviceGetName"],
            NVML_VIRTUALIZATION[device["nvmlDeviceGetVirtualizationMode"]])
        got = (result["family"], result["memory_gb"], result["form_factor"], result["label"])
        assert got == RECORDINGS[case]
        assert result["matched_by"] == "pci_id"


PROFILES: dict[str, dict[str, Any] | None] = {
    "GRID A100D-80C": {
        "profile": "A100D-80C", "board": "A100D", "mig_slices": None, "framebuffer_gb": 80,
        "series": "C", "series_meaning": "compute", "physical_label": "A100-PCIe-80GB"},
    "NVIDIA H100XM-80C": {
        "profile": "H100XM-80C", "board": "H100XM", "mig_slices": None, "framebuffer_gb": 80,
        "series": "C", "series_meaning": "compute", "physical_label": "H100-SXM5-80GB"},
    "GRID A100DX-4-20C": {
        "profile": "A100DX-4-20C", "board": "A100DX", "mig_slices": 4, "framebuffer_gb": 20,
        "series": "C", "series_meaning": "compute", "physical_label": "A100-SXM4-80GB"},
    "A100-1-5C": {
        "profile": "A100-1-5C", "board": "A100", "mig_slices": 1, "framebuffer_gb": 5,
        "series": "C", "series_meaning": "compute", "physical_label": "A100-PCIe-40GB"},
    "GRID T4-16Q": {
        "profile": "T4-16Q", "board": "T4", "mig_slices": None, "framebuffer_gb": 16,
        "series": "Q", "series_meaning": "workstation", "physical_label": "T4-PCIe-16GB"},
    "NVIDIA L40S-2B": {
        "profile": "L40S-2B", "board": "L40S", "mig_slices": None, "framebuffer_gb": 2,
        "series": "B", "series_meaning": "pc", "physical_label": "L40S-PCIe-48GB"},
    "NVIDIA H200-141A": {
        "profile": "H200-141A", "board": "H200", "mig_slices": None, "framebuffer_gb": 141,
        "series": "A", "series_meaning": "apps", "physical_label": "H200-NVL-141GB"},
    "NVIDIA RTXA6000-24Q": {
        "profile": "RTXA6000-24Q", "board": "RTXA6000", "mig_slices": None,
        "framebuffer_gb": 24, "series": "Q", "series_meaning": "workstation",
        "physical_label": "RTX-A6000-PCIe-48GB"},
    "NVIDIA RTX6000-Ada-24Q": {
        "profile": "RTX6000-Ada-24Q", "board": "RTX6000-Ada", "mig_slices": None,
        "framebuffer_gb": 24, "series": "Q", "series_meaning": "workstation",
        "physical_label": "RTX-6000-Ada-PCIe-48GB"},
    "NVIDIA L40S-24Q": {
        "profile": "L40S-24Q", "board": "L40S", "mig_slices": None, "framebuffer_gb": 24,
        "series": "Q", "series_meaning": "workstation", "physical_label": "L40S-PCIe-48GB"},
    "NVIDIA A16-4Q": {
        "profile": "A16-4Q", "board": "A16", "mig_slices": None, "framebuffer_gb": 4,
        "series": "Q", "series_meaning": "workstation", "physical_label": "A16-PCIe-16GB"},
    "NVIDIA A10-24Q": {
        "profile": "A10-24Q", "board": "A10", "mig_slices": None, "framebuffer_gb": 24,
        "series": "Q", "series_meaning": "workstation", "physical_label": "A10-PCIe-24GB"},
    "NVIDIA A40-48Q": {
        "profile": "A40-48Q", "board": "A40", "mig_slices": None, "framebuffer_gb": 48,
        "series": "Q", "series_meaning": "workstation", "physical_label": "A40-PCIe-48GB"},
    "NVIDIA L40-48Q": {
        "profile": "L40-48Q", "board": "L40", "mig_slices": None, "framebuffer_gb": 48,
        "series": "Q", "series_meaning": "workstation", "physical_label": "L40-PCIe-48GB"},
    "GRID V100DX-32Q": {
        "profile": "V100DX-32Q", "board": "V100DX", "mig_slices": None, "framebuffer_gb": 32,
        "series": "Q", "series_meaning": "workstation", "physical_label": "V100-SXM2-32GB"},
    # An unknown board keeps the letters it was printed with, upper-cased.
    "NVIDIA rtx9000-Pro-8Q": {
        "profile": "RTX9000-PRO-8Q", "board": "RTX9000-PRO", "mig_slices": None,
        "framebuffer_gb": 8, "series": "Q", "series_meaning": "workstation",
        "physical_label": None},
    "NVIDIA RTX9000-48C": {
        "profile": "RTX9000-48C", "board": "RTX9000", "mig_slices": None,
        "framebuffer_gb": 48, "series": "C", "series_meaning": "compute",
        "physical_label": None},
    # Physical names and near misses are not profiles.
    "NVIDIA A100-SXM4-80GB": None,
    "A100-SXM4-80GB": None,
    "NVIDIA A100-PCIE-40GB": None,
    "NVIDIA H100 80GB HBM3": None,
    "NVIDIA H200": None,
    "NVIDIA H100 NVL": None,
    "Tesla V100-SXM2-32GB": None,
    "NVIDIA GH200 144G HBM3e": None,
    "GRID A100D-80": None,
    "GRID A100D-80X": None,
    "GRID A100D-0C": None,
    "GRID -80C": None,
    "GRID A100D-80C extra": None,
    "NVIDIA RTX 6000 Ada Generation": None,
    "NVIDIA RTX A6000": None,
    "NVIDIA RTX6000-Ada-24": None,
    "NVIDIA RTX6000-Ada-": None,
    "": None,
}


@pytest.mark.parametrize("name", list(PROFILES))
def test_decode_vgpu_profile(name: str) -> None:
    assert variants.decode_vgpu_profile(name) == PROFILES[name]


RAW_IDS = {
    "0x233010DE": 590352606,
    "233010DE": 590352606,
    "0x233510de": 590680286,
    " 0x20B510DE\n": 0x20B510DE,
    "0X20B210DE": 0x20B210DE,
    "": None,
    "0x": None,
    "GRID": None,
    "0x233010DG": None,
    "0x1233010DE": None,  # nine digits: not a 32-bit id
    "-0x1": None,
    "0x2330 10DE": None,
}


@pytest.mark.parametrize("text", list(RAW_IDS))
def test_parse_pci_device_id(text: str) -> None:
    assert variants.parse_pci_device_id(text) == RAW_IDS[text]


def test_format_pci_device_id_as_nvidia_smi_prints_it() -> None:
    assert variants.format_pci_device_id(590352606) == "0x233010DE"
    assert variants.format_pci_device_id(0x1EB810DE) == "0x1EB810DE"
    assert variants.format_pci_device_id(0x10DE) == "0x000010DE"
    with pytest.raises(ValueError):
        variants.format_pci_device_id(1 << 32)


def test_format_parse_round_trip_over_the_catalog() -> None:
    for row in variants.CATALOG:
        raw = (row.device_id << 16) | variants.NVIDIA_VENDOR_ID
        text = variants.format_pci_device_id(raw)
        assert len(text) == 10 and text == text[:2] + text[2:].upper()
        assert variants.parse_pci_device_id(text) == raw
        assert variants.parse_pci_device_id(text[2:]) == raw


# Every row of the reference table, by device id (both ids where it gives two), and the
# shared 25B6 the reference names in "Telling variants apart".
REFERENCE_IDS = {
    0x1DB1, 0x1DB5, 0x1DB4, 0x1DB6, 0x1EB8, 0x20F1, 0x20B1, 0x20B5, 0x20B0, 0x20B2,
    0x20F3, 0x20F5, 0x2236, 0x2237, 0x27B8, 0x26B5, 0x26B9, 0x2331, 0x2330, 0x2339,
    0x2337, 0x2321, 0x2324, 0x2322, 0x2335, 0x233B, 0x2342, 0x2348, 0x2901, 0x25B6,
    # Not in the reference table; added for issue #20, the boards of NVIDIA's documented
    # vGPU profiles: A40, RTX A6000, RTX 6000 Ada Generation.
    0x2235, 0x2230, 0x26B1,
}


def test_catalog_covers_the_reference_table() -> None:
    assert {row.device_id for row in variants.CATALOG} == REFERENCE_IDS


def test_catalog_rows_are_sourced_labelled_and_unambiguous() -> None:
    pairs: set[tuple[int, str]] = set()
    labels: dict[str, tuple[str, int, str]] = {}
    boards: dict[str, str] = {}
    for row in variants.CATALOG:
        assert row.source.strip() and row.label.strip()
        assert 0 < row.device_id <= 0xFFFF
        assert row.form_factor in variants.FORM_FACTORS
        assert set(row.peak_tflops) == set(variants.DTYPES)
        assert row.label.startswith(row.family)
        assert row.label.endswith(f"{row.memory_gb}GB")
        for name in row.names:
            assert (row.device_id, name) not in pairs, (hex(row.device_id), name)
            pairs.add((row.device_id, name))
            if name.startswith("NVIDIA "):  # older drivers' form is there too
                assert name[len("NVIDIA "):] in row.names
        # One label is one product, whichever of its ids it came under.
        facts = (row.family, row.memory_gb, row.form_factor)
        assert labels.setdefault(row.label, facts) == facts
        if row.vgpu_board is not None:
            assert boards.setdefault(row.vgpu_board, row.label) == row.label


def test_catalog_rows_are_plain_data() -> None:
    rows = variants.catalog_rows()
    # One row per id of REFERENCE_IDS (33), and a second for 25B6, shared by A2 and A16.
    assert len(rows) == 34
    assert json.loads(json.dumps(rows)) == rows
    h100 = next(r for r in rows if r["label"] == "H100-SXM5-80GB")
    assert h100["pci_device_id"] == "0x233010DE"
    assert h100["names"] == ["NVIDIA H100 80GB HBM3", "H100 80GB HBM3"]


# Dense figures from the reference table. The sparse ones NVIDIA prints first are twice
# these (H100 SXM bf16 1979, A100 624, L40S 733): a matmul can never reach them.
DENSE = [
    ("H100-SXM5-80GB", "bf16", 989.0),
    ("H100-SXM5-80GB", "fp16", 989.0),
    ("H100-SXM5-80GB", "tf32", 495.0),
    ("H100-SXM5-80GB", "fp32", 67.0),
    ("H200-SXM-141GB", "bf16", 989.0),
    ("H100-PCIe-80GB", "bf16", 756.0),
    ("A100-SXM4-80GB", "bf16", 312.0),
    ("A100-PCIe-80GB", "tf32", 156.0),
    ("L40S-PCIe-48GB", "bf16", 362.0),
    ("L4-PCIe-24GB", "bf16", 121.0),
    ("B200-SXM-180GB", "bf16", 2250.0),
    ("V100-SXM2-32GB", "fp16", 125.0),
    ("T4-PCIe-16GB", "fp16", 65.0),
    # NVIDIA A40 datasheet: 74.8 | 149.6* TF32 and 149.7 | 299.4* BF16 (* with sparsity).
    ("A40-PCIe-48GB", "tf32", 74.8),
    ("A40-PCIe-48GB", "bf16", 149.7),
    ("A40-PCIe-48GB", "fp32", 37.4),
    ("RTX-A6000-PCIe-48GB", "fp32", 38.7),
    ("RTX-6000-Ada-PCIe-48GB", "fp32", 91.1),
]
# A40 299.4 and 149.6, RTX A6000 309.7 and RTX 6000 Ada 1457 are sparse (or FP8) figures.
SPARSE = {1979.0, 1978.9, 624.0, 1513.0, 733.0, 242.0, 250.0, 4500.0, 299.4, 149.6, 309.7,
          1457.0}


@pytest.mark.parametrize(("label", "dtype", "tflops"), DENSE)
def test_peak_figures_are_dense(label: str, dtype: str, tflops: float) -> None:
    row = next(r for r in variants.CATALOG if r.label == label)
    assert row.peak_tflops[dtype] == tflops


def test_no_peak_figure_uses_sparsity() -> None:
    for row in variants.CATALOG:
        peaks = row.peak_tflops
        assert not SPARSE & {v for v in peaks.values() if v is not None}, row.label
        # Where both are given, bf16 is twice tf32 dense; a sparse bf16 beside a dense
        # tf32 would make it four times.
        if peaks["tf32"] is not None and peaks["bf16"] is not None:
            assert 1.9 <= peaks["bf16"] / peaks["tf32"] <= 2.1, row.label
        if peaks["bf16"] is not None:
            assert peaks["fp16"] == peaks["bf16"], row.label


# Figures the reference marks [unverified] or does not give must be None.
UNVERIFIED = [
    ("V100-SXM2-16GB", "default_power_w"),
    ("V100-SXM2-32GB", "max_sm_clock_mhz"),
    ("T4-PCIe-16GB", "max_sm_clock_mhz"),
    ("A800-SXM4-80GB", "default_power_w"),
    ("A10-PCIe-24GB", "max_sm_clock_mhz"),
    ("A10G-PCIe-24GB", "default_power_w"),
    ("H100-SXM5-94GB", "max_sm_clock_mhz"),
    ("H100-NVL-94GB", "max_sm_clock_mhz"),
    ("H800-SXM5-80GB", "default_power_w"),
    ("H200-NVL-141GB", "max_sm_clock_mhz"),
    ("GH200-96GB", "max_sm_clock_mhz"),
    ("B200-SXM-180GB", "max_sm_clock_mhz"),
]
UNVERIFIED_PEAKS = ["H100-SXM5-94GB", "H100-SXM5-64GB", "H100-NVL-94GB", "H800-SXM5-80GB",
                    "H800-PCIe-80GB", "H200-NVL-141GB", "GH200-96GB", "GH200-144GB",
                    "A10G-PCIe-24GB"]


@pytest.mark.parametrize(("label", "figure"), UNVERIFIED)
def test_unverified_figures_are_none(label: str, figure: str) -> None:
    row = next(r for r in variants.CATALOG if r.label == label)
    assert getattr(row, figure) is None


@pytest.mark.parametrize("label", UNVERIFIED_PEAKS)
def test_unverified_peaks_are_none(label: str) -> None:
    row = next(r for r in variants.CATALOG if r.label == label)
    assert set(row.peak_tflops.values()) == {None}


def test_h100_sxm5_64gb_has_no_invented_name() -> None:
    row = next(r for r in variants.CATALOG if r.label == "H100-SXM5-64GB")
    assert row.names == ()


def test_catalog_rows_cannot_be_changed() -> None:
    row = variants.CATALOG[0]
    with pytest.raises(AttributeError):
        row.label = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        row.peak_tflops["fp32"] = 1.0  # type: ignore[index]


PY38_CHECK = """
import json, agent.gpu.variants as v
r = v.classify_variant(590352606, "NVIDIA H100 80GB HBM3", "passthrough")
assert (r["family"], r["memory_gb"], r["form_factor"], r["label"]) == \\
    ("H100", 80, "SXM", "H100-SXM5-80GB"), r
g = v.classify_variant(0x20B510DE, "GRID A100D-80C", "vgpu")
assert (g["form_factor"], g["memory_gb"], g["matched_by"]) == ("vGPU", 80, "vgpu_profile"), g
assert v.decode_vgpu_profile("GRID A100DX-4-20C")["mig_slices"] == 4
assert v.parse_pci_device_id(v.format_pci_device_id(590352606)) == 590352606
json.dumps(v.catalog_rows())
print("ok")
"""


def test_runs_on_python_3_8(python38: str) -> None:
    # The agent runs on the host's Python, 3.8 and newer: import and use it there.
    done = subprocess.run([python38, "-c", PY38_CHECK], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
