"""Whether a card is failing, or has been: the counters its driver keeps, and a verdict.

Every counter is read through `agent.source.nvml.Nvml` (read-only calls), so a live driver, a
recording and a converted nvidia-smi report take the same path; a call the driver does not
answer stays None and is noted in the GPU's `unavailable` map, as the fingerprint does.
The kernel log's Xid lines are read where the tenant may read it, and said unreadable
where not. `RULE` is the verdict's rule in words; `judge` applies it.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import collections
import functools
import math
import os
import re
import shutil
import subprocess
import time
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from agent.health import xid as xids
from agent.source.nvml import Arg, Handle, Nvml, NvmlError, call_key

# What NVIDIA documents, and what the rules below rest on (each rule names its source
# again where it is applied; MEM is NVIDIA's "GPU Memory Error Management",
# docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/, one page per section):
# - MEM, "Row Remapping" (row-remapping.html): "The process of row-remapping requires a
#   GPU reset to take effect"; "Supports up to 512 remapping for the frame buffer", where
#   page retirement on older GPUs "Supported a maximum of 64 retirements".
# - MEM, "RMA Policy" (rma-policy-thresholds-for-row-remapping.html), "GPU DRAM Memory
#   RMA Policy": "the RMA criteria is met when the row-remapping failure flag is set and
#   validated by the field diagnostic"; the flag is set by a remap attempt on a bank that
#   already has eight uncorrectable rows remapped, on a row already remapped, or after 512.
#   "GPU L2 Memory RMA Policy": "Regarding SRAM uncorrectable errors, the RMA criteria is
#   met" when the SRAM Threshold Exceeded flag is set: "More than 4 UCE Unique Count events
#   within an address bank for parity protected SRAMs", more than 2 for SEC-DED ones.
# - MEM, "Error Recovery and Response Flags" (error-recovery-and-response-flags.html):
#   with the row-remapping pending flag set "unaffected applications can continue running
#   ... and new workloads can be launched"; the recovery action flag (RECOVERY_ACTIONS).
# - NVML API Reference, nvmlDeviceGetRemappedRows: "isPending indicates whether or not
#   there are pending remappings. A reset will be required to actually remap the row.
#   failureOccurred will be set if a row remapping ever failed in the past."
# - NVIDIA's "Dynamic Page Retirement" (before Ampere), docs.nvidia.com/deploy/
#   dynamic-page-retirement: the driver retires a page after one double-bit error or two
#   single-bit errors on one address; after a double-bit error "'Pending Page Blacklist'
#   status becomes 'YES'" until the driver reloads or the GPU resets.
# - NVML API Reference, nvmlDeviceGetTotalEccErrors: volatile counts are "since the last
#   driver load", aggregate ones "persist indefinitely"; the total is "the sum of errors
#   across each of the separate memory systems".
# - DCGM's health watch (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp, limits in
#   common/DcgmGPUHardwareLimits.h, next steps in dcgmlib/dcgm_errors.h), where NVIDIA
#   documents no threshold: MonitorMemVolatileDbes fails on any volatile double-bit error
#   (DCGM_FR_VOLATILE_DBE_DETECTED_NEXT: "Drain the GPU and reset it or reboot the
#   node."); MonitorMemRetiredPending only warns; MonitorMemUnrepairableFlag fails.
REMAP_SPARES = 512
# How a reason about the host link under load begins: the report's host-link finding
# names the same cause, and drops the health finding that would say it twice.
LINK_REASON = "the host link ran at"
# How a reason about missing NVLink links begins; judged again after load, it is carried
# from the fingerprint's verdict (the link count is the fingerprint's reading).
NVLINK_REASON = "NVLink:"
RETIREMENT_TABLE = 64
# DCGM counts the retirement table full at DCGM_LIMIT_MAX_RETIRED_PAGES = 63 ("updated to
# match the field diag", common/DcgmGPUHardwareLimits.h; MonitorMemSbeDbeRetiredPages
# fails at it); MEM, "Row Remapping", says 64 retirements at most.
RETIRED_FULL = 63
# Degraded once a quarter of those spares is used: NVIDIA publishes no threshold short of
# a failure, and a quarter leaves the card repairing itself with visibly less margin than
# a fresh one, where a handful of correctable remaps is the mechanism working as designed
# ("catch weakening cells at the 2 SBE point ... before ... a DBE").
REMAPS_DEGRADED = REMAP_SPARES // 4
RETIRED_DEGRADED = RETIREMENT_TABLE // 4

RULE = (
    "Each reason asks for an action: none, reset (the card works on; the provider resets "
    "it), drain_and_reset (the node's work is drained first), replace (NVIDIA's RMA "
    "criteria); the verdict asks for the most any reason does. Each rule names its source in "
    "parentheses; MEM is NVIDIA's GPU Memory Error Management, DCGM its health watch. "
    "failing: a row remapping failed, or the driver's SRAM error threshold is exceeded "
    "(replace; MEM, RMA Policy); the driver flags unrepairable memory (replace; DCGM, "
    f"MonitorMemUnrepairableFlag); {RETIRED_FULL} or more retired pages (replace; DCGM_LIMIT_"
    "MAX_RETIRED_PAGES); any uncorrectable ECC error since the driver loaded (reset; DCGM, "
    "MonitorMemVolatileDbes); NVML's recovery action asks for a GPU or bus reset (reset) or "
    "a node or system reboot (drain_and_reset) (MEM, Error Recovery and Response Flags); an "
    "NVLink replay or recovery error during the run, or CRC errors at 100 a second or more "
    "(reset; DCGM, MonitorNVLink4Fields); a hardware Xid stamped inside the agent's run "
    "whose bucket asks more than restarting the application: RESET_GPU (reset), RESTART_BM "
    "(drain_and_reset), CONTACT_SUPPORT (replace), and the workflows of Xid 48 and 74 "
    "(reset, as the counters they follow) (NVIDIA's Xid catalog, Resolution Bucket "
    "(Immediate Action); agent/health/xid.py). "
    "degraded: a row remap, a page retirement, a memory channel or TPC repair pending "
    "(reset: unaffected work goes on until the reset, MEM, Error Recovery and Response "
    "Flags; DCGM does not fail on them); NVML's recovery action asks to drain peer-to-peer "
    "traffic (drain_and_reset); rows remapped, or pages retired, for uncorrectable errors; "
    "uncorrectable errors in the card's life but none since the driver loaded; "
    f"{REMAPS_DEGRADED} or more remapped rows of the {REMAP_SPARES} spares, or "
    f"{RETIRED_DEGRADED} or more retired pages of {RETIREMENT_TABLE} (fleet's own: no "
    "document sets a threshold short of a failure); a memory bank with no spare row left "
    "(the remap bank histogram's None; its next remap fails, MEM, RMA Policy); PCIe replays "
    "during the run above DCGM's rate (ceil of 1e-12 x the lane speed x lanes a minute: 31 "
    "at Gen5 x16; DCGM, MonitorPcie); a hardware Xid inside the run whose bucket asks "
    "nothing of the card (RESTART_APP, IGNORE); the host link under load below the "
    "generation or width the card and slot support (fleet's own); fewer active NVLink links "
    "than the variant carries (agent/gpu/variants.py), where at least one is active: a "
    "single SXM card passed into a VM shows none, which proves nothing. These ask for no "
    "action unless said. "
    "unknown: none of these, and the driver did not answer the uncorrectable ECC count "
    "since it loaded, or answered neither remapped rows nor retired pages (ECC off, a vGPU "
    "guest, an old driver or recording); no action. healthy: otherwise. Throttle time, "
    "energy, the replay count at rest and Xid lines before the run are reported, not "
    "judged: they follow load and history the renter cannot see."
)

ERROR_TYPES = (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
               ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"))
COUNTER_TYPES = (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC"))
# Ampere split the locations into SRAM (caches, register files) and DRAM (HBM); older
# cards count each cache apart. NVML_MEMORY_LOCATION_DRAM is DEVICE_MEMORY's value (2).
LOCATIONS = (("DRAM", "NVML_MEMORY_LOCATION_DRAM"), ("SRAM", "NVML_MEMORY_LOCATION_SRAM"))
LEGACY_LOCATIONS = (
    ("DRAM", "NVML_MEMORY_LOCATION_DRAM"),
    ("L1", "NVML_MEMORY_LOCATION_L1_CACHE"),
    ("L2", "NVML_MEMORY_LOCATION_L2_CACHE"),
    ("register_file", "NVML_MEMORY_LOCATION_REGISTER_FILE"),
    ("texture", "NVML_MEMORY_LOCATION_TEXTURE_MEMORY"),
    ("texture_shared", "NVML_MEMORY_LOCATION_TEXTURE_SHM"),
    ("CBU", "NVML_MEMORY_LOCATION_CBU"),
)
AMPERE = 7  # NVML_DEVICE_ARCH_AMPERE
RETIREMENT_CAUSES = (
    ("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
    ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
)
# Time the clocks were held below their target, by the policy that held them.
PERF_POLICIES = (
    ("power", "NVML_PERF_POLICY_POWER"),
    ("thermal", "NVML_PERF_POLICY_THERMAL"),
    ("sync_boost", "NVML_PERF_POLICY_SYNC_BOOST"),
    ("board_limit", "NVML_PERF_POLICY_BOARD_LIMIT"),
    ("low_utilization", "NVML_PERF_POLICY_LOW_UTILIZATION"),
    ("reliability", "NVML_PERF_POLICY_RELIABILITY"),
    ("total_app_clocks", "NVML_PERF_POLICY_TOTAL_APP_CLOCKS"),
    ("total_base_clocks", "NVML_PERF_POLICY_TOTAL_BASE_CLOCKS"),
)
# The NVML functions read_health calls, all read-only (update_after_load adds the link
# maxima, which the fingerprint reads too).
CALLS = (
    "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetMemoryErrorCounter", "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetSramEccErrorStatus", "nvmlDeviceGetRepairStatus",
    "nvmlDeviceGetUnrepairableMemoryFlag_v1", "nvmlDeviceGetRowRemapperHistogram",
    "nvmlDeviceGetNvLinkErrorCounter",
)
# NVML's recovery action (nvmlDeviceGetFieldValues, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
# nvmlDeviceGpuRecoveryAction_t: 0 NONE "no action needed", 1 GPU_RESET, 2 NODE_REBOOT,
# 3 DRAIN_P2P, 4 DRAIN_AND_RESET "Drain P2P and Reset Gpu", 5 RECOVER_IMEX_DOMAIN,
# 6 BUS_RESET, 7 SYSTEM_REBOOT. NVIDIA's "Error Recovery and Response Flags"
# (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html):
# RESET "requires a reset to recover. Terminate all GPU processes, reset the GPU";
# NODE_REBOOT "may have left the OS in an inconsistent state".
RECOVERY_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
# value -> (verdict, action, words): the reboots and resets stop the card until done
# (failing); the drains leave it working for what does not cross to a peer (degraded).
RECOVERY_ACTIONS = {
    1: ("failing", "reset", "a GPU reset"),
    2: ("failing", "drain_and_reset", "a node reboot"),
    3: ("degraded", "drain_and_reset", "its peer-to-peer traffic drained"),
    4: ("degraded", "drain_and_reset", "its peer-to-peer traffic drained and a GPU reset"),
    5: ("failing", "drain_and_reset", "its IMEX domain recovered"),
    6: ("failing", "reset", "a reset of its PCIe bus"),
    7: ("failing", "drain_and_reset", "a system reboot"),
}
# The buyer's actions, least first; a verdict asks for the most any of its reasons asks.
ACTIONS = ("none", "reset", "drain_and_reset", "replace")
NVLINK_ERRORS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
                 ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                 ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
                 ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))
# DCGM's health watch (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp, MonitorNVLink4Fields;
# common/DcgmGPUHardwareLimits.h): a replay or recovery error (DCGM_LIMIT_MAX_NVLINK_ERROR
# = 1) fails the watch; CRC errors warn, and fail at DCGM_LIMIT_MAX_NVLINK_CRC_ERROR = 100
# a second ("RM has informed us that CRC errors only matter at rates of 100+ per second").
NVLINK_CRC_PER_S = 100.0
# DCGM's PCIe watch (MonitorPcie, GetExpectedPcieReplayRate) warns when the replays of a
# minute exceed ceil(per-lane rate x lanes): a bit error rate of 1e-12 at the lane's
# speed, 0.15 a minute per lane at Gen1 doubling each generation (1.92 at Gen5: 31 a
# minute at Gen5 x16).
PCIE_REPLAYS_PER_LANE_MIN = (0.15, 0.3, 0.48, 0.96, 1.92, 3.84)

NOT_AVAILABLE = 2**63  # NVML's "no value" is ULLONG_MAX; a real counter never gets near

XID_MARK = "NVRM: Xid"
XID_EVENTS = 64  # the document keeps at most this many per GPU
XID_LINE_CHARS = 512
KMSG = "/dev/kmsg"
# The kernel's ring buffer holds a few MiB at most; these bound a slow or endless read.
KMSG_SECONDS = 2.0
KMSG_RECORDS = 1_000_000
DMESG_SECONDS = 5.0
Ask = Callable[..., Any]  # (fn, *args) -> the answer, or None when the driver gave none
_XID_BUS = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]+):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})")
_BUS_ID = re.compile(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.\d)?$")


class NvLinks(NamedTuple):
    """A GPU's active NVLink links, how many its variant carries (None: not in the
    catalog) and the variant's label, for the verdict."""

    active: int
    carried: Optional[int]
    variant: Optional[str]


