"""Where this host's GPU answers come from, and every GPU's fingerprint read from them:
what the document (agent/collect.py) and a rerun's child (agent/rerun/child.py) both
start from.

The GPU source is chosen in this order: a file the user named (recording or nvidia-smi
output), the recording named by FLEET_NVML_REPLAY, the live driver, and, when NVML cannot
be loaded, `nvidia-smi -q -x`. With none of them there is no NVIDIA GPU, and the source
says why.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.gpu.fingerprint import LIVE_SMI_ORIGIN, fingerprint_gpu
from agent.source import smi
from agent.source.nvml import REPLAY_ENV, LiveNvml, Nvml, NvmlError, NvmlUnavailable, ReplayNvml
from agent.timing import contention


class SourceError(Exception):
    """The named GPU source cannot be read; the message says which file and why."""


def _source_kind(recording: Dict[str, Any]) -> str:
    note = str(recording.get("source", ""))
    if note.startswith("converted from nvidia-smi -q -x"):
        return "nvidia-smi-xml"
    if note.startswith("converted from nvidia-smi -q"):
        return "nvidia-smi-text"
    return "recording"


def open_source(path: Optional[str]) -> Tuple[Optional[Nvml], Dict[str, Any]]:
    """The NVML backend to read, and a description of where its answers come from."""
    if path is None and os.environ.get(REPLAY_ENV):
        path = os.environ[REPLAY_ENV]
    if path is not None:
        try:
            recording = smi.recording_from_file(path)
            nvml: Nvml = ReplayNvml(recording, origin=path)
        except (OSError, ValueError) as exc:
            raise SourceError(str(exc)) from exc
        return nvml, {"kind": _source_kind(recording), "path": path,
                      "note": str(recording.get("source", ""))[:500],
                      "context": recording.get("context") or {}}
    try:
        return LiveNvml(), {"kind": "nvml", "path": None, "note": "live driver", "context": {}}
    except NvmlUnavailable as exc:
        nvml_reason = str(exc)
    try:
        xml = smi.run_nvidia_smi_xml()
    except (OSError, ValueError, RuntimeError) as exc:
        return None, {"kind": "none", "path": None, "context": {},
                      "note": f"{nvml_reason}; nvidia-smi -q -x failed: {exc}"}
    if xml is None:
        return None, {"kind": "none", "path": None, "context": {},
                      "note": f"{nvml_reason}; no nvidia-smi on PATH"}
    recording = smi.recording_from_xml(xml, origin=LIVE_SMI_ORIGIN)
    return ReplayNvml(recording, origin=LIVE_SMI_ORIGIN), {
        "kind": "nvidia-smi-xml", "path": None, "context": {},
        "note": f"NVML unavailable ({nvml_reason}); read nvidia-smi -q -x instead"}


def fingerprint_all(nvml: Nvml, system: Dict[str, Any], euid: int, probe_writes: bool,
                    live: bool, progress: Callable[[int, int], None] = lambda i, n: None
                    ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Every GPU's fingerprint, and the errors of those NVML could not read. `live`: the
    GPUs are this machine's, not a file's."""
    gpus: List[Dict[str, Any]] = []
    errors: List[Dict[str, Any]] = []
    count = int(system["gpu_count"])
    for index in range(count):
        progress(index, count)
        try:
            gpu = fingerprint_gpu(nvml, index, system, euid, probe_writes)
            if live:
                # Whose the memory a process holds is, where the run can see it; a
                # recording's pids are another machine's.
                gpu["processes"] = [contention.seen_from_here(p) for p in gpu["processes"]]
            gpus.append(gpu)
        except NvmlError as exc:
            errors.append({"stage": "fingerprint", "gpu": index, "message": str(exc)})
    return gpus, errors
