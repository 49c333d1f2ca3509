"""nvidia-smi -q text and -q -x XML converted into NVML recordings (agent/source/smi.py).

The real captures are checked against the NVML recording made on the same machine: every
key the converter produces that the recording also has must hold the same value, except
readings that moved between the two captures (listed below, types still checked).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent.source import smi
from agent.source.nvml import NvmlError, ReplayNvml
from tests.conftest import GPU_CASES

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = GPU_CASES  # real captures, copied from shared/fixtures beside their recordings
NS = {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}

# Readings that move between the nvidia-smi capture and the NVML capture of one machine.
LIVE_KEYS = {
    *(f"nvmlDeviceGetClockInfo({c})" for c in
      ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_CLOCK_VIDEO")),
    *(f"nvmlDeviceGetClock({c},NVML_CLOCK_ID_CURRENT)" for c in
      ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_CLOCK_VIDEO")),
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    # PCIe traffic and replays: not in the NVML recordings, but they move between the
    # text and XML captures of the H200.
    "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)",
    "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)",
    "nvmlDeviceGetPcieReplayCounter",
}
# Struct fields that move (memory in use), and that nvidia-smi rounds to whole MiB; the
# totals beside them are compared exactly.
LIVE_FIELDS = {
    "nvmlDeviceGetMemoryInfo": {"free", "used"},
    "nvmlDeviceGetBAR1MemoryInfo": {"bar1Free", "bar1Used"},
}
# What a converted recording of a real GPU must at least carry.
REQUIRED = [
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial",
    "nvmlDeviceGetBoardPartNumber", "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetInforomImageVersion", "nvmlDeviceGetGspFirmwareVersion",
    "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)", "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)",
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_GRAPHICS)", "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_VIDEO)",
    "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetIndex",
]
SYSTEM_REQUIRED = ["nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion",
                   "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetCount"]

CAPTURE_CASES = [
    ("h100-sxm5-passthrough", "nvidia-smi-q.txt", 1),
    ("h200-sxm-x2-passthrough", "nvidia-smi-q.txt", 2),
    ("h200-sxm-x2-passthrough", "nvidia-smi-q.xml", 2),
]


def _shape(value: Any) -> Any:
    """The value's type structure: what a live reading must keep while its number moves."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def _differences(got: dict[str, Any], real: dict[str, Any]) -> list[str]:
    problems = []
    for key in sorted(set(got) & set(real)):
        mine, theirs = got[key], real[key]
        if key in LIVE_KEYS:
            if _shape(mine) != _shape(theirs):
                problems.append(f"{key}: shape {_shape(mine)} != {_shape(theirs)}")
        elif key in LIVE_FIELDS and isinstance(mine, dict) and isinstance(theirs, dict):
            if set(mine) != set(theirs):
                problems.append(f"{key}: fields {sorted(mine)} != {sorted(theirs)}")
            for field in mine:
                if field in LIVE_FIELDS[key]:
                    if type(mine[field]) is not type(theirs.get(field)):
                        problems.append(f"{key}.{field}: type differs")
                elif mine[field] != theirs.get(field):
                    problems.append(f"{key}.{field}: {mine[field]!r} != {theirs.get(field)!r}")
        elif mine != theirs:
            problems.append(f"{key}: {str(mine)[:80]} != {str(theirs)[:80]}")
    return problems


def _capture(case: str, name: str) -> Path:
    return CAPTURES / case / name


@pytest.mark.parametrize(("case", "name", "count"), CAPTURE_CASES)
def test_capture_agrees_with_the_nvml_recording_of_the_same_machine(
        case: str, name: str, count: int) -> None:
    got = smi.recording_from_file(str(_capture(case, name)))
    real = json.loads(_capture(case, "nvml-recording.json").read_text())

    assert got["format"] == "nvml-recording/1"
    kind = "-q -x" if name.endswith(".xml") else "-q"
    assert got["source"] == f"converted from nvidia-smi {kind} ({CAPTURES / case / name})"
    assert len(got["devices"]) == count
    assert [k for k in SYSTEM_REQUIRED if k not in got["system"]] == []
    assert _differences(got["system"], real["system"]) == []
    for index, (mine, theirs) in enumerate(zip(got["devices"], real["devices"], strict=True)):
        assert [k for k in REQUIRED if k not in mine] == [], f"GPU {index}"
        assert _differences(mine, theirs) == [], f"GPU {index}"
        # Enough overlap that the comparison means something.
        assert len(set(mine) & set(theirs)) >= 60


def test_capture_comparison_can_fail() -> None:
    real = json.loads(_capture("h100-sxm5-passthrough", "nvml-recording.json").read_text())
    device = dict(real["devices"][0])
    device["nvmlDeviceGetPowerManagementLimit"] = 650000
    device["nvmlDeviceGetMemoryInfo"] = dict(device["nvmlDeviceGetMemoryInfo"], total=1)
    device["nvmlDeviceGetPowerUsage"] = "75 W"
    assert _differences(device, real["devices"][0]) == [
        "nvmlDeviceGetMemoryInfo.total: 1 != 85520809984",
        "nvmlDeviceGetPowerManagementLimit: 650000 != 700000",
        "nvmlDeviceGetPowerUsage: shape str != int",
    ]


def test_h200_text_and_xml_give_the_same_answers() -> None:
    text = smi.recording_from_file(str(_capture("h200-sxm-x2-passthrough", "nvidia-smi-q.txt")))
    xml = smi.recording_from_file(str(_capture("h200-sxm-x2-passthrough", "nvidia-smi-q.xml")))
    assert text["system"] == xml["system"]
    for t, x in zip(text["devices"], xml["devices"], strict=True):
        # Only the XML lists the supported clocks (the text needs -d SUPPORTED_CLOCKS).
        assert set(t) - set(x) == set()
        assert set(x) - set(t) == {"nvmlDeviceGetSupportedMemoryClocks",
                                   "nvmlDeviceGetSupportedGraphicsClocks(3201)",
                                   "nvmlDeviceGetSupportedGraphicsClocks(2201)"}
        assert _differences(t, x) == []
        # The two captures were a second apart: the memory totals agree exactly.
        assert t["nvmlDeviceGetMemoryInfo"]["total"] == x["nvmlDeviceGetMemoryInfo"]["total"]