class KernelLog(NamedTuple):
    """What the kernel log gave: whether it could be read, from where or why not, and its
    lines that carry an Xid, oldest first."""

    readable: bool
    note: str
    lines: List[str]


# --- reading --------------------------------------------------------------------------


def _count(value: Any) -> Optional[int]:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number < NOT_AVAILABLE else None


def read_health(
    nvml: Nvml,
    handle: Handle,
    unavailable: Optional[Dict[str, str]] = None,
    architecture: Optional[int] = None,
    bus_id: Optional[str] = None,
    kernel_log: Optional[KernelLog] = None,
    nvlinks: Sequence[int] = (),
) -> Dict[str, Any]:
    """The counters of the GPU behind `handle`, as the Health model's fields (no verdict).

    Calls the driver does not answer go into `unavailable` (the GPU's map) by their
    recording key. `architecture` (NVML_DEVICE_ARCH_*) picks the memory locations to ask;
    `bus_id` picks this GPU's Xid lines out of `kernel_log`; no log, no `xid`; `nvlinks`:
    the active NVLink links, whose error counters are read.
    """
    missing: Dict[str, str] = {} if unavailable is None else unavailable

    def ask(fn: str, *args: Arg) -> Any:
        try:
            return nvml.call(handle, fn, *args)
        except NvmlError as exc:
            missing[call_key(fn, args)] = exc.name
            return None

    return {
        "ecc": _ecc(ask, architecture),
        "remapped_rows": _remapped_rows(ask("nvmlDeviceGetRemappedRows")),
        "retired_pages": _retired_pages(ask),
        "pcie_replays": _count(ask("nvmlDeviceGetPcieReplayCounter")),
        "pcie_replays_during_run": None,
        "pcie_gen_load": None,
        "pcie_width_load": None,
        "throttle_ns": _throttle(ask),
        "energy_mj": _count(ask("nvmlDeviceGetTotalEnergyConsumption")),
        "xid": None if kernel_log is None else xid(kernel_log, bus_id),
        **_repair_flags(ask),
        "nvlink_errors": nvlink_errors(ask, nvlinks),
        "nvlink_errors_during_run": None,
        "run_seconds": None,
        "xid_during_run": None,
    }


