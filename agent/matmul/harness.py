"""The standard harness: an M×N×K matmul number that survives a skeptic.

Protocol (docs/design.md, "The standard harness"):
- random inputs from a fixed seed, never zeros (zeros ran 13% faster on an H200 here);
- a correctness gate against a float64 reference on a slice of rows, before timing;
- CUDA events recorded on the kernel's own stream; the L2 flushed before every timed run
  (a buffer of at least twice the L2) unless warm-cache mode is asked for, or, by default
  since 1.2 (`flush="auto"`), in sustained mode where the product's own operands and
  output are at least that large and evict the L2 themselves: there the flush changes
  nothing in what the product finds cached, only the card's power pattern, and on some
  H100s it pushed the card into a slower operating point that back-to-back work never
  sees (bench/records/2026-11-23-harness-1.2.0.md). `flush="always"` keeps it everywhere;
- warm-up in windows until throughput, SM clock and power stop drifting, or a cap;
- timed runs back to back (sustained, the default: what a training job sees) or with a
  pause between them (burst); the host synchronises once per batch, on the batch's last
  stop event, while the next batch is already queued, so the GPU never idles;
- NVML telemetry sampled through the measurement window and stored with the result;
- median, trimmed mean, min, max, CV and a 95% interval of the median; TFLOP/s since 1.4
  is the work over the time: 2·M·N·K times the runs over their summed time, what a long
  job gets (1.2-1.3 took the 10%-trimmed mean, which read up to 0.2% above the work
  done; the median before). Runs slowed by something outside the card (INTERRUPTED_FACTOR)
  are excluded by name and the result flagged contended, not trimmed by count. The
  within-run 95% interval comes from the measurement's ~1 s sub-windows; the interval a
  repeat run falls inside is fleet's (agent/timing/repeat.py); provenance of everything that
  changes the kernel.

torch is imported here and by the node suite (agent/node/suite.py), nowhere else in the agent.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Set, Tuple

from agent.matmul import integrity, steady
from agent.source.nvml import Handle, Nvml, NvmlError
from agent.timing import contention as contended_by
from agent.timing import soak, stats, telemetry

HARNESS_VERSION = "1.4.0"
# The standard benchmark: what the agent's CLI, fleet's CLI and its local agent all default
# to, so that a figure without options is the same figure everywhere.
DEFAULT_DTYPE = "bf16"
DEFAULT_SIZE = 8192
# What `tflops` is computed from: the runs' mean time, i.e. the work over the time (the
# 10%-trimmed mean in 1.2-1.3, the median before).
STATISTIC = "mean"
# A run this many times the median run is not the card at one of its operating points
# (the lent cards' points were at most 8% apart, a thermal or power brake is flagged by
# NVML): another context's time slice, a preemption or a stall outside the card. It is
# excluded, and named in the result's contention, unless NVML saw the card itself slow
# down (hw_slowdown or thermal), in which case the slow runs are the card's and count.
INTERRUPTED_FACTOR = 1.5
TIMING_METHOD = "cuda-events-per-run"
# Max relative error (max |C - ref| / max |ref|) against float64 on the same inputs. The
# output's own rounding dominates: bf16 keeps 8 bits (0.4% per element), fp16 11 bits,
# tf32 rounds the inputs to 10 bits.
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3, "tf32": 5e-3, "fp32": 1e-4}
DTYPES = tuple(TOLERANCE)  # the matmul data types the harness runs
# Environment variables that change which kernel runs or how it is set up.
KERNEL_ENV_PREFIXES = (
    "CUBLAS", "CUBLASLT", "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32", "TORCH_BLAS",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING", "PYTORCH_CUDA_ALLOC_CONF",
    "DISABLE_ADDMM_CUDA_LT", "TORCH_CUDNN",
)
MIN_FLUSH_BYTES = 64 * 1024 * 1024

Progress = Callable[[str], None]


class HarnessError(Exception):
    """The harness cannot run here (no torch, no device, bad options)."""


@dataclass
class Config:
    """One benchmark's settings: the matmul's shape and dtype, the mode, and the soak protocol."""

    dtype: str = DEFAULT_DTYPE
    m: int = DEFAULT_SIZE
    n: int = DEFAULT_SIZE
    k: int = DEFAULT_SIZE
    mode: str = "sustained"  # or "burst"
    # "soaked" (the default since 1.3): every GPU loaded continuously from its first
    # launch until throughput and temperature stop moving (agent/timing/soak.py), then measured;
    # "quick": warm-up until 1-s windows agree, the protocol of every result before 1.3,
    # a cool-start figure. Burst is always quick: its pauses are the point.
    protocol: str = "soaked"
    pause_ms: float = 50.0  # burst mode only
    warm_l2: bool = False
    sequential: bool = False
    gpus: Optional[List[int]] = None
    device: str = "cuda"  # "cpu" runs the same code path without a GPU (tests)
    seed: int = 20261122
    check_rows: int = 64
    # On the lent H100s a card starting cool wandered between 672 and 707 TFLOP/s for about
    # 20 s of load before settling, and a settled card still hops between 15 MHz clock bins
    # every few hundred ms, so 0.5 s window medians jump by 1%. Windows of 1 s, each reduced
    # to a 10%-trimmed mean (a time average across bins), 4 of which must agree and 6 show
    # no trend (bench/RESULTS.md, "Harness"). A card that jumps back and forth between two
    # tight levels in its last 8 windows is alternating between operating points: as steady
    # as it will get, so the measurement starts and spans them.
    window_s: float = 1.0
    steady_windows: int = 4
    trend_windows: int = 6
    alternating_windows: int = 8
    steady_tolerance: float = 0.005  # throughput; clocks and power get wider bands
    clock_tolerance: float = 0.02  # 15 MHz bins near 1400 MHz are 1.1% apart
    power_tolerance: float = 0.03
    max_warmup_s: float = 10.5
    # The measurement lasts at least measure_s, then goes on while its ~1 s sub-windows
    # disagree by more than measure_tolerance (the H100's two operating points are ~2.3%
    # apart; a settled card's 1 s windows span ~0.7%), until the whole run on this GPU,
    # set-up and warm-up included, reaches max_total_s: 20 s of wall per GPU at most.
    # None: 6 s for the quick protocol, soak.MEASURE_S once soaked.
    measure_s: Optional[float] = None
    measure_tolerance: float = 0.01
    max_total_s: float = 18.0
    soak_window_s: float = soak.WINDOW_S
    soak_span_s: float = soak.SPAN_S
    soak_cap_s: float = soak.CAP_S
    soak_first_s: float = soak.FIRST_S
    soak_throughput_tolerance: float = soak.THROUGHPUT_TOLERANCE
    soak_temperature_tolerance_c: float = soak.TEMPERATURE_TOLERANCE_C
    max_runs: int = 20000
    lock_clocks_mhz: Optional[int] = None
    flush_bytes: Optional[int] = None  # default: max(2 x L2, 64 MiB)
    # "auto" (the default since 1.2): flush unless A, B and C together are at least the
    # flush size (they evict the L2 themselves, and the flush only changes the card's power
    # pattern) in sustained mode; burst always flushes. "always": flush before every run
    # whatever the size (the default before).
    flush: str = "auto"

    @property
    def soaked(self) -> bool:
        """Whether the GPU is soaked to a steady temperature before measuring."""
        return self.protocol == "soaked" and self.mode == "sustained"

    @property
    def measure_seconds(self) -> float:
        """How long to measure: `measure_s` when given, else the protocol's default."""
        if self.measure_s is not None:
            return self.measure_s
        return soak.MEASURE_S if self.soaked else 6.0

    def validate(self) -> None:
        """Raise HarnessError, naming the setting and the fix, when the settings clash."""
        if self.protocol not in ("soaked", "quick"):
            raise HarnessError(f"protocol {self.protocol!r}: choose soaked or quick")
        if min(self.soak_window_s, self.soak_span_s, self.soak_cap_s) <= 0:
            raise HarnessError("the soak's window, span and cap must be positive")
        if self.soak_span_s < 2 * self.soak_window_s:
            raise HarnessError(f"a soak span of {self.soak_span_s:g} s holds fewer than two "
                               f"{self.soak_window_s:g}-s windows: give a longer span")
        if self.dtype not in TOLERANCE:
            raise HarnessError(f"dtype {self.dtype!r}: choose one of {', '.join(TOLERANCE)}")
        if self.flush not in ("auto", "always"):
            raise HarnessError(f"flush {self.flush!r}: choose auto or always")
        if self.mode not in ("sustained", "burst"):
            raise HarnessError(f"mode {self.mode!r}: choose sustained or burst")
        if min(self.m, self.n, self.k) < 1:
            raise HarnessError("M, N and K must be positive")
        if self.check_rows < 1:
            raise HarnessError("check_rows must be at least 1")


