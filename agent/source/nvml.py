"""NVML access through one narrow interface: live, recorded or replayed.

Every NVML question the agent asks goes through `Nvml.call(handle, fn, *args)`, so the
same fingerprint code runs against a live driver, writes a recording while it does, or
replays a recording (`nvml-recording/1`, docs/design.md) on a machine with no GPU.

Recording keys are the pynvml function name, then the arguments after the handle in
parentheses (NVML constants by name, numbers as numbers, no spaces). A value is what
pynvml returned, structs as objects of their fields, or {"nvml_error": NAME}. A child
handle (a MIG device) is recorded as {"nvml_handle": {...its own calls...}}.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, ClassVar, Dict, List, Optional, Union

RECORDING_FORMAT = "nvml-recording/1"
REPLAY_ENV = "FLEET_NVML_REPLAY"

Arg = Union[str, int]


class NvmlError(Exception):
    """An NVML call failed; `name` is the NVML_ERROR_* constant's name."""

    def __init__(self, name: str, call: str = "") -> None:
        super().__init__(f"{call}: {name}" if call else name)
        self.name = name
        self.call = call


class NvmlUnavailable(Exception):
    """NVML itself cannot be used here (no library, no driver, no pynvml)."""


def call_key(fn: str, args: "tuple[Arg, ...]") -> str:
    """The recording's key of a call: the function's name and its arguments, if any."""
    if not args:
        return fn
    return fn + "(" + ",".join(str(a) for a in args) + ")"


def pair_arg(other: Handle) -> str:
    """How a call on two GPUs names the second in a recording's key: `GPU1`."""
    return f"GPU{other.label}"


def to_plain(value: Any) -> Any:
    """pynvml's answer as JSON data: ctypes structs become objects of their fields."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        out: Dict[str, Any] = {}
        for field in fields:
            name = field[0]
            # pynvml's printable structs decode char arrays through __getattr__.
            out[name] = to_plain(getattr(value, name))
        return out
    if hasattr(value, "value"):  # a bare ctypes scalar
        return to_plain(value.value)
    if hasattr(value, "__dict__"):
        # pynvml's nvmlFriendlyObject (process lists, for one): attributes, no _fields_.
        return {str(k): to_plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    try:
        return [to_plain(v) for v in value]
    except TypeError:
        return str(value)


class Handle:
    """A device as the agent sees it: an index path and whatever the backend needs."""

    def __init__(self, label: str, native: Any, store: Optional[Dict[str, Any]] = None):
        self.label = label  # "0", or "0/mig1" for a MIG device of GPU 0
        self.native = native
        self.store = store  # where a recorder writes this handle's answers


class Nvml:
    """The interface: system calls, device handles and per-handle calls."""

    source = "nvml"

    def system(self, fn: str, *args: Arg) -> Any:
        """The answer of the system-wide call `fn`; raises NvmlError when NVML gives none."""
        raise NotImplementedError

    def device_count(self) -> int:
        """How many GPUs NVML sees."""
        return int(self.system("nvmlDeviceGetCount"))

    def device(self, index: int) -> Handle:
        """The handle of GPU `index`."""
        raise NotImplementedError

    def child(self, handle: Handle, fn: str, *args: Arg) -> Handle:
        """A handle that an NVML call hands back, such as a MIG device's."""
        raise NotImplementedError

    def call(self, handle: Handle, fn: str, *args: Arg) -> Any:
        """The answer of `fn` on `handle`; raises NvmlError when NVML gives none."""
        raise NotImplementedError

    def pair(self, handle: Handle, other: Handle, fn: str, *args: Arg) -> Any:
        """The answer of `fn` on two GPUs (topology, peer-to-peer status). Recorded under
        the first GPU as `fn(GPU<other>,args...)`: a handle has no name of its own."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the backend; nothing to do unless it holds NVML open."""
        pass


def _error_names(pynvml: Any) -> Dict[int, str]:
    return {
        getattr(pynvml, n): n
        for n in dir(pynvml)
        if n.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, n), int)
    }


