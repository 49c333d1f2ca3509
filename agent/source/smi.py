"""nvidia-smi's `-q` text and `-q -x` XML, converted into an NVML recording.

The fingerprint reads NVML answers through `agent.source.nvml.ReplayNvml`, so turning nvidia-smi's
report into an `nvml-recording/1` dict lets one code path handle a live driver, a recording
and nvidia-smi output alike. Both forms are first read into the same small tree (names
normalised so that the XML tag `fb_memory_usage` and the text label `FB Memory Usage` meet),
then one mapping turns the tree into recording keys.

Rules, so that a converted recording says no more than nvidia-smi did:
- A value becomes what pynvml would have returned, in pynvml's units (mW, bytes, MHz, C),
  and with the recording's key and value shape (docs/design.md, "NVML recordings").
- "N/A", "[N/A]" and "Not Supported" become {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"};
  NVML's other error strings map back to their names.
- A field nvidia-smi does not print is left out, so replay answers FUNCTION_NOT_FOUND, as
  an old driver would. "Requested functionality has been deprecated" is left out too.
- A value that cannot be read is left out and named in the recording's "source" note.
- A section fleet does not know (a newer driver's) is skipped and named there too; only
  input that is no nvidia-smi report at all is refused.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

from agent.source import smi_health
from agent.source.nvml import RECORDING_FORMAT

ACCEPTED_FORMS = (
    "an NVML recording (JSON with format nvml-recording/1), "
    "`nvidia-smi -q -x` XML, or `nvidia-smi -q` text"
)
MIB = 1048576
MAX_NOTES = 8  # the "source" note is cut at 500 characters by the agent anyway

Parse = Callable[[str], Any]


class SmiFormatError(ValueError):
    """The input is not one of the accepted forms, or is malformed; the message says where."""


class SmiCommandError(RuntimeError):
    """`nvidia-smi -q -x` ran but failed or hung; the message carries what it said."""


# --- the tree both forms are read into ----------------------------------------------------


def _norm(name: str) -> str:
    """'FB Memory Usage' and 'fb_memory_usage' both become 'fb memory usage'."""
    return " ".join(name.replace("_", " ").lower().split())


@functools.lru_cache(maxsize=None)
def _names(spec: str) -> Tuple[str, ...]:
    """'serial|serial number': alternatives in order of preference."""
    return tuple(_norm(part) for part in spec.split("|"))


class _Node:
    """One entry of nvidia-smi's report: a name, its value (maybe empty) and children."""

    __slots__ = ("children", "key", "line", "name", "value")

    def __init__(self, name: str, value: str, line: int = 0) -> None:
        self.name = name
        self.key = _norm(name)
        self.value = value.strip()
        self.line = line  # text only: where it was printed, for notes
        self.children: List[_Node] = []

    def find(self, spec: str) -> Optional[_Node]:
        for name in _names(spec):
            for child in self.children:
                if child.key == name:
                    return child
        return None

    def at(self, *specs: str) -> Optional[_Node]:
        node: Optional[_Node] = self
        for spec in specs:
            if node is None:
                return None
            node = node.find(spec)
        return node

    def walk(self) -> Iterator[_Node]:
        for child in self.children:
            yield child
            yield from child.walk()


def _from_element(element: ET.Element) -> _Node:
    node = _Node(element.tag, element.text or "")
    node.children = [_from_element(child) for child in element]
    return node