@dataclass
class GpuTarget:
    """One GPU to benchmark: torch's index, and NVML's index and handle when NVML sees it."""

    index: int  # torch's device index (or 0 on the CPU)
    nvml_index: Optional[int]
    uuid: Optional[str]
    nvml: Optional[Nvml] = None
    handle: Optional[Handle] = None

    def fingerprint(self, gpus: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """This GPU's fingerprint among `gpus`; on the CPU path, or for a GPU NVML does not
        see, what a figure can still say of it (its index and UUID)."""
        for gpu in gpus:
            if self.nvml_index is not None and gpu.get("index") == self.nvml_index:
                return gpu
        return {"index": self.nvml_index if self.nvml_index is not None else self.index,
                "uuid": self.uuid}


@dataclass
class Coordinator:
    """Lets concurrent GPUs start measuring together once all of them are steady."""

    expected: int
    _steady: Set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _go: threading.Event = field(default_factory=threading.Event)

    def report(self, index: int, is_steady: bool, gave_up: bool) -> None:
        """Note that GPU `index` is steady (or gave up waiting); release all once every one is."""
        with self._lock:
            if is_steady or gave_up:
                self._steady.add(index)
            if len(self._steady) >= self.expected:
                self._go.set()

    def ready(self) -> bool:
        """Whether every GPU is steady, so measuring may start."""
        return self._go.is_set()


class SoakCoordinator:
    """Every GPU of a node starts loading at once, measures once every one has soaked (or
    reached the cap), and keeps loading until the last has measured: in production the
    whole node runs together, and a neighbour idling early would cool the others."""

    def __init__(self, expected: int) -> None:
        self._expected = expected
        self._arrived: Set[int] = set()
        self._ready: Set[int] = set()
        self._finished: Set[int] = set()
        self._gone: Set[int] = set()
        self._cond = threading.Condition()

    def _all(self, members: Set[int]) -> bool:
        return len(members | self._gone) >= self._expected

    def arrive(self, index: int, timeout: float) -> None:
        """Wait, set up and checked, until every GPU is (or has failed); then all launch."""
        with self._cond:
            self._arrived.add(index)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._all(self._arrived), timeout)

    def withdraw(self, index: int) -> None:
        """A GPU that failed: nobody waits for it any more."""
        with self._cond:
            self._gone.add(index)
            self._cond.notify_all()

    def report_ready(self, index: int) -> None:
        """Note that GPU `index` has soaked (or reached the cap) and is ready to measure."""
        with self._cond:
            self._ready.add(index)

    def all_ready(self) -> bool:
        """Whether every GPU still running has soaked."""
        with self._cond:
            return self._all(self._ready)

    def report_finished(self, index: int) -> None:
        """Note that GPU `index` has finished measuring."""
        with self._cond:
            self._finished.add(index)

    def all_finished(self) -> bool:
        """Whether every GPU still running has finished measuring, so loading may stop."""
        with self._cond:
            return self._all(self._finished)


def import_torch() -> Any:
    try:
        import torch
    except Exception as exc:  # a broken install raises more than ImportError
        raise HarnessError(
            f"torch is not importable by {sys.executable or 'this Python'} ({exc}): install "
            "torch for it, or run the agent with a Python that has it (with fleet probe: "
            "`python:` for this host in the inventory)") from exc
    return torch