class LiveNvml(Nvml):
    """The driver, through NVIDIA's pynvml (nvidia-ml-py)."""

    source = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlUnavailable(f"pynvml is not importable: {exc}") from exc
        self._p: Any = pynvml
        self._errors = _error_names(pynvml)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(
                f"nvmlInit failed: {self._errors.get(exc.value, exc.value)}"
            ) from exc
        except OSError as exc:  # some pynvml builds let a dlopen failure through
            raise NvmlUnavailable(f"libnvidia-ml could not be loaded: {exc}") from exc

    def _resolve(self, arg: Arg) -> Any:
        if isinstance(arg, str):
            return getattr(self._p, arg)
        return arg

    def _invoke(self, native: Any, fn: str, args: "tuple[Arg, ...]") -> Any:
        func = getattr(self._p, fn, None)
        key = call_key(fn, args)
        if func is None:
            raise NvmlError("NVML_ERROR_FUNCTION_NOT_FOUND", key)
        real_args = [self._resolve(a) for a in args]
        if native is not None:
            real_args.insert(0, native)
        try:
            if fn in self._CALLER_BUILT:
                return getattr(self, self._CALLER_BUILT[fn])(func, real_args, key)
            return func(*real_args)
        except self._p.NVMLError as exc:
            raise NvmlError(self._errors.get(exc.value, f"NVML_ERROR_{exc.value}"), key) from None

    # Calls whose pynvml wrapper wants what a recording key cannot say (a list of field
    # ids, a struct the caller builds): keyed by one field's name, or by the call alone.
    _CALLER_BUILT: ClassVar[Dict[str, str]] = {"nvmlDeviceGetFieldValues": "_field_value",
                                               "nvmlDeviceGetSramEccErrorStatus": "_sram_status"}

    def _field_value(self, func: Any, args: List[Any], key: str) -> Any:
        """One field's value: `nvmlDeviceGetFieldValues(FIELD)` -> the number, or the
        field's own NVML error (the call succeeds while a field fails)."""
        handle, field = args
        value = func(handle, [field])[0]
        if value.nvmlReturn != 0:
            raise NvmlError(self._errors.get(value.nvmlReturn,
                                             f"NVML_ERROR_{value.nvmlReturn}"), key)
        # nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort
        member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
        return getattr(value.value, member[value.valueType] if value.valueType < 7 else
                       "ullVal")

    def _sram_status(self, func: Any, args: List[Any], key: str) -> Any:
        """nvmlDeviceGetSramEccErrorStatus fills a versioned struct the caller gives."""
        status = self._p.c_nvmlEccSramErrorStatus_v1_t()
        func(args[0], self._p.byref(status))
        return status

    def system(self, fn: str, *args: Arg) -> Any:
        """The answer of the system-wide call `fn`, as plain Python values."""
        return to_plain(self._invoke(None, fn, args))

    def device(self, index: int) -> Handle:
        """The handle of GPU `index`, from the driver."""
        native = self._invoke(None, "nvmlDeviceGetHandleByIndex", (index,))
        return Handle(str(index), native)

    def child(self, handle: Handle, fn: str, *args: Arg) -> Handle:
        """The handle that `fn` hands back on `handle`, labelled by its path."""
        native = self._invoke(handle.native, fn, args)
        return Handle(f"{handle.label}/{call_key(fn, args)}", native)

    def call(self, handle: Handle, fn: str, *args: Arg) -> Any:
        """The answer of `fn` on `handle`, as plain Python values."""
        return to_plain(self._invoke(handle.native, fn, args))

    def pair(self, handle: Handle, other: Handle, fn: str, *args: Arg) -> Any:
        """The answer of `fn` on `handle` and `other`, as plain Python values."""
        func = getattr(self._p, fn, None)
        key = call_key(fn, (pair_arg(other), *args))
        if func is None:
            raise NvmlError("NVML_ERROR_FUNCTION_NOT_FOUND", key)
        try:
            return to_plain(func(handle.native, other.native,
                                 *[self._resolve(a) for a in args]))
        except self._p.NVMLError as exc:
            raise NvmlError(self._errors.get(exc.value, f"NVML_ERROR_{exc.value}"), key) from None

    def close(self) -> None:
        """Shut NVML down; an error on the way out changes nothing."""
        with contextlib.suppress(self._p.NVMLError):
            self._p.nvmlShutdown()


def _answer(store: Dict[str, Any], key: str) -> Any:
    if key not in store:
        # What an old driver without the entry point says.
        raise NvmlError("NVML_ERROR_FUNCTION_NOT_FOUND", key)
    value = store[key]
    if isinstance(value, dict) and set(value) == {"nvml_error"}:
        raise NvmlError(str(value["nvml_error"]), key)
    return value


