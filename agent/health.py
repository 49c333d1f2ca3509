"""Whether a card is failing, or has been: the counters its driver keeps, and a verdict.

Every counter is read through `agent.nvml.Nvml` (read-only calls), so a live driver, a
recording and a converted nvidia-smi report take the same path; a call the driver does not
answer stays None and is noted in the GPU's `unavailable` map, as the fingerprint does.
The kernel log's Xid lines are read where the tenant may read it, and said unreadable
where not. `RULE` is the verdict's rule in words; `judge` applies it.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import shutil
import subprocess
import time
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from agent.nvml import Arg, Handle, Nvml, NvmlError, call_key

# What NVIDIA documents, and what the thresholds below rest on:
# - Row remapping (Ampere and later), docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/
#   row-remapping.html: "The process of row-remapping requires a GPU reset to take effect";
#   "Supports up to 512 remapping for the frame buffer", where page retirement on older
#   GPUs "Supported a maximum of 64 retirements".
# - nvmlDeviceGetRemappedRows: "isPending indicates whether or not there are pending
#   remappings. A reset will be required to actually remap the row. failureOccurred will
#   be set if a row remapping ever failed in the past." NVIDIA's RMA policy for row
#   remapping: the RMA criterion is met when that failure flag is set and its field
#   diagnostic confirms it.
# - Dynamic page retirement (before Ampere), docs.nvidia.com/deploy/dynamic-page-retirement:
#   the driver retires a page after one double-bit error or two single-bit errors on one
#   address; after a double-bit error "'Pending Page Blacklist' status becomes 'YES'" until
#   the driver reloads or the GPU resets.
# - nvmlDeviceGetTotalEccErrors: volatile counts are "since the last driver load",
#   aggregate ones "persist indefinitely"; the total is "the sum of errors across each of
#   the separate memory systems".
REMAP_SPARES = 512
# How a reason about the host link under load begins: the report's host-link finding
# names the same cause, and drops the health finding that would say it twice.
LINK_REASON = "the host link ran at"
# How a reason about missing NVLink links begins; judged again after load, it is carried
# from the fingerprint's verdict (the link count is the fingerprint's reading).
NVLINK_REASON = "NVLink:"
RETIREMENT_TABLE = 64
# Degraded once a quarter of those spares is used: NVIDIA publishes no threshold short of
# a failure, and a quarter leaves the card repairing itself with visibly less margin than
# a fresh one, where a handful of correctable remaps is the mechanism working as designed
# ("catch weakening cells at the 2 SBE point ... before ... a DBE").
REMAPS_DEGRADED = REMAP_SPARES // 4
RETIRED_DEGRADED = RETIREMENT_TABLE // 4

RULE = (
    "failing: a row remapping failed (no spare row was left; NVIDIA's RMA criterion once "
    "its field diagnostic confirms it); a row remap is pending (a row failed since the last "
    "reset, and the repair waits for a GPU reset the provider has not done); any "
    "uncorrectable ECC error since the driver loaded; a page retirement pending (before "
    "Ampere); "
    f"{RETIREMENT_TABLE} or more retired pages (the retirement table is full). "
    "degraded: rows remapped, or pages retired, for uncorrectable errors (a past "
    "uncorrectable error, repaired); uncorrectable errors in the card's life but none since "
    f"the driver loaded; {REMAPS_DEGRADED} or more remapped rows of the {REMAP_SPARES} "
    f"spares, or {RETIRED_DEGRADED} or more retired pages of {RETIREMENT_TABLE} (a quarter "
    "of the spares used); the PCIe replay counter rising while the agent ran; the host link "
    "under load below the generation or width the card and slot support; fewer active "
    "NVLink links than the variant carries (agent/variants.py), where at least one is "
    "active: a single SXM card passed into a VM shows none, which proves nothing. "
    "unknown: none of these, and the driver did not answer the uncorrectable ECC count "
    "since it loaded, or answered neither remapped rows nor retired pages (ECC off, a vGPU "
    "guest, an old driver or recording). healthy: otherwise. Throttle time, energy, the "
    "replay count at rest and Xid lines are reported, not judged: they follow load and "
    "history the renter cannot see."
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
    "nvmlDeviceGetTotalEnergyConsumption",
)
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
) -> Dict[str, Any]:
    """The counters of the GPU behind `handle`, as the Health model's fields (no verdict).

    Calls the driver does not answer go into `unavailable` (the GPU's map) by their
    recording key. `architecture` (NVML_DEVICE_ARCH_*) picks the memory locations to ask;
    `bus_id` picks this GPU's Xid lines out of `kernel_log`; no log, no `xid`.
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
    }


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
    return {"readable": True, "note": log.note, "events": events[-XID_EVENTS:]}


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