def kernel_environment(torch: Any) -> Dict[str, str]:
    """The settings that choose torch's matmul kernels: KERNEL_ENV_PREFIXES variables and flags."""
    env = {k: v[:256] for k, v in sorted(os.environ.items())
           if k.startswith(KERNEL_ENV_PREFIXES)}
    matmul = torch.backends.cuda.matmul
    env["torch.backends.cuda.matmul.allow_tf32"] = str(matmul.allow_tf32)
    env["torch.float32_matmul_precision"] = str(torch.get_float32_matmul_precision())
    for flag in ("allow_bf16_reduced_precision_reduction",
                 "allow_fp16_reduced_precision_reduction"):
        if hasattr(matmul, flag):
            env[f"torch.backends.cuda.matmul.{flag}"] = str(getattr(matmul, flag))
    return env


def cublas_version() -> Optional[str]:
    """cuBLASLt's own version, from the library this process actually loaded."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            paths = {line.split()[-1] for line in fh if "libcublasLt" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            raw = int(lib.cublasLtGetVersion())
        except (OSError, AttributeError):
            continue
        # 130001 -> 13.0.1; cuBLAS encodes major*10000 + minor*100 + patch.
        return f"{raw // 10000}.{(raw % 10000) // 100}.{raw % 100}"
    return None


class Runner:
    """One device's inputs, flush buffer and timed-run primitives."""

    def __init__(self, torch: Any, cfg: Config, target: GpuTarget) -> None:
        self.torch = torch
        self.cfg = cfg
        self.target = target
        self.cuda = cfg.device == "cuda"
        self.device = torch.device(f"cuda:{target.index}" if self.cuda else "cpu")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16,
                 "tf32": torch.float32, "fp32": torch.float32}[cfg.dtype]
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        # Inputs scaled so that sums over K stay O(1) in every dtype.
        scale = 1.0 / (cfg.k ** 0.25)
        with self._on_stream():
            a = torch.randn(cfg.m, cfg.k, generator=gen, device=self.device)
            b = torch.randn(cfg.k, cfg.n, generator=gen, device=self.device)
            self.a, self.b = (a * scale).to(dtype), (b * scale).to(dtype)
            self.c = torch.empty(cfg.m, cfg.n, dtype=dtype, device=self.device)
        self.l2_bytes = self._l2_bytes()
        self.flush: Any = None
        itemsize = 2 if cfg.dtype in ("bf16", "fp16") else 4
        self.working_set_bytes = (cfg.m * cfg.k + cfg.k * cfg.n + cfg.m * cfg.n) * itemsize
        size = cfg.flush_bytes or max(2 * (self.l2_bytes or 0), MIN_FLUSH_BYTES)
        evicts_itself = cfg.mode == "sustained" and self.working_set_bytes >= size
        # The result's `cache`, part of what results are compared by: "flushed" where the
        # flush ran though the operands evict the L2 themselves (--flush-always), as it
        # moved the figure by up to 1% on the lent H100s, either way.
        self.cache = ("warm" if cfg.warm_l2
                      else "flushed" if evicts_itself and cfg.flush == "always" else "cold")
        if cfg.warm_l2:
            self.flush_note = "none: warm-L2 mode"
        elif cfg.flush == "auto" and evicts_itself:
            # Burst keeps the flush: after each pause, the first kernel pays the card's
            # wake from idle, and the flush takes it outside the timed run (without it two
            # H200s read 7% CV and 652/675 TFLOP/s at 1980 MHz against 740 with it).
            self.flush_note = (f"none: A, B and C ({self.working_set_bytes >> 20} MiB) are at "
                               f"least the flush size ({size >> 20} MiB) and evict the L2 "
                               f"themselves every run")
        else:
            self.flush_note = f"every run: {size >> 20} MiB written before it"
            self.flush = torch.empty(size, dtype=torch.uint8, device=self.device)

    def _on_stream(self) -> Any:
        if self.stream is None:
            import contextlib

            return contextlib.nullcontext()
        return self.torch.cuda.stream(self.stream)

    def _l2_bytes(self) -> Optional[int]:
        if not self.cuda:
            return None
        props = self.torch.cuda.get_device_properties(self.device)
        value = getattr(props, "L2_cache_size", None)
        return int(value) if value else None

    def check(self) -> Tuple[float, int]:
        """Max relative error of one product against float64 on a fixed slice of rows."""
        torch = self.torch
        with self._on_stream():
            self.c.fill_(float("nan"))  # an unwritten element must fail the gate
            torch.matmul(self.a, self.b, out=self.c)
            gen = torch.Generator().manual_seed(self.cfg.seed + 1)
            rows = torch.randperm(self.cfg.m, generator=gen)[: self.cfg.check_rows].to(self.device)
            ref = self.a.index_select(0, rows).double() @ self.b.double()
            got = self.c.index_select(0, rows).double()
            scale = ref.abs().max()
            err = ((got - ref).abs().max() / scale).item() if scale.item() > 0 else float("inf")
        if self.stream is not None:
            self.stream.synchronize()
        if err != err:  # NaN: an element was never written or overflowed
            err = float("inf")
        return err, int(rows.numel())

    def _one(self, start: Any, stop: Any) -> None:
        if self.flush is not None:
            self.flush.zero_()
        start.record(self.stream)
        self.torch.matmul(self.a, self.b, out=self.c)
        stop.record(self.stream)

    def launch(self, runs: int) -> List[Tuple[Any, Any]]:
        """Queue `runs` timed runs; nothing waits for them here."""
        torch = self.torch
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(runs)]
        with self._on_stream():
            for start, stop in pairs:
                self._one(start, stop)
        return pairs

    @staticmethod
    def collect(pairs: Sequence[Tuple[Any, Any]]) -> List[float]:
        """Wait for the queued runs `pairs` to finish; their times in milliseconds."""
        pairs[-1][1].synchronize()  # the one wait: on the last stop event
        return [float(start.elapsed_time(stop)) for start, stop in pairs]

    def cpu_runs(self, runs: int) -> List[float]:
        """Time `runs` matmuls on the CPU, one after another; their times in milliseconds."""
        times: List[float] = []
        for _ in range(runs):
            if self.flush is not None:
                self.flush.zero_()
            t0 = time.perf_counter()
            self.torch.matmul(self.a, self.b, out=self.c)
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    def timed(self, runs: int) -> List[float]:
        """`runs` back-to-back runs, waited for: used in warm-up windows."""
        if not self.cuda:
            return self.cpu_runs(runs)
        return self.collect(self.launch(runs))

    def continuous(self, runs: Callable[[], int]
                   ) -> Generator[Tuple[float, float, List[float]], None, None]:
        """Chunks of `runs()` timed runs, back to back for as long as the caller takes them:
        (host time before, host time after, run times). On the GPU the next chunk is
        queued before the host waits on this one, so the card never idles between them;
        the chunk queued when the caller stops runs out untimed."""
        if not self.cuda:
            while True:
                c0 = time.perf_counter()
                got = self.cpu_runs(runs())
                yield c0, time.perf_counter(), got
        c0 = time.perf_counter()
        pending = self.launch(runs())
        while True:
            queued = self.launch(runs())
            got = self.collect(pending)
            c1 = time.perf_counter()
            yield c0, c1, got
            c0, pending = c1, queued

    def burst_run(self, pause_s: float) -> float:
        """Sleep `pause_s`, then time one matmul: a burst from idle, in milliseconds."""
        time.sleep(pause_s)
        if not self.cuda:
            return self.cpu_runs(1)[0]
        return self.collect(self.launch(1))[0]