def _flag(value: Any) -> Optional[bool]:
    number = _count(value)
    return None if number is None else bool(number)


def _repair_flags(ask: Ask) -> Dict[str, Any]:
    """The recovery action, the remap bank histogram and the repair flags nvidia-smi -q
    prints beside the ECC counts (drivers from R575; older ones do not answer)."""
    histogram = ask("nvmlDeviceGetRowRemapperHistogram")
    banks = None
    if isinstance(histogram, dict):
        banks = {k: _count(histogram.get(k)) for k in ("max", "high", "partial", "low", "none")}
        if any(v is None for v in banks.values()):
            banks = None
    sram = ask("nvmlDeviceGetSramEccErrorStatus")
    repair = ask("nvmlDeviceGetRepairStatus")  # pynvml: [channel pending, TPC pending]
    pair = isinstance(repair, (list, tuple)) and len(repair) == 2
    return {
        "recovery_action": _count(ask("nvmlDeviceGetFieldValues", RECOVERY_FIELD)),
        "remap_histogram": banks,
        "sram_threshold_exceeded": _flag(sram.get("bThresholdExceeded"))
        if isinstance(sram, dict) else None,
        "channel_repair_pending": _flag(repair[0]) if pair else None,
        "tpc_repair_pending": _flag(repair[1]) if pair else None,
        "unrepairable_memory": _flag(ask("nvmlDeviceGetUnrepairableMemoryFlag_v1")),
    }


