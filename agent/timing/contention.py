"""Who else is on a GPU while the agent measures it: other processes, whose they are, and
how busy the GPU was before the agent started.

A figure measured beside another process is the renter's contention, not the provider's
card: the matmul harness and the node suite both check before and after each figure,
and the controller keeps a contended figure out of every provider comparison. Whose
process it is decides what the reader does about it: one of the renter's own (the same
user as the agent: a forgotten job) or another user's (a shared machine, or a provider's
agent on the GPU). The owner is read from /proc where the process is visible; inside a
container NVML may report host PIDs that /proc does not show, and then the owner is
unknown, said so, never guessed.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
from typing import Any, Collection, Dict, List, Optional

from agent.source.nvml import Handle, Nvml, NvmlError

# nvidia-smi's own definition of "busy" is any utilization; the harness has called a GPU
# busy above 5% since 1.0 (a monitoring agent's sampling shows as 1-2%).
BUSY_UTILIZATION = 5
_PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses",
                  "nvmlDeviceGetGraphicsRunningProcesses")


def _uid(pid: int, proc: str) -> Optional[int]:
    try:
        with open(os.path.join(proc, str(pid), "status")) as status:
            for line in status:
                if line.startswith("Uid:"):
                    return int(line.split()[1])  # the real uid
    except (OSError, ValueError, IndexError):
        return None
    return None


def _user(uid: Optional[int]) -> Optional[str]:
    if uid is None:
        return None
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name[:64]
    except (ImportError, KeyError):
        return None


def owner(pid: int, proc: str = "/proc") -> Dict[str, Any]:
    """{"pid", "uid", "user", "own"}: `own` is whether the process runs as the agent's own
    user (None where /proc does not show the process)."""
    uid = _uid(pid, proc)
    return {"pid": pid, "uid": uid, "user": _user(uid),
            "own": None if uid is None else uid == os.getuid()}


def _name(pid: int, proc: str) -> Optional[str]:
    try:
        with open(os.path.join(proc, str(pid), "comm"), encoding="utf-8",
                  errors="replace") as comm:
            return comm.read(64).strip() or None
    except OSError:
        return None


def holds_a_gpu(pid: int, proc: str = "/proc") -> Optional[bool]:
    """Whether /proc here shows `pid` holding an NVIDIA device file open: None where its
    open files cannot be read (another user's, without the privilege)."""
    if not os.path.isdir(os.path.join(proc, str(pid))):
        return False
    fds = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return None
    for name in names:
        try:
            if os.readlink(os.path.join(fds, name)).startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def seen_from_here(process: Dict[str, Any], proc: str = "/proc") -> Dict[str, Any]:
    """A fingerprint's process with what /proc here says of it: `visible` (whether this
    machine's /proc shows the pid holding a GPU: a process the renter's run can see), and
    where it does, its `name` (comm), `user` and whether it is the agent's `own` user's.

    A pid alone is not enough: NVML in a container may list a host pid, and the
    container's own process of the same number is another program. So visible is True
    only where that pid holds an NVIDIA device open, False where /proc has no such pid or
    shows it holding none (nothing of it named), None where its open files cannot be read.
    Only for a live GPU: a recording's pids are another machine's."""
    pid = int(process.get("pid", -1))
    holds = holds_a_gpu(pid, proc) if pid > 0 else False
    if holds is False:
        return {**process, "visible": False, "name": None, "user": None, "own": None}
    known = owner(pid, proc)
    return {**process, "visible": holds, "name": _name(pid, proc), "user": known["user"],
            "own": known["own"]}


# Names the agent that started this process (agent/rerun/child.py sets it on its child).
PARENT_ENV = "FLEET_AGENT_PARENT"


def _parent() -> List[int]:
    """The agent a rerun's child was started by (`PARENT_ENV`): its CUDA
    context, idle on the same GPUs, is the agent's own, not another user's."""
    value = os.environ.get(PARENT_ENV, "")
    return [int(value)] if value.isdigit() and int(value) == os.getppid() else []


def others(nvml: Optional[Nvml], handle: Optional[Handle],
           ours: Collection[int] = (), proc: str = "/proc") -> List[Dict[str, Any]]:
    """The processes NVML shows on the GPU other than the agent and `ours` (its own
    children), each with its owner; [] where NVML cannot tell."""
    if nvml is None or handle is None:
        return []
    skip = {os.getpid(), *ours, *_parent()}
    pids = set()
    for fn in _PROCESS_CALLS:
        try:
            for entry in nvml.call(handle, fn) or []:
                pid = int(entry.get("pid", -1)) if isinstance(entry, dict) else -1
                if pid > 0 and pid not in skip:
                    pids.add(pid)
        except (NvmlError, TypeError, ValueError):
            continue
    return [owner(pid, proc) for pid in sorted(pids)]


def utilization(nvml: Optional[Nvml], handle: Optional[Handle]) -> Optional[int]:
    """The GPU's utilization in percent as NVML reports it, None where it cannot."""
    if nvml is None or handle is None:
        return None
    try:
        return int(nvml.call(handle, "nvmlDeviceGetUtilizationRates")["gpu"])
    except (NvmlError, KeyError, TypeError, ValueError):
        return None


def describe(process: Dict[str, Any]) -> str:
    """"pid 4242 (user bob, not the agent's user)", "pid 4242 (owner not visible)"."""
    pid = process.get("pid")
    if process.get("own") is None:
        return f"pid {pid} (owner not visible from the agent)"
    who = process.get("user") or f"uid {process.get('uid')}"
    whose = "the agent's own user" if process.get("own") else "not the agent's user"
    return f"pid {pid} (user {who}, {whose})"


def reasons(seen: List[Dict[str, Any]], busy_before: Optional[int]) -> List[str]:
    """The contention lines a figure carries: other processes, a busy GPU."""
    lines = []
    if seen:
        unique = {p["pid"]: p for p in seen}
        lines.append("other processes on the GPU: "
                     + ", ".join(describe(unique[pid]) for pid in sorted(unique)))
    if busy_before is not None and busy_before > BUSY_UTILIZATION:
        lines.append(f"GPU utilization {busy_before}% before the measurement started")
    return lines