def test_converted_recording_replays() -> None:
    recording = smi.recording_from_file(
        str(_capture("h200-sxm-x2-passthrough", "nvidia-smi-q.xml")))
    nvml = ReplayNvml(recording, origin="test")
    assert nvml.device_count() == 2
    assert nvml.system("nvmlSystemGetCudaDriverVersion_v2") == 13000
    gpu = nvml.device(1)
    assert nvml.call(gpu, "nvmlDeviceGetUUID") == "GPU-bc70f54c-4a7c-ae40-4e0b-c30d43a47e57"
    assert nvml.call(gpu, "nvmlDeviceGetPciInfo_v3")["pciDeviceId"] == 0x233510DE
    assert nvml.call(gpu, "nvmlDeviceGetClock", "NVML_CLOCK_GRAPHICS",
                     "NVML_CLOCK_ID_APP_CLOCK_TARGET") == 1980
    assert nvml.call(gpu, "nvmlDeviceGetPowerManagementLimitConstraints") == [200000, 700000]
    assert nvml.call(gpu, "nvmlDeviceGetSupportedGraphicsClocks", 3201)[0] == 1980
    with pytest.raises(NvmlError) as refused:
        nvml.call(gpu, "nvmlDeviceGetFanSpeed")
    assert refused.value.name == "NVML_ERROR_NOT_SUPPORTED"
    with pytest.raises(NvmlError) as missing:  # nvidia-smi does not print the SM app clock
        nvml.call(gpu, "nvmlDeviceGetApplicationsClock", "NVML_CLOCK_SM")
    assert missing.value.name == "NVML_ERROR_FUNCTION_NOT_FOUND"


def test_recording_json_is_returned_as_is() -> None:
    path = _capture("h100-sxm5-passthrough", "nvml-recording.json")
    assert smi.recording_from_file(str(path)) == json.loads(path.read_text())


# --- hand-written reports ------------------------------------------------------------------

# Seed 001, provider C: a vGPU guest on an A100 80GB PCIe board (driver 550.90.07, CUDA 12.4,
# bus 00000000:06:00.0), power and clocks N/A, persistence on, ECC on, 1 / 81920 MiB.
# A guest shows the physical device id (20B5); the subsystem id here is made up.
GRID_TEXT = """
==============NVSMI LOG==============

Timestamp                                 : Mon Nov  4 09:00:00 2024
Driver Version                            : 550.90.07
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:06:00.0
    Product Name                          : GRID A100D-80C
    Product Brand                         : NVIDIA Virtual Compute Server
    Product Architecture                  : Ampere
    Display Mode                          : Enabled
    Display Active                        : Disabled
    Persistence Mode                      : Enabled
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    Serial Number                         : N/A
    GPU UUID                              : GPU-9d0e1c55-2d7a-11ef-9a6b-0242ac120002
    Minor Number                          : 0
    VBIOS Version                         : 00.00.00.00.00
    MultiGPU Board                        : No
    Board ID                              : 0x600
    Board Part Number                     : N/A
    Inforom Version
        Image Version                     : N/A
        OEM Object                        : N/A
    GPU Virtualization Mode
        Virtualization Mode               : VGPU
        Host VGPU Mode                    : N/A
    vGPU Software Licensed Product
        Product Name                      : NVIDIA Virtual Compute Server
        License Status                    : Licensed (Expiry: 2024-11-5 9:0:0 GMT)
    GSP Firmware Version                  : N/A
    PCI
        Bus                               : 0x06
        Device                            : 0x00
        Domain                            : 0x0000
        Device Id                         : 0x20B510DE
        Bus Id                            : 00000000:06:00.0
        Sub System Id                     : 0x162010DE
        GPU Link Info
            PCIe Generation
                Max                       : N/A
                Current                   : N/A
            Link Width
                Max                       : N/A
                Current                   : N/A
    Fan Speed                             : N/A
    Performance State                     : P0
    Clocks Event Reasons                  : N/A
    FB Memory Usage
        Total                             : 81920 MiB
        Reserved                          : 0 MiB
        Used                              : 1 MiB
        Free                              : 81919 MiB
    Compute Mode                          : Default
    Utilization
        Gpu                               : 0 %
        Memory                            : 0 %
    Ecc Mode
        Current                           : Enabled
        Pending                           : Enabled
    Remapped Rows                         : N/A
    Temperature
        GPU Current Temp                  : N/A
    GPU Power Readings
        Power Draw                        : N/A
        Current Power Limit               : N/A
        Requested Power Limit             : N/A
        Default Power Limit               : N/A
        Min Power Limit                   : N/A
        Max Power Limit                   : N/A
    Clocks
        Graphics                          : [N/A]
        SM                                : [N/A]
        Memory                            : [N/A]
        Video                             : [N/A]
    Applications Clocks
        Graphics                          : Not Supported
        Memory                            : Not Supported
    Max Clocks
        Graphics                          : N/A
        SM                                : N/A
        Memory                            : N/A
        Video                             : N/A
    Supported Clocks                      : N/A
    Processes                             : None
"""

