"""The agent document's "host_limits" block (fleet/model/host_limits.py): the limits
(`limits.py`), ACS (`acs.py`) and software (`software.py`) of the machine the agent runs
on, or None with the reason as an error, so that nothing here can lose the document.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Tuple

from agent.host.acs import read_acs
from agent.host.limits import read_limits
from agent.host.software import read_software

FORMAT = "fleet-host-limits/1"
STAGE = "host_limits"


def host_limits(root: str = "/", import_torch: Optional[Dict[str, Any]] = None,
                software: bool = True) -> Dict[str, Any]:
    """The block, read under `root`; `import_torch` is {"import_torch_s",
    "import_torch_error"}, as the torch probe of the host facts timed it
    (agent/gpu/host.py), None where torch was not probed."""
    started = time.monotonic()
    found: Dict[str, Any] = {"format": FORMAT}
    found.update(read_limits(root))
    found["acs"] = read_acs(root)
    is_root = os.geteuid() == 0
    found["software"] = read_software(is_root) if software else None
    found.update(import_torch or {"import_torch_s": None,
                                  "import_torch_error": "not probed"})
    found["read_s"] = round(time.monotonic() - started, 3)
    return found


def document_host_limits(import_torch: Optional[Dict[str, Any]] = None
                         ) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]]]:
    """(the block, errors): None and one error (stage "host_limits") where reading failed."""
    try:
        return host_limits("/", import_torch), []
    except Exception as exc:  # the document stands without its limits
        return None, [{"stage": STAGE, "message": (
            f"host limits not read ({type(exc).__name__}: {str(exc)[:300]}); the rest "
            "of the document stands")}]