class ReplayNvml(Nvml):
    """Answers from a recording, as the machine it was made on answered."""

    source = "replay"

    def __init__(self, recording: Dict[str, Any], origin: str = "") -> None:
        if recording.get("format") != RECORDING_FORMAT:
            raise ValueError(
                f"{origin or 'recording'}: format is {recording.get('format')!r}, "
                f"expected {RECORDING_FORMAT!r}"
            )
        self.recording = recording
        self.origin = origin
        self._system: Dict[str, Any] = recording.get("system") or {}
        self._devices: List[Dict[str, Any]] = recording.get("devices") or []

    @classmethod
    def from_file(cls, path: str) -> "ReplayNvml":
        """The replay of the recording at `path`; ValueError naming the file when it is not one."""
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except ValueError as exc:
                raise ValueError(f"{path}: not JSON ({exc})") from exc
        return cls(data, origin=path)

    def system(self, fn: str, *args: Arg) -> Any:
        """The recorded answer of the system-wide call `fn`."""
        return _answer(self._system, call_key(fn, args))

    def device_count(self) -> int:
        """The recorded device count, or the number of recorded devices when none was recorded."""
        try:
            return int(self.system("nvmlDeviceGetCount"))
        except NvmlError:
            return len(self._devices)

    def device(self, index: int) -> Handle:
        """The handle of recorded GPU `index`; NvmlError when the recording has no such GPU."""
        if index >= len(self._devices):
            raise NvmlError("NVML_ERROR_INVALID_ARGUMENT", f"nvmlDeviceGetHandleByIndex({index})")
        return Handle(str(index), self._devices[index])

    def child(self, handle: Handle, fn: str, *args: Arg) -> Handle:
        """The recorded handle that `fn` handed back on `handle`."""
        key = call_key(fn, args)
        value = _answer(handle.native, key)
        if not (isinstance(value, dict) and isinstance(value.get("nvml_handle"), dict)):
            raise ValueError(f"{self.origin}: {key} is not a recorded handle")
        return Handle(f"{handle.label}/{key}", value["nvml_handle"])

    def call(self, handle: Handle, fn: str, *args: Arg) -> Any:
        """The recorded answer of `fn` on `handle`."""
        return _answer(handle.native, call_key(fn, args))

    def pair(self, handle: Handle, other: Handle, fn: str, *args: Arg) -> Any:
        """The recorded answer of `fn` on `handle` and `other`."""
        return _answer(handle.native, call_key(fn, (pair_arg(other), *args)))


class RecordingNvml(Nvml):
    """Passes calls to another backend and writes down every answer it got."""

    def __init__(self, inner: Nvml, source_note: str) -> None:
        self.inner = inner
        self.source = inner.source
        self.recording: Dict[str, Any] = {
            "format": RECORDING_FORMAT,
            "source": source_note,
            "system": {},
            "devices": [],
        }

    @staticmethod
    def _note(store: Dict[str, Any], key: str, func: Any) -> Any:
        try:
            value = func()
        except NvmlError as exc:
            store[key] = {"nvml_error": exc.name}
            raise
        store[key] = value
        return value

    def system(self, fn: str, *args: Arg) -> Any:
        """The inner backend's answer of the system-wide call `fn`, recorded."""
        store = self.recording["system"]
        return self._note(store, call_key(fn, args), lambda: self.inner.system(fn, *args))

    def device(self, index: int) -> Handle:
        """The inner backend's handle of GPU `index`, with a place for its answers."""
        inner = self.inner.device(index)
        devices: List[Dict[str, Any]] = self.recording["devices"]
        while len(devices) <= index:
            devices.append({})
        return Handle(inner.label, inner, devices[index])

    def child(self, handle: Handle, fn: str, *args: Arg) -> Handle:
        """The inner backend's handle that `fn` hands back on `handle`, recorded."""
        assert handle.store is not None
        key = call_key(fn, args)
        try:
            inner = self.inner.child(handle.native, fn, *args)
        except NvmlError as exc:
            handle.store[key] = {"nvml_error": exc.name}
            raise
        store: Dict[str, Any] = {}
        handle.store[key] = {"nvml_handle": store}
        return Handle(inner.label, inner, store)

    def call(self, handle: Handle, fn: str, *args: Arg) -> Any:
        """The inner backend's answer of `fn` on `handle`, recorded (errors too)."""
        assert handle.store is not None
        return self._note(
            handle.store, call_key(fn, args), lambda: self.inner.call(handle.native, fn, *args)
        )

    def pair(self, handle: Handle, other: Handle, fn: str, *args: Arg) -> Any:
        """The inner backend's answer of `fn` on two GPUs, recorded under the first."""
        assert handle.store is not None
        key = call_key(fn, (pair_arg(other), *args))
        return self._note(handle.store, key,
                          lambda: self.inner.pair(handle.native, other.native, fn, *args))

    def close(self) -> None:
        """Close the inner backend."""
        self.inner.close()


def open_nvml() -> Nvml:
    """The recording named by FLEET_NVML_REPLAY, else the live driver."""
    replay = os.environ.get(REPLAY_ENV)
    if replay:
        return ReplayNvml.from_file(replay)
    return LiveNvml()
