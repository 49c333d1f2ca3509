"""One GPU's fingerprint from NVML: what the card is and how it is configured.

Every function here asks through `agent.source.nvml.Nvml`, so a live driver, a recording and a
converted `nvidia-smi` file all take the same path. A value NVML does not give stays None
and the reason goes into the GPU's `unavailable` map: nothing is invented.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from agent.gpu import capabilities, nvlink, variants
from agent.health import card as health
from agent.source.nvml import Arg, Handle, Nvml, NvmlError, call_key

# NVML_GPU_VIRTUALIZATION_MODE_*: pass-through is an ordinary VM with the whole card.
VIRTUALIZATION_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host", 4: "host"}
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
ARCHITECTURES = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
    8: "Ada", 9: "Hopper", 10: "Blackwell",
}
# CUDA cores per SM, to derive the SM count NVML only reports for MIG devices. GA100 and
# GV100 have 64 FP32 cores per SM; GA10x, Ada, Hopper and Blackwell have 128.
CORES_PER_SM = {5: 64, 6: 64, 9: 128, 8: 128, 10: 128}
CLOCKS_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
MAX_MIG_DEVICES = 8  # an H100 splits into at most 7


class Reader:
    """Asks one handle, keeping a note of every question that got no answer."""

    def __init__(self, nvml: Nvml, handle: Handle) -> None:
        self.nvml = nvml
        self.handle = handle
        self.unavailable: Dict[str, str] = {}

    def get(self, fn: str, *args: Arg) -> Any:
        """The answer of `fn` on this handle, or None, noting why, when NVML gave none."""
        try:
            return self.nvml.call(self.handle, fn, *args)
        except NvmlError as exc:
            self.unavailable[call_key(fn, args)] = exc.name
            return None

    def first(self, *calls: "tuple[Any, ...]") -> Any:
        """The first call whose function exists: the current name, then deprecated ones.

        A call that answers an error other than FUNCTION_NOT_FOUND ends the search: the
        driver knows the function and has told us no.
        """
        for call in calls:
            fn, args = call[0], call[1:]
            try:
                value = self.nvml.call(self.handle, fn, *args)
            except NvmlError as exc:
                self.unavailable[call_key(fn, args)] = exc.name
                if exc.name != "NVML_ERROR_FUNCTION_NOT_FOUND":
                    return None
                continue
            for other in calls:
                self.unavailable.pop(call_key(other[0], other[1:]), None)
            return value
        return None


def _watts(mw: Any) -> Optional[float]:
    return None if mw is None else round(int(mw) / 1000.0, 3)


def _mib(num_bytes: Any) -> Optional[int]:
    return None if num_bytes is None else int(num_bytes) // 1048576


def _int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def _bool(value: Any) -> Optional[bool]:
    return None if value is None else bool(value)


def _pair(value: Any, index: int) -> Any:
    if isinstance(value, list) and len(value) > index:
        return value[index]
    return None


def _clock_range(values: Optional[List[int]]) -> Optional[Dict[str, int]]:
    if not values:
        return None
    return {"count": len(values), "min_mhz": min(values), "max_mhz": max(values)}


def cuda_version_text(raw: Any) -> Optional[str]:
    """NVML's 13000 is CUDA 13.0; 12070 is 12.7."""
    if raw is None:
        return None
    value = int(raw)
    return f"{value // 1000}.{(value % 1000) // 10}"