def nvlink_errors(ask: Ask, links: Sequence[int]) -> Optional[List[Dict[str, Any]]]:
    """Per active link, nvmlDeviceGetNvLinkErrorCounter's replay, recovery and CRC counts
    (what `nvidia-smi nvlink -e` prints); None when no link is active or none answered.
    The per-link calls, because NVML's total fields answered NOT_SUPPORTED on the lent
    H100's device handle (issue 36)."""
    read = []
    for link in links:
        counts = {name: _count(ask("nvmlDeviceGetNvLinkErrorCounter", link, arg))
                  for name, arg in NVLINK_ERRORS}
        if any(v is not None for v in counts.values()):
            read.append({"link": link, **counts})
    return read or None


def _ecc(ask: Ask, architecture: Optional[int]) -> Optional[Dict[str, Any]]:
    totals: Dict[str, Optional[int]] = {}
    for error, error_arg in ERROR_TYPES:
        for counter, counter_arg in COUNTER_TYPES:
            totals[f"{error}_{counter}"] = _count(
                ask("nvmlDeviceGetTotalEccErrors", error_arg, counter_arg))
    if all(v is None for v in totals.values()):
        # A driver that keeps no totals keeps no locations either: asking for each one
        # would only fill `unavailable`.
        return None
    locations: Sequence[Tuple[str, str]]
    if architecture is None:  # an old driver or a report that does not say: ask all
        locations = LOCATIONS + LEGACY_LOCATIONS[1:]
    else:
        locations = LEGACY_LOCATIONS if architecture < AMPERE else LOCATIONS
    by_location: Dict[str, Dict[str, Optional[int]]] = {}
    for name, location in locations:
        counts = {
            f"{error}_{counter}": _count(ask("nvmlDeviceGetMemoryErrorCounter", error_arg,
                                             counter_arg, location))
            for error, error_arg in ERROR_TYPES for counter, counter_arg in COUNTER_TYPES
        }
        if any(v is not None for v in counts.values()):
            by_location[name] = counts
    return {**totals, "by_location": by_location}


def _remapped_rows(answer: Any) -> Optional[Dict[str, Any]]:
    # pynvml answers (correctable, uncorrectable, pending, failure).
    if not isinstance(answer, (list, tuple)) or len(answer) != 4:
        return None
    correctable, uncorrectable = _count(answer[0]), _count(answer[1])
    if correctable is None or uncorrectable is None:
        return None
    return {"correctable": correctable, "uncorrectable": uncorrectable,
            "pending": bool(answer[2]), "failure": bool(answer[3])}


def _retired_pages(ask: Ask) -> Optional[Dict[str, Any]]:
    counts: Dict[str, Optional[int]] = {}
    for name, cause in RETIREMENT_CAUSES:
        pages = ask("nvmlDeviceGetRetiredPages", cause)
        # NVIDIA's own nvidia_smi.py counts the list it gets back; addresses are not kept.
        counts[name] = len(pages) if isinstance(pages, list) else None
    pending = ask("nvmlDeviceGetRetiredPagesPendingStatus")
    if all(v is None for v in counts.values()) and pending is None:
        return None
    return {**counts, "pending": None if pending is None else bool(pending)}


