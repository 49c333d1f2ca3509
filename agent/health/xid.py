"""Xid codes by what they point at (hardware, driver, application), NVIDIA's resolution
bucket for each, and what a buyer asks for.

Source of every bucket: NVIDIA's Xid catalog, "Analyzing Xid Errors with the Xid Catalog"
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), table "Xids", column
"Resolution Bucket (Immediate Action)", spelt as NVIDIA spells it. The page itself was read
for its first rows (8 and 13: RESTART_APP; the unused 1-7: CONTACT_SUPPORT); every code
below through two copies of its spreadsheet: leptonai/gpud
components/accelerator/nvidia/xid/catalog_generated.go (generated from the catalog's
Xid-Catalog.xlsx on 2025-10-29) and NVIDIA/NVSentinel
distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv. They agree
code by code, except that NVSentinel writes CONTACT_SUPPORT as UNEXPECTED_ERR_REPORT_ISSUE
(61) and XID_154 in words ("Follow guidance as it applies to another Xid").

The cause column predates the buckets: the catalog's older "Xid Errors" table (HW error,
driver error, user app error, bus error). A row added from the catalog alone (46, 68, 136,
143) takes its cause from the catalog's investigatory bucket: CONTACT_SUPPORT or
INVESTIGATE_LINK_SI (NVIDIA looks at the card or the link) is "hardware".

The action is fleet's word for the bucket (BUCKET_ACTIONS): "none" (restart the
application; the card is fine), "reset", "drain_and_reset" (the node's other work is hit
too), "replace". A WORKFLOW_* or XID_154 bucket names no single action: NVIDIA's workflow
reads other signals, which agent/health/card.py judges on their own (the ECC counts, the
remap flags, NVML's recovery action, the NVLink counters); such a row asks what card.py
asks for the same event, said at the row. A code not listed is "unknown" and never judged.

Standard library only, Python 3.8 and newer: this runs on the GPU host.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional

# NVIDIA's immediate-action bucket -> what the buyer asks the provider for.
BUCKET_ACTIONS: Dict[str, str] = {
    "IGNORE": "none",
    "RESTART_APP": "none",  # the application restarts; nothing is asked of the card
    "RESET_GPU": "reset",
    # Restart the bare-metal node: every GPU on it stops, so the node's work is drained
    # first, as for NVML's NODE_REBOOT recovery action (card.py RECOVERY_ACTIONS).
    "RESTART_BM": "drain_and_reset",
    # NVIDIA names no recovery step, only its support. A renter cannot open that case for
    # a provider's card, and the card is not to be trusted until the provider has; so the
    # ask is another card. This is not NVIDIA's RMA criterion: its field diagnostic decides
    # that (GPU Memory Error Management, "RMA Policy"). NVIDIA's NVSentinel files these
    # as UNEXPECTED_ERR_REPORT_ISSUE, FATAL.
    "CONTACT_SUPPORT": "replace",
}


class XidClass(NamedTuple):
    """What an Xid code points at, what to ask for, its name and NVIDIA's bucket for it."""

    cause: str  # "hardware", "driver", "application"
    action: str  # "none", "reset", "drain_and_reset", "replace"
    name: str
    bucket: Optional[str] = None  # the catalog's Resolution Bucket (Immediate Action)


TABLE: Dict[int, XidClass] = {
    8: XidClass("driver", "none", "GPU stopped processing (idle timeout)", "RESTART_APP"),
    13: XidClass("application", "none", "graphics engine exception", "RESTART_APP"),
    31: XidClass("application", "none", "GPU memory page fault", "RESTART_APP"),
    43: XidClass("application", "none", "GPU stopped processing", "IGNORE"),
    # The investigatory bucket: "Not Solo: IGNORE (follow other Xid)".
    45: XidClass("application", "none", "preemptive cleanup, due to previous errors",
                 "WORKFLOW_XID_45"),
    46: XidClass("hardware", "reset", "GPU stopped processing (GPU timeout)", "RESET_GPU"),
    # A double-bit error: card.py asks a reset for the uncorrectable error it counts, and
    # judges the remap it leads to (pending: reset; failed: replace) on its own.
    48: XidClass("hardware", "reset", "double-bit ECC error", "WORKFLOW_XID_48"),
    # Unused on A100, H100, B100 and GB200 by the catalog.
    61: XidClass("driver", "replace", "internal micro-controller breakpoint",
                 "CONTACT_SUPPORT"),
    62: XidClass("driver", "reset", "internal micro-controller halt", "RESET_GPU"),
    # The remap it records waits for a reset: card.py asks that from the pending flag.
    63: XidClass("hardware", "none", "ECC page retirement or row remap recorded", "IGNORE"),
    # The failure flag it sets is NVIDIA's RMA criterion: card.py asks a replacement from
    # the flag, read at the fingerprint.
    64: XidClass("hardware", "reset", "ECC page retirement or row remap failure",
                 "RESET_GPU"),
    68: XidClass("hardware", "none", "NVDEC0 exception", "RESTART_APP"),
    69: XidClass("application", "none", "graphics engine class error", "RESTART_APP"),
    # NVLink errors: what card.py asks when DCGM's NVLink watch fails on the counters.
    74: XidClass("hardware", "reset", "NVLink error", "WORKFLOW_NVLINK_ERR"),
    79: XidClass("hardware", "drain_and_reset", "GPU has fallen off the bus", "RESTART_BM"),
    92: XidClass("hardware", "none", "high single-bit ECC error rate", "IGNORE"),
    94: XidClass("hardware", "none", "contained ECC error", "RESTART_APP"),
    95: XidClass("hardware", "reset", "uncontained ECC error", "RESET_GPU"),
    109: XidClass("application", "reset", "context switch timeout", "RESET_GPU"),
    119: XidClass("driver", "reset", "GSP RPC timeout", "RESET_GPU"),
    120: XidClass("driver", "reset", "GSP error", "RESET_GPU"),
    121: XidClass("hardware", "none", "C2C link error", "IGNORE"),
    136: XidClass("hardware", "reset", "link training failed", "RESET_GPU"),
    140: XidClass("hardware", "reset", "unrecovered ECC error", "RESET_GPU"),
    143: XidClass("hardware", "reset", "GPU initialization error", "RESET_GPU"),
    # Names the recovery action another Xid set: card.py judges NVML's recovery action.
    154: XidClass("driver", "none", "GPU recovery action changed", "XID_154"),
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
    """{"code", "cause", "action", "name", "bucket"} of one Xid line."""
    number = code(line)
    found = TABLE.get(number, UNKNOWN) if number is not None else UNKNOWN
    return {"code": number, "cause": found.cause, "action": found.action, "name": found.name,
            "bucket": found.bucket}
