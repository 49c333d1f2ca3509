"""The NVML backends: replay answers as recorded, recording reproduces what it saw."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from agent.source.nvml import NvmlError, RecordingNvml, ReplayNvml, call_key, to_plain


def recording(**device: Any) -> dict[str, Any]:
    return {"format": "nvml-recording/1", "source": "test",
            "system": {"nvmlDeviceGetCount": 1}, "devices": [device]}


def test_call_keys_follow_the_recording_grammar() -> None:
    assert call_key("nvmlDeviceGetName", ()) == "nvmlDeviceGetName"
    assert call_key("nvmlDeviceGetClock", ("NVML_CLOCK_SM", "NVML_CLOCK_ID_CURRENT")) == \
        "nvmlDeviceGetClock(NVML_CLOCK_SM,NVML_CLOCK_ID_CURRENT)"
    assert call_key("nvmlDeviceGetSupportedGraphicsClocks", (2619,)) == \
        "nvmlDeviceGetSupportedGraphicsClocks(2619)"


def test_replay_answers_values_errors_and_missing_calls() -> None:
    nvml = ReplayNvml(recording(
        nvmlDeviceGetName="NVIDIA H100 80GB HBM3",
        nvmlDeviceGetFanSpeed={"nvml_error": "NVML_ERROR_NOT_SUPPORTED"},
    ))
    handle = nvml.device(0)
    assert nvml.device_count() == 1
    assert nvml.call(handle, "nvmlDeviceGetName") == "NVIDIA H100 80GB HBM3"
    with pytest.raises(NvmlError) as refused:
        nvml.call(handle, "nvmlDeviceGetFanSpeed")
    assert refused.value.name == "NVML_ERROR_NOT_SUPPORTED"
    with pytest.raises(NvmlError) as missing:
        nvml.call(handle, "nvmlDeviceGetBrand")
    assert missing.value.name == "NVML_ERROR_FUNCTION_NOT_FOUND"
    with pytest.raises(NvmlError):
        nvml.device(1)


def test_replay_refuses_other_formats(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "something/2"}))
    with pytest.raises(ValueError, match="something/2"):
        ReplayNvml.from_file(str(bad))


def test_child_handles_replay_mig_devices() -> None:
    nvml = ReplayNvml(recording(**{
        "nvmlDeviceGetMigDeviceHandleByIndex(0)": {"nvml_handle": {"nvmlDeviceGetUUID": "MIG-1"}},
        "nvmlDeviceGetMigDeviceHandleByIndex(1)": {"nvml_error": "NVML_ERROR_NOT_FOUND"},
    }))
    gpu = nvml.device(0)
    mig = nvml.child(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", 0)
    assert nvml.call(mig, "nvmlDeviceGetUUID") == "MIG-1"
    with pytest.raises(NvmlError, match="NOT_FOUND"):
        nvml.child(gpu, "nvmlDeviceGetMigDeviceHandleByIndex", 1)


def test_recording_a_replay_reproduces_every_answer_it_was_asked(h100_recording: Path) -> None:
    original = json.loads(h100_recording.read_text())
    recorder = RecordingNvml(ReplayNvml(original), "test")
    handle = recorder.device(0)
    asked = list(original["devices"][0])
    for key in asked:
        fn, _, rest = key.partition("(")
        args: list[Any] = [int(a) if a.isdigit() else a for a in rest.rstrip(")").split(",")
                           if a] if rest else []
        with contextlib.suppress(NvmlError):
            recorder.call(handle, fn, *args)
    assert recorder.recording["devices"][0] == original["devices"][0]


def test_to_plain_turns_ctypes_structs_into_objects() -> None:
    import ctypes

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("name", ctypes.c_char * 8)]

    value = Memory(total=85520809984, name=b"hbm3")
    assert to_plain(value) == {"total": 85520809984, "name": "hbm3"}
    assert to_plain([ctypes.c_uint(3), (1, 2)]) == [3, [1, 2]]


def test_to_plain_reads_pynvml_friendly_objects() -> None:
    """Process lists come back as nvmlFriendlyObject, not structs (seen on the lent H100)."""
    pynvml = pytest.importorskip("pynvml")
    proc = pynvml.nvmlFriendlyObject({"pid": 4242, "usedGpuMemory": None})
    assert to_plain([proc]) == [{"pid": 4242, "usedGpuMemory": None}]