def decode_event_reasons(mask: Optional[int]) -> Optional[List[str]]:
    """The names of the clock event reasons set in `mask`; None when there is no mask."""
    if mask is None:
        return None
    names = [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCKS_EVENT_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def read_system(nvml: Nvml) -> Dict[str, Any]:
    """The host-wide facts (driver, NVML and CUDA versions), with the calls that got no answer."""
    unavailable: Dict[str, str] = {}

    def ask(fn: str) -> Any:
        try:
            return nvml.system(fn)
        except NvmlError as exc:
            unavailable[fn] = exc.name
            return None

    cuda = ask("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = ask("nvmlSystemGetCudaDriverVersion")
        if cuda is not None:
            unavailable.pop("nvmlSystemGetCudaDriverVersion_v2", None)
    return {
        "driver_version": ask("nvmlSystemGetDriverVersion"),
        "cuda_driver_version": cuda_version_text(cuda),
        "nvml_version": ask("nvmlSystemGetNVMLVersion"),
        "gpu_count": nvml.device_count(),
        "unavailable": unavailable,
    }


def _clocks(r: Reader) -> Dict[str, Any]:
    def app_clock(kind: str, clock_id: str, deprecated: str) -> Optional[int]:
        return _int(r.first(
            ("nvmlDeviceGetClock", kind, clock_id),
            (deprecated, kind),
        ))

    supported_mem: Optional[List[int]] = r.get("nvmlDeviceGetSupportedMemoryClocks")
    table: Dict[str, List[int]] = {}
    for mem in supported_mem or []:
        table[str(mem)] = r.get("nvmlDeviceGetSupportedGraphicsClocks", mem) or []
    graphics = sorted({mhz for clocks in table.values() for mhz in clocks})
    return {
        "sm_clock_mhz": _int(r.get("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM")),
        "mem_clock_mhz": _int(r.get("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM")),
        "max_sm_clock_mhz": _int(r.get("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM")),
        "max_mem_clock_mhz": _int(r.get("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM")),
        "app_sm_clock_target_mhz": app_clock(
            "NVML_CLOCK_SM", "NVML_CLOCK_ID_APP_CLOCK_TARGET", "nvmlDeviceGetApplicationsClock"),
        "app_sm_clock_default_mhz": app_clock(
            "NVML_CLOCK_SM", "NVML_CLOCK_ID_APP_CLOCK_DEFAULT",
            "nvmlDeviceGetDefaultApplicationsClock"),
        "app_mem_clock_target_mhz": app_clock(
            "NVML_CLOCK_MEM", "NVML_CLOCK_ID_APP_CLOCK_TARGET", "nvmlDeviceGetApplicationsClock"),
        "app_mem_clock_default_mhz": app_clock(
            "NVML_CLOCK_MEM", "NVML_CLOCK_ID_APP_CLOCK_DEFAULT",
            "nvmlDeviceGetDefaultApplicationsClock"),
        "boost_sm_clock_max_mhz": app_clock(
            "NVML_CLOCK_SM", "NVML_CLOCK_ID_CUSTOMER_BOOST_MAX",
            "nvmlDeviceGetMaxCustomerBoostClock"),
        "supported_memory_clocks": _clock_range(supported_mem),
        "supported_graphics_clocks": _clock_range(graphics),
        # Kept whole: --lock-clocks must pick a pair the card offers.
        "supported_clock_table": table or None,
    }


def _mig_devices(nvml: Nvml, handle: Handle) -> List[Dict[str, Any]]:
    devices: List[Dict[str, Any]] = []
    r = Reader(nvml, handle)
    count = _int(r.get("nvmlDeviceGetMaxMigDeviceCount")) or MAX_MIG_DEVICES
    for index in range(count):
        try:
            child = nvml.child(handle, "nvmlDeviceGetMigDeviceHandleByIndex", index)
        except NvmlError:
            continue  # an unused slot: NOT_FOUND
        m = Reader(nvml, child)
        name = m.get("nvmlDeviceGetName")
        attrs = m.get("nvmlDeviceGetAttributes_v2") or {}
        memory = m.get("nvmlDeviceGetMemoryInfo") or {}
        devices.append({
            "index": index,
            "name": name,
            "profile": _mig_profile(name),
            "uuid": m.get("nvmlDeviceGetUUID"),
            "memory_total_mib": _mib(memory.get("total")),
            "sm_count": _int(attrs.get("multiprocessorCount")),
            "gpu_instance_id": _int(m.get("nvmlDeviceGetGpuInstanceId")),
            "compute_instance_id": _int(m.get("nvmlDeviceGetComputeInstanceId")),
        })
    return devices


def _mig_profile(name: Optional[str]) -> Optional[str]:
    """'NVIDIA H100 80GB HBM3 MIG 3g.40gb' -> '3g.40gb'."""
    if not name or " MIG " not in name:
        return None
    return name.rsplit(" MIG ", 1)[1].strip() or None


def _processes(r: Reader) -> List[Dict[str, Any]]:
    seen: Dict[int, Dict[str, Any]] = {}
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                     ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        for proc in r.get(fn) or []:
            pid = int(proc.get("pid", -1))
            used = proc.get("usedGpuMemory")
            # NVML reports "unknown" memory as ULLONG_MAX (NVML_VALUE_NOT_AVAILABLE).
            mib = None if used is None or int(used) >= 2**63 else _mib(used)
            seen[pid] = {"pid": pid, "used_memory_mib": mib, "kind": kind}
    return list(seen.values())


def fingerprint_gpu(
    nvml: Nvml,
    index: int,
    system: Dict[str, Any],
    euid: int,
    probe_writes: bool = False,
) -> Dict[str, Any]:
    """Everything NVML tells about GPU `index`: identity, settings, clocks and what it withheld."""
    handle = nvml.device(index)
    r = Reader(nvml, handle)
    pci = r.first(("nvmlDeviceGetPciInfo_v3",), ("nvmlDeviceGetPciInfo",)) or {}
    raw_id = _int(pci.get("pciDeviceId"))
    raw_sub = _int(pci.get("pciSubSystemId"))
    limits = r.get("nvmlDeviceGetPowerManagementLimitConstraints")
    memory = r.get("nvmlDeviceGetMemoryInfo") or {}
    arch = _int(r.get("nvmlDeviceGetArchitecture"))
    cores = _int(r.get("nvmlDeviceGetNumGpuCores"))
    cc = r.get("nvmlDeviceGetCudaComputeCapability")
    ecc = r.get("nvmlDeviceGetEccMode")
    mig = r.get("nvmlDeviceGetMigMode")
    virt = _int(r.get("nvmlDeviceGetVirtualizationMode"))
    reasons = _int(r.first(
        ("nvmlDeviceGetCurrentClocksEventReasons",),
        ("nvmlDeviceGetCurrentClocksThrottleReasons",),
    ))
    compute_mode = _int(r.get("nvmlDeviceGetComputeMode"))
    pstate = _int(r.get("nvmlDeviceGetPerformanceState"))
    util = r.get("nvmlDeviceGetUtilizationRates") or {}
    links, remotes = nvlink.read(nvml, handle, r.unavailable)
    name = r.get("nvmlDeviceGetName")
    virtualization = VIRTUALIZATION_MODES.get(virt) if virt is not None else None
    mig_enabled = _bool(_pair(mig, 0))
    sm_count = None
    if cores is not None and arch in CORES_PER_SM:
        per_sm = CORES_PER_SM[arch]
        # GA100 (A100, A30, A800: compute capability 8.0) has 64 cores per SM, GA10x 128.
        if arch == 7:
            per_sm = 64 if cc == [8, 0] else 128
        sm_count = cores // per_sm

    gpu: Dict[str, Any] = {
        "index": index,
        "name": name,
        "uuid": r.get("nvmlDeviceGetUUID"),
        "serial": r.get("nvmlDeviceGetSerial"),
        "board_part_number": r.get("nvmlDeviceGetBoardPartNumber"),
        "vbios_version": r.get("nvmlDeviceGetVbiosVersion"),
        "inforom_image_version": r.get("nvmlDeviceGetInforomImageVersion"),
        "gsp_firmware_version": r.get("nvmlDeviceGetGspFirmwareVersion"),
        "pci_bus_id": pci.get("busId"),
        "pci_device_id": None if raw_id is None else variants.format_pci_device_id(raw_id),
        "pci_subsystem_id": None if raw_sub is None else variants.format_pci_device_id(raw_sub),
        "architecture": ARCHITECTURES.get(arch) if arch is not None else None,
        "cuda_compute_capability": f"{cc[0]}.{cc[1]}" if isinstance(cc, list) and len(cc) == 2
        else None,
        "driver_version": system.get("driver_version"),
        "cuda_driver_version": system.get("cuda_driver_version"),
        "memory_total_mib": _mib(memory.get("total")),
        "memory_used_mib": _mib(memory.get("used")),
        "cuda_cores": cores,
        "sm_count": sm_count,
        "power_limit_w": _watts(r.get("nvmlDeviceGetPowerManagementLimit")),
        "power_limit_default_w": _watts(r.get("nvmlDeviceGetPowerManagementDefaultLimit")),
        "power_limit_enforced_w": _watts(r.get("nvmlDeviceGetEnforcedPowerLimit")),
        "power_limit_min_w": _watts(_pair(limits, 0)),
        "power_limit_max_w": _watts(_pair(limits, 1)),
        "power_draw_w": _watts(r.get("nvmlDeviceGetPowerUsage")),
        "persistence_mode": _bool(r.get("nvmlDeviceGetPersistenceMode")),
        "compute_mode": COMPUTE_MODES.get(compute_mode) if compute_mode is not None else None,
        "ecc_enabled": _bool(_pair(ecc, 0)),
        "ecc_pending": _bool(_pair(ecc, 1)),
        "mig_enabled": mig_enabled,
        "mig_pending": _bool(_pair(mig, 1)),
        "mig_devices": _mig_devices(nvml, handle) if mig_enabled else [],
        "virtualization_mode": virtualization,
        "pcie_gen_current": _int(r.get("nvmlDeviceGetCurrPcieLinkGeneration")),
        "pcie_gen_max": _int(r.get("nvmlDeviceGetMaxPcieLinkGeneration")),
        "pcie_width_current": _int(r.get("nvmlDeviceGetCurrPcieLinkWidth")),
        "pcie_width_max": _int(r.get("nvmlDeviceGetMaxPcieLinkWidth")),
        "nvlink_links_active": sum(1 for s in links if s),
        "nvlink_links_total": len(links),
        # Where each active link goes (agent/gpu/nvlink.py); None: NVML did not say.
        "nvlink_remotes": remotes,
        "clocks_event_reasons": reasons,
        "clocks_event_reason_names": decode_event_reasons(reasons),
        "temperature_c": _int(r.get("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU")),
        "performance_state": None if pstate is None else f"P{pstate}",
        "utilization_gpu_pct": _int(util.get("gpu")),
        "processes": _processes(r),
    }
    gpu.update(_clocks(r))
    gpu["variant"] = variants.classify_variant(raw_id, name, virtualization)
    gpu["nvlink_links_variant"] = variants.nvlink_links(gpu["variant"])
    api_restriction = r.get(
        "nvmlDeviceGetAPIRestriction", "NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS")
    gpu["capabilities"] = capabilities.assess(gpu, r.unavailable, api_restriction, euid)
    if probe_writes:
        capabilities.probe_writes(gpu, _setter(nvml, handle))
    gpu["health"] = health.read_and_judge(nvml, handle, r.unavailable, arch, pci.get("busId"),
                                          _kernel_log(nvml), health.NvLinks(
                                              gpu["nvlink_links_active"],
                                              gpu["nvlink_links_variant"],
                                              gpu["variant"].get("label")),
                                          nvlink_states=links)
    gpu["unavailable"] = dict(sorted(r.unavailable.items()))
    return gpu


# The origin agent/survey.py's open_source gives the `nvidia-smi -q -x` it ran on this very
# host: its answers are this host's, so its kernel log is the one to read.
LIVE_SMI_ORIGIN = "nvidia-smi -q -x"


def _kernel_log(nvml: Nvml) -> health.KernelLog:
    """This host's kernel log, unless the answers are a recording of another machine."""
    if nvml.source == "replay" and getattr(nvml, "origin", "") != LIVE_SMI_ORIGIN:
        return health.KernelLog(False, "not read: the GPU answers are replayed from a "
                                "recording of another machine", [])
    return health.read_kernel_log()


def _setter(nvml: Nvml, handle: Handle) -> Callable[..., Optional[str]]:
    def call(fn: str, *args: Arg) -> Optional[str]:
        try:
            nvml.call(handle, fn, *args)
        except NvmlError as exc:
            return exc.name
        return None

    return call
