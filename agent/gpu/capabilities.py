"""May the tenant change a GPU setting? A verdict per setting, with its evidence.

By default the verdicts are inferred from read-only signals: the virtualization mode, API
restrictions, power-limit constraints, supported clocks, which getters answered, and
whether the agent runs as root. `probe_writes` (opt-in, `--probe-writes`) turns an
inference into an observation by writing each setting's *current* value back, a no-op
for the card, and recording what the driver said, such as the seed's provider C:
"Changing power management limit is not supported in current scope".
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

SETTINGS = (
    "application_clocks",
    "locked_gpu_clocks",
    "locked_memory_clocks",
    "power_limit",
    "persistence_mode",
    "compute_mode",
    "ecc",
)
# The driver's answers that mean "not for you", as opposed to "not known here".
REFUSALS = {"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_INVALID_STATE"}
APP_CLOCKS_API = "NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS"
COMPUTE_MODE_CODES = {"Default": 0, "Exclusive_Thread": 1, "Prohibited": 2, "Exclusive_Process": 3}

Verdict = Dict[str, Any]


def _verdict(verdict: str, *evidence: str) -> Verdict:
    return {"verdict": verdict, "method": "inferred", "evidence": list(evidence), "probe": None}


def _failed(unavailable: Dict[str, str], *keys: str) -> Optional[str]:
    """'key: ERROR' for the first of these getters that answered an error."""
    for key in keys:
        if key in unavailable:
            return f"{key}: {unavailable[key]}"
    return None


def _needs_root(euid: int, granted: Verdict) -> Verdict:
    if euid == 0:
        return granted
    return _verdict(
        "unknown",
        f"agent runs as uid {euid}, not root: NVML allows this to root only; "
        "run the agent as root (or with sudo) to know",
        *granted["evidence"],
    )


def assess(
    gpu: Dict[str, Any],
    unavailable: Dict[str, str],
    api_restriction: Optional[int],
    euid: int,
) -> Dict[str, Verdict]:
    """Per setting, whether this tenant could change it on `gpu`, and why not when not."""
    if gpu.get("virtualization_mode") == "vgpu":
        reason = "vGPU guest: the hypervisor, not the tenant, owns the card's settings"
        return {setting: _verdict("no", reason) for setting in SETTINGS}
    return {
        "application_clocks": _application_clocks(gpu, unavailable, api_restriction, euid),
        "locked_gpu_clocks": _locked_clocks(gpu, unavailable, euid, "graphics"),
        "locked_memory_clocks": _locked_clocks(gpu, unavailable, euid, "memory"),
        "power_limit": _power_limit(gpu, unavailable, euid),
        "persistence_mode": _simple(
            gpu, unavailable, euid, "persistence_mode", "nvmlDeviceGetPersistenceMode"),
        "compute_mode": _simple(gpu, unavailable, euid, "compute_mode", "nvmlDeviceGetComputeMode"),
        "ecc": _ecc(gpu, unavailable, euid),
    }


def _application_clocks(
    gpu: Dict[str, Any], unavailable: Dict[str, str], restriction: Optional[int], euid: int
) -> Verdict:
    failed = _failed(unavailable, "nvmlDeviceGetSupportedMemoryClocks")
    if gpu.get("supported_memory_clocks") is None:
        return _verdict("no", failed or "no supported application clocks listed")
    listed = _clock_note(gpu, "graphics")
    if restriction == 0:
        return _verdict("yes", "API restriction off: any user may set application clocks", listed)
    if restriction == 1:
        return _needs_root(euid, _verdict("yes", "API restriction: root only", listed, "root"))
    note = _failed(unavailable, f"nvmlDeviceGetAPIRestriction({APP_CLOCKS_API})")
    return _needs_root(euid, _verdict("yes", listed, note or "API restriction unknown", "root"))


def _clock_note(gpu: Dict[str, Any], kind: str) -> str:
    clocks = gpu.get(f"supported_{kind}_clocks") or {}
    return (f"{clocks.get('count')} supported {kind} clocks, "
            f"{clocks.get('min_mhz')}-{clocks.get('max_mhz')} MHz")


def _locked_clocks(
    gpu: Dict[str, Any], unavailable: Dict[str, str], euid: int, kind: str
) -> Verdict:
    clocks = gpu.get(f"supported_{kind}_clocks")
    if clocks is None:
        failed = _failed(unavailable, "nvmlDeviceGetSupportedMemoryClocks")
        return _verdict("no", failed or f"no supported {kind} clocks listed")
    if kind == "memory" and clocks.get("count") == 1:
        return _verdict("no", "one supported memory clock: there is nothing to lock to")
    return _needs_root(euid, _verdict(
        "yes", _clock_note(gpu, kind),
        "inferred only: NVML has no getter for locked clocks", "root"))


def _power_limit(gpu: Dict[str, Any], unavailable: Dict[str, str], euid: int) -> Verdict:
    if gpu.get("power_limit_w") is None:
        failed = _failed(unavailable, "nvmlDeviceGetPowerManagementLimit")
        return _verdict("no", failed or "power limit not reported")
    low, high = gpu.get("power_limit_min_w"), gpu.get("power_limit_max_w")
    if low is None or high is None:
        failed = _failed(unavailable, "nvmlDeviceGetPowerManagementLimitConstraints")
        return _verdict("no", failed or "no power limit constraints reported")
    if low == high:
        return _verdict("no", f"constraints min == max == {low:g} W: nothing to choose")
    return _needs_root(euid, _verdict("yes", f"constraints {low:g}-{high:g} W", "root"))


def _simple(
    gpu: Dict[str, Any], unavailable: Dict[str, str], euid: int, field: str, getter: str
) -> Verdict:
    if gpu.get(field) is None:
        return _verdict("no", _failed(unavailable, getter) or f"{field} not reported")
    return _needs_root(euid, _verdict("yes", f"{getter} answers", "root"))


def _ecc(gpu: Dict[str, Any], unavailable: Dict[str, str], euid: int) -> Verdict:
    if gpu.get("ecc_enabled") is None:
        return _verdict("no", _failed(unavailable, "nvmlDeviceGetEccMode") or "ECC not reported")
    return _needs_root(euid, _verdict(
        "yes", "nvmlDeviceGetEccMode answers", "a change takes effect after a reset", "root"))


def write_back_calls(gpu: Dict[str, Any]) -> List[Tuple[str, str, Tuple[int, ...]]]:
    """(setting, NVML setter, current value) for each setting whose value is known.

    Locked clocks have no getter, so no write of them could be a no-op: never probed.
    """
    calls: List[Tuple[str, str, Tuple[int, ...]]] = []
    if gpu.get("power_limit_w") is not None:
        milliwatts = round(gpu["power_limit_w"] * 1000)
        calls.append(("power_limit", "nvmlDeviceSetPowerManagementLimit", (milliwatts,)))
    mem, sm = gpu.get("app_mem_clock_target_mhz"), gpu.get("app_sm_clock_target_mhz")
    if mem is not None and sm is not None:
        calls.append(("application_clocks", "nvmlDeviceSetApplicationsClocks", (mem, sm)))
    if gpu.get("persistence_mode") is not None:
        calls.append(("persistence_mode", "nvmlDeviceSetPersistenceMode",
                      (int(gpu["persistence_mode"]),)))
    if gpu.get("compute_mode") in COMPUTE_MODE_CODES:
        calls.append(("compute_mode", "nvmlDeviceSetComputeMode",
                      (COMPUTE_MODE_CODES[gpu["compute_mode"]],)))
    if gpu.get("ecc_pending") is not None:
        # The pending mode is what the card will boot into: writing it back changes nothing.
        calls.append(("ecc", "nvmlDeviceSetEccMode", (int(gpu["ecc_pending"]),)))
    return calls


def probe_writes(gpu: Dict[str, Any], setter: Callable[..., Optional[str]]) -> None:
    """Write each known current value back and let the driver's answer decide."""
    caps: Dict[str, Verdict] = gpu["capabilities"]
    for setting, fn, args in write_back_calls(gpu):
        error = setter(fn, *args)
        key = f"{fn}({','.join(str(a) for a in args)})"
        verdict = caps[setting]
        verdict["probe"] = {"call": key, "result": error or "accepted"}
        if error is None:
            caps[setting] = {**verdict, "verdict": "yes", "method": "probed",
                             "evidence": [f"{key} accepted (current value written back)"]}
        elif error in REFUSALS:
            caps[setting] = {**verdict, "verdict": "no", "method": "probed",
                             "evidence": [f"{key} refused: {error}"]}
        else:
            verdict["evidence"] = verdict["evidence"] + [f"write probe inconclusive: {error}"]
    for setting in ("locked_gpu_clocks", "locked_memory_clocks"):
        caps[setting]["evidence"] = caps[setting]["evidence"] + [
            "not write-probed: NVML has no getter for locked clocks, so no write is a no-op"]
