"""Every fixture folder's forms of one machine must fingerprint alike (issue #20).

A folder under tests/fixtures/gpus may hold the same machine as `nvidia-smi -q` text,
`nvidia-smi -q -x` XML and an NVML recording. Each form is fingerprinted through the agent's
one code path (`collect`), and every field that all the forms carry must come out the same.
A folder whose forms disagree fails here, so a fixture cannot drift from its siblings and
the converter cannot read one form differently from another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.collect import collect
from tests.conftest import GPU_CASES

FORMS = ("nvidia-smi-q.txt", "nvidia-smi-q.xml", "nvml-recording.json")

# The fingerprint fields every form carries: nvidia-smi prints each of them, in both the
# text and the XML, and NVML answers each.
COMPARED = (
    "index", "name", "uuid", "serial", "board_part_number", "vbios_version",
    "inforom_image_version", "gsp_firmware_version", "pci_bus_id", "pci_device_id",
    "pci_subsystem_id", "architecture", "driver_version", "cuda_driver_version",
    "memory_total_mib", "power_limit_w", "power_limit_default_w", "power_limit_enforced_w",
    "power_limit_min_w", "power_limit_max_w", "persistence_mode", "compute_mode",
    "ecc_enabled", "ecc_pending", "mig_enabled", "mig_pending", "virtualization_mode",
    "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
    "max_sm_clock_mhz", "max_mem_clock_mhz", "app_mem_clock_target_mhz",
    "app_mem_clock_default_mhz", "variant",
)
# Left out, and why:
# - cuda_cores, sm_count, cuda_compute_capability, nvlink_links_*: nvidia-smi -q prints no
#   core count, compute capability or NVLink state (those need `nvidia-smi nvlink -s`), so
#   the text and XML lack them.
# - app_sm_clock_*_mhz, boost_sm_clock_max_mhz: nvidia-smi prints the graphics and memory
#   application clocks and the graphics boost clock only, not the SM ones.
# - supported_*: the text lists supported clocks only under `-d SUPPORTED_CLOCKS`.
# - capabilities, unavailable: they follow from which getters answered at all, which
#   differs by form by the reasons above (the app-clocks API restriction is not printed).
# - power_draw_w, temperature_c, sm_clock_mhz, mem_clock_mhz, utilization_gpu_pct,
#   performance_state, clocks_event_reasons*, memory_used_mib, processes: readings, which
#   move between captures taken seconds apart on a real machine.
# - mig_devices: compared apart below; the text names no MIG device and prints no UUID.
MIG_FIELDS = ("index", "memory_total_mib", "sm_count", "gpu_instance_id",
              "compute_instance_id")
# The health verdict and the counters behind it (agent/health/card.py), which nvidia-smi -q
# prints in both forms. Left out: throttle_ns (time that grows between captures, and
# nvidia-smi prints two of NVML's eight policies), energy_mj (not in nvidia-smi -q), xid
# (the kernel log is in no form) and the under-load fields (set after a benchmark).
HEALTH_COMPARED = ("verdict", "reasons", "ecc", "remapped_rows", "retired_pages",
                   "pcie_replays")
# Issue 36's signals: compared where the recording was made by an agent that asked NVML
# for them (an older recording replays them as unknown, which the text does not).
HEALTH_SIGNALS = ("action", "recovery_action", "remap_histogram", "sram_threshold_exceeded",
                  "channel_repair_pending", "tpc_repair_pending", "unrepairable_memory")


def _forms(folder: Path) -> list[str]:
    return [form for form in FORMS if (folder / form).is_file()]


CASES = sorted(p.name for p in GPU_CASES.iterdir() if p.is_dir() and len(_forms(p)) > 1)


def _fingerprint(path: Path) -> dict[str, Any]:
    return collect(str(path), probe_torch=False)


def disagreements(documents: dict[str, dict[str, Any]]) -> list[str]:
    """Each compared field on which the forms give different answers, per GPU."""
    problems: list[str] = []
    counts = {form: len(doc["gpus"]) for form, doc in documents.items()}
    if len(set(counts.values())) != 1:
        return [f"GPU counts differ: {counts}"]
    first = next(iter(documents))
    for i in range(counts[first]):
        gpus = {form: doc["gpus"][i] for form, doc in documents.items()}
        for field in COMPARED:
            values = {form: gpu.get(field) for form, gpu in gpus.items()}
            if len({repr(v) for v in values.values()}) > 1:
                problems.append(f"gpu[{i}].{field}: {values}")
        signals = all((gpu.get("health") or {}).get("remap_histogram") is not None
                      for form, gpu in gpus.items() if form == "nvml-recording.json")
        for field in HEALTH_COMPARED + (HEALTH_SIGNALS if signals else ()):
            values = {form: (gpu.get("health") or {}).get(field) for form, gpu in gpus.items()}
            if len({repr(v) for v in values.values()}) > 1:
                problems.append(f"gpu[{i}].health.{field}: {values}")
        migs = {form: [{k: d.get(k) for k in MIG_FIELDS} for d in gpu["mig_devices"]]
                for form, gpu in gpus.items()}
        if len({repr(v) for v in migs.values()}) > 1:
            problems.append(f"gpu[{i}].mig_devices: {migs}")
    return problems


def test_there_are_folders_to_compare() -> None:
    # The real captures and the vGPU cases of issue #20 at least.
    assert {"h100-sxm5-lent-device", "h200-sxm-x2-passthrough", "h100-sxm5-passthrough",
            "vgpu-guest-rtxa6000-24q", "vgpu-host-a40", "a100-sxm4-remap-pending",
            "a100-sxm4-remapped-after-reset", "h100-sxm5-sram-uncorrectable",
            "h100-sxm5-sram-threshold", "v100-sxm2-retired-pages"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_every_form_of_a_fixture_gives_the_same_fingerprint(case: str) -> None:
    folder = GPU_CASES / case
    documents = {form: _fingerprint(folder / form) for form in _forms(folder)}
    assert disagreements(documents) == []
    # The comparison is not vacuous: the identity and a health verdict are there in every
    # form, with the counters that decide it wherever the verdict is not "unknown".
    for form, doc in documents.items():
        for gpu in doc["gpus"]:
            assert gpu["name"] and gpu["pci_device_id"] and gpu["uuid"], form
            assert gpu["variant"]["form_factor"] != "unknown", form
            assert gpu["health"]["verdict"] in ("healthy", "degraded", "failing", "unknown")
            if gpu["health"]["verdict"] != "unknown":
                assert gpu["health"]["ecc"] is not None, form


def test_a_folder_whose_forms_disagree_fails(tmp_path: Path) -> None:
    """Edit one form of a real capture: the comparison must name the field."""
    folder = GPU_CASES / "h200-sxm-x2-passthrough"
    text = (folder / "nvidia-smi-q.txt").read_text()
    assert text.count("0x233510DE") == 2  # one per GPU: the edit touches GPU 0 only
    edited = tmp_path / "nvidia-smi-q.txt"
    edited.write_text(text.replace("0x233510DE", "0x233B10DE", 1))
    documents = {"xml": _fingerprint(folder / "nvidia-smi-q.xml"),
                 "text": _fingerprint(edited)}
    problems = disagreements(documents)
    assert any(p.startswith("gpu[0].pci_device_id:") for p in problems), problems
    assert any(p.startswith("gpu[0].variant:") for p in problems), problems
    assert not any(p.startswith("gpu[1].") for p in problems), problems


def test_a_health_counter_that_differs_between_forms_fails(tmp_path: Path) -> None:
    """Clear the pending remap in the text of a failing card: verdict and rows disagree."""
    folder = GPU_CASES / "a100-sxm4-remap-pending"
    text = (folder / "nvidia-smi-q.txt").read_text()
    line = "        Pending                           : Yes\n"
    assert text.count(line) == 1
    edited = tmp_path / "nvidia-smi-q.txt"
    edited.write_text(text.replace(line, line.replace("Yes", "No")))
    problems = disagreements({"recording": _fingerprint(folder / "nvml-recording.json"),
                              "text": _fingerprint(edited)})
    assert any(p.startswith("gpu[0].health.verdict:") for p in problems), problems
    assert any(p.startswith("gpu[0].health.remapped_rows:") for p in problems), problems
    assert not any(".health.ecc" in p for p in problems), problems


def test_a_missing_gpu_is_a_disagreement() -> None:
    one = {"gpus": [{"name": "a", "mig_devices": []}]}
    assert disagreements({"a": one, "b": {"gpus": []}}) == [
        "GPU counts differ: {'a': 1, 'b': 0}"]