# nvidia-smi indents its text report by four spaces a level; a GPU's section opens with its
# PCI bus id at the margin.
_KEY_VALUE = re.compile(r"^(?P<key>\S.*?)\s+:(?:\s(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_BANNER = re.compile(r"^=+[^=]*=+$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A section heading at the margin that fleet may not know ("vGPU Driver Capability" on a
# vGPU host, "HIC Info", "Unit 0"): words only. A shell prompt or a pasted command line has
# "$", "#", "@" or ">" and fails this; a bare command line fails later for having no lines
# under it.
_SECTION = re.compile(r"^[A-Za-z][A-Za-z0-9 .,/()+_-]*$")


def _parse_text(text: str, where: str) -> _Node:
    root = _Node("", "")
    stack: List[Tuple[int, _Node]] = [(-1, root)]
    headings: List[_Node] = []  # sections at the margin, which must have lines under them
    for number, raw in enumerate(text.splitlines(), 1):
        if _CONTROL.search(raw):
            raise SmiFormatError(f"{where}: line {number}: control characters; this is not "
                                 "nvidia-smi -q text")
        line = raw.expandtabs(8).rstrip()
        if not line:
            continue
        indent = len(line) - len(line.lstrip(" "))
        popped: Optional[int] = None
        while stack[-1][0] >= indent:
            popped = stack.pop()[0]
        if popped is not None and popped != indent:
            # A line that steps back to a depth no open section has: nvidia-smi never
            # prints one, so the file was cut or spliced.
            raise SmiFormatError(f"{where}: line {number}: indentation {indent} matches no "
                                 f"enclosing section: {line.strip()!r}")
        content = line.strip()
        match = _KEY_VALUE.match(content)
        node = (_Node(match.group("key"), match.group("value") or "", number) if match
                else _Node(content, "", number))
        # A GPU's heading is checked apart: an empty GPU section has its own message.
        if (indent == 0 and match is None and not _BANNER.match(content)
                and not _GPU_HEADER.match(content)):
            if not _SECTION.match(content):
                raise SmiFormatError(f"{where}: line {number}: {content[:80]!r} is not part "
                                     "of nvidia-smi -q output")
            headings.append(node)
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    for heading in headings:
        if not heading.children:
            raise SmiFormatError(f"{where}: line {heading.line}: {heading.name[:80]!r} is not "
                                 "part of nvidia-smi -q output (a heading nvidia-smi prints "
                                 "at the margin has lines under it)")
    return root


# --- values --------------------------------------------------------------------------------

# What nvidia-smi prints for an NVML error is nvmlErrorString()'s text, sometimes bracketed.
_ERRORS = {
    "n/a": "NVML_ERROR_NOT_SUPPORTED",
    "not supported": "NVML_ERROR_NOT_SUPPORTED",
    "insufficient permissions": "NVML_ERROR_NO_PERMISSION",
    "unknown error": "NVML_ERROR_UNKNOWN",
    "gpu is lost": "NVML_ERROR_GPU_IS_LOST",
    "gpu requires reset": "NVML_ERROR_RESET_REQUIRED",
}
_DEPRECATED = "requested functionality has been deprecated"

_ENABLED = {"enabled": 1, "disabled": 0}
_YES_NO = {"yes": 1, "no": 0}
_ON_OFF = {"on": 1, "off": 0}
# NVML_BRAND_*; the strings are nvidia-smi's names for them.
_BRANDS = {
    "quadro": 1, "tesla": 2, "nvs": 3, "grid": 4, "geforce": 5, "titan": 6,
    "nvidia virtual applications": 7, "nvidia virtual pc": 8,
    "nvidia virtual compute server": 9, "nvidia rtx virtual workstation": 10,
    "nvidia cloud gaming": 11, "quadro rtx": 12, "nvidia rtx": 13, "nvidia": 14,
    "geforce rtx": 15, "titan rtx": 16,
}
# NVML_DEVICE_ARCH_*
_ARCHITECTURES = {
    "kepler": 2, "maxwell": 3, "pascal": 4, "volta": 5, "turing": 6, "ampere": 7,
    "ada": 8, "ada lovelace": 8, "hopper": 9, "blackwell": 10,
}
_COMPUTE_MODES = {
    "default": 0, "exclusive_thread": 1, "exclusive thread": 1, "prohibited": 2,
    "exclusive_process": 3, "exclusive process": 3,
}
_VIRTUALIZATION = {"none": 0, "pass-through": 1, "vgpu": 2, "host vgpu": 3, "host vsga": 4}
_HOST_VGPU = {"non sr-iov": 0, "sr-iov": 1}
_GPU_OPERATION_MODES = {"all on": 0, "compute": 1, "low double precision": 2}
_DRIVER_MODELS = {"wddm": 0, "tcc": 1, "wdm": 1, "mcdm": 2}
# nvidia-smi's man page: "Power Management: a flag that indicates whether power management
# is enabled. Either Supported or N/A".
_POWER_MANAGEMENT = {"supported": 1, "enabled": 1, "disabled": 0}
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(\S*)$")


def _error_name(raw: str) -> Optional[str]:
    return _ERRORS.get(raw.strip().strip("[]").strip().lower())


def _text(raw: str) -> str:
    return raw


def _integer(raw: str) -> int:
    return int(raw)


def _hex(raw: str) -> int:
    return int(raw, 16)  # accepts both "0x233010DE" (text) and "233010DE" (XML)


def _choice(table: Dict[str, int]) -> Parse:
    def parse(raw: str) -> int:
        try:
            return table[raw.strip().lower()]
        except KeyError:
            raise ValueError(raw) from None
    return parse


def _quantity(unit: str, scale: float = 1) -> Parse:
    """'700.00 W' -> 700000 with scale 1000; the unit must be the one nvidia-smi prints."""
    def parse(raw: str) -> int:
        match = _NUMBER.match(raw.strip())
        if match is None or match.group(2).lower() != unit.lower():
            raise ValueError(raw)
        return round(float(match.group(1)) * scale)
    return parse


_MHZ = _quantity("MHz")
_MILLIWATTS = _quantity("W", 1000)
_BYTES = _quantity("MiB", MIB)
_CELSIUS = _quantity("C")
_PERCENT = _quantity("%")


def _pstate(raw: str) -> int:
    match = re.match(r"^P(\d+)$", raw.strip())
    if match:
        return int(match.group(1))
    if raw.strip().lower() == "unknown":
        return 32  # NVML_PSTATE_UNKNOWN
    raise ValueError(raw)


def _cuda_version(raw: str) -> int:
    """'13.0' -> 13000 and '12.4' -> 12040, as nvmlSystemGetCudaDriverVersion returns."""
    match = re.match(r"^(\d+)\.(\d+)$", raw.strip())
    if match is None:
        raise ValueError(raw)
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def _c2c(raw: str) -> Dict[str, int]:
    return {"isC2cEnabled": _choice(_ENABLED)(raw)}


# --- the mapping ---------------------------------------------------------------------------

_POWER = "gpu power readings|power readings"
_LINK = ("pci", "pci gpu link info|gpu link info")

# (recording key, path of names from the GPU's section, parser): fields that are one value.
# Where two lines feed one key, the later one wins: a newer nvidia-smi prints the newer label.
_SIMPLE: Sequence[Tuple[str, Tuple[str, ...], Parse]] = (
    ("nvmlDeviceGetName", ("product name",), _text),
    ("nvmlDeviceGetBrand", ("product brand",), _choice(_BRANDS)),
    ("nvmlDeviceGetArchitecture", ("product architecture",), _choice(_ARCHITECTURES)),
    ("nvmlDeviceGetDisplayMode", ("display mode",), _choice(_ENABLED)),
    # nvidia-smi 580 calls "Display Mode" deprecated and prints NVML's display mode (is a
    # display connected) as "Display Attached": the H100 capture shows Yes with mode 1.
    ("nvmlDeviceGetDisplayMode", ("display attached",), _choice(_YES_NO)),
    ("nvmlDeviceGetDisplayActive", ("display active",), _choice(_ENABLED)),
    ("nvmlDeviceGetPersistenceMode", ("persistence mode",), _choice(_ENABLED)),
    ("nvmlDeviceGetAccountingMode", ("accounting mode",), _choice(_ENABLED)),
    ("nvmlDeviceGetAccountingBufferSize", ("accounting mode buffer size",), _integer),
    ("nvmlDeviceGetSerial", ("serial|serial number",), _text),
    ("nvmlDeviceGetUUID", ("uuid|gpu uuid",), _text),
    ("nvmlDeviceGetMinorNumber", ("minor number",), _integer),
    ("nvmlDeviceGetVbiosVersion", ("vbios version",), _text),
    ("nvmlDeviceGetMultiGpuBoard", ("multigpu board",), _choice(_YES_NO)),
    ("nvmlDeviceGetBoardId", ("board id",), _hex),
    ("nvmlDeviceGetBoardPartNumber", ("board part number",), _text),
    ("nvmlDeviceGetModuleId", ("platforminfo|platform info", "module id"), _integer),
    ("nvmlDeviceGetInforomImageVersion", ("inforom version", "img version|image version"),
     _text),
    ("nvmlDeviceGetInforomVersion(NVML_INFOROM_OEM)", ("inforom version", "oem object"),
     _text),
    ("nvmlDeviceGetInforomVersion(NVML_INFOROM_ECC)", ("inforom version", "ecc object"),
     _text),
    ("nvmlDeviceGetInforomVersion(NVML_INFOROM_POWER)",
     ("inforom version", "pwr object|power management object"), _text),
    ("nvmlDeviceGetC2cModeInfoV", ("c2c mode|gpu c2c mode",), _c2c),
    ("nvmlDeviceGetVirtualizationMode", ("gpu virtualization mode", "virtualization mode"),
     _choice(_VIRTUALIZATION)),
    ("nvmlDeviceGetHostVgpuMode", ("gpu virtualization mode", "host vgpu mode"),
     _choice(_HOST_VGPU)),
    ("nvmlDeviceGetGspFirmwareVersion", ("gsp firmware version",), _text),
    ("nvmlDeviceGetFanSpeed", ("fan speed",), _PERCENT),
    ("nvmlDeviceGetPerformanceState", ("performance state",), _pstate),
    ("nvmlDeviceGetComputeMode", ("compute mode",), _choice(_COMPUTE_MODES)),
    ("nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
     ("temperature", "gpu temp|gpu current temp"), _CELSIUS),
    # Drivers before the "T.Limit" report printed the thresholds themselves; the newer
    # T.Limit lines are offsets from a limit and have no NVML getter of that meaning.
    ("nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)",
     ("temperature", "gpu temp max threshold|gpu shutdown temp"), _CELSIUS),
    ("nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)",
     ("temperature", "gpu temp slow threshold|gpu slowdown temp"), _CELSIUS),
    ("nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_GPU_MAX)",
     ("temperature", "gpu temp max gpu threshold|gpu max operating temp"), _CELSIUS),
    ("nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_MEM_MAX)",
     ("temperature", "gpu temp max mem threshold|memory max operating temp"), _CELSIUS),
    ("nvmlDeviceGetPcieReplayCounter", ("pci", "replay counter|replays since reset"),
     _integer),
    ("nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)",
     ("pci", "tx util|tx throughput"), _quantity("KB/s")),
    ("nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)",
     ("pci", "rx util|rx throughput"), _quantity("KB/s")),
    # "Max" is what this GPU in this slot can reach (nvmlDeviceGetMaxPcieLinkGeneration),
    # "Device Max" what the GPU alone supports.
    ("nvmlDeviceGetMaxPcieLinkGeneration", (*_LINK, "pcie gen|pcie generation",
                                            "max link gen|max"), _integer),
    ("nvmlDeviceGetCurrPcieLinkGeneration", (*_LINK, "pcie gen|pcie generation",
                                             "current link gen|current"), _integer),
    ("nvmlDeviceGetGpuMaxPcieLinkGeneration", (*_LINK, "pcie gen|pcie generation",
                                               "max device link gen|device max"), _integer),
    ("nvmlDeviceGetMaxPcieLinkWidth", (*_LINK, "link widths|link width",
                                       "max link width|max"), _quantity("x")),
    ("nvmlDeviceGetCurrPcieLinkWidth", (*_LINK, "link widths|link width",
                                        "current link width|current"), _quantity("x")),
    # Drivers before R450 print the flag as plain "Pending".
    ("nvmlDeviceGetRetiredPagesPendingStatus",
     ("retired pages", "pending blacklist|pending retirement|pending page blacklist"
                       "|pending page retirement|pending"), _choice(_YES_NO)),
    # Since driver 535: "Requested" is what software set, "Current" the limit in force.
    ("nvmlDeviceGetPowerManagementLimit", (_POWER, "requested power limit|power limit"),
     _MILLIWATTS),
    ("nvmlDeviceGetEnforcedPowerLimit", (_POWER, "enforced power limit|current power limit"),
     _MILLIWATTS),
    ("nvmlDeviceGetPowerManagementDefaultLimit", (_POWER, "default power limit"),
     _MILLIWATTS),
    ("nvmlDeviceGetPowerManagementMode", (_POWER, "power management"),
     _choice(_POWER_MANAGEMENT)),
)

# (recording key, section, one name per list element, parser): [current, pending] and alike.
_LISTS: Sequence[Tuple[str, str, Tuple[str, ...], Parse]] = (
    ("nvmlDeviceGetEccMode", "ecc mode", ("current ecc|current", "pending ecc|pending"),
     _choice(_ENABLED)),
    ("nvmlDeviceGetMigMode", "mig mode", ("current mig|current", "pending mig|pending"),
     _choice(_ENABLED)),
    ("nvmlDeviceGetGpuOperationMode", "gpu operation mode",
     ("current gom|current", "pending gom|pending"), _choice(_GPU_OPERATION_MODES)),
    ("nvmlDeviceGetDriverModel", "driver model", ("current dm|current", "pending dm|pending"),
     _choice(_DRIVER_MODELS)),
    ("nvmlDeviceGetAutoBoostedClocksEnabled", "clock policy",
     ("auto boost", "auto boost default"), _choice(_ON_OFF)),
    ("nvmlDeviceGetPowerManagementLimitConstraints", _POWER,
     ("min power limit", "max power limit"), _MILLIWATTS),
)

_CLOCK_TYPES = (
    ("graphics clock|graphics", "NVML_CLOCK_GRAPHICS"),
    ("sm clock|sm", "NVML_CLOCK_SM"),
    ("mem clock|memory", "NVML_CLOCK_MEM"),
    ("video clock|video", "NVML_CLOCK_VIDEO"),
)
# Section -> the getters that answer its lines: the older per-purpose entry point and
# nvmlDeviceGetClock with the matching clock id, which NVML documents as the same value.
_CLOCK_SECTIONS: Sequence[Tuple[str, Sequence[Tuple[str, Optional[str]]]]] = (
    ("clocks", (("nvmlDeviceGetClockInfo", None),
                ("nvmlDeviceGetClock", "NVML_CLOCK_ID_CURRENT"))),
    ("applications clocks", (("nvmlDeviceGetApplicationsClock", None),
                             ("nvmlDeviceGetClock", "NVML_CLOCK_ID_APP_CLOCK_TARGET"))),
    ("default applications clocks", (("nvmlDeviceGetDefaultApplicationsClock", None),
                                     ("nvmlDeviceGetClock", "NVML_CLOCK_ID_APP_CLOCK_DEFAULT"))),
    ("max clocks", (("nvmlDeviceGetMaxClockInfo", None),)),
    ("max customer boost clocks", (("nvmlDeviceGetMaxCustomerBoostClock", None),
                                   ("nvmlDeviceGetClock", "NVML_CLOCK_ID_CUSTOMER_BOOST_MAX"))),
)

# nvmlClocksEventReasons bits. XML tags carry a "clocks_event_reason_" (older:
# "clocks_throttle_reason_") prefix; text nests the two HW causes under "HW Slowdown".
_REASON_BITS = {
    "idle": 0x1, "gpu idle": 0x1,
    "applications clocks setting": 0x2,
    "sw power cap": 0x4,
    "hw slowdown": 0x8,
    "sync boost": 0x10,
    "sw thermal slowdown": 0x20,
    "hw thermal slowdown": 0x40,
    "hw power brake slowdown": 0x80,
    "display clock setting": 0x100, "display clocks setting": 0x100,
}
_REASON_KEYS = ("nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons")

_MIG_SHARED = (
    ("multiprocessor count", "multiprocessorCount"),
    ("copy engine count", "sharedCopyEngineCount"),
    ("decoder count", "sharedDecoderCount"),
    ("encoder count", "sharedEncoderCount"),
    ("jpg count", "sharedJpegCount"),
    ("ofa count", "sharedOfaCount"),
)
_PROCESS_LISTS = (
    ("C", "nvmlDeviceGetComputeRunningProcesses"),
    ("G", "nvmlDeviceGetGraphicsRunningProcesses"),
    ("M", "nvmlDeviceGetMPSComputeRunningProcesses"),
)


# What nvidia-smi prints that fleet reads nothing from, R418 to R580 and newer: bare metal,
# pass-through, vGPU guest, vGPU host and MIG, text labels and XML tags alike (compared after
# _norm). A name neither here nor in the mapping above is skipped with a note in the
# recording's "source", so a newer driver's section is seen rather than refused.
_UNUSED_TOP = (
    "timestamp|hic info|vgpu driver capability|conf compute|unit"
)
_UNUSED_GPU = (
    # identity and board
    "gpu pdi|pdi|gpu part number|fru part number|gpu fru part number|addressing mode"
    "|inforom bbx object flush|inforom bbx flush|gpu reset status"
    "|ibmnpu|module id|gpu module id"
    # virtualization: a guest's licence, a host's capabilities and its active vGPUs
    "|vgpu software licensed product|vgpu device capability|vgpus|vgpu instances"
    "|active vgpus"
    # configuration and readings fleet does not use
    "|sparse operation mode|voltage|dram encryption mode"
    "|conf compute protected memory usage|cc protected memory usage|conf compute"
    "|encoder stats|fbc stats"
    "|gpu memory power readings|module power readings|power smoothing"
    "|workload power profiles|power profiles|supported gpu target temp|deferred clocks"
    "|fabric|capabilities|accounted processes"
)


def _section_names(specs: Sequence[str]) -> FrozenSet[str]:
    return frozenset(name for spec in specs for name in _names(spec))


# A GPU's sections the mapping reads, from the tables above and the methods below.
_KNOWN_GPU = _section_names([
    *(path[0] for _, path, _ in _SIMPLE), *(section for _, section, _, _ in _LISTS),
    *(section for section, _ in _CLOCK_SECTIONS), _POWER,
    "pci|fb memory usage|bar1 memory usage|utilization|remapped rows|supported clocks"
    "|clocks event reasons|clocks throttle reasons|processes|mig devices"
    # agent/source/smi_health.py's sections
    "|ecc errors|retired pages|clocks event reasons counters|gpu recovery action",
    _UNUSED_GPU,
])
_KNOWN_TOP = _section_names([
    "driver version|cuda version|attached gpus|gpu", _UNUSED_TOP,
])


def _reads_instant_power(arch: Optional[int], device_id: Optional[int]) -> Optional[bool]:
    """Whether nvmlDeviceGetPowerUsage is the instantaneous reading (None: cannot tell).

    NVML: "On Ampere (except GA100) or newer GPUs, the API returns power averaged over 1
    sec interval. On GA100 and older architectures, instantaneous power is returned."
    GA100 parts (A100, A30, A800) have PCI device ids 0x2080 to 0x20FF.
    """
    if arch is None:
        return None
    if arch < 7:
        return True
    if arch == 7:
        if device_id is None:
            return None
        return 0x2080 <= (device_id >> 16) <= 0x20FF
    return False


# Shared with smi_health, whose readers take `_Converter.read`.
_VALUE, _ERROR, _ABSENT = smi_health.VALUE, smi_health.ERROR, smi_health.ABSENT


class _Converter:
    """Builds one recording, keeping a note of every value it could not read."""

    def __init__(self, command: str, origin: str) -> None:
        self.command = command
        self.origin = origin
        self.notes: List[str] = []
        self.skipped: List[str] = []
        self.gpu_label = ""

    # -- reading ------------------------------------------------------------------------

    def note(self, node: _Node, why: str) -> None:
        where = f"line {node.line}" if node.line else node.name
        self.notes.append(f"{self.gpu_label}{where} {why}".strip())

    def skip_unknown(self, owner: _Node, known: FrozenSet[str]) -> None:
        """Name each entry of `owner` fleet does not know, so a new section shows."""
        for child in owner.children:
            # "Unit 0" and a GPU's heading carry a number or a bus id after the name.
            name = "gpu" if _GPU_HEADER.match(child.name) else re.sub(r"^unit \d+$", "unit",
                                                                         child.key)
            if name in known or _BANNER.match(child.name):
                continue
            where = f"line {child.line}" if child.line else f"<{child.name}>"
            self.skipped.append(f"{self.gpu_label}{child.name.strip()[:60]!r} ({where})")

    def read(self, node: Optional[_Node], parse: Parse) -> Tuple[str, Any]:
        if node is None:
            return _ABSENT, None
        raw = node.value
        if raw.lower() == _DEPRECATED:
            return _ABSENT, None
        error = _error_name(raw)
        if error is not None:
            return _ERROR, error
        if not raw and node.children:
            self.note(node, f"{node.name!r} is a section where a value was expected")
            return _ABSENT, None
        try:
            return _VALUE, parse(raw)
        except ValueError:
            self.note(node, f"{node.name!r} = {raw[:40]!r} not understood")
            return _ABSENT, None

    def put(self, store: Dict[str, Any], key: str, node: Optional[_Node], parse: Parse) -> None:
        state, value = self.read(node, parse)
        if state == _VALUE:
            store[key] = value
        elif state == _ERROR:
            store[key] = {"nvml_error": value}

    def section_error(self, section: Optional[_Node]) -> Optional[str]:
        """The NVML error a whole section printed instead of its lines ("Remapped Rows: N/A")."""
        if section is None or section.children:
            return None
        return _error_name(section.value)

    def combine(
        self,
        store: Dict[str, Any],
        key: str,
        section: Optional[_Node],
        parts: Sequence[Tuple[str, Parse]],
        build: Callable[[List[Any]], Any],
    ) -> None:
        """One key from several lines of a section: all read, or the first error, or none."""
        if section is None:
            return
        error = self.section_error(section)
        if error is not None:
            store[key] = {"nvml_error": error}
            return
        values: List[Any] = []
        for spec, parse in parts:
            state, value = self.read(section.find(spec), parse)
            if state == _ERROR:
                store[key] = {"nvml_error": value}
                return
            if state == _ABSENT:
                return
            values.append(value)
        store[key] = build(values)

    # -- the recording ------------------------------------------------------------------

    def recording(self, root: _Node, gpus: List[_Node], form_note: str) -> Dict[str, Any]:
        system: Dict[str, Any] = {}
        self.put(system, "nvmlSystemGetDriverVersion", root.find("driver version"), _text)
        # nvidia-smi prints one CUDA version; the _v2 entry point answers the same number.
        cuda = root.find("cuda version")
        if cuda is not None and cuda.value.lower() == "not found":
            # A vGPU manager host has no libcuda. nvmlSystemGetCudaDriverVersion_v2 then
            # answers LIBRARY_NOT_FOUND; the older entry point answers a version that
            # nvidia-smi does not print, so it is left out.
            system["nvmlSystemGetCudaDriverVersion_v2"] = {
                "nvml_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}
        else:
            self.put(system, "nvmlSystemGetCudaDriverVersion", cuda, _cuda_version)
        if "nvmlSystemGetCudaDriverVersion" in system:
            system["nvmlSystemGetCudaDriverVersion_v2"] = system["nvmlSystemGetCudaDriverVersion"]
        self.skip_unknown(root, _KNOWN_TOP)
        attached = root.find("attached gpus")
        state, count = self.read(attached, _integer)
        # Only a report of every GPU gives NVML's count and indices: `nvidia-smi -q -i 1`
        # prints GPU 1 alone while still saying "Attached GPUs: 2".
        whole = state == _VALUE and count == len(gpus)
        if whole:
            system["nvmlDeviceGetCount"] = count
        elif state == _VALUE:
            self.notes.append(f"'Attached GPUs' is {count} but {len(gpus)} GPU sections are "
                              "printed: GPU count and indices left out")
        devices = [self.device(gpu, index if whole else None) for index, gpu in enumerate(gpus)]
        source = f"converted from {self.command}" + (f" ({self.origin})" if self.origin else "")
        if form_note:
            source += f"; {form_note}"
        if self.skipped:
            shown = ", ".join(self.skipped[:MAX_NOTES])
            more = len(self.skipped) - MAX_NOTES
            source += f"; skipped, not known to fleet: {shown}" + (f" and {more} more"
                                                                  if more > 0 else "")
        if self.notes:
            shown = "; ".join(self.notes[:MAX_NOTES])
            more = len(self.notes) - MAX_NOTES
            source += f"; left out, not understood: {shown}" + (f"; and {more} more"
                                                                if more > 0 else "")
        return {"format": RECORDING_FORMAT, "source": source, "system": system,
                "devices": devices}

    def device(self, gpu: _Node, index: Optional[int]) -> Dict[str, Any]:
        self.gpu_label = f"{gpu.name} {gpu.value}".strip() + ": "
        store: Dict[str, Any] = {}
        self.skip_unknown(gpu, _KNOWN_GPU)
        if index is not None:
            store["nvmlDeviceGetIndex"] = index
        for key, path, parse in _SIMPLE:
            node = gpu.at(*path)
            if node is not None:
                self.put(store, key, node, parse)
        for key, section, names, parse in _LISTS:
            self.combine(store, key, gpu.find(section), [(n, parse) for n in names], list)
        self.pci(store, gpu)
        self.memory(store, gpu)
        self.combine(store, "nvmlDeviceGetUtilizationRates", gpu.find("utilization"),
                      [("gpu util|gpu", _PERCENT), ("memory util|memory", _PERCENT)],
                      lambda v: {"gpu": v[0], "memory": v[1]})
        self.combine(store, "nvmlDeviceGetRemappedRows", gpu.find("remapped rows"),
                     [("remapped row corr|correctable error", _integer),
                      ("remapped row unc|uncorrectable error", _integer),
                      ("remapped row pending|pending", _choice(_YES_NO)),
                      ("remapped row failure|remapping failure occurred", _choice(_YES_NO))],
                     list)
        store.update(smi_health.health_keys(self.read, gpu))
        self.power_usage(store, gpu)
        self.clocks(store, gpu)
        self.event_reasons(store, gpu)
        self.supported_clocks(store, gpu)
        self.processes(store, gpu)
        self.mig_devices(store, gpu)
        return store

    def pci(self, store: Dict[str, Any], gpu: _Node) -> None:
        def build(v: List[Any]) -> Dict[str, Any]:
            bus, device, domain, device_id, subsystem, bus_id = v
            # NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT is "%04X:%02X:%02X.0".
            return {"busIdLegacy": f"{domain:04X}:{bus:02X}:{device:02X}.0",
                    "domain": domain, "bus": bus, "device": device,
                    "pciDeviceId": device_id, "pciSubSystemId": subsystem, "busId": bus_id}

        self.combine(store, "nvmlDeviceGetPciInfo", gpu.find("pci"), [
            ("pci bus|bus", _hex), ("pci device|device", _hex), ("pci domain|domain", _hex),
            ("pci device id|device id", _hex), ("pci sub system id|sub system id", _hex),
            ("pci bus id|bus id", _text)], build)
        if "nvmlDeviceGetPciInfo" in store:
            store["nvmlDeviceGetPciInfo_v3"] = store["nvmlDeviceGetPciInfo"]

    def memory(self, store: Dict[str, Any], owner: _Node) -> None:
        # NVML's v1 memory struct counts reserved memory as used and keeps
        # total == used + free, so used is derived from the two printed totals.
        self.combine(store, "nvmlDeviceGetMemoryInfo", owner.find("fb memory usage"),
                     [("total", _BYTES), ("free", _BYTES)],
                     lambda v: {"total": v[0], "free": v[1], "used": v[0] - v[1]})
        self.combine(store, "nvmlDeviceGetBAR1MemoryInfo", owner.find("bar1 memory usage"),
                     [("total", _BYTES), ("free", _BYTES), ("used", _BYTES)],
                     lambda v: {"bar1Total": v[0], "bar1Free": v[1], "bar1Used": v[2]})

    def power_usage(self, store: Dict[str, Any], gpu: _Node) -> None:
        power = gpu.find(_POWER)
        if power is None:
            return
        error = self.section_error(power)
        if error is not None:
            store["nvmlDeviceGetPowerUsage"] = {"nvml_error": error}
            return
        draw = power.find("power draw")  # before driver 545: nvmlDeviceGetPowerUsage itself
        if draw is None:
            average = power.find("average power draw")
            instant = power.find("instant power draw|instantaneous power draw")
            if average is None and instant is None:
                return
            arch = store.get("nvmlDeviceGetArchitecture")
            pci = store.get("nvmlDeviceGetPciInfo")
            device_id = pci.get("pciDeviceId") if isinstance(pci, dict) else None
            which = _reads_instant_power(arch if isinstance(arch, int) else None,
                                         device_id if isinstance(device_id, int) else None)
            if which is None:
                self.note(power, "power draw left out: without the architecture it is not "
                          "known which reading nvmlDeviceGetPowerUsage gives")
                return
            draw = instant if which else average
        self.put(store, "nvmlDeviceGetPowerUsage", draw, _MILLIWATTS)

    def clocks(self, store: Dict[str, Any], gpu: _Node) -> None:
        for section_name, getters in _CLOCK_SECTIONS:
            section = gpu.find(section_name)
            if section is None:
                continue
            for spec, clock in _CLOCK_TYPES:
                state, value = self.read(section.find(spec), _MHZ)
                if state == _ABSENT:
                    continue
                answer = value if state == _VALUE else {"nvml_error": value}
                for fn, clock_id in getters:
                    args = clock if clock_id is None else f"{clock},{clock_id}"
                    store[f"{fn}({args})"] = answer

    def event_reasons(self, store: Dict[str, Any], gpu: _Node) -> None:
        section = gpu.find("clocks event reasons|clocks throttle reasons")
        if section is None:
            return
        error = self.section_error(section)
        mask, seen = 0, 0
        for node in section.walk():
            name = node.key
            for prefix in ("clocks event reason ", "clocks throttle reason "):
                if name.startswith(prefix):
                    name = name[len(prefix):]
            state = node.value.lower()
            if state not in ("active", "not active"):
                error = error or _error_name(node.value)
                continue
            bit = _REASON_BITS.get(name)
            if bit is None:
                if state == "active":
                    self.note(node, f"clock event reason {node.name!r} is active but has no "
                              "known NVML bit: the mask is left out")
                    return
                continue
            seen += 1
            if state == "active":
                mask |= bit
        if seen:
            answer: Any = mask
        elif error is not None:
            answer = {"nvml_error": error}
        else:
            return
        for key in _REASON_KEYS:
            store[key] = answer

    def supported_clocks(self, store: Dict[str, Any], gpu: _Node) -> None:
        section = gpu.find("supported clocks")
        if section is None:
            return
        error = self.section_error(section)
        if error is not None:
            store["nvmlDeviceGetSupportedMemoryClocks"] = {"nvml_error": error}
            return
        found: Dict[str, Any] = {}
        memory: List[int] = []
        for entry in section.children:
            if entry.key == "supported mem clock":  # XML
                mem_node = entry.find("value")
                graphics = [c for c in entry.children if c.key == "supported graphics clock"]
            elif entry.key == "memory":  # text: graphics clocks indented under each memory
                mem_node, graphics = entry, [c for c in entry.children if c.key == "graphics"]
            else:
                continue
            state, mem = self.read(mem_node, _MHZ)
            if state != _VALUE:
                return
            table: List[int] = []
            for node in graphics:
                state, mhz = self.read(node, _MHZ)
                if state != _VALUE:
                    return
                table.append(mhz)
            memory.append(mem)
            found[f"nvmlDeviceGetSupportedGraphicsClocks({mem})"] = table
        if memory:
            store["nvmlDeviceGetSupportedMemoryClocks"] = memory
            store.update(found)

    def processes(self, store: Dict[str, Any], gpu: _Node) -> None:
        section = gpu.find("processes")
        if section is None:
            return
        if not section.children:
            if section.value.lower() in ("", "none"):
                store[_PROCESS_LISTS[0][1]] = []
                store[_PROCESS_LISTS[1][1]] = []
                return
            error = _error_name(section.value)
            if error is None:
                self.note(section, f"processes {section.value[:40]!r} not understood")
                return
            store[_PROCESS_LISTS[0][1]] = {"nvml_error": error}
            store[_PROCESS_LISTS[1][1]] = {"nvml_error": error}
            return
        lists: Dict[str, List[Dict[str, Any]]] = {kind: [] for kind, _ in _PROCESS_LISTS}
        for fields in _process_entries(section):
            parsed = self.process(fields)
            if parsed is None:
                return  # one process misread would make every list wrong: keep none
            kinds, info = parsed
            for kind in kinds:
                lists[kind].append(info)
        for kind, key in _PROCESS_LISTS:
            # MPS clients are told apart ("M") only by newer nvidia-smi; an empty MPS list
            # would claim more than the report says.
            if kind != "M" or lists[kind]:
                store[key] = lists[kind]

    def process(self, fields: Dict[str, _Node]) -> Optional[Tuple[List[str], Dict[str, Any]]]:
        pid_node = fields.get("pid") or fields.get("process id")
        type_node = fields.get("type")
        if pid_node is None or type_node is None:
            return None
        state, pid = self.read(pid_node, _integer)
        kinds = [part.strip().upper() for part in type_node.value.split("+")]
        if state != _VALUE or not kinds or any(k not in ("C", "G", "M") for k in kinds):
            self.note(type_node, f"process {pid_node.value!r} of type {type_node.value!r} "
                      "not understood: process lists left out")
            return None
        info: Dict[str, Any] = {"pid": pid}
        used = fields.get("used memory") or fields.get("used gpu memory")
        state, value = self.read(used, _BYTES)
        # pynvml answers None where NVML has no figure (NVML_VALUE_NOT_AVAILABLE), and
        # nvidia-smi prints that as N/A.
        info["usedGpuMemory"] = value if state == _VALUE else None
        for name, field in (("gpu instance id", "gpuInstanceId"),
                            ("compute instance id", "computeInstanceId")):
            state, value = self.read(fields.get(name), _integer)
            if state == _VALUE:  # "N/A" outside MIG: NVML's value for it is not printed
                info[field] = value
        return kinds, info

    def mig_devices(self, store: Dict[str, Any], gpu: _Node) -> None:
        section = gpu.find("mig devices")
        if section is None:
            return
        for entry in section.children:
            if entry.key != "mig device":
                continue
            state, index = self.read(entry.find("index"), _integer)
            if state != _VALUE:
                self.note(entry, "MIG device without a readable index left out")
                continue
            child: Dict[str, Any] = {}
            self.put(child, "nvmlDeviceGetGpuInstanceId", entry.find("gpu instance id"),
                     _integer)
            self.put(child, "nvmlDeviceGetComputeInstanceId",
                     entry.find("compute instance id"), _integer)
            self.memory(child, entry)
            shared = entry.at("device attributes", "shared")
            attributes: Dict[str, Any] = {}
            for spec, field in _MIG_SHARED:
                state, value = self.read(shared.find(spec) if shared else None, _integer)
                if state == _VALUE:
                    attributes[field] = value
            if attributes:
                # Only the fields nvidia-smi prints: the slice counts and memorySizeMB of
                # nvmlDeviceGetAttributes_v2 are not in its report.
                child["nvmlDeviceGetAttributes_v2"] = attributes
            store[f"nvmlDeviceGetMigDeviceHandleByIndex({index})"] = {"nvml_handle": child}


def _process_entries(section: _Node) -> List[Dict[str, _Node]]:
    """Each process's lines by name, from XML's <process_info> or the text's flat list."""
    entries: List[Dict[str, _Node]] = []
    pending: Dict[str, _Node] = {}
    for child in section.children:
        if child.key == "process info":
            entries.append({c.key: c for c in child.children})
        elif child.key in ("gpu instance id", "compute instance id"):
            pending[child.key] = child  # the text prints these before the PID they belong to
        elif child.key == "process id":
            fields = dict(pending)
            pending = {}
            fields["process id"] = child
            fields.update((c.key, c) for c in child.children)
            entries.append(fields)
        elif entries and child.key in ("type", "name", "used gpu memory"):
            entries[-1][child.key] = child  # older layouts print these beside the PID
    return entries


# --- entry points -------------------------------------------------------------------------


def recording_from_xml(text: str, origin: str = "") -> Dict[str, Any]:
    """An `nvml-recording/1` dict from `nvidia-smi -q -x` output."""
    where = origin or "nvidia-smi -q -x output"
    # nvidia-smi's XML has a DOCTYPE naming its DTD and never declares entities; ElementTree
    # fetches no external DTD, and refusing declarations keeps entity expansion out too.
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise SmiFormatError(f"{where}: declares XML entities, which nvidia-smi never does")
    try:
        element = ET.fromstring(text)
    except ET.ParseError as exc:
        raise SmiFormatError(f"{where}: not well-formed XML ({exc}); truncated?") from None
    if element.tag != "nvidia_smi_log":
        raise SmiFormatError(f"{where}: the root element is <{element.tag}>, not "
                             "<nvidia_smi_log>: not nvidia-smi -q -x output")
    root = _from_element(element)
    gpus = []
    for position, gpu_element in enumerate(element):
        gpu = root.children[position]
        if gpu.key == "gpu":
            gpu.value = gpu_element.get("id", "")  # the bus id, for notes
            gpu.name = "GPU"
            gpus.append(gpu)
    _check_gpus(root, gpus, where)
    return _Converter("nvidia-smi -q -x", origin).recording(root, gpus, "")


def recording_from_text(text: str, origin: str = "") -> Dict[str, Any]:
    """An `nvml-recording/1` dict from `nvidia-smi -q` text."""
    where = origin or "nvidia-smi -q output"
    root = _parse_text(text, where)
    gpus = [node for node in root.children if _GPU_HEADER.match(node.name)]
    for gpu in gpus:
        if not gpu.children:
            raise SmiFormatError(f"{where}: line {gpu.line}: {gpu.name!r} has no lines under "
                                 "it; the report is cut short")
    _check_gpus(root, gpus, where)
    return _Converter("nvidia-smi -q", origin).recording(root, gpus, "")


def _check_gpus(root: _Node, gpus: List[_Node], where: str) -> None:
    attached = root.find("attached gpus")
    if not gpus and attached is None:
        # Whatever else it prints, every report of any driver has one or the other.
        raise SmiFormatError(f"{where}: no 'Attached GPUs' entry and no GPU section: not "
                             "nvidia-smi -q output")
    if attached is not None and not gpus and attached.value.isdigit() and int(attached.value):
        raise SmiFormatError(f"{where}: says {attached.value} GPUs are attached but has no GPU "
                             "section; the report is cut short")


def recording_from_file(path: str) -> Dict[str, Any]:
    """A recording from a file of any accepted form: recording JSON, -q -x XML or -q text."""
    with open(path, "rb") as fh:
        data = fh.read()
    text = data.decode("utf-8", "replace").lstrip("\ufeff")
    head = text.lstrip()
    if not head:
        raise SmiFormatError(f"{path}: the file is empty; fleet reads {ACCEPTED_FORMS}")
    if head.startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise SmiFormatError(f"{path}: starts like JSON but is not valid JSON ({exc}); "
                                 f"fleet reads {ACCEPTED_FORMS}") from None
        if isinstance(doc, dict) and doc.get("format") == RECORDING_FORMAT:
            return doc
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise SmiFormatError(f"{path}: JSON, but its format is {found!r}, not "
                             f"{RECORDING_FORMAT!r}; fleet reads {ACCEPTED_FORMS}")
    if head.startswith("<?xml") or "<nvidia_smi_log" in text:
        return recording_from_xml(text, origin=path)
    if "NVSMI LOG" in text or "Attached GPUs" in text:
        return recording_from_text(text, origin=path)
    raise SmiFormatError(f"{path}: not a form fleet reads; it reads {ACCEPTED_FORMS}")


def run_nvidia_smi_xml(timeout: float = 30.0) -> Optional[str]:
    """`nvidia-smi -q -x`'s output; None when there is no nvidia-smi to run."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-q", "-x"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=timeout, check=False)
    except FileNotFoundError:
        return None  # removed between the lookup and the run
    except subprocess.TimeoutExpired as exc:
        said = _said(exc.stderr) or _said(exc.stdout)
        raise SmiCommandError(f"nvidia-smi -q -x did not finish within {timeout:g} s"
                              + (f": {said}" if said else "")) from None
    if proc.returncode != 0:
        # nvidia-smi prints "couldn't communicate with the NVIDIA driver" on stdout.
        said = _said(proc.stderr) or _said(proc.stdout)
        raise SmiCommandError(f"nvidia-smi -q -x exited with status {proc.returncode}"
                              + (f": {said}" if said else " and printed nothing"))
    return proc.stdout.decode("utf-8", "replace")


def _said(output: Optional[bytes]) -> str:
    if not output:
        return ""
    return output.decode("utf-8", "replace").strip()[-2000:]