GRID_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <driver_version>550.90.07</driver_version>
  <cuda_version>12.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:06:00.0">
    <product_name>GRID A100D-80C</product_name>
    <product_brand>NVIDIA Virtual Compute Server</product_brand>
    <product_architecture>Ampere</product_architecture>
    <persistence_mode>Enabled</persistence_mode>
    <mig_mode><current_mig>Disabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
    <serial>N/A</serial>
    <uuid>GPU-9d0e1c55-2d7a-11ef-9a6b-0242ac120002</uuid>
    <gpu_virtualization_mode>
      <virtualization_mode>VGPU</virtualization_mode>
      <host_vgpu_mode>N/A</host_vgpu_mode>
    </gpu_virtualization_mode>
    <vgpu_software_licensed_product>
      <licensed_product_name>NVIDIA Virtual Compute Server</licensed_product_name>
      <license_status>Licensed (Expiry: 2024-11-5 9:0:0 GMT)</license_status>
    </vgpu_software_licensed_product>
    <pci>
      <pci_bus>06</pci_bus><pci_device>00</pci_device><pci_domain>0000</pci_domain>
      <pci_device_id>20B510DE</pci_device_id><pci_bus_id>00000000:06:00.0</pci_bus_id>
      <pci_sub_system_id>162010DE</pci_sub_system_id>
    </pci>
    <performance_state>P0</performance_state>
    <clocks_event_reasons>N/A</clocks_event_reasons>
    <fb_memory_usage>
      <total>81920 MiB</total><reserved>0 MiB</reserved><used>1 MiB</used><free>81919 MiB</free>
    </fb_memory_usage>
    <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
    <remapped_rows>N/A</remapped_rows>
    <temperature><gpu_temp>N/A</gpu_temp></temperature>
    <gpu_power_readings>
      <power_state>P0</power_state>
      <average_power_draw>N/A</average_power_draw>
      <instant_power_draw>N/A</instant_power_draw>
      <current_power_limit>N/A</current_power_limit>
      <requested_power_limit>N/A</requested_power_limit>
      <default_power_limit>N/A</default_power_limit>
      <min_power_limit>N/A</min_power_limit>
      <max_power_limit>N/A</max_power_limit>
    </gpu_power_readings>
    <clocks>
      <graphics_clock>N/A</graphics_clock><sm_clock>N/A</sm_clock>
      <mem_clock>N/A</mem_clock><video_clock>N/A</video_clock>
    </clocks>
    <max_clocks>
      <graphics_clock>N/A</graphics_clock><sm_clock>N/A</sm_clock>
      <mem_clock>N/A</mem_clock><video_clock>N/A</video_clock>
    </max_clocks>
    <supported_clocks>N/A</supported_clocks>
    <processes>
    </processes>
  </gpu>
</nvidia_smi_log>
"""

GRID_EXPECTED: dict[str, Any] = {
    "nvmlDeviceGetName": "GRID A100D-80C",
    "nvmlDeviceGetBrand": 9,
    "nvmlDeviceGetArchitecture": 7,
    "nvmlDeviceGetVirtualizationMode": 2,
    "nvmlDeviceGetHostVgpuMode": NS,
    "nvmlDeviceGetPersistenceMode": 1,
    "nvmlDeviceGetEccMode": [1, 1],
    "nvmlDeviceGetMigMode": [0, 0],
    "nvmlDeviceGetSerial": NS,
    "nvmlDeviceGetPciInfo": {"busIdLegacy": "0000:06:00.0", "domain": 0, "bus": 6,
                             "device": 0, "pciDeviceId": 0x20B510DE,
                             "pciSubSystemId": 0x162010DE, "busId": "00000000:06:00.0"},
    "nvmlDeviceGetMemoryInfo": {"total": 81920 * 1048576, "free": 81919 * 1048576,
                                "used": 1048576},
    "nvmlDeviceGetPerformanceState": 0,
    "nvmlDeviceGetCurrentClocksEventReasons": NS,
    "nvmlDeviceGetCurrentClocksThrottleReasons": NS,
    "nvmlDeviceGetRemappedRows": NS,
    "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)": NS,
    "nvmlDeviceGetPowerUsage": NS,
    "nvmlDeviceGetPowerManagementLimit": NS,
    "nvmlDeviceGetEnforcedPowerLimit": NS,
    "nvmlDeviceGetPowerManagementDefaultLimit": NS,
    "nvmlDeviceGetPowerManagementLimitConstraints": NS,
    "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)": NS,
    "nvmlDeviceGetClock(NVML_CLOCK_SM,NVML_CLOCK_ID_CURRENT)": NS,
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)": NS,
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)": NS,
    "nvmlDeviceGetSupportedMemoryClocks": NS,
    "nvmlDeviceGetComputeRunningProcesses": [],
    "nvmlDeviceGetGraphicsRunningProcesses": [],
    "nvmlDeviceGetIndex": 0,
}
# The text shows a few more lines than the XML above.
GRID_TEXT_ONLY: dict[str, Any] = {
    "nvmlDeviceGetBoardPartNumber": NS,
    "nvmlDeviceGetInforomImageVersion": NS,
    "nvmlDeviceGetGspFirmwareVersion": NS,
    "nvmlDeviceGetBoardId": 0x600,
    "nvmlDeviceGetDisplayMode": 1,
    "nvmlDeviceGetFanSpeed": NS,
    "nvmlDeviceGetCurrPcieLinkGeneration": NS,
    "nvmlDeviceGetMaxPcieLinkWidth": NS,
    "nvmlDeviceGetApplicationsClock(NVML_CLOCK_GRAPHICS)": NS,
    "nvmlDeviceGetClock(NVML_CLOCK_MEM,NVML_CLOCK_ID_APP_CLOCK_TARGET)": NS,
    "nvmlDeviceGetUtilizationRates": {"gpu": 0, "memory": 0},
}

# An R470 host: "Clocks Throttle Reasons", names without "NVIDIA ", the older power and
# temperature labels; figures from the reference row "V100 SXM2 16GB / 32GB".
OLD_TEXT = """
==============NVSMI LOG==============

