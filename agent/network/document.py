"""The agent document's "network" block: the fingerprint of the machine the agent runs
on, or None with the reason as an error, so that nothing here can lose the document.

Made from a recording or nvidia-smi file, a document's host facts are still those of the
machine that read it (agent/collect.py); its network is too, read live like them, and a
note says so, since the GPUs its distances name are that machine's and not the
recording's.

The controller refuses a document whose block breaks its bounds (fleet/model/network.py),
and with it the whole document. A host with hundreds of containers can list more virtual
interfaces than the bound holds, so those past it are left out here, with a note: they
are neither fabric NICs nor anything a finding reads.

Standard library only, Python 3.8.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from agent.network.fingerprint import Run, network

MAX_DEVICES = 512  # NetworkFingerprint.devices
MAX_NOTES = 16  # NetworkFingerprint.notes
STAGE = "network"


def _bounded(found: Dict[str, Any]) -> Dict[str, Any]:
    devices: List[Dict[str, Any]] = found["devices"]
    if len(devices) > MAX_DEVICES:
        # fabric NICs first, then other NICs, then virtual interfaces; in their order
        rank = sorted(range(len(devices)), key=lambda i: (
            not devices[i]["fabric"], devices[i]["kind"] == "virtual", i))
        keep = sorted(rank[:MAX_DEVICES])
        found["devices"] = [devices[i] for i in keep]
        found["fabric_nics"] = sum(1 for d in found["devices"] if d["fabric"])
        found["notes"].append(
            f"{len(devices) - MAX_DEVICES} of {len(devices)} interfaces not listed "
            f"(virtual ones first): a document lists at most {MAX_DEVICES}")
    found["notes"] = found["notes"][:MAX_NOTES]
    return found


def document_network(replayed: Optional[str] = None, root: str = "/",
                     run: Optional[Run] = None
                     ) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]]]:
    """(the network block, errors): the fingerprint of `root` and None, or None and one
    error (stage "network") where reading it failed. `replayed` names the kind of file
    the document's GPUs were replayed from (source.kind), None when they are live."""
    try:
        found = network(root, run)
        if replayed is not None:
            found["notes"].insert(0, (
                f"read on the machine that replayed the {replayed} file, as the host "
                "facts are: its GPU distances are that machine's, not the recording's"))
        return _bounded(found), []
    except Exception as exc:  # the document stands without its network
        return None, [{"stage": STAGE, "message": (
            f"network not read ({type(exc).__name__}: {str(exc)[:300]}); the rest of "
            "the document stands")}]