def _throttle(ask: Ask) -> Dict[str, int]:
    held: Dict[str, int] = {}
    for name, policy in PERF_POLICIES:
        answer = ask("nvmlDeviceGetViolationStatus", policy)
        if isinstance(answer, dict):
            ns = _count(answer.get("violationTime"))  # NVML: nanoseconds
            if ns is not None:
                held[name] = ns
    return held


# --- the kernel log -------------------------------------------------------------------


def xid_lines(lines: Iterable[str]) -> List[str]:
    """The lines that carry an Xid, in their order."""
    return [line.rstrip("\n") for line in lines if XID_MARK in line]


def _kmsg_line(record: str) -> Optional[str]:
    """'4,1234,430954509105,-;NVRM: Xid ...' as dmesg prints it: '[430954.509105] NVRM: ...'."""
    head, sep, message = record.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    message = message.split("\n", 1)[0]  # continuation lines (" KEY=value") are not text
    try:
        return f"[{int(fields[2]) / 1e6:12.6f}] {message}"
    except (IndexError, ValueError):
        return message


def _read_kmsg(deadline: float) -> Tuple[Optional[List[str]], str]:
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"{KMSG}: {exc.strerror or exc}"
    kept: collections.deque[str] = collections.deque(maxlen=10 * XID_EVENTS)
    try:
        for _ in range(KMSG_RECORDS):
            if time.monotonic() > deadline:
                return list(kept), f"{KMSG} (stopped after {KMSG_SECONDS:g} s)"
            try:
                data = os.read(fd, 16384)  # one record per read
            except BlockingIOError:
                break  # the end of the buffer: nothing newer to wait for
            except BrokenPipeError:
                continue  # the record was overwritten while we read: skip it
            except OSError as exc:
                return None, f"{KMSG}: {exc.strerror or exc}"
            if not data:
                break
            line = _kmsg_line(data.decode("utf-8", "replace"))
            if line is not None and XID_MARK in line:
                kept.append(line)
    finally:
        os.close(fd)
    return list(kept), KMSG


def _read_dmesg() -> Tuple[Optional[List[str]], str]:
    exe = shutil.which("dmesg")
    if exe is None:
        return None, "dmesg: not installed"
    try:
        done = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=DMESG_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return None, f"dmesg: did not finish within {DMESG_SECONDS:g} s"
    except OSError as exc:
        return None, f"dmesg: {exc.strerror or exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, said[-1][:200] if said else f"dmesg: exit status {done.returncode}"
    return xid_lines(done.stdout.decode("utf-8", "replace").splitlines()), "dmesg"


@functools.lru_cache(maxsize=1)
def read_kernel_log() -> KernelLog:
    """This host's kernel log, where the tenant may read it: /dev/kmsg without blocking,
    else `dmesg`. Read once per agent run: every GPU's lines come from the same log."""
    lines, kmsg_note = _read_kmsg(time.monotonic() + KMSG_SECONDS)
    if lines is not None:
        return KernelLog(True, kmsg_note, lines)
    lines, dmesg_note = _read_dmesg()
    if lines is not None:
        return KernelLog(True, dmesg_note, lines)
    return KernelLog(False, f"{kmsg_note}; {dmesg_note}", [])


def _bus_parts(text: str) -> Optional[Tuple[int, int, int]]:
    match = _BUS_ID.match(text.strip())
    if match is None:
        return None
    return int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)


def xid(log: KernelLog, bus_id: Optional[str]) -> Dict[str, Any]:
    """The Health model's `xid`: the newest of the log's Xid lines for the GPU at `bus_id`
    (NVML's "00000000:52:00.0"; the kernel prints "PCI:0000:52:00"), all of them when the
    bus is not known."""
    if not log.readable:
        return {"readable": False, "note": log.note, "events": []}
    want = None if bus_id is None else _bus_parts(bus_id)
    events = []
    for line in log.lines:
        match = _XID_BUS.search(line)
        if want is not None and (match is None or (
                int(match.group(1), 16), int(match.group(2), 16),
                int(match.group(3), 16)) != want):
            continue
        events.append(line[:XID_LINE_CHARS])
    kept = events[-XID_EVENTS:]
    return {"readable": True, "note": log.note, "events": kept,
            "classified": [xids.classify(line) for line in kept]}


# --- the verdict ----------------------------------------------------------------------


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def nvlink_reason(links: Optional[NvLinks]) -> Optional[str]:
    """Why a GPU with fewer active NVLink links than its variant carries is degraded;
    None when it has them all, shows none at all, or the count is not known."""
    if links is None or not links.carried or not 0 < links.active < links.carried:
        return None
    return (f"{NVLINK_REASON} {links.active} of {links.carried} links active "
            f"({links.variant or 'the variant'} carries {links.carried})")


class Finding(NamedTuple):
    """One reason of a verdict: how bad, what the buyer asks for, in words."""

    verdict: str  # "failing" or "degraded"
    action: str  # one of ACTIONS
    reason: str