def _other_processes(target: GpuTarget) -> List[Dict[str, Any]]:
    return contended_by.others(target.nvml, target.handle)


def _utilization(target: GpuTarget) -> Optional[int]:
    return contended_by.utilization(target.nvml, target.handle)


def lock_clocks(target: GpuTarget, mhz: int) -> Dict[str, Any]:
    """Ask the driver to lock the SM clock; say whether it refused. Opt-in only."""
    if target.nvml is None or target.handle is None:
        return {"requested_mhz": mhz, "applied": False, "error": "no NVML handle"}
    try:
        target.nvml.call(target.handle, "nvmlDeviceSetGpuLockedClocks", mhz, mhz)
    except NvmlError as exc:
        return {"requested_mhz": mhz, "applied": False, "error": exc.name}
    return {"requested_mhz": mhz, "applied": True, "error": None}


def unlock_clocks(target: GpuTarget) -> Optional[str]:
    """Undo `lock_clocks`. NVML has no getter for locked clocks, so the state before is
    taken to be unlocked (the default); the reset's own answer is recorded."""
    if target.nvml is None or target.handle is None:
        return None
    try:
        target.nvml.call(target.handle, "nvmlDeviceResetGpuLockedClocks")
    except NvmlError as exc:
        return exc.name
    return None


def warmup_state(windows: Sequence[float], clocks: Sequence[Optional[float]],
                 power: Sequence[Optional[float]], band: float, cfg: Config) -> str:
    """SETTLED when throughput, SM clock and power have all stopped drifting; ALTERNATING
    when throughput jumps back and forth between two tight levels (the clock and power
    jump with it, so they are not asked to agree); otherwise DRIFTING."""
    if (steady.is_steady(windows, band, cfg.steady_windows, cfg.trend_windows)
            and steady.is_steady(clocks, cfg.clock_tolerance, cfg.steady_windows,
                                 cfg.trend_windows)
            and steady.is_steady(power, cfg.power_tolerance, cfg.steady_windows,
                                 cfg.trend_windows)):
        return steady.SETTLED
    if steady.is_alternating(windows, band, cfg.alternating_windows):
        return steady.ALTERNATING
    return steady.DRIFTING


def _sub_windows(chunks: Sequence[Tuple[float, float, List[float]]]) -> List[List[float]]:
    """Two consecutive chunks (about one warm-up window) make a sub-window; an odd last
    chunk joins the one before it."""
    subs = [chunks[i][2] + (chunks[i + 1][2] if i + 1 < len(chunks) else [])
            for i in range(0, len(chunks), 2)]
    if len(chunks) > 2 and len(chunks) % 2 == 1:
        last = subs.pop()
        subs[-1] = subs[-1] + last
    return subs


def _sub_window_bounds(chunks: Sequence[Tuple[float, float, List[float]]]
                       ) -> List[Tuple[float, float]]:
    bounds = [(chunks[i][0], chunks[min(i + 1, len(chunks) - 1)][1])
              for i in range(0, len(chunks), 2)]
    if len(chunks) > 2 and len(chunks) % 2 == 1:
        last = bounds.pop()
        bounds[-1] = (bounds[-1][0], last[1])
    return bounds


def interrupted(samples_ms: Sequence[float], card_slowed: bool
                ) -> Tuple[List[float], List[Tuple[int, float]]]:
    """The runs kept and the runs excluded as interrupted ((index, ms)): those at least
    INTERRUPTED_FACTOR times the median, unless the card itself slowed (then none)."""
    if card_slowed or len(samples_ms) < 3:
        return list(samples_ms), []
    limit = INTERRUPTED_FACTOR * statistics.median(samples_ms)
    excluded = [(i, t) for i, t in enumerate(samples_ms) if t >= limit]
    if not excluded:
        return list(samples_ms), []
    return [t for t in samples_ms if t < limit], excluded


def _interval_tflops(cfg: Config, sub_means: Sequence[float]) -> Optional[List[float]]:
    """The within-run 95% interval in TFLOP/s (low, high), from the sub-windows' mean run
    times: how well this measurement knows its own level, not where a repeat lands."""
    if len(sub_means) < 2:
        return None
    low_ms, high_ms = stats.batch_interval(sub_means)
    centre = stats.tflops(cfg.m, cfg.n, cfg.k, statistics.fmean(sub_means))
    if low_ms <= 0 or stats.tflops(cfg.m, cfg.n, cfg.k, low_ms) > 10 * centre:
        return None  # sub-windows too far apart for an upper bound worth the name
    return [float(f"{stats.tflops(cfg.m, cfg.n, cfg.k, ms):.6g}") for ms in (high_ms, low_ms)]


