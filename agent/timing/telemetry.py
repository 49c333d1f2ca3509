"""NVML telemetry sampled on a side thread while the harness measures.

Power, not the kernel, sets a power-capped card's number (docs/design.md, "The
standard harness"), so each result carries what the card did during its own measurement window:
SM and memory clocks, power, temperature and the clocks-event reasons bitmask.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Dict, List, Optional, Sequence

from agent.gpu.fingerprint import CLOCKS_EVENT_REASONS
from agent.source.nvml import Handle, Nvml, NvmlError

# One sample: seconds (perf_counter), SM MHz, memory MHz, watts, deg C, reasons bitmask.
Sample = List[float]
THERMAL = 0x20 | 0x40
HW_SLOWDOWN = 0x8 | 0x80
POWER_CAP = 0x4


class Sampler:
    """Polls one GPU every `interval_s` until stopped; thread-safe reads of what it has."""

    def __init__(self, nvml: Optional[Nvml], handle: Optional[Handle],
                 interval_s: float = 0.02) -> None:
        self.nvml = nvml
        self.handle = handle
        self.interval_s = interval_s
        self._samples: List[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._reasons_fn = "nvmlDeviceGetCurrentClocksEventReasons"

    def _ask(self, fn: str, *args: str) -> float:
        assert self.nvml is not None and self.handle is not None
        try:
            return float(self.nvml.call(self.handle, fn, *args))
        except NvmlError:
            return float("nan")

    def sample(self) -> Sample:
        """One reading now: time, SM and memory clocks, power, temperature, event reasons."""
        reasons = self._ask(self._reasons_fn)
        if reasons != reasons and self._reasons_fn.endswith("EventReasons"):
            # Drivers before the rename only know the deprecated "throttle" name.
            self._reasons_fn = "nvmlDeviceGetCurrentClocksThrottleReasons"
            reasons = self._ask(self._reasons_fn)
        return [
            time.perf_counter(),
            self._ask("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
            self._ask("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
            self._ask("nvmlDeviceGetPowerUsage") / 1000.0,
            self._ask("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU"),
            reasons,
        ]

    def _run(self) -> None:
        while not self._stop.is_set():
            row = self.sample()
            with self._lock:
                self._samples.append(row)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        """Start polling in a daemon thread; nothing without NVML or when already started."""
        if self.nvml is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="fleet-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and wait (up to 5 s) for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def between(self, start: float, end: float) -> List[Sample]:
        """The samples taken from `start` to `end`, both included."""
        with self._lock:
            return [s for s in self._samples if start <= s[0] <= end]


def _median(values: Sequence[float]) -> Optional[float]:
    finite = [v for v in values if v == v]
    return statistics.median(finite) if finite else None


def window_medians(samples: Sequence[Sample]) -> Dict[str, Optional[float]]:
    """The median SM clock and power over `samples`; None where no sample had one."""
    return {"sm_clock_mhz": _median([s[1] for s in samples]),
            "power_w": _median([s[3] for s in samples])}


def summarise(samples: Sequence[Sample]) -> Dict[str, object]:
    """The sample count, median clocks and power, hottest temperature, and each reason's share."""
    reasons = [int(s[5]) for s in samples if s[5] == s[5]]
    shares: Dict[str, float] = {}
    for bit, name in CLOCKS_EVENT_REASONS.items():
        hits = sum(1 for r in reasons if r & bit)
        if hits:
            shares[name] = round(hits / len(reasons), 4)
    temps = [s[4] for s in samples if s[4] == s[4]]
    return {
        "samples": len(samples),
        "sm_clock_mhz_median": _median([s[1] for s in samples]),
        "mem_clock_mhz_median": _median([s[2] for s in samples]),
        "power_w_median": _median([s[3] for s in samples]),
        "temperature_c_max": max(temps) if temps else None,
        "reason_shares": shares,
    }


def share_with(samples: Sequence[Sample], mask: int) -> float:
    """The share of samples with any reason bit of `mask` set; 0 without samples."""
    reasons = [int(s[5]) for s in samples if s[5] == s[5]]
    if not reasons:
        return 0.0
    return sum(1 for r in reasons if r & mask) / len(reasons)


def downsample(samples: Sequence[Sample], start: float, limit: int = 600) -> List[List[float]]:
    """At most `limit` rows, time relative to `start`; NaN (unanswered) becomes -1."""
    step = max(1, -(-len(samples) // limit))
    rows: List[List[float]] = []
    for s in samples[::step]:
        rows.append([round(s[0] - start, 4)] + [v if v == v else -1.0 for v in s[1:]])
    return rows