def _pcie_limit(gen: Optional[int], width: Optional[int]) -> Optional[int]:
    """DCGM's most replays a minute for a link of `gen` and `width` (None: not known)."""
    if not gen or not width:
        return None
    per_lane = PCIE_REPLAYS_PER_LANE_MIN[min(gen, len(PCIE_REPLAYS_PER_LANE_MIN)) - 1]
    return math.ceil(round(per_lane * width, 6))


def _memory(health: Dict[str, Any]) -> List[Finding]:
    found: List[Finding] = []
    ecc = health.get("ecc") or {}
    rows = health.get("remapped_rows")
    pages = health.get("retired_pages")
    if rows is not None:
        if rows["failure"]:
            # MEM, "RMA Policy", "GPU DRAM Memory RMA Policy".
            found.append(Finding("failing", "replace",
                                 "a row remapping failed: no spare row was left"))
        if rows["pending"]:
            # MEM, "Error Recovery and Response Flags": "unaffected applications can
            # continue running ... and new workloads can be launched"; DCGM's health watch
            # has no check that fails on it (DCGM_FR_PENDING_ROW_REMAP is a diagnostic's).
            found.append(Finding("degraded", "reset", "a row remap is pending: it takes "
                                 "effect only when the GPU is reset"))
    if health.get("sram_threshold_exceeded"):
        # MEM, "RMA Policy", "GPU L2 Memory RMA Policy": the flag is the SRAM's RMA
        # criterion, as the failure flag is the DRAM's; DCGM's diagnostic rates it
        # DCGM_ERROR_ISOLATE ("Cannot perform workload. GPU should be isolated.").
        found.append(Finding("failing", "replace", "the driver's SRAM error threshold is "
                             "exceeded: too many uncorrectable errors in one SRAM bank"))
    if health.get("unrepairable_memory"):
        # DCGM's health watch, MonitorMemUnrepairableFlag: fails on the flag
        # (DCGM_FR_FAULTY_MEMORY; next step: run a field diagnostic).
        found.append(Finding("failing", "replace", "the driver flags unrepairable memory"))
    # NVML API Reference, nvmlRepairStatus_v1_t (bChannelRepairPending, bTpcRepairPending)
    # documents the flags and no action; "until the GPU is reset" is fleet's reading, by
    # the pending remap's rule.
    if health.get("channel_repair_pending"):
        found.append(Finding("degraded", "reset", "a memory channel repair is pending until "
                             "the GPU is reset"))
    if health.get("tpc_repair_pending"):
        found.append(Finding("degraded", "reset", "a TPC repair is pending until the GPU is "
                             "reset"))
    # No document gives a threshold short of a failure for the next three: fleet's own
    # (REMAPS_DEGRADED, RETIRED_DEGRADED), reported with nothing asked.
    if rows is not None:
        if rows["uncorrectable"]:
            found.append(Finding("degraded", "none", _n(rows["uncorrectable"], "row")
                                 + " remapped for uncorrectable errors"))
        total = rows["correctable"] + rows["uncorrectable"]
        if total >= REMAPS_DEGRADED:
            found.append(Finding("degraded", "none",
                                 f"{_n(total, 'remapped row')} of {REMAP_SPARES} spares"))
    banks = health.get("remap_histogram") or {}
    if banks.get("none"):
        # A total of 128 of 512 hides a bank with no spare row left: its next failing row
        # fails the remap, NVIDIA's RMA criterion (MEM, "RMA Policy"). Not yet that:
        # degraded, nothing to ask.
        found.append(Finding("degraded", "none", _n(banks["none"], "memory bank") + " with "
                             "no spare row left: the next row failing there fails its remap"))
    volatile = ecc.get("uncorrected_volatile")
    aggregate = ecc.get("uncorrected_aggregate")
    if volatile:
        # DCGM's health watch, MonitorMemVolatileDbes: fails on any ("Drain the GPU and
        # reset it or reboot the node."); the reset also activates the rows remapped for it
        # (MEM, "Row Remapping").
        found.append(Finding("failing", "reset", _n(volatile, "uncorrectable ECC error")
                             + " since the driver loaded"))
    elif aggregate:
        found.append(Finding("degraded", "none", _n(aggregate, "uncorrectable ECC error")
                             + " in the card's life" + (", none since the driver loaded"
                                                        if volatile == 0 else "")))
    if pages is not None:
        if pages["pending"]:
            # "Dynamic Page Retirement": pending "until the driver reloads or the GPU
            # resets"; DCGM's MonitorMemRetiredPending warns, it does not fail.
            found.append(Finding("degraded", "reset", "a page retirement is pending until "
                                 "the GPU is reset"))
        single, double = pages["single_bit"] or 0, pages["double_bit"] or 0
        if single + double >= RETIRED_FULL:
            found.append(Finding("failing", "replace", f"{single + double} retired pages: "
                                 f"the table is full at {RETIRED_FULL} (DCGM)"))
        elif single + double >= RETIRED_DEGRADED:
            found.append(Finding("degraded", "none",
                                 f"{single + double} retired pages of {RETIREMENT_TABLE}"))
        if double:
            found.append(Finding("degraded", "none",
                                 _n(double, "page") + " retired for double-bit errors"))
    return found