@dataclass
class Load:
    """What one GPU's load produced, whichever protocol ran it: the warm-up or soak
    windows, the measurement's chunks (host start, host end, run times) and its bounds."""

    windows: List[float]  # warm-up (or soak) window levels, trimmed-mean ms
    state: str
    steady: bool
    warmup_s: float
    band: float
    agree: float
    chunks: List[Tuple[float, float, List[float]]]
    m0: float
    m1: float
    soak: Optional[Dict[str, Any]] = None
    integrity: Optional[Dict[str, Any]] = None  # soaked loads only (agent/matmul/integrity.py)


def _quick_load(runner: Runner, cfg: Config, target: GpuTarget, coordinator: Coordinator,
                sampler: telemetry.Sampler, wall0: float, progress: Progress) -> Load:
    """Warm-up in windows of about window_s until steady (and, when concurrent, until every
    GPU is), or the cap; then a measurement of at least measure_s that goes on while its
    sub-windows disagree, until the whole run reaches max_total_s."""
    load0 = time.perf_counter()
    first = runner.timed(3)
    per_run_ms = max(sorted(first)[1], 1e-3)
    if not runner.cuda:
        # On the CPU, sized by the wall time of the first runs too, as the soaked load is:
        # the flush before each run (64 MiB zeroed) takes far longer there than a small
        # product, and windows sized by the product alone lasted 10-20 s, not window_s.
        per_run_ms = max(per_run_ms, (time.perf_counter() - load0) * 1e3 / 3)
    window_runs = max(3, int(cfg.window_s * 1e3 / (per_run_ms + 0.05)))
    burst_runs = max(3, int(cfg.window_s * 1e3 / (per_run_ms + cfg.pause_ms)))
    windows: List[float] = []
    errors: List[float] = []
    clocks: List[Optional[float]] = []
    power: List[Optional[float]] = []
    warm0 = time.perf_counter()
    state = steady.DRIFTING
    is_steady = gave_up = False
    while True:
        t0 = time.perf_counter()
        if cfg.mode == "burst":
            # Burst's steady state is the card at burst's duty cycle, not under load.
            window = [runner.burst_run(cfg.pause_ms / 1e3) for _ in range(burst_runs)]
        else:
            window = runner.timed(window_runs)
        seen = telemetry.window_medians(sampler.between(t0, time.perf_counter()))
        windows.append(stats.trimmed_mean(window))
        errors.append(stats.relative_standard_error(window))
        clocks.append(seen["sm_clock_mhz"])
        power.append(seen["power_w"])
        # A window of few runs (burst mode: ~20 a second) cannot resolve 0.5%: widen
        # the band to three standard errors of a window's mean where that is larger.
        band = min(1.0, max(cfg.steady_tolerance,
                            3.0 * statistics.median(errors[-cfg.steady_windows:])))
        state = warmup_state(windows, clocks, power, band, cfg)
        is_steady = state != steady.DRIFTING
        gave_up = time.perf_counter() - warm0 >= cfg.max_warmup_s
        coordinator.report(target.index, is_steady, gave_up)
        if (is_steady or gave_up) and coordinator.ready():
            break
        if gave_up and time.perf_counter() - warm0 >= 2 * cfg.max_warmup_s:
            break  # another GPU never settled either: stop waiting for it
    warmup_s = time.perf_counter() - warm0
    progress(f"GPU {target.index}: {'steady' if is_steady else 'NOT steady'} ({state}) "
             f"after {warmup_s:.1f} s ({len(windows)} windows); measuring")

    # Measurement: chunks of about half a window, judged in sub-windows of two chunks.
    agree = max(cfg.measure_tolerance, 2.0 * band)
    chunks: List[Tuple[float, float, List[float]]] = []
    runs = 0
    m0 = time.perf_counter()

    def done() -> bool:
        now = time.perf_counter()
        subs = [stats.trimmed_mean(s) for s in _sub_windows(chunks)]
        return runs >= cfg.max_runs or steady.measurement_done(
            subs, now - m0, cfg.measure_seconds, now - wall0, cfg.max_total_s, agree)

    if cfg.mode == "burst" or not runner.cuda:
        chunk_runs = max(2, (burst_runs if cfg.mode == "burst" else window_runs) // 2)
        while not done():
            c0 = time.perf_counter()
            if cfg.mode == "burst":
                got = [runner.burst_run(cfg.pause_ms / 1e3) for _ in range(chunk_runs)]
            else:
                got = runner.cpu_runs(chunk_runs)
            chunks.append((c0, time.perf_counter(), got))
            runs += len(got)
    else:
        # The next batch is queued before the host waits on this one: the GPU never
        # idles. A batch ran between the two collections around it.
        batch = max(3, window_runs // 2)
        pending = runner.launch(batch)
        c0 = m0
        while True:
            full = runs + 2 * batch > cfg.max_runs
            queued = None if (full or done()) else runner.launch(batch)
            got = runner.collect(pending)
            c1 = time.perf_counter()
            chunks.append((c0, c1, got))
            runs += len(got)
            c0 = c1
            if queued is None:
                break
            pending = queued
    return Load(windows, state, is_steady, warmup_s, band, agree, chunks, m0,
                time.perf_counter())


def _soak_window(sampler: telemetry.Sampler, start: float, end: float, load0: float,
                 times: List[float], cfg: Config) -> soak.Window:
    seen = sampler.between(start, end)
    medians = telemetry.window_medians(seen)
    temps = [s[4] for s in seen if s[4] == s[4]]
    return soak.Window(end - load0, stats.tflops(cfg.m, cfg.n, cfg.k, stats.trimmed_mean(times)),
                       statistics.median(temps) if temps else None,
                       medians["sm_clock_mhz"], medians["power_w"])


def _soaked_load(runner: Runner, cfg: Config, target: GpuTarget, coordinator: SoakCoordinator,
                 sampler: telemetry.Sampler, progress: Progress) -> Load:
    """One continuous load from the first launch to the last timed run: soak windows judged
    by agent/timing/soak.py until this GPU has soaked or reached the cap, on until every GPU of
    the node has; then measure_seconds of timed runs; then load on, untimed, until every
    GPU has measured."""
    load0 = time.perf_counter()
    # Sized by the wall time of the first runs too: a flush before each run (or the
    # CPU's) makes a chunk far longer than the product's own time says.
    per_run_ms = max(sorted(runner.timed(3))[1], (time.perf_counter() - load0) * 1e3 / 3, 1e-3)
    # Chunks of a quarter window: a measurement sub-window (two chunks) is then ~1 s, as
    # in the quick protocol. Sized again from each chunk's own duration, which a flush
    # (or the CPU) makes longer than the product's time alone.
    chunk_s = cfg.soak_window_s / 4
    batch = [max(2, int(chunk_s * 1e3 / (per_run_ms + 0.05)))]
    windows: List[soak.Window] = []
    levels_ms: List[float] = []
    pending: List[float] = []
    first: List[float] = []
    window0 = load0
    verdict = soak.Verdict(False, None, None)
    settled_s: Optional[float] = None
    phase = "soak"
    ready_at: Optional[float] = None
    chunks: List[Tuple[float, float, List[float]]] = []
    runs = 0
    m0 = m1 = soak_end = 0.0
    told = 0.0
    # The product compared bit for bit with its first one, a soak window apart, queued
    # between chunks (never inside a timed run) on the product's own stream.
    check = integrity.Check(
        runner.torch, runner.c, runner.stream, load0, cfg.soak_window_s,
        lambda at: integrity.temperature_near(sampler.between(at - 1.0, at + 1.0), at))
    stream = runner.continuous(lambda: batch[0])
    try:
        for c0, c1, got in stream:
            check.after_chunk(c1)
            batch[0] = max(2, min(4 * batch[0], int(len(got) * chunk_s / max(c1 - c0, 1e-6))))
            elapsed = c1 - load0
            if elapsed <= cfg.soak_first_s:
                first += got
            if phase != "tail":
                pending += got
                if c1 - window0 >= cfg.soak_window_s:
                    windows.append(_soak_window(sampler, window0, c1, load0, pending, cfg))
                    levels_ms.append(stats.trimmed_mean(pending))
                    pending, window0 = [], c1
                    # The verdict that passed is the one kept: later windows, while the
                    # node's other GPUs soak, are in the curve.
                    if phase == "soak" and settled_s is None:
                        verdict = soak.judge(windows, cfg.soak_span_s, cfg.soak_span_s,
                                             cfg.soak_throughput_tolerance,
                                             cfg.soak_temperature_tolerance_c)
                        if verdict.soaked and settled_s is None:
                            settled_s = elapsed
            if phase == "soak":
                if ready_at is None and (settled_s is not None or elapsed >= cfg.soak_cap_s):
                    ready_at = elapsed
                    coordinator.report_ready(target.index)
                if elapsed - told >= 10.0 and windows:
                    told = elapsed
                    w = windows[-1]
                    progress(f"GPU {target.index}: {elapsed:.0f} s under load, "
                             f"{w.tflops:.1f} TFLOP/s, "
                             + (f"{w.temperature_c:.0f} C, " if w.temperature_c is not None
                                else "") + _verdict_words(verdict, cfg))
                # A GPU that never reports (its thread stuck) is not waited for past the
                # cap and a span more.
                if ready_at is not None and (coordinator.all_ready() or elapsed >= cfg.soak_cap_s
                                             + cfg.soak_span_s):
                    phase, m0, soak_end = "measure", c1, elapsed
                    said = "soaked" if settled_s is not None else "NOT soaked"
                    progress(f"GPU {target.index}: {said} ({_verdict_words(verdict, cfg)}); "
                             "measuring "
                             f"{cfg.measure_seconds:g} s at {elapsed:.0f} s of load")
                continue
            if phase == "measure":
                chunks.append((c0, c1, got))
                runs += len(got)
                if c1 - m0 >= cfg.measure_seconds or runs + batch[0] > cfg.max_runs:
                    phase, m1 = "tail", c1
                    coordinator.report_finished(target.index)
                continue
            if coordinator.all_finished() or c1 - m1 >= cfg.measure_seconds + cfg.soak_span_s:
                break
    finally:
        stream.close()
    if phase != "tail":  # only when the stream ended early, which it never does on its own
        m1 = time.perf_counter()
    checked = check.finish()
    if checked["mismatches"]:
        progress(f"GPU {target.index}: product changed under load in "
                 f"{checked['mismatches']} of {checked['checks']} checks, first at "
                 f"{checked['first_mismatch_s']:.0f} s ({checked['first_mismatch_elements']} "
                 "elements)")
    # The same statistic as the headline's, so that the drop (set by `measure`, once the
    # headline is known) compares like with like; the soak's own windows keep the
    # trimmed mean: they judge a slope, and one interrupted run must not tilt a 2-s window.
    first_tflops = (stats.tflops(cfg.m, cfg.n, cfg.k,
                                 statistics.fmean(interrupted(first, False)[0]))
                    if first else None)
    temps = [s[4] for s in sampler.between(m0, m1) if s[4] == s[4]]
    start = [s[4] for s in sampler.between(load0, load0 + 1.0) if s[4] == s[4]]
    detail = {
        "soaked": settled_s is not None,
        "seconds": round(soak_end, 3),
        "settled_s": None if settled_s is None else round(settled_s, 3),
        "cap_s": cfg.soak_cap_s, "window_s": cfg.soak_window_s, "span_s": cfg.soak_span_s,
        "throughput_tolerance": cfg.soak_throughput_tolerance,
        "temperature_tolerance_c": cfg.soak_temperature_tolerance_c,
        "throughput_change": _rounded(verdict.throughput_change, 6),
        "temperature_change_c": _rounded(verdict.temperature_change_c, 3),
        "first_20s_tflops": first_tflops,
        "drop": None,
        "temperature_c": statistics.median(temps) if temps else None,
        "temperature_start_c": start[0] if start else None,
        "curve": soak.curve_rows(windows),
    }
    # The warm-up's windows are the soak's own (the curve goes on through the measurement).
    soak_levels = [levels_ms[i] for i, w in enumerate(windows) if w.end_s <= soak_end + 1e-9]
    return Load(soak_levels, steady.SETTLED if settled_s is not None else steady.DRIFTING,
                settled_s is not None, soak_end, cfg.soak_throughput_tolerance,
                cfg.measure_tolerance, chunks, m0, m1, detail, checked)


def _rounded(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(value, digits)


def _verdict_words(verdict: soak.Verdict, cfg: Config) -> str:
    if verdict.throughput_change is None:
        return f"judged once {cfg.soak_span_s:g} s of load are in"
    words = f"throughput {100 * verdict.throughput_change:+.2f}%"
    if verdict.temperature_change_c is not None:
        words += f", temperature {verdict.temperature_change_c:+.1f} C"
    return words + f" over the last {cfg.soak_span_s:g} s"


def measure(
    torch: Any,
    cfg: Config,
    target: GpuTarget,
    coordinator: Any,
    gpus_in_run: int,
    progress: Progress,
) -> Dict[str, Any]:
    """One GPU's result. `coordinator` is a Coordinator for the quick protocol (and burst),
    a SoakCoordinator for the soaked one."""
    wall0 = time.perf_counter()
    busy_before = _other_processes(target)
    util_before = _utilization(target)
    lock: Optional[Dict[str, Any]] = None
    sampler = telemetry.Sampler(target.nvml, target.handle)
    sampler.start()
    soaked = cfg.soaked
    try:
        if cfg.lock_clocks_mhz is not None:
            lock = lock_clocks(target, cfg.lock_clocks_mhz)
        runner = Runner(torch, cfg, target)
        err, rows_checked = runner.check()
        progress(f"GPU {target.index}: correctness max relative error {err:.2e}")
        if soaked:
            # Everything before the load (imports, inputs, the gate) is done: every GPU
            # of the node starts loading together, from here to its last timed run.
            coordinator.arrive(target.index, timeout=600.0)
            load = _soaked_load(runner, cfg, target, coordinator, sampler, progress)
        else:
            load = _quick_load(runner, cfg, target, coordinator, sampler, wall0, progress)
        window_samples = sampler.between(load.m0, load.m1)
        card_slowed = (telemetry.share_with(window_samples, telemetry.HW_SLOWDOWN) > 0
                       or telemetry.share_with(window_samples, telemetry.THERMAL) > 0)
        subs = _sub_windows(load.chunks)
        sub_means = [stats.trimmed_mean(s) for s in subs]
        # Each sub-window's work over its time, its interrupted runs left out as the
        # headline leaves them out.
        sub_levels = [statistics.fmean(interrupted(s, card_slowed)[0]) for s in subs]
        sub_seen = [telemetry.window_medians(sampler.between(a, b))
                    for a, b in _sub_window_bounds(load.chunks)]
        points = steady.operating_points(sub_means, load.agree,
                                         [x["sm_clock_mhz"] for x in sub_seen],
                                         [x["power_w"] for x in sub_seen])
    except BaseException:
        if soaked:
            # The others must not wait at the start, or for this GPU's soak, any longer.
            coordinator.withdraw(target.index)
        raise
    finally:
        sampler.stop()
        unlock_error = unlock_clocks(target) if lock and lock.get("applied") else None
    every = [t for _, _, got in load.chunks for t in got]
    samples, excluded = interrupted(every, card_slowed)
    busy_after = _other_processes(target)
    summary = stats.summarise(samples)
    headline = stats.tflops(cfg.m, cfg.n, cfg.k, summary["mean_ms"])
    if load.soak is not None and load.soak.get("first_20s_tflops"):
        load.soak["drop"] = 1.0 - headline / load.soak["first_20s_tflops"]
    tele = telemetry.summarise(window_samples)
    tolerance = TOLERANCE[cfg.dtype]
    contention: List[str] = []
    contention.extend(contended_by.reasons(busy_before + busy_after, util_before))
    if excluded:
        contention.append(
            f"{len(excluded)} interrupted run(s) excluded, at least {INTERRUPTED_FACTOR:g}x "
            f"the median run: " + ", ".join(f"run {i} ({ms:.3f} ms)" for i, ms in excluded[:20])
            + (" ..." if len(excluded) > 20 else ""))
    props = torch.cuda.get_device_properties(runner.device) if runner.cuda else None
    if lock is not None and unlock_error is not None:
        lock["unlock_error"] = unlock_error
    seconds = load.m1 - load.m0
    return {
        "gpu_index": target.nvml_index if target.nvml_index is not None else target.index,
        "gpu_uuid": target.uuid,
        "harness_version": HARNESS_VERSION,
        "timing_method": TIMING_METHOD if runner.cuda else "cpu-perf-counter-per-run",
        "mode": cfg.mode,
        "pause_ms": cfg.pause_ms if cfg.mode == "burst" else 0.0,
        "thermal": "soaked" if soaked else "cool-start",
        "cache": runner.cache,
        "concurrency": "sequential" if cfg.sequential or gpus_in_run == 1 else "concurrent",
        "gpus_in_run": gpus_in_run,
        "dtype": cfg.dtype,
        "m": cfg.m, "n": cfg.n, "k": cfg.k,
        "tflops": headline,
        "statistic": STATISTIC,
        "stats": summary,
        "warmup": {"steady": load.steady, "state": load.state,
                   "seconds": round(load.warmup_s, 3), "windows": len(load.windows),
                   "band": round(load.band, 6),
                   "window_trimmed_means_ms": [round(w, 6) for w in load.windows][-1000:]},
        "measurement": {
            "seconds": round(seconds, 3), "sub_windows": len(subs),
            "extended": not soaked and seconds > cfg.measure_seconds + cfg.window_s,
            "band": round(load.agree, 6),
            "sub_window_trimmed_means_ms": [round(w, 6) for w in sub_means][:1000],
            "within_run_ci95": _interval_tflops(cfg, sub_levels),
            "excluded_runs": [[i, round(ms, 6)] for i, ms in excluded][:1000],
            "operating_points": [
                {"tflops": stats.tflops(cfg.m, cfg.n, cfg.k, p["median_ms"])
                 if p["median_ms"] else 0.0,
                 "share": round(p["share"] or 0.0, 4),
                 "sm_clock_mhz": p["sm_clock_mhz"], "power_w": p["power_w"]}
                for p in points][:16],
        },
        "correctness": {"max_rel_error": err if err != float("inf") else None,
                        "tolerance": tolerance, "rows_checked": rows_checked,
                        "passed": err <= tolerance},
        "flags": {
            "power_capped": telemetry.share_with(window_samples, telemetry.POWER_CAP) > 0.1,
            "thermal_throttled": telemetry.share_with(window_samples, telemetry.THERMAL) > 0,
            "hw_slowdown": telemetry.share_with(window_samples, telemetry.HW_SLOWDOWN) > 0,
            "contended": bool(contention),
            # Each protocol raises its own: the quick one's warm-up never settled, the
            # soaked one's load reached the cap still moving.
            "not_steady": not soaked and not load.steady,
            "not_soaked": soaked and not load.steady,
            # Two levels that each held at least two sub-windows: a lone sub-window
            # between them is the switch itself, or a blip.
            "operating_point_switch": sum(
                1 for p in points if (p["share"] or 0.0) * len(subs) >= 1.5) >= 2,
            "correctness_failed": not err <= tolerance,
            "clocks_locked": bool(lock and lock.get("applied")),
        },
        "contention": contention,
        "clock_lock": lock,
        "soak": load.soak,
        "integrity": load.integrity,
        "telemetry": tele,
        "telemetry_series": telemetry.downsample(window_samples, load.m0),
        "samples_ms": [round(s, 6) for s in samples],  # the excluded runs are not here
        "provenance": {
            "torch_version": str(torch.__version__),
            "cuda_runtime_version": torch.version.cuda,
            "cublas_version": cublas_version() if runner.cuda else None,
            "device_name": props.name if props is not None else "cpu",
            "sm_count": int(props.multi_processor_count) if props is not None else None,
            "l2_bytes": runner.l2_bytes,
            "flush_bytes": int(runner.flush.numel()) if runner.flush is not None else 0,
            "l2_flush": runner.flush_note,
            "working_set_bytes": runner.working_set_bytes,
            "inputs": f"randn(seed={cfg.seed}) * K^-0.25, cast to {cfg.dtype}",
            "env": kernel_environment(torch),
        },
        "wall_s": round(time.perf_counter() - wall0, 3),
    }


def _configure_precision(torch: Any, dtype: str) -> None:
    # fp32 means the CUDA cores (no TF32); tf32 asks for the tensor cores' TF32 mode.
    allow = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.set_float32_matmul_precision("high" if allow else "highest")


def match_targets(torch: Any, cfg: Config, gpus: Sequence[Dict[str, Any]],
                  nvml: Optional[Nvml]) -> List[GpuTarget]:
    """Torch's device order may differ from NVML's (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES):
    match them by UUID, then PCI bus id."""
    if cfg.device != "cuda":
        return [GpuTarget(0, None, None)]
    if not torch.cuda.is_available():
        raise HarnessError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    by_uuid = {g.get("uuid"): g for g in gpus if g.get("uuid")}
    by_bus = {str(g.get("pci_bus_id") or "").lower()[-12:]: g for g in gpus}
    targets: List[GpuTarget] = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        uuid_text = f"GPU-{uuid}" if uuid is not None else None
        match = by_uuid.get(uuid_text)
        if match is None and hasattr(props, "pci_bus_id"):
            bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            match = by_bus.get(bus.lower()[-12:])
        nvml_index = match.get("index") if match else None
        if cfg.gpus is not None and (nvml_index if nvml_index is not None else index) \
                not in cfg.gpus:
            continue
        target = GpuTarget(index, nvml_index, (match or {}).get("uuid") or uuid_text)
        if nvml is not None and nvml_index is not None:
            target.nvml = nvml
            target.handle = nvml.device(int(nvml_index))
        targets.append(target)
    if not targets:
        raise HarnessError(f"no GPU matches --gpus {cfg.gpus}")
    return targets


def run(
    cfg: Config,
    gpus: Sequence[Dict[str, Any]],
    nvml: Optional[Nvml],
    progress: Progress,
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Benchmark the selected GPUs; returns (results, errors)."""
    cfg.validate()
    torch = import_torch()
    _configure_precision(torch, cfg.dtype)
    targets = match_targets(torch, cfg, gpus, nvml)
    results: List[Dict[str, Any]] = []
    errors: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def one(target: GpuTarget, coordinator: Any, count: int) -> None:
        try:
            result = measure(torch, cfg, target, coordinator, count, progress)
        except Exception as exc:  # one GPU's failure must not lose the others' results
            with lock:
                errors.append({"stage": "benchmark", "gpu": target.nvml_index,
                               "message": f"{type(exc).__name__}: {exc}"[:4000]})
            if isinstance(coordinator, Coordinator):
                coordinator.report(target.index, True, True)
            return
        with lock:
            results.append(result)

    def coordinator_for(count: int) -> Any:
        return SoakCoordinator(count) if cfg.soaked else Coordinator(count)

    if cfg.sequential or len(targets) == 1:
        for target in targets:
            one(target, coordinator_for(1), 1)
    else:
        coordinator = coordinator_for(len(targets))
        threads = [threading.Thread(target=one, args=(t, coordinator, len(targets)),
                                    name=f"fleet-gpu{t.index}") for t in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    results.sort(key=lambda r: int(r["gpu_index"]))
    return results, errors