Timestamp                                 : Tue Jun 21 12:58:00 2022
Driver Version                            : 470.103.01
CUDA Version                              : 11.4

Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    Product Brand                         : Tesla
    Display Mode                          : Disabled
    Display Active                        : Disabled
    Persistence Mode                      : Disabled
    MIG Mode
        Current                           : N/A
        Pending                           : N/A
    Serial Number                         : 0323918000000
    GPU UUID                              : GPU-3c2b0a1e-0000-0000-0000-000000000000
    PCI
        Bus                               : 0x18
        Device                            : 0x00
        Domain                            : 0x0000
        Device Id                         : 0x1DB510DE
        Bus Id                            : 00000000:18:00.0
        Sub System Id                     : 0x124910DE
    Performance State                     : P0
    Clocks Throttle Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Active
        HW Slowdown                       : Not Active
            HW Thermal Slowdown           : Not Active
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Active
        Display Clock Setting             : Not Active
    Remapped Rows                         : N/A
    Temperature
        GPU Current Temp                  : 61 C
        GPU Shutdown Temp                 : 90 C
        GPU Slowdown Temp                 : 87 C
        GPU Max Operating Temp            : 83 C
        Memory Max Operating Temp         : 85 C
    Power Readings
        Power Management                  : Supported
        Power Draw                        : 299.41 W
        Power Limit                       : 300.00 W
        Default Power Limit               : 300.00 W
        Enforced Power Limit              : 300.00 W
        Min Power Limit                   : 150.00 W
        Max Power Limit                   : 300.00 W
    Max Clocks
        Graphics                          : 1530 MHz
        SM                                : 1530 MHz
        Memory                            : 877 MHz
        Video                             : 1372 MHz
    Supported Clocks
        Memory                            : 877 MHz
            Graphics                      : 1530 MHz
            Graphics                      : 1522 MHz
    Processes
        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 4242
            Type                          : C
            Name                          : python
            Used GPU Memory               : 1024 MiB
        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 1717
            Type                          : C+G
            Name                          : Xorg
            Used GPU Memory               : N/A
"""

OLD_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log>
  <driver_version>470.103.01</driver_version>
  <cuda_version>11.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:18:00.0">
    <product_name>Tesla V100-SXM2-32GB</product_name>
    <product_brand>Tesla</product_brand>
    <display_mode>Disabled</display_mode>
    <clocks_throttle_reasons>
{reasons}
    </clocks_throttle_reasons>
    <temperature>
      <gpu_temp>61 C</gpu_temp>
      <gpu_temp_max_threshold>90 C</gpu_temp_max_threshold>
      <gpu_temp_slow_threshold>87 C</gpu_temp_slow_threshold>
      <gpu_temp_max_gpu_threshold>83 C</gpu_temp_max_gpu_threshold>
      <gpu_temp_max_mem_threshold>85 C</gpu_temp_max_mem_threshold>
    </temperature>
    <power_readings>
      <power_state>P0</power_state>
      <power_management>Supported</power_management>
      <power_draw>299.41 W</power_draw>
      <power_limit>300.00 W</power_limit>
      <default_power_limit>300.00 W</default_power_limit>
      <enforced_power_limit>300.00 W</enforced_power_limit>
      <min_power_limit>150.00 W</min_power_limit>
      <max_power_limit>300.00 W</max_power_limit>
    </power_readings>
    <max_clocks>
      <graphics_clock>1530 MHz</graphics_clock><sm_clock>1530 MHz</sm_clock>
      <mem_clock>877 MHz</mem_clock><video_clock>1372 MHz</video_clock>
    </max_clocks>
    <supported_clocks>
      <supported_mem_clock>
        <value>877 MHz</value>
        <supported_graphics_clock>1530 MHz</supported_graphics_clock>
        <supported_graphics_clock>1522 MHz</supported_graphics_clock>
      </supported_mem_clock>
    </supported_clocks>
    <processes>
      <process_info>
        <gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>
        <pid>4242</pid><type>C</type><process_name>python</process_name>
        <used_memory>1024 MiB</used_memory>
      </process_info>
      <process_info>
        <gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>
        <pid>1717</pid><type>C+G</type><process_name>Xorg</process_name>
        <used_memory>N/A</used_memory>
      </process_info>
    </processes>
  </gpu>
</nvidia_smi_log>
"""

OLD_XML = OLD_XML.replace("{reasons}", "\n".join(
    f"      <clocks_throttle_reason_{name}>{state}</clocks_throttle_reason_{name}>"
    for name, state in [
        ("gpu_idle", "Not Active"), ("applications_clocks_setting", "Not Active"),
        ("sw_power_cap", "Active"), ("hw_slowdown", "Not Active"),
        ("hw_thermal_slowdown", "Not Active"), ("hw_power_brake_slowdown", "Not Active"),
        ("sync_boost", "Not Active"), ("sw_thermal_slowdown", "Active"),
        ("display_clocks_setting", "Not Active"),
    ]))

OLD_EXPECTED: dict[str, Any] = {
    "nvmlDeviceGetName": "Tesla V100-SXM2-32GB",
    "nvmlDeviceGetBrand": 2,
    "nvmlDeviceGetDisplayMode": 0,
    # SW Power Cap 0x4 and SW Thermal Slowdown 0x20.
    "nvmlDeviceGetCurrentClocksEventReasons": 0x24,
    "nvmlDeviceGetCurrentClocksThrottleReasons": 0x24,
    "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)": 61,
    "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)": 90,
    "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)": 87,
    "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_GPU_MAX)": 83,
    "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_MEM_MAX)": 85,
    "nvmlDeviceGetPowerManagementMode": 1,
    "nvmlDeviceGetPowerUsage": 299410,
    "nvmlDeviceGetPowerManagementLimit": 300000,
    "nvmlDeviceGetPowerManagementDefaultLimit": 300000,
    "nvmlDeviceGetEnforcedPowerLimit": 300000,
    "nvmlDeviceGetPowerManagementLimitConstraints": [150000, 300000],
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)": 1530,
    "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)": 877,
    "nvmlDeviceGetSupportedMemoryClocks": [877],
    "nvmlDeviceGetSupportedGraphicsClocks(877)": [1530, 1522],
    "nvmlDeviceGetComputeRunningProcesses": [
        {"pid": 4242, "usedGpuMemory": 1073741824},
        {"pid": 1717, "usedGpuMemory": None},
    ],
    "nvmlDeviceGetGraphicsRunningProcesses": [{"pid": 1717, "usedGpuMemory": None}],
    "nvmlDeviceGetIndex": 0,
}
OLD_TEXT_ONLY: dict[str, Any] = {
    "nvmlDeviceGetMigMode": NS,
    "nvmlDeviceGetPersistenceMode": 0,
    "nvmlDeviceGetRemappedRows": NS,
    "nvmlDeviceGetPciInfo": {"busIdLegacy": "0000:18:00.0", "domain": 0, "bus": 0x18,
                             "device": 0, "pciDeviceId": 0x1DB510DE,
                             "pciSubSystemId": 0x124910DE, "busId": "00000000:18:00.0"},
}