def _recovery(health: Dict[str, Any]) -> List[Finding]:
    # MEM, "Error Recovery and Response Flags", the recovery action flag (RECOVERY_ACTIONS).
    value = health.get("recovery_action")
    if not value:
        return []
    verdict, action, words = RECOVERY_ACTIONS.get(
        value, ("failing", "drain_and_reset", f"recovery action {value}"))
    return [Finding(verdict, action, f"the driver asks for {words} (NVML recovery action "
                                     f"{value})")]


def _links(health: Dict[str, Any], pcie_gen_max: Optional[int],
           pcie_width_max: Optional[int]) -> List[Finding]:
    found: List[Finding] = []
    seconds = health.get("run_seconds")
    rise = health.get("pcie_replays_during_run")
    gen, width = health.get("pcie_gen_load"), health.get("pcie_width_load")
    limit = _pcie_limit(gen or pcie_gen_max, width or pcie_width_max)
    if rise and seconds and limit is not None:
        # DCGM's health watch, MonitorPcie: a warning, so degraded with nothing asked.
        per_min = rise * 60.0 / seconds
        if per_min > limit:
            found.append(Finding("degraded", "none", f"the PCIe replay counter rose "
                                 f"{per_min:.0f} a minute during the run (DCGM warns above "
                                 f"{limit})"))
    # The host link under load against what card and slot support: fleet's own rule (no
    # NVIDIA document sets one); the report's host-link finding says the cause.
    if gen is not None and pcie_gen_max is not None and gen < pcie_gen_max:
        found.append(Finding("degraded", "none", f"{LINK_REASON} Gen{gen} under load; the "
                             f"card and slot support Gen{pcie_gen_max}"))
    if width is not None and pcie_width_max is not None and width < pcie_width_max:
        found.append(Finding("degraded", "none", f"{LINK_REASON} x{width} under load; the "
                             f"card and slot support x{pcie_width_max}"))
    # DCGM's health watch, MonitorNVLink4Fields (NVLINK_CRC_PER_S): fails on these.
    for link in health.get("nvlink_errors_during_run") or []:
        hard = [(link.get(k) or 0, k) for k in ("replay", "recovery")]
        for count, kind in hard:
            if count:
                found.append(Finding("failing", "reset", f"{NVLINK_REASON} link "
                                     f"{link['link']} logged {_n(count, kind + ' error')} "
                                     "during the run (DCGM fails on any)"))
        crc = (link.get("crc_flit") or 0) + (link.get("crc_data") or 0)
        # Below DCGM's rate a CRC error is not judged: healthy lent H100s log 0.07-0.9
        # data CRC errors a second on every link under load (NVML's CRC_DATA counter;
        # nvidia-smi nvlink -e shows 0 CRC errors) while their pairs copy at full speed
        # (bench/RESULTS.md, "Health that says what to do").
        if crc and seconds and crc / seconds >= NVLINK_CRC_PER_S:
            found.append(Finding("failing", "reset",
                                 f"{NVLINK_REASON} link {link['link']} logged "
                                 f"{_n(crc, 'CRC error')} during the run, "
                                 f"{crc / seconds:.3g} a second (DCGM fails at "
                                 f"{NVLINK_CRC_PER_S:g})"))
    return found


def _xid_found(health: Dict[str, Any]) -> List[Finding]:
    # The action is the Xid catalog's immediate-action bucket (agent/health/xid.py). A
    # bucket that asks more than restarting the application stops the card until it is
    # done: failing, as for NVML's recovery actions. DCGM's health watch agrees code by
    # code (BuildXidMappings): it fails on 48, 64, 74, 79, 95 and 140 and only warns on
    # 31, 43, 63, 94 and 121.
    found = []
    for event in health.get("xid_during_run") or []:
        if event.get("cause") != "hardware":
            continue
        action = str(event.get("action") or "none")
        verdict = "degraded" if action == "none" else "failing"
        found.append(Finding(verdict, action, f"Xid {event.get('code')} ({event.get('name')}) "
                             "during the agent's run"))
    return found


def decide(
    health: Dict[str, Any],
    pcie_gen_max: Optional[int] = None,
    pcie_width_max: Optional[int] = None,
    nvlink: Optional[NvLinks] = None,
    carried: Sequence[str] = (),
) -> Tuple[str, Optional[str], List[str]]:
    """(verdict, action, reasons) by RULE: failing reasons first, then degraded; the action
    is the most any reason asks for (None when unknown). The link is judged only when both
    its state under load (in `health`) and the most the card and slot support are known;
    NVLink only when `nvlink` says the count. `carried`: degraded reasons already found
    (NVLink's, judged again after load)."""
    found = (_memory(health) + _recovery(health) + _links(health, pcie_gen_max, pcie_width_max)
             + _xid_found(health))
    found += [Finding("degraded", "none", r) for r in [nvlink_reason(nvlink), *carried]
              if r is not None]
    if found:
        verdict = "failing" if any(f.verdict == "failing" for f in found) else "degraded"
        action = max((f.action for f in found), key=ACTIONS.index)
        return verdict, action, ([f.reason for f in found if f.verdict == "failing"]
                                 + [f.reason for f in found if f.verdict == "degraded"])
    missing = []
    pages = health.get("retired_pages")
    if (health.get("ecc") or {}).get("uncorrected_volatile") is None:
        missing.append("the driver did not answer the uncorrectable ECC count since it "
                       "loaded")
    if health.get("remapped_rows") is None and (
            pages is None or pages["single_bit"] is None or pages["double_bit"] is None):
        missing.append("the driver answered neither remapped rows nor retired pages")
    if missing:
        return "unknown", None, missing
    return "healthy", "none", []


