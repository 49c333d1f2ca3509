"""Xid codes by what they point at (hardware, driver, application) and what a buyer asks for.

Sources: NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
"Resolution Bucket (Immediate Action)": RESTART_APP, RESET_GPU, CONTACT_SUPPORT ...) and
its older "Xid Errors" table (the cause columns: HW error, driver error, user app error,
bus error); Azure's node health checks, Imbue's host validation and Meta's cluster
monitoring classify the same codes the same way. The action is fleet's word for the
bucket: "none" (restart the application; the card is fine), "reset", "drain_and_reset"
(the node's other work is hit too: the GPU fell off the bus, an uncontained error),
"replace" (a row remap failed: NVIDIA's RMA criterion). A code not listed is "unknown"
and never judged.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional


class XidClass(NamedTuple):
    """What an Xid code points at, what to ask for, and its name in NVIDIA's catalog."""

    cause: str  # "hardware", "driver", "application"
    action: str  # "none", "reset", "drain_and_reset", "replace"
    name: str


TABLE: Dict[int, XidClass] = {
    8: XidClass("driver", "none", "GPU stopped processing (idle timeout)"),
    13: XidClass("application", "none", "graphics engine exception"),
    31: XidClass("application", "none", "GPU memory page fault"),
    43: XidClass("application", "none", "GPU stopped processing"),
    45: XidClass("application", "none", "preemptive cleanup, due to previous errors"),
    48: XidClass("hardware", "reset", "double-bit ECC error"),
    61: XidClass("driver", "reset", "internal micro-controller breakpoint"),
    62: XidClass("driver", "reset", "internal micro-controller halt"),
    63: XidClass("hardware", "reset", "ECC page retirement or row remap recorded"),
    64: XidClass("hardware", "replace", "ECC page retirement or row remap failure"),
    69: XidClass("application", "none", "graphics engine class error"),
    74: XidClass("hardware", "reset", "NVLink error"),
    79: XidClass("hardware", "drain_and_reset", "GPU has fallen off the bus"),
    92: XidClass("hardware", "none", "high single-bit ECC error rate"),
    94: XidClass("hardware", "reset", "contained ECC error"),
    95: XidClass("hardware", "drain_and_reset", "uncontained ECC error"),
    109: XidClass("application", "none", "context switch timeout"),
    119: XidClass("driver", "reset", "GSP RPC timeout"),
    120: XidClass("driver", "reset", "GSP error"),
    121: XidClass("hardware", "reset", "C2C link error"),
    140: XidClass("hardware", "reset", "unrecovered ECC error"),
    154: XidClass("driver", "none", "GPU recovery action changed"),
}
UNKNOWN = XidClass("unknown", "none", "not in fleet's table")

_CODE = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
# dmesg's and /dev/kmsg's "[  430954.509105] ": seconds since boot, the clock of
# time.monotonic() on Linux. A line printed with a wall-clock date has no such stamp.
_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")


def code(line: str) -> Optional[int]:
    """The Xid number of a kernel line, None when it carries none."""
    match = _CODE.search(line)
    return int(match.group(1)) if match else None


def stamp(line: str) -> Optional[float]:
    """Seconds since boot that the kernel stamped on `line`, None when not stamped so."""
    match = _STAMP.match(line)
    return float(match.group(1)) if match else None


def classify(line: str) -> Dict[str, object]:
    """{"code", "cause", "action", "name"} of one Xid line."""
    number = code(line)
    found = TABLE.get(number, UNKNOWN) if number is not None else UNKNOWN
    return {"code": number, "cause": found.cause, "action": found.action, "name": found.name}