def judge(
    health: Dict[str, Any],
    pcie_gen_max: Optional[int] = None,
    pcie_width_max: Optional[int] = None,
    nvlink: Optional[NvLinks] = None,
    carried: Sequence[str] = (),
) -> Tuple[str, List[str]]:
    """(verdict, reasons) by RULE. The link is judged only when both its state under load
    (in `health`) and the most the card and slot support are known; NVLink only when
    `nvlink` says the count. `carried`: degraded reasons already found (NVLink's, judged
    again after load)."""
    failing: List[str] = []
    degraded: List[str] = []
    ecc = health.get("ecc") or {}
    rows = health.get("remapped_rows")
    pages = health.get("retired_pages")

    if rows is not None:
        if rows["failure"]:
            failing.append("a row remapping failed: no spare row was left")
        if rows["pending"]:
            failing.append("a row remap is pending: it takes effect only when the GPU is "
                           "reset")
        if rows["uncorrectable"]:
            degraded.append(_n(rows["uncorrectable"], "row") + " remapped for uncorrectable "
                            "errors")
        total = rows["correctable"] + rows["uncorrectable"]
        if total >= REMAPS_DEGRADED:
            degraded.append(f"{_n(total, 'remapped row')} of {REMAP_SPARES} spares")
    volatile = ecc.get("uncorrected_volatile")
    aggregate = ecc.get("uncorrected_aggregate")
    if volatile:
        failing.append(_n(volatile, "uncorrectable ECC error") + " since the driver loaded")
    elif aggregate:
        degraded.append(_n(aggregate, "uncorrectable ECC error") + " in the card's life"
                        + (", none since the driver loaded" if volatile == 0 else ""))
    if pages is not None:
        if pages["pending"]:
            failing.append("a page retirement is pending until the GPU is reset")
        single, double = pages["single_bit"] or 0, pages["double_bit"] or 0
        if single + double >= RETIREMENT_TABLE:
            failing.append(f"{single + double} retired pages: the table of "
                           f"{RETIREMENT_TABLE} is full")
        elif single + double >= RETIRED_DEGRADED:
            degraded.append(f"{single + double} retired pages of {RETIREMENT_TABLE}")
        if double:
            degraded.append(_n(double, "page") + " retired for double-bit errors")
    rise = health.get("pcie_replays_during_run")
    if rise:
        degraded.append(f"the PCIe replay counter rose by {rise} during the run")
    gen, width = health.get("pcie_gen_load"), health.get("pcie_width_load")
    if gen is not None and pcie_gen_max is not None and gen < pcie_gen_max:
        degraded.append(f"{LINK_REASON} Gen{gen} under load; the card and slot "
                        f"support Gen{pcie_gen_max}")
    if width is not None and pcie_width_max is not None and width < pcie_width_max:
        degraded.append(f"{LINK_REASON} x{width} under load; the card and slot "
                        f"support x{pcie_width_max}")
    missing_links = nvlink_reason(nvlink)
    degraded += [r for r in [missing_links, *carried] if r is not None]

    if failing:
        return "failing", failing + degraded
    if degraded:
        return "degraded", degraded
    missing = []
    if volatile is None:
        missing.append("the driver did not answer the uncorrectable ECC count since it "
                       "loaded")
    if rows is None and (pages is None or pages["single_bit"] is None
                         or pages["double_bit"] is None):
        missing.append("the driver answered neither remapped rows nor retired pages")
    if missing:
        return "unknown", missing
    return "healthy", []


def judged(
    health: Dict[str, Any],
    pcie_gen_max: Optional[int] = None,
    pcie_width_max: Optional[int] = None,
    nvlink: Optional[NvLinks] = None,
    carried: Sequence[str] = (),
) -> Dict[str, Any]:
    """The Health model's document: the verdict, its reasons and rule, then the counters."""
    counters = {k: v for k, v in health.items() if k not in ("verdict", "reasons", "rule")}
    verdict, reasons = judge(counters, pcie_gen_max, pcie_width_max, nvlink, carried)
    return {"verdict": verdict, "reasons": reasons, "rule": RULE, **counters}


def read_and_judge(
    nvml: Nvml,
    handle: Handle,
    unavailable: Optional[Dict[str, str]] = None,
    architecture: Optional[int] = None,
    bus_id: Optional[str] = None,
    kernel_log: Optional[KernelLog] = None,
    nvlink: Optional[NvLinks] = None,
) -> Dict[str, Any]:
    """`read_health`, judged: what the fingerprint carries as `health`. `nvlink`: the
    GPU's active NVLink links against its variant's (the fingerprint reads them)."""
    return judged(read_health(nvml, handle, unavailable, architecture, bus_id, kernel_log),
                  nvlink=nvlink)


def update_after_load(
    health: Dict[str, Any],
    nvml: Nvml,
    handle: Handle,
    pcie_gen_load: Optional[int],
    pcie_width_load: Optional[int],
) -> Dict[str, Any]:
    """`health` judged again with what only load shows: how far the PCIe replay counter rose
    since the fingerprint read it, and the host link as it ran under load (links drop a
    generation at idle, so the fingerprint's own reading proves nothing). Read-only."""

    def ask(fn: str) -> Optional[int]:
        try:
            return _count(nvml.call(handle, fn))
        except NvmlError:
            return None

    updated = dict(health)
    before, after = health.get("pcie_replays"), ask("nvmlDeviceGetPcieReplayCounter")
    # A counter that went down was reset (or wrapped): how far it rose is not known.
    updated["pcie_replays_during_run"] = (after - before if before is not None
                                          and after is not None and after >= before else None)
    updated["pcie_gen_load"] = pcie_gen_load
    updated["pcie_width_load"] = pcie_width_load
    kept = [r for r in health.get("reasons") or [] if str(r).startswith(NVLINK_REASON)]
    return judged(updated, ask("nvmlDeviceGetMaxPcieLinkGeneration"),
                  ask("nvmlDeviceGetMaxPcieLinkWidth"), carried=kept)