@pytest.mark.parametrize(("convert", "report", "driver", "cuda", "expected", "absent"), [
    (smi.recording_from_text, GRID_TEXT, "550.90.07", 12040, {**GRID_EXPECTED, **GRID_TEXT_ONLY},
     ["nvmlDeviceGetVgpuLicense", "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_GPU)",
      "nvmlDeviceGetDefaultApplicationsClock(NVML_CLOCK_GRAPHICS)"]),
    (smi.recording_from_xml, GRID_XML, "550.90.07", 12040, GRID_EXPECTED,
     ["nvmlDeviceGetBoardPartNumber", "nvmlDeviceGetDisplayMode"]),
    (smi.recording_from_text, OLD_TEXT, "470.103.01", 11040, {**OLD_EXPECTED, **OLD_TEXT_ONLY},
     ["nvmlDeviceGetArchitecture", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
      "nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetGspFirmwareVersion"]),
    (smi.recording_from_xml, OLD_XML, "470.103.01", 11040, OLD_EXPECTED,
     ["nvmlDeviceGetArchitecture", "nvmlDeviceGetPciInfo"]),
], ids=["grid-guest-text", "grid-guest-xml", "r470-v100-text", "r470-v100-xml"])
def test_hand_written_reports(convert: Any, report: str, driver: str, cuda: int,
                              expected: dict[str, Any], absent: list[str]) -> None:
    recording = convert(report, origin="case")
    assert recording["system"] == {
        "nvmlSystemGetDriverVersion": driver, "nvmlSystemGetCudaDriverVersion": cuda,
        "nvmlSystemGetCudaDriverVersion_v2": cuda, "nvmlDeviceGetCount": 1}
    (device,) = recording["devices"]
    assert {k: device.get(k, "<absent>") for k in expected} == expected
    # Not printed, or printed without an NVML getter (the vGPU licence): left out.
    assert [k for k in absent if k in device] == []
    assert "not understood" not in recording["source"]
    assert not any("cense" in json.dumps(v) for v in device.values())


def test_ga100_power_draw_is_the_instantaneous_reading_and_hopper_the_average() -> None:
    def power(name: str, arch: str, device_id: str) -> Any:
        report = GRID_XML.replace("<product_architecture>Ampere", f"<product_architecture>{arch}")
        report = report.replace("20B510DE", device_id)
        report = report.replace("<average_power_draw>N/A", "<average_power_draw>60.00 W")
        report = report.replace("<instant_power_draw>N/A", "<instant_power_draw>70.00 W")
        return smi.recording_from_xml(report)["devices"][0].get("nvmlDeviceGetPowerUsage")

    assert power("a100", "Ampere", "20B510DE") == 70000
    assert power("a10", "Ampere", "223610DE") == 60000
    assert power("h100", "Hopper", "233010DE") == 60000
    assert power("v100", "Volta", "1DB510DE") == 70000


def test_error_strings_become_nvml_errors_and_deprecated_lines_are_left_out() -> None:
    report = OLD_TEXT.replace("Serial Number                         : 0323918000000",
                              "Serial Number                         : [Insufficient Permissions]")
    report = report.replace("Display Mode                          : Disabled",
                            "Display Mode                          : Requested functionality "
                            "has been deprecated")
    report = report.replace("Power Draw                        : 299.41 W",
                            "Power Draw                        : [Not Supported]")
    report = report.replace("Persistence Mode                      : Disabled",
                            "Persistence Mode                      : [Unknown Error]")
    device = smi.recording_from_text(report)["devices"][0]
    assert device["nvmlDeviceGetSerial"] == {"nvml_error": "NVML_ERROR_NO_PERMISSION"}
    assert "nvmlDeviceGetDisplayMode" not in device
    assert device["nvmlDeviceGetPowerUsage"] == NS
    assert device["nvmlDeviceGetPersistenceMode"] == {"nvml_error": "NVML_ERROR_UNKNOWN"}


def test_unreadable_values_are_left_out_and_named_in_the_source() -> None:
    report = OLD_TEXT.replace("GPU Current Temp                  : 61 C",
                              "GPU Current Temp                  : hot")
    report = report.replace("Product Brand                         : Tesla",
                            "Product Brand                         : Brand New")
    recording = smi.recording_from_text(report, origin="odd.txt")
    device = recording["devices"][0]
    assert "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)" not in device
    assert "nvmlDeviceGetBrand" not in device
    assert recording["source"].startswith("converted from nvidia-smi -q (odd.txt); left out")
    assert "'GPU Current Temp' = 'hot'" in recording["source"]
    assert "line 11 'Product Brand'" in recording["source"]


def test_a_report_of_some_gpus_gives_no_count_or_index() -> None:
    report = OLD_TEXT.replace("Attached GPUs                             : 1",
                              "Attached GPUs                             : 2")
    recording = smi.recording_from_text(report)
    assert "nvmlDeviceGetCount" not in recording["system"]
    assert "nvmlDeviceGetIndex" not in recording["devices"][0]
    assert "'Attached GPUs' is 2 but 1 GPU sections" in recording["source"]
    assert ReplayNvml(recording).device_count() == 1


# --- every section real drivers print (issue #20) -------------------------------------

# Of our own making (tests/fixtures/gpus/README.md): a vGPU manager host, with its top-level
# "vGPU Driver Capability" and per-GPU vGPU sections, and a workstation board's guest.
VGPU_CASES = [(case, name) for case in ("vgpu-host-a40", "vgpu-guest-rtxa6000-24q")
              for name in ("nvidia-smi-q.txt", "nvidia-smi-q.xml")]


