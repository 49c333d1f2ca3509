"""The versions of the software a provider patches that the GPU fingerprint does not
read (NVIDIA's container toolkit and fabric manager; the driver, CUDA and NIC firmware
are read with the GPUs and the network), and vboost as nvidia-smi lists it. The time
to import torch is the torch probe's own (agent/gpu/host.py, run_torch_probe).

Each is asked of a command with a timeout; a command that is absent leaves its value
None with the reason, never a guess. Reads only: `nvidia-smi boost-slider -l` lists.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from agent.gpu.host import run_command

VERSION_TIMEOUT_S = 10.0
VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)*)")


def parse_version(text: str) -> Optional[str]:
    """The first dotted version in a tool's --version text."""
    match = VERSION.search(text)
    return match.group(1)[:32] if match else None


def _version_of(argvs: Any) -> Dict[str, Optional[str]]:
    for argv in argvs:
        done = run_command(argv, VERSION_TIMEOUT_S)
        if done.returncode == 0:
            found = parse_version(done.stdout + " " + done.stderr)
            if found:
                return {"version": found, "source": " ".join(argv)}
    return {"version": None, "source": None}


def parse_vboost(text: str) -> Dict[int, Dict[str, int]]:
    """nvidia-smi boost-slider -l's vboost rows: {GPU: {"current", "max"}}, the two value
    columns taken in the order the table's header names them ("Current Value" and "Max
    Value"); current first where no header says."""
    max_first = False
    for line in text.splitlines():
        low = line.lower()
        if "current" in low and "max" in low:
            max_first = low.index("max") < low.index("current")
            break
    found: Dict[int, Dict[str, int]] = {}
    for match in re.finditer(r"^\|?\s*(\d+)\s+vboost\s+(\d+)\s+(\d+)", text,
                             re.MULTILINE | re.IGNORECASE):
        first, second = int(match.group(2)), int(match.group(3))
        found[int(match.group(1))] = ({"current": second, "max": first} if max_first
                                      else {"current": first, "max": second})
    return found


def read_software(is_root: bool) -> Dict[str, Any]:
    """{"container_toolkit", "fabric_manager": {"version", "source"}, "vboost"}."""
    boost = run_command(["nvidia-smi", "boost-slider", "-l"], VERSION_TIMEOUT_S)
    rows = parse_vboost(boost.stdout) if boost.returncode == 0 else {}
    # nvidia-smi's settings take root (the clocks' and power's rule, agent/gpu/
    # capabilities.py); inferred, never tried.
    verdict = "unknown" if not rows else "yes" if is_root else "no"
    return {
        "container_toolkit": _version_of([["nvidia-ctk", "--version"],
                                          ["nvidia-container-cli", "--version"]]),
        "fabric_manager": _version_of([["nv-fabricmanager", "--version"]]),
        "vboost": {"listed": {str(k): v for k, v in sorted(rows.items())[:64]},
                   "tenant_may_change": verdict, "method": "inferred"},
    }