def judge(
    health: Dict[str, Any],
    pcie_gen_max: Optional[int] = None,
    pcie_width_max: Optional[int] = None,
    nvlink: Optional[NvLinks] = None,
    carried: Sequence[str] = (),
) -> Tuple[str, List[str]]:
    """(verdict, reasons): `decide` without the action."""
    verdict, _, reasons = decide(health, pcie_gen_max, pcie_width_max, nvlink, carried)
    return verdict, reasons


def judged(
    health: Dict[str, Any],
    pcie_gen_max: Optional[int] = None,
    pcie_width_max: Optional[int] = None,
    nvlink: Optional[NvLinks] = None,
    carried: Sequence[str] = (),
) -> Dict[str, Any]:
    """The Health model's document: the verdict, its action, reasons and rule, then the
    counters."""
    counters = {k: v for k, v in health.items()
                if k not in ("verdict", "action", "reasons", "rule")}
    verdict, action, reasons = decide(counters, pcie_gen_max, pcie_width_max, nvlink, carried)
    return {"verdict": verdict, "action": action, "reasons": reasons, "rule": RULE,
            **counters}


def read_and_judge(
    nvml: Nvml,
    handle: Handle,
    unavailable: Optional[Dict[str, str]] = None,
    architecture: Optional[int] = None,
    bus_id: Optional[str] = None,
    kernel_log: Optional[KernelLog] = None,
    nvlink: Optional[NvLinks] = None,
    nvlink_states: Optional[Sequence[Any]] = None,
) -> Dict[str, Any]:
    """`read_health`, judged: what the fingerprint carries as `health`. `nvlink`: the
    GPU's active NVLink links against its variant's; `nvlink_states`: each link's state
    (the fingerprint reads both)."""
    active = () if nvlink_states is None else [i for i, up in enumerate(nvlink_states) if up]
    return judged(read_health(nvml, handle, unavailable, architecture, bus_id, kernel_log,
                              active), nvlink=nvlink)


def update_after_load(
    health: Dict[str, Any],
    nvml: Nvml,
    handle: Handle,
    pcie_gen_load: Optional[int],
    pcie_width_load: Optional[int],
    run_seconds: Optional[float] = None,
    kernel_log: Optional[KernelLog] = None,
    run_started: Optional[float] = None,
    bus_id: Optional[str] = None,
) -> Dict[str, Any]:
    """`health` judged again with what only load shows: how far the PCIe replay counter and
    each active NVLink link's error counters rose since the fingerprint read them, over
    `run_seconds` (rates, as DCGM judges them), the host link as it ran under load (links
    drop a generation at idle, so the fingerprint's own reading proves nothing), and the
    Xid lines of `kernel_log` (read again after the load) stamped at or after
    `run_started` (seconds since boot, time.monotonic()'s clock). Read-only."""

    def ask(fn: str, *args: Arg) -> Any:
        try:
            return nvml.call(handle, fn, *args)
        except NvmlError:
            return None

    updated = dict(health)
    before, after = health.get("pcie_replays"), _count(ask("nvmlDeviceGetPcieReplayCounter"))
    # A counter that went down was reset (or wrapped): how far it rose is not known.
    updated["pcie_replays_during_run"] = (after - before if before is not None
                                          and after is not None and after >= before else None)
    updated["pcie_gen_load"] = pcie_gen_load
    updated["pcie_width_load"] = pcie_width_load
    updated["run_seconds"] = None if run_seconds is None else round(float(run_seconds), 3)
    links_before = health.get("nvlink_errors") or []
    now = nvlink_errors(ask, [int(link["link"]) for link in links_before]) or []
    by_link = {link["link"]: link for link in now}
    rises = []
    for old in links_before:
        new = by_link.get(old["link"], {})
        rise: Dict[str, Any] = {"link": old["link"]}
        for name, _ in NVLINK_ERRORS:
            was, is_ = old.get(name), new.get(name)
            rise[name] = is_ - was if was is not None and is_ is not None and is_ >= was else None
        rises.append(rise)
    updated["nvlink_errors_during_run"] = rises or None
    if kernel_log is not None and kernel_log.readable and run_started is not None:
        lines = xid(kernel_log, bus_id)["events"]
        updated["xid_during_run"] = [
            {**xids.classify(line), "line": line[:XID_LINE_CHARS]} for line in lines
            if (xids.stamp(line) or -1.0) >= run_started]
    kept = [r for r in health.get("reasons") or [] if str(r).startswith(NVLINK_REASON)
            and "links active" in str(r)]
    return judged(updated, _count(ask("nvmlDeviceGetMaxPcieLinkGeneration")),
                  _count(ask("nvmlDeviceGetMaxPcieLinkWidth")), carried=kept)
