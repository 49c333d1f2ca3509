"""What the tenant meets beside the limits: how long a fresh `import torch` takes, the
versions of the software a provider patches that the GPU fingerprint does not read
(NVIDIA's container toolkit and fabric manager; the driver, CUDA and NIC firmware are
read with the GPUs and the network), and vboost as nvidia-smi lists it.

Each is asked of a command with a timeout; a command that is absent leaves its value
None with the reason, never a guess. Reads only: `nvidia-smi boost-slider -l` lists.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Dict, Optional

from agent.gpu.host import run_command

IMPORT_TIMEOUT_S = 120.0
VERSION_TIMEOUT_S = 10.0
# A child prints the seconds its `import torch` took, timed inside it, so that Python's
# own start is not counted.
IMPORT_SCRIPT = ("import time; t = time.perf_counter(); import torch; "
                 "print('fleet-import-s', time.perf_counter() - t)")
VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)*)")


def parse_import(stdout: str) -> Optional[float]:
    """The seconds the child's import took, from its `fleet-import-s` line."""
    for line in stdout.splitlines():
        if line.startswith("fleet-import-s "):
            try:
                return round(float(line.split()[1]), 3)
            except ValueError:
                return None
    return None


def time_import_torch(python: Optional[str] = None) -> Dict[str, Any]:
    """{"import_torch_s", "import_torch_error"}: the first `import torch` of the run, in
    a fresh process, with the page cache as the host left it (the agent drops no cache:
    a node that imported torch a moment ago answers from memory, as a job's second
    start would)."""
    done = run_command([python or sys.executable, "-c", IMPORT_SCRIPT], IMPORT_TIMEOUT_S)
    seconds = parse_import(done.stdout) if done.returncode == 0 else None
    if seconds is not None:
        return {"import_torch_s": seconds, "import_torch_error": None}
    why = done.error or (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"import_torch_s": None, "import_torch_error": why[:256]}


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
    """nvidia-smi boost-slider -l's vboost rows: {GPU: {"current", "max"}}."""
    found: Dict[int, Dict[str, int]] = {}
    for match in re.finditer(r"^\|?\s*(\d+)\s+vboost\s+(\d+)\s+(\d+)", text,
                             re.MULTILINE | re.IGNORECASE):
        found[int(match.group(1))] = {"current": int(match.group(2)),
                                      "max": int(match.group(3))}
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