@pytest.mark.parametrize(("case", "name"), VGPU_CASES)
def test_vgpu_reports_are_read_whole_and_agree_with_their_recording(
        case: str, name: str) -> None:
    path = CAPTURES / case / name
    got = smi.recording_from_file(str(path))
    real = json.loads((CAPTURES / case / "nvml-recording.json").read_text())
    kind = "-q -x" if name.endswith(".xml") else "-q"
    # Nothing skipped or left out: every section these drivers print is known.
    assert got["source"] == f"converted from nvidia-smi {kind} ({path})"
    assert _differences(got["system"], real["system"]) == []
    mine, theirs = got["devices"][0], real["devices"][0]
    assert _differences(mine, theirs) == []
    assert len(set(mine) & set(theirs)) >= 60


def test_a_vgpu_manager_host_has_no_cuda_and_says_it_hosts() -> None:
    for name in ("nvidia-smi-q.txt", "nvidia-smi-q.xml"):
        recording = smi.recording_from_file(str(CAPTURES / "vgpu-host-a40" / name))
        # "CUDA Version : Not Found": the _v2 entry point's answer without libcuda.
        assert recording["system"]["nvmlSystemGetCudaDriverVersion_v2"] == {
            "nvml_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}
        assert "nvmlSystemGetCudaDriverVersion" not in recording["system"]
        device = recording["devices"][0]
        assert device["nvmlDeviceGetVirtualizationMode"] == 3  # host vGPU
        assert device["nvmlDeviceGetHostVgpuMode"] == 1  # SR-IOV


GUEST_TEXT = (CAPTURES / "vgpu-guest-rtxa6000-24q" / "nvidia-smi-q.txt").read_text()
GUEST_XML = (CAPTURES / "vgpu-guest-rtxa6000-24q" / "nvidia-smi-q.xml").read_text()


def test_sections_fleet_does_not_know_are_skipped_and_named() -> None:
    """A newer driver's section is read past with a note, never refused."""
    plain = smi.recording_from_text(GUEST_TEXT, origin="guest.txt")
    text = GUEST_TEXT.replace("Attached GPUs", "Quantum Link Info\n    Entangled : No\n"
                              "Attached GPUs", 1)
    text = text.replace("    Processes", "    Hologram Mode : Off\n    Photon Budget\n"
                        "        Left : 3 %\n    Processes", 1)
    assert text.count("Quantum") == text.count("Hologram") == 1
    got = smi.recording_from_text(text, origin="guest.txt")
    lines = text.splitlines()
    top = lines.index("Quantum Link Info") + 1
    gpu = lines.index("    Hologram Mode : Off") + 1
    assert got["source"] == (
        "converted from nvidia-smi -q (guest.txt); skipped, not known to fleet: "
        f"'Quantum Link Info' (line {top}), GPU 00000000:02:00.0: 'Hologram Mode' "
        f"(line {gpu}), GPU 00000000:02:00.0: 'Photon Budget' (line {gpu + 1})")
    assert got["devices"] == plain["devices"] and got["system"] == plain["system"]

    xml = GUEST_XML.replace("<attached_gpus>", "<quantum_link_info><entangled>No"
                            "</entangled></quantum_link_info>\n\t<attached_gpus>", 1)
    xml = xml.replace("<processes>", "<hologram_mode>Off</hologram_mode>\n\t\t<processes>", 1)
    got = smi.recording_from_xml(xml, origin="guest.xml")
    assert got["source"] == (
        "converted from nvidia-smi -q -x (guest.xml); skipped, not known to fleet: "
        "'quantum_link_info' (<quantum_link_info>), "
        "GPU 00000000:02:00.0: 'hologram_mode' (<hologram_mode>)")
    assert got["devices"] == smi.recording_from_xml(GUEST_XML)["devices"]


def test_the_skipped_note_is_bounded() -> None:
    extra = "".join(f"    Future Field {n} : {n}\n" for n in range(12))
    got = smi.recording_from_text(GUEST_TEXT.replace("    Processes", extra + "    Processes",
                                                     1))
    assert got["source"].count("Future Field") == smi.MAX_NOTES
    assert got["source"].endswith(" and 4 more")


MIG_TEXT = """
==============NVSMI LOG==============
Driver Version                            : 580.159.04
CUDA Version                              : 13.0
Attached GPUs                             : 1
GPU 00000000:00:06.0
    Product Name                          : NVIDIA H100 80GB HBM3
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
    MIG devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 2
            Compute Instance ID           : 0
            Device Attributes
                Shared
                    Multiprocessor count  : 60
                    Copy Engine count     : 3
                    Encoder count         : 0
                    Decoder count         : 3
                    OFA count             : 0
                    JPG count             : 3
            FB Memory Usage
                Total                     : 40448 MiB
                Reserved                  : 0 MiB
                Used                      : 11 MiB
                Free                      : 40437 MiB
        MIG Device
            Index                         : 1
            GPU Instance ID               : 9
            Compute Instance ID           : 0
            FB Memory Usage
                Total                     : 9984 MiB
                Reserved                  : 0 MiB
                Used                      : 11 MiB
                Free                      : 9973 MiB
    Processes
        GPU instance ID                   : 2
        Compute instance ID               : 0
        Process ID                        : 4242
            Type                          : M
            Name                          : python
            Used GPU Memory               : 1024 MiB
"""

MIG_XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>580.159.04</driver_version>
  <cuda_version>13.0</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:00:06.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>
    <mig_devices>
      <mig_device>
        <index>0</index><gpu_instance_id>2</gpu_instance_id>
        <compute_instance_id>0</compute_instance_id>
        <device_attributes><shared>
          <multiprocessor_count>60</multiprocessor_count>
          <copy_engine_count>3</copy_engine_count><encoder_count>0</encoder_count>
          <decoder_count>3</decoder_count><ofa_count>0</ofa_count><jpg_count>3</jpg_count>
        </shared></device_attributes>
        <fb_memory_usage><total>40448 MiB</total><reserved>0 MiB</reserved>
          <used>11 MiB</used><free>40437 MiB</free></fb_memory_usage>
      </mig_device>
      <mig_device>
        <index>1</index><gpu_instance_id>9</gpu_instance_id>
        <compute_instance_id>0</compute_instance_id>
        <fb_memory_usage><total>9984 MiB</total><reserved>0 MiB</reserved>
          <used>11 MiB</used><free>9973 MiB</free></fb_memory_usage>
      </mig_device>
    </mig_devices>
    <processes>
      <process_info>
        <gpu_instance_id>2</gpu_instance_id><compute_instance_id>0</compute_instance_id>
        <pid>4242</pid><type>M</type><process_name>python</process_name>
        <used_memory>1024 MiB</used_memory>
      </process_info>
    </processes>
  </gpu>
</nvidia_smi_log>
"""


@pytest.mark.parametrize("recording", [
    smi.recording_from_text(MIG_TEXT), smi.recording_from_xml(MIG_XML)], ids=["text", "xml"])
def test_mig_devices_and_mig_processes(recording: dict[str, Any]) -> None:
    nvml = ReplayNvml(recording)
    gpu = nvml.device(0)
    assert nvml.call(gpu, "nvmlDeviceGetMigMode") == [1, 1]
    first = nvml.child(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", 0)
    assert nvml.call(first, "nvmlDeviceGetGpuInstanceId") == 2
    assert nvml.call(first, "nvmlDeviceGetAttributes_v2") == {
        "multiprocessorCount": 60, "sharedCopyEngineCount": 3, "sharedDecoderCount": 3,
        "sharedEncoderCount": 0, "sharedJpegCount": 3, "sharedOfaCount": 0}
    assert nvml.call(first, "nvmlDeviceGetMemoryInfo")["total"] == 40448 * 1048576
    second = nvml.child(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", 1)
    with pytest.raises(NvmlError):  # no attributes printed for it
        nvml.call(second, "nvmlDeviceGetAttributes_v2")
    with pytest.raises(NvmlError):
        nvml.child(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", 2)
    device = recording["devices"][0]
    assert device["nvmlDeviceGetMPSComputeRunningProcesses"] == [
        {"pid": 4242, "usedGpuMemory": 1073741824, "gpuInstanceId": 2,
         "computeInstanceId": 0}]
    assert device["nvmlDeviceGetComputeRunningProcesses"] == []


# --- what is refused -----------------------------------------------------------------------

_TRUNCATED = (CAPTURES / "h200-sxm-x2-passthrough" / "nvidia-smi-q.xml").read_text()[:20000]


@pytest.mark.parametrize(("content", "says"), [
    ("", "empty"),
    ("   \n\n", "empty"),
    ("hello, world\nthis is not a GPU report\n", "not a form fleet reads"),
    ("\x00\x01\x02binary", "not a form fleet reads"),
    (json.dumps({"format": "fleet-agent/1", "gpus": []}), "'fleet-agent/1'"),
    (json.dumps([1, 2, 3]), "'list'"),
    ('{"format": "nvml-recording/1", ', "not valid JSON"),
    (_TRUNCATED, "not well-formed XML"),
    ("<?xml version='1.0'?>\n<other_log><gpu/></other_log>", "<other_log>"),
    ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY x "y">]>\n'
     "<nvidia_smi_log>&x;</nvidia_smi_log>", "entities"),
    ("==============NVSMI LOG==============\nAttached GPUs : 2\n", "cut short"),
    ("==============NVSMI LOG==============\nAttached GPUs : 1\nGPU 00000000:00:06.0\n",
     "line 3"),
    ("==============NVSMI LOG==============\nAttached GPUs : 1\nGPU 00000000:00:06.0\n"
     "    Product Name : X\n        PCI\n            Bus : 0x00\n          Device : 0x06\n",
     "line 7: indentation 10"),
    ("$ nvidia-smi -q\n==============NVSMI LOG==============\nAttached GPUs : 0\n", "line 1"),
    # A word at the margin with nothing under it is no section nvidia-smi prints.
    ("nvidia-smi -q\n==============NVSMI LOG==============\nAttached GPUs : 0\n",
     "line 1: 'nvidia-smi -q' is not part of nvidia-smi -q output"),
    ("==============NVSMI LOG==============\nTimestamp : Tue\nSome Notes\n", "line 3"),
    ("==============NVSMI LOG==============\nTimestamp : Tue\nvGPU Driver Capability\n"
     "        Heterogenous Multi-vGPU : Supported\n", "no 'Attached GPUs' entry"),
    ("<?xml version='1.0'?>\n<nvidia_smi_log><timestamp>Tue</timestamp></nvidia_smi_log>",
     "no 'Attached GPUs' entry and no GPU section"),
], ids=["empty", "blank", "garbage", "binary", "other-json-format", "json-list",
        "broken-json", "truncated-xml", "other-xml", "xml-entities", "no-gpu-section",
        "empty-gpu-section", "bad-indentation", "shell-prompt", "command-line",
        "heading-without-lines", "no-gpus-at-all", "xml-no-gpus-at-all"])
def test_files_that_are_refused_name_the_file(tmp_path: Path, content: str, says: str) -> None:
    if content == "" and says == "not well-formed XML":
        pytest.skip("the H200 capture is not on this machine")
    path = tmp_path / "input.dat"
    path.write_bytes(content.encode("utf-8"))
    with pytest.raises(smi.SmiFormatError) as refused:
        smi.recording_from_file(str(path))
    message = str(refused.value)
    assert message.startswith(f"{path}: ")
    assert says in message
    assert isinstance(refused.value, ValueError)


def test_refusals_list_the_accepted_forms(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("nothing to see\n")
    with pytest.raises(smi.SmiFormatError) as refused:
        smi.recording_from_file(str(path))
    for form in ("nvml-recording/1", "nvidia-smi -q -x", "nvidia-smi -q` text"):
        assert form in str(refused.value)


# --- running nvidia-smi --------------------------------------------------------------------


def _fake_smi(directory: Path, body: str) -> None:
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _put_first_on_path(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")


def test_no_nvidia_smi_gives_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert smi.run_nvidia_smi_xml() is None


def test_nvidia_smi_output_is_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, f"""
        [ "$1 $2" = "-q -x" ] || exit 3
        cat <<'EOF'
{GRID_XML}EOF
    """)
    _put_first_on_path(monkeypatch, tmp_path)
    xml = smi.run_nvidia_smi_xml()
    assert xml is not None
    recording = smi.recording_from_xml(xml, origin="nvidia-smi -q -x")
    assert recording["devices"][0]["nvmlDeviceGetName"] == "GRID A100D-80C"


def test_nvidia_smi_failure_carries_what_it_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, """
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        exit 9
    """)
    _put_first_on_path(monkeypatch, tmp_path)
    with pytest.raises(smi.SmiCommandError, match="status 9: NVIDIA-SMI has failed") as failed:
        smi.run_nvidia_smi_xml()
    assert isinstance(failed.value, RuntimeError)
    _fake_smi(tmp_path, "echo 'Failed to initialize NVML: Driver/library version mismatch' >&2"
                        "\nexit 18\n")
    with pytest.raises(smi.SmiCommandError, match="status 18: Failed to initialize NVML"):
        smi.run_nvidia_smi_xml()


def test_nvidia_smi_that_hangs_times_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, "echo 'waiting for the GPU' >&2\nexec sleep 30\n")
    _put_first_on_path(monkeypatch, tmp_path)
    with pytest.raises(smi.SmiCommandError, match=r"within 0\.5 s: waiting for the GPU"):
        smi.run_nvidia_smi_xml(timeout=0.5)


# --- the host's Python ---------------------------------------------------------------------


def test_python38_converts_the_same(python38: str) -> None:
    cases = [str(_capture(case, name)) for case, name, _ in CAPTURE_CASES]
    program = ("import json, sys\nimport agent.source.smi as smi\n"
               "json.dump([smi.recording_from_file(p) for p in sys.argv[1:]], sys.stdout)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([python38, "-c", program, *cases], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [smi.recording_from_file(p) for p in cases]


# --- health sections (issue #30, agent/source/smi_health.py) ---------------------------------

def _with_sections(sections: str) -> dict[str, Any]:
    """OLD_TEXT's V100 with `sections` printed where nvidia-smi prints them, converted."""
    report = OLD_TEXT.replace("    Remapped Rows                         : N/A\n",
                              textwrap.indent(textwrap.dedent(sections), "    ")
                              + "    Remapped Rows                         : N/A\n")
    recording = smi.recording_from_text(report)
    assert "not understood" not in recording["source"], recording["source"]
    assert "ECC Errors" not in recording["source"]  # read, not skipped
    device: dict[str, Any] = recording["devices"][0]
    return device


TOTAL = "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_{},NVML_{}_ECC)"
AT = ("nvmlDeviceGetMemoryErrorCounter(NVML_MEMORY_ERROR_TYPE_{},NVML_{}_ECC,"
      "NVML_MEMORY_LOCATION_{})")


def test_hopper_sram_uncorrectable_is_parity_plus_sec_ded_and_totals_add_locations() -> None:
    device = _with_sections("""\
        ECC Errors
            Volatile
                SRAM Correctable                  : 3
                SRAM Uncorrectable Parity         : 1
                SRAM Uncorrectable SEC-DED        : 2
                DRAM Correctable                  : 40
                DRAM Uncorrectable                : 0
            Aggregate
                SRAM Correctable                  : 3
                SRAM Uncorrectable Parity         : 1
                SRAM Uncorrectable SEC-DED        : N/A
                DRAM Correctable                  : 41
                DRAM Uncorrectable                : 5
                SRAM Threshold Exceeded           : No
    """)
    assert device[AT.format("UNCORRECTED", "VOLATILE", "SRAM")] == 3
    assert device[TOTAL.format("CORRECTED", "VOLATILE")] == 43
    assert device[TOTAL.format("UNCORRECTED", "VOLATILE")] == 3
    assert device[TOTAL.format("CORRECTED", "AGGREGATE")] == 44
    # A number beside "N/A" matches no single NVML answer: that location and the total
    # it feeds are left out, the others kept.
    assert AT.format("UNCORRECTED", "AGGREGATE", "SRAM") not in device
    assert TOTAL.format("UNCORRECTED", "AGGREGATE") not in device
    assert device[AT.format("UNCORRECTED", "AGGREGATE", "DRAM")] == 5


def test_pre_ampere_ecc_counts_by_cache_retired_pages_and_the_old_pending_label() -> None:
    device = _with_sections("""\
        ECC Errors
            Volatile
                Single Bit
                    Device Memory             : 0
                    L2 Cache                  : 2
                    Texture Memory            : N/A
                    Total                     : 2
                Double Bit
                    Device Memory             : 1
                    Total                     : 1
        Retired Pages
            Single Bit ECC                    : 3
            Double Bit ECC                    : 0
            Pending                           : Yes
    """)
    assert device[TOTAL.format("CORRECTED", "VOLATILE")] == 2
    assert device[TOTAL.format("UNCORRECTED", "VOLATILE")] == 1
    assert device[AT.format("CORRECTED", "VOLATILE", "L2_CACHE")] == 2
    assert device[AT.format("CORRECTED", "VOLATILE", "TEXTURE_MEMORY")] == NS
    assert device[AT.format("UNCORRECTED", "VOLATILE", "DRAM")] == 1
    assert TOTAL.format("CORRECTED", "AGGREGATE") not in device  # not printed
    # The text counts the pages without their addresses: one None per page.
    assert device["nvmlDeviceGetRetiredPages("
                  "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)"] == [None] * 3
    assert device["nvmlDeviceGetRetiredPages("
                  "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)"] == []
    assert device["nvmlDeviceGetRetiredPagesPendingStatus"] == 1


def test_a_whole_ecc_section_not_supported_and_clock_event_counters_in_nanoseconds() -> None:
    device = _with_sections("""\
        ECC Errors                            : N/A
        Clocks Event Reasons Counters
            SW Power Capping                  : 1500 us
            Sync Boost                        : N/A
            SW Thermal Slowdown               : 7 us
    """)
    for error in ("CORRECTED", "UNCORRECTED"):
        for counter in ("VOLATILE", "AGGREGATE"):
            assert device[TOTAL.format(error, counter)] == NS
    assert device["nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER)"] == {
        "violationTime": 1_500_000}
    assert device["nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_SYNC_BOOST)"] == NS
    # Thermal slowdown time is a field value with no violation policy: not read.
    assert "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL)" not in device
