"""nvidia-smi's health sections as NVML recording keys, for `agent.source.smi`'s converter.

`ECC Errors`, `Retired Pages` and `Clocks Event Reasons Counters` carry what
`agent.health.card` asks NVML for; each becomes the keys and values the same driver's NVML
calls would have given, under smi.py's rules (a value nvidia-smi does not print is left
out, "N/A" is NOT_SUPPORTED). Two forms of `ECC Errors` exist: Ampere and later print
SRAM and DRAM counts (Hopper splits SRAM uncorrectable into parity and SEC-DED); older
cards print single-bit and double-bit counts per cache with a total. The XML's tags
(`sram_uncorrectable_secded`) and the text's labels ("SRAM Uncorrectable SEC-DED") meet
through smi.py's name normalisation.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

# smi.py's reading states: a value, an NVML error's name, or nothing printed.
VALUE, ERROR, ABSENT = "value", "error", "absent"

Parse = Callable[[str], Any]


class Node(Protocol):
    """One entry of nvidia-smi's report, as smi.py reads both forms into."""

    key: str
    value: str
    children: List[Any]

    def find(self, spec: str) -> Optional[Any]: ...


Read = Callable[[Optional[Any], Parse], Tuple[str, Any]]

TYPES = (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
         ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"))
TYPE_ARG = dict(TYPES)
COUNTERS = (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC"))
# Ampere and later: (location, error type) -> the lines that add up to its count.
SPLIT_LINES: Sequence[Tuple[str, str, Tuple[str, ...]]] = (
    ("NVML_MEMORY_LOCATION_SRAM", "corrected", ("sram correctable",)),
    ("NVML_MEMORY_LOCATION_SRAM", "uncorrected",
     ("sram uncorrectable", "sram uncorrectable parity",
      "sram uncorrectable sec-ded|sram uncorrectable secded")),
    ("NVML_MEMORY_LOCATION_DRAM", "corrected", ("dram correctable",)),
    ("NVML_MEMORY_LOCATION_DRAM", "uncorrected", ("dram uncorrectable",)),
)
# Before Ampere, under "Single Bit" (corrected) and "Double Bit" (uncorrected).
LEGACY_LINES = (
    ("device memory", "NVML_MEMORY_LOCATION_DRAM"),  # DEVICE_MEMORY has DRAM's value
    ("register file", "NVML_MEMORY_LOCATION_REGISTER_FILE"),
    ("l1 cache", "NVML_MEMORY_LOCATION_L1_CACHE"),
    ("l2 cache", "NVML_MEMORY_LOCATION_L2_CACHE"),
    ("texture memory", "NVML_MEMORY_LOCATION_TEXTURE_MEMORY"),
    ("texture shared|texture shm", "NVML_MEMORY_LOCATION_TEXTURE_SHM"),
    ("cbu", "NVML_MEMORY_LOCATION_CBU"),
)
LEGACY_KINDS = (("single bit", "corrected"), ("double bit", "uncorrected"))
RETIREMENT = (
    ("multiple single bit retirement|single bit ecc",
     "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
    ("double bit retirement|double bit ecc", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
)
# The two "Clocks Event Reasons Counters" that are NVML's perf-policy counters (pynvml:
# NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = NVML_FI_DEV_PERF_POLICY_POWER, and so for
# sync boost). The thermal and power-brake counters are field values with no
# nvmlDeviceGetViolationStatus policy, so they are not read.
VIOLATIONS = (
    ("sw power capping|clocks event reasons counters sw power cap", "NVML_PERF_POLICY_POWER"),
    ("sync boost|clocks event reasons counters sync boost", "NVML_PERF_POLICY_SYNC_BOOST"),
)
_NUMBER = re.compile(r"^(\d+)\s*(\S*)$")
_ADDRESS = re.compile(r"^0x[0-9A-Fa-f]+$")


def _integer(raw: str) -> int:
    return int(raw)


def _microseconds_as_ns(raw: str) -> int:
    """'29259889 us' -> nanoseconds, the unit of nvmlViolationTime_t.violationTime."""
    match = _NUMBER.match(raw.strip())
    if match is None or match.group(2) != "us":
        raise ValueError(raw)
    return int(match.group(1)) * 1000


def _sum(states: List[Tuple[str, Any]]) -> Optional[Any]:
    """One answer from several lines: their sum, the error all of them printed, or None
    (nothing printed, or numbers beside errors, which no single NVML answer matches)."""
    printed = [(state, value) for state, value in states if state != ABSENT]
    if not printed:
        return None
    if all(state == VALUE for state, _ in printed):
        return sum(value for _, value in printed)
    errors = {value for state, value in printed if state == ERROR}
    if len(errors) == 1 and all(state == ERROR for state, _ in printed):
        return {"nvml_error": errors.pop()}
    return None


def ecc_keys(read: Read, gpu: Node) -> Dict[str, Any]:
    """`ECC Errors` as nvmlDeviceGetTotalEccErrors and nvmlDeviceGetMemoryErrorCounter keys.

    NVML's total is "the sum of errors across each of the separate memory systems", so a
    total nvidia-smi does not print is the sum of the locations it does.
    """
    section = gpu.find("ecc errors")
    if section is None:
        return {}
    store: Dict[str, Any] = {}
    if not section.children:
        state, value = read(section, _integer)  # "ECC Errors : N/A" on some guests
        if state == ERROR:
            for _, error_arg in TYPES:
                for _, counter_arg in COUNTERS:
                    key = f"nvmlDeviceGetTotalEccErrors({error_arg},{counter_arg})"
                    store[key] = {"nvml_error": value}
        return store
    for counter, counter_arg in COUNTERS:
        part = section.find(counter)
        if part is None:
            continue
        by_type: Dict[str, List[Tuple[str, Any]]] = {"corrected": [], "uncorrected": []}
        # A location printed but not readable as one answer leaves its total unknown too:
        # the sum of the others would understate it.
        unresolved = set()
        if part.find("single bit") is not None:
            _legacy(read, part, counter_arg, store)
        else:
            for location, error, lines in SPLIT_LINES:
                states = [read(part.find(spec), _integer) for spec in lines]
                answer = _sum(states)
                if answer is None:
                    if any(state != ABSENT for state, _ in states):
                        unresolved.add(error)
                    continue
                error_arg = TYPE_ARG[error]
                store[f"nvmlDeviceGetMemoryErrorCounter({error_arg},{counter_arg},"
                      f"{location})"] = answer
                by_type[error] += [s for s in states if s[0] != ABSENT]
        for error, error_arg in TYPES:
            key = f"nvmlDeviceGetTotalEccErrors({error_arg},{counter_arg})"
            # The older form prints its own total; an unresolved location leaves none.
            if key in store or error in unresolved:
                continue
            answer = _sum(by_type[error])
            if answer is not None:
                store[key] = answer
    return store


def _legacy(read: Read, part: Node, counter_arg: str, store: Dict[str, Any]) -> None:
    """Counts per cache under "Single Bit" and "Double Bit", each with its printed total."""
    for kind, error in LEGACY_KINDS:
        lines = part.find(kind)
        if lines is None:
            continue
        error_arg = TYPE_ARG[error]
        for spec, location in LEGACY_LINES:
            state, value = read(lines.find(spec), _integer)
            if state == ABSENT:
                continue
            store[f"nvmlDeviceGetMemoryErrorCounter({error_arg},{counter_arg},{location})"] = (
                value if state == VALUE else {"nvml_error": value})
        state, value = read(lines.find("total"), _integer)
        if state != ABSENT:
            store[f"nvmlDeviceGetTotalEccErrors({error_arg},{counter_arg})"] = (
                value if state == VALUE else {"nvml_error": value})


def retired_page_keys(read: Read, gpu: Node) -> Dict[str, Any]:
    """`Retired Pages` counts as nvmlDeviceGetRetiredPages answers.

    NVML answers the list of retired addresses, and nvidia-smi counts that list. The text
    prints the count alone: each page it counts is then a None, an address not printed
    (fleet counts the pages and keeps no address). The XML's addresses are kept.
    """
    section = gpu.find("retired pages")
    if section is None or not section.children:
        return {}
    store: Dict[str, Any] = {}
    for spec, cause in RETIREMENT:
        entry = section.find(spec)
        if entry is None:
            continue
        count_node = entry.find("retired count")
        state, count = read(entry if count_node is None else count_node, _integer)
        key = f"nvmlDeviceGetRetiredPages({cause})"
        if state == ERROR:
            store[key] = {"nvml_error": count}
        elif state == VALUE:
            listed = entry.find("retired page addresses|retired pagelist")
            addresses = [int(c.value, 16) for c in (listed.children if listed else [])
                         if _ADDRESS.match(c.value)]
            store[key] = addresses if len(addresses) == count else [None] * count
    return store


def violation_keys(read: Read, gpu: Node) -> Dict[str, Any]:
    """`Clocks Event Reasons Counters` (drivers from 535) as nvmlDeviceGetViolationStatus
    answers with the one field nvidia-smi prints: violationTime in nanoseconds."""
    section = gpu.find("clocks event reasons counters")
    if section is None:
        return {}
    store: Dict[str, Any] = {}
    for spec, policy in VIOLATIONS:
        state, value = read(section.find(spec), _microseconds_as_ns)
        key = f"nvmlDeviceGetViolationStatus({policy})"
        if state == VALUE:
            store[key] = {"violationTime": value}
        elif state == ERROR:
            store[key] = {"nvml_error": value}
    return store


# "GPU Recovery Action" as nvidia-smi prints nvmlDeviceGpuRecoveryAction_t. "None" is the
# lent H100's and H200s' (driver 580); the other words are nvidia-smi's names of NVML's
# values as fleet expects them, not seen on a card.
RECOVERY_WORDS = {"none": 0, "gpu reset": 1, "reset": 1, "node reboot": 2, "reboot": 2,
                  "drain p2p": 3, "drain and reset": 4, "drain p2p and reset": 4,
                  "recover imex domain": 5, "bus reset": 6, "system reboot": 7}
_YES_NO = {"yes": 1, "no": 0}
BANKS = ("max", "high", "partial", "low", "none")


def _words(table: Dict[str, int]) -> Parse:
    def parse(raw: str) -> int:
        key = " ".join(raw.replace("_", " ").lower().split())
        if key not in table:
            raise ValueError(raw)
        return table[key]
    return parse


def _banks(raw: str) -> int:
    """'2560 bank(s)' -> 2560."""
    match = _NUMBER.match(raw.strip())
    if match is None or match.group(2) != "bank(s)":
        raise ValueError(raw)
    return int(match.group(1))


def repair_keys(read: Read, gpu: Node) -> Dict[str, Any]:
    """The recovery action, the repair flags printed under `ECC Errors` (drivers from
    R575) and the row remapper's bank histogram, as the NVML calls agent/health/card.py asks."""
    store: Dict[str, Any] = {}

    def put(key: str, state: str, value: Any) -> None:
        if state == VALUE:
            store[key] = value
        elif state == ERROR:
            store[key] = {"nvml_error": value}

    put("nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
        *read(gpu.find("gpu recovery action"), _words(RECOVERY_WORDS)))
    ecc = gpu.find("ecc errors")
    if ecc is not None and ecc.children:
        aggregate = ecc.find("aggregate")
        state, value = read(None if aggregate is None else
                            aggregate.find("sram threshold exceeded"), _words(_YES_NO))
        if state == VALUE:
            store["nvmlDeviceGetSramEccErrorStatus"] = {"bThresholdExceeded": value}
        elif state == ERROR:
            store["nvmlDeviceGetSramEccErrorStatus"] = {"nvml_error": value}
        channel = read(ecc.find("channel repair pending"), _words(_YES_NO))
        tpc = read(ecc.find("tpc repair pending"), _words(_YES_NO))
        if channel[0] == VALUE and tpc[0] == VALUE:
            store["nvmlDeviceGetRepairStatus"] = [channel[1], tpc[1]]
        elif channel[0] == ERROR and tpc[0] == ERROR:
            store["nvmlDeviceGetRepairStatus"] = {"nvml_error": channel[1]}
        put("nvmlDeviceGetUnrepairableMemoryFlag_v1",
            *read(ecc.find("unrepairable memory"), _words(_YES_NO)))
    rows = gpu.find("remapped rows")
    histogram = None if rows is None else rows.find(
        "bank remap availability histogram|row remapper histogram")
    if histogram is not None:
        counts = {}
        for bank in BANKS:
            state, value = read(histogram.find(f"{bank}|row remapper histogram {bank}"),
                                _banks)
            if state != VALUE:
                break
            counts[bank] = value
        else:
            store["nvmlDeviceGetRowRemapperHistogram"] = counts
    return store


def health_keys(read: Read, gpu: Node) -> Dict[str, Any]:
    """Every key above, for one GPU's section."""
    return {**ecc_keys(read, gpu), **retired_page_keys(read, gpu), **violation_keys(read, gpu),
            **repair_keys(read, gpu)}
