"""The job suite: what a GPU-hour buys for a real job, on every GPU of the node at once.

Straight after the matmul (the node suite follows: agent/collect.py says why), each GPU
runs, in lockstep with the others (one thread a GPU, as the matmul's harness runs them):

1. the gates (agent/job/train_step.py, agent/job/decode.py), for every attention backend
   the torch offers (flash, cuDNN, efficient: `Config.backends`): a small training step
   and a small decode step in bf16 against float32. A backend the torch cannot run for
   the shape is said and left out; one that runs and computes wrong fails its GPU, which
   measures nothing. From here until the training load begins a matmul keeps the card at
   load (agent/job/warm.py), so that the soak starts near the matmul's heat;
2. the training step of the decoder stack (agent/job/transformer.py) with the first
   backend that passed on every GPU, loaded continuously until throughput and temperature
   stop moving by the matmul's rule (agent/timing/soak.py: the same window, tolerances and
   cap, after the matmul too: `Config.cap_s` says why; the span is 15 s straight after a
   soaked matmul, `Config.warm_span_s` says why), then measured;
3. the same step with each other backend that passed, measured on the card the first
   soaked;
4. where asked (`--job-compile`: `Config.compile`, `Gpu._compiled`), the same step under
   torch.compile with the backend the node's eager figures made fastest: compiled one
   GPU at a time while a matmul holds each card, gated against float32 as the backends
   are, measured as the other backends; its compile time stored apart (`compile_s`);
5. decode over the KV cache (a CUDA graph a step, one a backend), at two points
   (`DECODE_POINTS`): a bandwidth point, whose step reads enough weights and cache that
   the memory system sets its time, and a latency point of one sequence, every backend at
   each, on the same soaked card; where asked to compile, at each point the step under
   torch.compile too, in its own CUDA graph, with the backend the node's eager figures at
   that point made fastest, gated and measured as the training step's
   (`Gpu._decode_compiled`).

The headline of a GPU's training, and of each decode point, is the fastest backend (and,
for training, form: eager or compiled) that passed its gate (`headline`), named beside
its figure: what a job tuned for that card and stack gets, whichever kernel that is.
Every backend's and form's figure is stored, so figures compare within one too.

The phases run in lockstep (no GPU starts one before every GPU has left the last)
because PyTorch's attention-backend switch is process-wide: every thread must be asking
for the same backend at once, the gates included. The gates' float32 reference writes
its attention out rather than switch backends (agent/job/transformer.py).

Steps are timed with CUDA events in a pipeline (each step's end event is waited for
only once the next step is queued, so the GPU never idles for the host's sake); the
figure is the work over the summed step times, as the matmul's is. Each result carries
its telemetry, who else was on the GPU, the gate's verdict, peak memory, and the
FLOP and byte counts with their sources (agent/job/transformer.py).

On the CPU path (`--cpu`) the same code runs at a tiny shape with the math backend and
short windows: the path, not a figure.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple

from agent.gpu import links
from agent.job import standin, warm
from agent.matmul.harness import Config as HarnessConfig
from agent.matmul.harness import GpuTarget, SoakCoordinator, import_torch, match_targets
from agent.node.suite import IDLE_BEFORE_UTILIZATION_S
from agent.source.nvml import Nvml
from agent.timing import contention, soak, stats, telemetry

# 1.1.0: every backend gated and timed, the fastest the headline; GQA native; decode at a
# bandwidth point and a latency point (issue 45). 1.2.0: the bandwidth point at 128 x 8,192
# cached positions (was 128 x 4,096), which reads the memory system on an H200 as on an H100.
# 1.3.0: decode hands grouped-query attention to SDPA natively where the backend takes it
# (cuDNN read 4.8% more on a lent H200 so), as query rows only where it does not.
# 1.4.0: the stack written as torchtitan's Llama 3 (torch's own RMSNorm, its complex RoPE
# in float32, the fused QKV projection, its cross-entropy loss: agent/job/transformer.py
# names each; issue 55), and the training step measured eager and compiled, the faster
# correct form the headline; with `--job-compile`, decode compiled at each point too (a
# figure of its own, `compiled`, added without changing how any other is measured).
SUITE_VERSION = "1.4.0"
TIMING_METHOD = "cuda-events-pipelined"
Progress = Callable[[str], None]
# Timed units of work: (when one ended by the host's clock, its milliseconds).
Units = Generator[Tuple[float, float], None, None]
CAPTURE_LOCK = threading.Lock()
# One GPU's torch.compile at a time: Dynamo serialises compiles anyway (a process-wide
# lock), and holding it here makes each GPU's compile_s its own compile, not its wait.
COMPILE_LOCK = threading.Lock()
# The shorter measurements (another backend, decode) are cut into this many sub-windows
# for their within-run interval.
SHORT_SUB_WINDOWS = 4


@dataclass
class Config:
    """What the suite runs and for how long (docs/job-suite.md says why)."""

    device: str = "cuda"
    gpus: Optional[List[int]] = None
    sequential: bool = False
    # The training step again under torch.compile, beside the eager backends, where asked
    # (`--job-compile`, `Gpu._compiled`): with the backend the node's eager figures made
    # fastest, its compile while a matmul holds the card (agent/job/warm.py), gated
    # against float32 as the backends are, then measured as they are. Not by default: on
    # a lent 2x H200 (2026-11-29) the compiles, one GPU at a time, took the stage from its
    # minute to 93.6 s (bench/RESULTS.md, "The training figure a tuned stack gets").
    compile: bool = False
    # Every attention backend a tuned job could run on a GPU, the soak's first: math is
    # left out, as it writes the scores out (2 GiB a layer at 2 x 32 x 4096^2 in bf16), a
    # fallback no tuned job takes.
    backends: Tuple[str, ...] = ("flash", "cudnn", "efficient")
    graph: bool = True
    window_s: float = soak.WINDOW_S
    span_s: float = soak.SPAN_S
    # The span once the matmul has heated the card (`after_matmul`): replayed on the
    # records' curves (bench/job_soak_span.py, nine runs straight after the matmul), a
    # 15-s span called every node soaked 17-39 s into the training load (median 26)
    # instead of 31-56 s (median 42), and the level of the 6 s after it landed within
    # -0.22% to +0.27% of the figure measured after the full span (the runs' own
    # spread: 0.25%). From idle the card heats for a minute and more: the full span.
    warm_span_s: float = 15.0
    # The soak takes the matmul's cap (agent/timing/soak.py, `--soak-cap-s`) after the matmul as
    # from idle. Straight after the matmul, held at load while the job set up
    # (agent/job/warm.py), lent H100s soaked 31-37 s into the training step; from idle
    # 49-82 s. Behind the node suite, the cards had cooled 22-24 C and under a 35-s cap
    # every GPU was still heating 6-8 C a span (bench/records/2026-11-26-h100x4-jobs).
    cap_s: float = soak.CAP_S
    # Measured for 6 s, the other backend 2 s and decode 3 s (after a second's warm-up
    # each), runs spread 0.27%, 0.38% and 0.08% (dof 17), where 8, 3 and 5 s spread
    # 0.21%, 0.24% and 0.06% (dof 4): a difference four degrees of freedom cannot tell
    # (an sd from dof 4 spans 0.6-2.9x at 95%). Three backends and two decode points
    # take decode to 1 s after 0.5 s of warm-up (at 0.3 s, the first backend after the
    # captures still ramped: its sub-windows spread 13% on a lent 4x H100,
    # bench/records/2026-11-27-h100x4-job-backends).
    measure_s: float = 6.0
    beside_warm_s: float = 0.5
    beside_s: float = 2.0
    decode_warm_s: float = 0.5
    decode_s: float = 1.0
    # Sub-windows of the measurement, for its within-run interval: the training
    # measurement's; the shorter ones are cut in `SHORT_SUB_WINDOWS`.
    sub_window_s: float = 1.0
    # How many graph replays one timed unit of decode holds (~30 ms at the bandwidth
    # point on an H100, ~6 ms at the latency point).
    decode_unit_steps: int = 8
    shapes: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_cpu(cls) -> "Config":
        """Seconds a CI machine spends in a fraction of: the path, not a figure."""
        # `--job-compile` compiles here too (the path's test); inductor's C++ for the CPU
        # is not what a GPU runs.
        return cls(device="cpu", backends=("math",), graph=False, compile=False,
                   window_s=0.2, span_s=0.8, warm_span_s=0.8, cap_s=1.2, measure_s=0.6,
                   beside_s=0.0, decode_warm_s=0.1, decode_s=0.4, sub_window_s=0.2,
                   decode_unit_steps=4)

    def after_matmul(self) -> "Config":
        """The suite as it runs straight after the matmul: the shorter span."""
        return replace(self, span_s=self.warm_span_s)


class JobError(Exception):
    """A GPU's job could not run or did not pass its gate; the message says which and why."""


def _shapes(cfg: Config) -> Dict[str, Any]:
    from agent.job import transformer as t

    cpu = cfg.device == "cpu"
    defaults = {"train": t.CPU_TRAIN if cpu else t.TRAIN,
                "decode": t.CPU_DECODE_POINTS if cpu else t.DECODE_POINTS,
                "gate": t.CPU_GATE if cpu else t.GATE,
                "gate_decode": t.CPU_GATE_DECODE if cpu else t.GATE_DECODE}
    defaults.update(cfg.shapes)
    return defaults


@dataclass
class Gate:
    """A backend that passed both gates on a GPU: how it takes grouped-query attention in
    training (agent/job/transformer.py GQA_NATIVE or GQA_EXPANDED) and the verdicts."""

    name: str
    gqa: str
    train: Dict[str, Any]
    decode: Dict[str, Any]
    # How decode hands it over: transformer.GQA_NATIVE or GQA_GROUPED (agent/job/decode.py).
    decode_gqa: str = "native"


class Agreement:
    """Which backends passed the gates on which GPU: a backend is measured only where
    every GPU of the node passed it, since the backend switch is process-wide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passed: Dict[int, List[str]] = {}
        self._figures: Dict[Tuple[str, int], Dict[str, float]] = {}

    def passed(self, index: int, backends: List[str]) -> None:
        with self._lock:
            self._passed[index] = backends

    def measured(self, index: int, figures: Dict[str, float], what: str = "train") -> None:
        """GPU `index`'s eager tokens/s by backend, of `what`: "train", or a decode
        point."""
        with self._lock:
            self._figures[(what, index)] = dict(figures)

    def fastest(self, order: Sequence[str], what: str = "train") -> Optional[str]:
        """The backend to compile the node's step of `what` with (one for every GPU, so
        that each GPU's compiled figure is the same step): the fastest eager backend on
        the most GPUs, ties to the larger sum of their figures, then to `order`; None
        before any GPU reported."""
        with self._lock:
            figures = [f for (kind, _), f in self._figures.items() if kind == what]
        wins: Dict[str, int] = {}
        sums: Dict[str, float] = {}
        for mine in figures:
            if mine:
                best = max(mine, key=lambda name: mine[name])
                wins[best] = wins.get(best, 0) + 1
            for name, value in mine.items():
                sums[name] = sums.get(name, 0.0) + value
        named = [name for name in order if name in sums]
        if not named:
            return None
        return max(named, key=lambda name: (wins.get(name, 0), sums[name],
                                             -named.index(name)))

    def agreed(self, order: Sequence[str]) -> List[str]:
        """The backends every GPU that reported passed, in `order`."""
        with self._lock:
            sets = [set(b) for b in self._passed.values()]
        return [name for name in order if sets and all(name in s for s in sets)]


def mark_headlines(results: List[Dict[str, Any]]) -> None:
    """Each result's `headline`: whether it is the fastest backend and form (eager or
    compiled) of its GPU's workload and decode point (every result here passed its
    gate)."""
    best: Dict[Tuple[str, Optional[str]], Dict[str, Any]] = {}
    for result in results:
        key = (result["workload"], result.get("point"))
        if key not in best or result["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = result
    for result in results:
        result["headline"] = best[(result["workload"], result.get("point"))] is result


class Timer:
    """Units of work (a training step; a run of graph replays) timed back to back: on
    CUDA each unit between two events, whose end is waited for once the next unit is
    queued; on the CPU by the wall clock."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.cuda = device.type == "cuda"
        self.device = device

    def units(self, work: Callable[[], None]) -> Units:
        """(when the unit ended by the host's clock, its milliseconds), forever."""
        if not self.cuda:
            while True:
                t0 = time.perf_counter()
                work()
                t1 = time.perf_counter()
                yield t1, (t1 - t0) * 1e3
        torch = self.torch
        pending: Optional[Tuple[Any, Any]] = None
        while True:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            if pending is not None:
                pending[1].synchronize()
                yield time.perf_counter(), float(pending[0].elapsed_time(pending[1]))
            pending = (start, end)


@dataclass
class Span:
    """The units timed in one phase's measurement: per-unit ms, steps and end times."""

    ms: List[float] = field(default_factory=list)
    ends: List[float] = field(default_factory=list)
    t0: float = 0.0
    t1: float = 0.0


def _window(sampler: telemetry.Sampler, start: float, end: float, load0: float,
            tokens_per_s: float) -> soak.Window:
    seen = sampler.between(start, end)
    medians = telemetry.window_medians(seen)
    temps = [s[4] for s in seen if s[4] == s[4]]
    return soak.Window(end - load0, tokens_per_s, statistics.median(temps) if temps else None,
                       medians["sm_clock_mhz"], medians["power_w"])


class Gpu:
    """One GPU's run of the suite."""

    def __init__(self, torch: Any, cfg: Config, target: GpuTarget, gpu: Dict[str, Any],
                 phases: Dict[str, Phase], progress: Progress,
                 node: Optional[Agreement] = None) -> None:
        self.torch = torch
        self.cfg = cfg
        self.target = target
        self.gpu = gpu
        self.phases = phases
        self.node = node or Agreement()
        self.progress = progress
        # Backends the torch could not run for the job's shapes, and why.
        self.unavailable: Dict[str, str] = {}
        self.shapes = _shapes(cfg)
        self.device = torch.device(f"cuda:{target.index}" if cfg.device == "cuda" else "cpu")
        self.timer = Timer(torch, self.device)
        self.sampler = telemetry.Sampler(target.nvml, target.handle)
        self.label = f"GPU {gpu.get('index', target.index)}" if self.timer.cuda else "the CPU"
        self.errors: List[str] = []
        self.warmer = warm.Warmer(torch, self.device)
        # Seconds the warmer held the card before the training load (None: it did not).
        self.warmed_s: Optional[float] = None

    def say(self, message: str) -> None:
        self.progress(f"{self.label}: {message}")

    def _reset_peak(self) -> None:
        if self.timer.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def _peak(self) -> Optional[int]:
        return int(self.torch.cuda.max_memory_allocated(self.device)) if self.timer.cuda \
            else None

    def _measure(self, units: Units, phase: SoakCoordinator,
                 seconds: float, warm_s: float = 0.0) -> Span:
        """Warm for `warm_s`, measure `seconds`, then load on untimed until every GPU of
        the node has measured (a neighbour idling early would cool the others)."""
        index = self.target.index
        phase.report_ready(index)
        span = Span()
        began = time.perf_counter()
        state = "warm" if warm_s > 0 else "measure"
        span.t0 = began
        for end, ms in units:
            if state == "warm":
                if end - began >= warm_s:
                    state, span.t0 = "measure", end
                continue
            if state == "measure":
                span.ms.append(ms)
                span.ends.append(end)
                if end - span.t0 >= seconds:
                    state, span.t1 = "tail", end
                    phase.report_finished(index)
                continue
            if phase.all_finished() or end - span.t1 >= seconds + self.cfg.span_s:
                break
        return span

    def _soak(self, units: Units, tokens_per_unit: int,
              phase: SoakCoordinator) -> Tuple[Span, Dict[str, Any]]:
        """The training load from its first timed step: soak windows judged by the
        matmul's rule until this GPU has soaked or reached the cap, on until every GPU
        has; then the measurement; then the tail."""
        cfg = self.cfg
        index = self.target.index
        load0 = time.perf_counter()
        windows: List[soak.Window] = []
        verdict = soak.Verdict(False, None, None)
        settled_s: Optional[float] = None
        window0, window_ms, window_units = load0, 0.0, 0
        told = 0.0
        ready = False
        soak_end = 0.0
        for end, ms in units:
            window_ms += ms
            window_units += 1
            elapsed = end - load0
            if end - window0 >= cfg.window_s:
                rate = tokens_per_unit * window_units / (window_ms / 1e3)
                windows.append(_window(self.sampler, window0, end, load0, rate))
                window0, window_ms, window_units = end, 0.0, 0
                if settled_s is None:
                    verdict = soak.judge(windows, cfg.span_s, cfg.span_s)
                    if verdict.soaked:
                        settled_s = elapsed
            if not ready and (settled_s is not None or elapsed >= cfg.cap_s):
                ready = True
                phase.report_ready(index)
            if elapsed - told >= 10.0 and windows:
                told = elapsed
                w = windows[-1]
                self.say(f"{elapsed:.0f} s of training, {w.tflops:,.0f} tokens/s"
                         + (f", {w.temperature_c:.0f} C" if w.temperature_c is not None else ""))
            if ready and (phase.all_ready() or elapsed >= cfg.cap_s + cfg.span_s):
                soak_end = elapsed
                break
        span = self._measure(units, phase, cfg.measure_s)
        # The curve goes on through the measurement, as the matmul's does.
        samples = self.sampler.between(span.t0, span.t1)
        temps = [s[4] for s in samples if s[4] == s[4]]
        start = [s[4] for s in self.sampler.between(load0, load0 + 1.0) if s[4] == s[4]]
        tail = self._windows(span, tokens_per_unit, load0)
        detail = {
            "soaked": settled_s is not None, "seconds": round(soak_end, 3),
            "settled_s": None if settled_s is None else round(settled_s, 3),
            "cap_s": cfg.cap_s, "window_s": cfg.window_s, "span_s": cfg.span_s,
            "throughput_tolerance": soak.THROUGHPUT_TOLERANCE,
            "temperature_tolerance_c": soak.TEMPERATURE_TOLERANCE_C,
            "throughput_change": None if verdict.throughput_change is None
            else round(verdict.throughput_change, 6),
            "temperature_change_c": None if verdict.temperature_change_c is None
            else round(verdict.temperature_change_c, 3),
            "temperature_c": statistics.median(temps) if temps else None,
            "temperature_start_c": start[0] if start else None,
            "warmed_s": self.warmed_s,
            "curve": soak.curve_rows(windows + tail),
        }
        return span, detail

    def _windows(self, span: Span, tokens_per_unit: int, load0: float) -> List[soak.Window]:
        """The measurement cut into soak windows, so that the curve runs on through it."""
        out: List[soak.Window] = []
        start, ms, n = span.t0, 0.0, 0
        for i, end in enumerate(span.ends):
            ms += span.ms[i]
            n += 1
            if end - start >= self.cfg.window_s:
                out.append(_window(self.sampler, start, end, load0,
                                   tokens_per_unit * n / (ms / 1e3)))
                start, ms, n = end, 0.0, 0
        return out

    def _sub_levels(self, span: Span, tokens_per_unit: int, window_s: float) -> List[float]:
        levels: List[float] = []
        start, ms, n = span.t0, 0.0, 0
        for i, end in enumerate(span.ends):
            ms += span.ms[i]
            n += 1
            if end - start >= window_s:
                levels.append(tokens_per_unit * n / (ms / 1e3))
                start, ms, n = end, 0.0, 0
        return levels

    def run(self, busy_before: Optional[int]) -> List[Dict[str, Any]]:
        """Gate, train with every backend, decode at every point; the results."""
        seen = contention.others(self.target.nvml, self.target.handle)
        self.sampler.start()
        # Started after the reading of who else is on the card: it is this process.
        self.warmer.start()
        try:
            gates = self._gates()
            results = self._train(gates, seen, busy_before)
            for point in self.shapes["decode"]:
                results += self._decode_or_say(point, gates, results[0], seen, busy_before)
            mark_headlines(results)
        except BaseException:
            for phase in self.phases.values():
                phase.withdraw(self.target.index)
            raise
        finally:
            self.warmer.stop()
            self.sampler.stop()
        after = contention.others(self.target.nvml, self.target.handle)
        if after:
            lines = contention.reasons(seen + after, busy_before)
            processes = list({p["pid"]: p for p in seen + after}.values())
            for result in results:
                result["contention"] = lines
                result["processes"] = processes
                result["flags"]["contended"] = True
        return results

    def _decode_or_say(self, point: str, gates: Dict[str, Gate], first: Dict[str, Any],
                       seen: List[Dict[str, Any]], busy_before: Optional[int]
                       ) -> List[Dict[str, Any]]:
        """Decode at `point`, or where it fails (a setting under which no CUDA graph can be
        captured: PYTORCH_NO_CUDA_MEMORY_CACHING=1), why, leaving this GPU's training
        figure and its other point standing; the node's other GPUs are not kept waiting."""
        try:
            return self._decode(point, gates, first, seen, busy_before)
        except Exception as exc:  # the whole GPU's figures must not go with one point
            prefix = f"decode:{point}"
            for name, phase in self.phases.items():
                if name == prefix or name.startswith(prefix + ":"):
                    phase.withdraw(self.target.index)
            self.errors.append(f"{self.label}: decode at the {point} point failed "
                               f"({type(exc).__name__}: {str(exc)[:300]}); its training "
                               "figure and the other decode point stand")
            self._free()
            return []

    def _sync(self) -> None:
        if self.timer.cuda:
            self.torch.cuda.synchronize(self.device)

    def _free(self) -> None:
        if self.timer.cuda:
            self.torch.cuda.empty_cache()

    def _gates(self) -> Dict[str, Gate]:
        """Every backend's gates, in lockstep with the node's other GPUs; the backends
        every GPU passed, with their verdicts. JobError where a backend computed wrong
        here, or none passed."""
        from agent.job import decode, train_step

        dtype = self.torch.bfloat16
        mine: Dict[str, Gate] = {}
        for name in self.cfg.backends:
            self.phases[f"gate:{name}"].arrive(self.target.index, timeout=300.0)
            gqa, checked, why = train_step.gate_backend(self.shapes["gate"], self.device,
                                                        name, dtype)
            checked_decode: Optional[Dict[str, Any]] = None
            decode_gqa = "native"
            if checked is not None:
                try:
                    decode_gqa, checked_decode = decode.gate_backend(
                        self.shapes["gate_decode"], self.device, name, dtype)
                except Exception as exc:  # the torch cannot run it for decode's shape
                    why = f"{type(exc).__name__}: {str(exc)[:200]}"
            if checked is None or checked_decode is None:
                self.unavailable[name] = why or "not run"
                continue
            for what, verdict in (("training step", checked), ("decode", checked_decode)):
                if not verdict["passed"]:
                    raise JobError(
                        f"{self.label}: the {what} gate failed with {name} attention at "
                        f"{verdict['shape']}: error {verdict['grad_max_rel_error']} against "
                        f"float32 (tolerance {verdict['tolerance']}), loss finite: "
                        f"{verdict['loss_finite']}; no job figure is measured on a GPU that "
                        "computes it wrong. Run the matmul's check (fleet bench --gemm-only) "
                        "on it; if that passes, the torch or its attention kernel is at "
                        "fault, else ask the provider to replace the GPU")
            mine[name] = Gate(name, gqa, checked, checked_decode, decode_gqa)
        self.node.passed(self.target.index, list(mine))
        self.phases["gated"].arrive(self.target.index, timeout=300.0)
        agreed = self.node.agreed(self.cfg.backends)
        for name in mine:
            if name not in agreed:
                self.errors.append(f"{self.label}: {name} attention passed its gates here but "
                                   "not on every GPU of the node; measured on none")
        for name, why in self.unavailable.items():
            self.errors.append(f"{self.label}: no {name} attention on this torch for the "
                               f"job's shapes ({why}); the other backends stand")
        if not agreed:
            raise JobError(f"{self.label}: no attention backend ran the job's gates on every "
                           f"GPU ({', '.join(self.cfg.backends)} tried); nothing measured")
        gates = {name: mine[name] for name in agreed}
        self.say("gates passed: " + ", ".join(
            f"{g.name} ({g.train['grad_max_rel_error']:.2%} and "
            f"{g.decode['grad_max_rel_error']:.2%} off float32, GQA {g.gqa}"
            + (f", decode {g.decode_gqa}" if g.decode_gqa != g.gqa else "") + ")"
            for g in gates.values()))
        return gates

    def _train(self, gates: Dict[str, Gate], seen: List[Dict[str, Any]],
               busy_before: Optional[int]) -> List[Dict[str, Any]]:
        """The soaked training figure with the first backend, and every other's beside."""
        from agent.job import train_step

        cfg = self.cfg
        wall0 = time.perf_counter()
        shape = self.shapes["train"]
        order = list(gates.values())
        first = order[0]
        trainer = train_step.Trainer(shape, self.device, self.torch.bfloat16, first.name,
                                     gqa=first.gqa)
        loss = trainer.first_step(self._sync)
        # Said with its time: the set-up is part of the stage's minute.
        self.say(f"stack built and its first step taken in {time.perf_counter() - wall0:.1f} s")
        self.phases["train"].arrive(self.target.index, timeout=600.0)
        self.warmed_s = self.warmer.stop()
        if self.warmer.error is not None:
            self.errors.append(f"{self.label}: the card could not be kept at load while the "
                               f"job set up ({self.warmer.error}); its soak started cooler")
        # From the first step on: the warmer's products are not the step's memory.
        self._reset_peak()
        tokens = shape.batch * shape.seq

        def step() -> None:
            _discard(trainer.step())

        # The CPU path may stand in for a GPU a setting slows (agent/job/standin.py).
        units = self.timer.units(standin.stretched(step) if cfg.device == "cpu" else step)
        span, detail = self._soak(units, tokens, self.phases["train"])
        units.close()
        self._sync()
        results = [self._result("train", first, span, tokens, 1, first.train, loss,
                                detail, wall0, seen, busy_before, trainer=trainer)]
        for gate in order[1:]:
            self.phases[f"beside:{gate.name}"].arrive(self.target.index, timeout=120.0)
            result = self._beside(trainer, gate, tokens, results[0], seen, busy_before)
            if result is not None:
                results.append(result)
        if cfg.compile:
            compiled = self._compiled(trainer, gates, tokens, results, seen, busy_before)
            if compiled is not None:
                results.append(compiled)
        return results

    def _compiled(self, trainer: Any, gates: Dict[str, Gate], tokens: int,
                  eager: List[Dict[str, Any]], seen: List[Dict[str, Any]],
                  busy_before: Optional[int]) -> Optional[Dict[str, Any]]:
        """The training step under torch.compile with the backend the node's eager
        figures made fastest, gated against float32, measured on the card the
        eager load soaked; a matmul holds the card while it compiles and waits for the
        node's other GPUs. None, and why in `errors`, where it did not compile or did not
        pass its gate: the eager figures stand."""
        cfg = self.cfg
        index = self.target.index
        self.node.measured(index, {r["attention"]: r["tokens_per_s"] for r in eager})
        self.phases["compile"].arrive(index, timeout=120.0)
        attention = self.node.fastest(list(gates))
        if attention is None or attention not in gates:
            self.phases["compiled"].withdraw(index)
            return None
        gate = gates[attention]
        wall0 = time.perf_counter()
        trainer.use(gate.name, gate.gqa)
        self.warmer.start()
        try:
            with COMPILE_LOCK:
                checked = trainer.compile(gate.name, self._sync, self.shapes["gate"])
            compile_s = trainer.compile_s
            self.phases["compiled"].arrive(index, timeout=600.0)
        except Exception as exc:  # no compiler on the host, a torch that cannot trace it
            self.warmer.stop()
            self.phases["compiled"].withdraw(index)
            self.errors.append(f"{self.label}: the training step did not compile with "
                               f"{attention} attention ({type(exc).__name__}: "
                               f"{str(exc).strip()[:300]}); the eager figures stand")
            return None
        self.warmer.stop()
        if not checked["passed"]:
            self.phases["compiled"].withdraw(index)
            self.errors.append(
                f"{self.label}: the compiled training step with {attention} attention "
                f"failed its gate: gradients {checked['grad_max_rel_error']} off float32's "
                f"(tolerance {checked['tolerance']}), loss finite: "
                f"{checked['loss_finite']}; not measured. The eager step passed its own "
                "gate on this card: the compiler, not the card, is at fault; the eager "
                "figures stand")
            return None
        self.say(f"compiled with {attention} attention in {compile_s:.1f} s, "
                 f"{checked['grad_max_rel_error']:.2%} off float32")
        # The compiled step's own memory, not the eager steps' before it.
        self._reset_peak()
        units = self.timer.units(lambda: _discard(trainer.step(compiled=True)))
        span = self._measure(units, self.phases["compiled"], cfg.beside_s, cfg.beside_warm_s)
        units.close()
        self._sync()
        return self._result("train", gate, span, tokens, 1, checked, None, None, wall0,
                            seen, busy_before, trainer=trainer, follows=eager[0],
                            compiled=True, compile_s=compile_s)

    def _decode(self, point: str, gates: Dict[str, Gate], first: Dict[str, Any],
                seen: List[Dict[str, Any]], busy_before: Optional[int]
                ) -> List[Dict[str, Any]]:
        """Decode at `point` with every backend, on the card the training step soaked
        (its weights and state freed): one graph a backend over one cache."""
        from agent.job import decode

        cfg = self.cfg
        self._free()
        self.phases[f"decode:{point}"].arrive(self.target.index, timeout=120.0)
        wall0 = time.perf_counter()
        self._reset_peak()
        shape = self.shapes["decode"][point]
        order = list(gates.values())
        # One capture at a time, and no GPU's work beside it: every GPU waits at the
        # phase's start and again once all have captured (agent/job/decode.py says what a
        # shared capture stream did on a lent 2x H100).
        with CAPTURE_LOCK:
            decoder = decode.Decoder(shape, self.device, self.torch.bfloat16, order[0].name,
                                     graph=cfg.graph and self.timer.cuda,
                                     gqa=order[0].decode_gqa)
            for gate in order[1:]:
                decoder.use(gate.name, gate.decode_gqa)
        self.phases[f"decode:{point}:captured"].arrive(self.target.index, timeout=120.0)
        steps = cfg.decode_unit_steps

        def replay() -> None:
            for _ in range(steps):
                decoder.step()

        results = []
        for gate in order:
            self.phases[f"decode:{point}:{gate.name}"].arrive(self.target.index,
                                                               timeout=120.0)
            decoder.use(gate.name, gate.decode_gqa)
            units = self.timer.units(replay)
            span = self._measure(units, self.phases[f"decode:{point}:{gate.name}"],
                                 cfg.decode_s, cfg.decode_warm_s)
            units.close()
            self._sync()
            results.append(self._result(
                "decode", gate, span, shape.batch, steps, gate.decode, None, None, wall0,
                seen, busy_before, follows=first, point=point))
            wall0 = time.perf_counter()
        if cfg.compile:
            compiled = self._decode_compiled(point, decoder, gates, results, first, seen,
                                             busy_before)
            if compiled is not None:
                results.append(compiled)
        return results

    def _decode_compiled(self, point: str, decoder: Any, gates: Dict[str, Gate],
                         eager: List[Dict[str, Any]], first: Dict[str, Any],
                         seen: List[Dict[str, Any]], busy_before: Optional[int]
                         ) -> Optional[Dict[str, Any]]:
        """Decode at `point` under torch.compile with the backend the node's eager figures
        at the point made fastest: gated against float32 at the gate's shape, compiled
        one GPU at a time while a matmul holds the card, captured one GPU at a time with
        no work beside it (as the eager graphs), measured as the eager backends. None,
        and why in `errors`, where it did not compile or did not pass: the eager figures
        stand."""
        from agent.job import decode

        cfg = self.cfg
        index = self.target.index
        compile_phase = self.phases[f"decode:{point}:compile"]
        captured = self.phases[f"decode:{point}:compiled:captured"]
        measured = self.phases[f"decode:{point}:compiled"]
        later = (captured, measured)
        self.node.measured(index, {r["attention"]: r["tokens_per_s"] for r in eager}, point)
        compile_phase.arrive(index, timeout=120.0)
        attention = self.node.fastest(list(gates), point)
        if attention is None or attention not in gates:
            for phase in later:
                phase.withdraw(index)
            return None
        gate = gates[attention]
        wall0 = time.perf_counter()
        self.warmer.start()
        try:
            with COMPILE_LOCK:
                checked = decode.gate(self.shapes["gate_decode"], self.device, attention,
                                      self.torch.bfloat16, gqa=gate.decode_gqa, compiled=True)
                compile_s = decoder.compile(attention, gate.decode_gqa, self._sync)
        except Exception as exc:  # no compiler on the host, a torch that cannot trace it
            self.warmer.stop()
            for phase in later:
                phase.withdraw(index)
            self.errors.append(f"{self.label}: decode at the {point} point did not compile "
                               f"with {attention} attention ({type(exc).__name__}: "
                               f"{str(exc).strip()[:300]}); its eager figures stand")
            return None
        self.warmer.stop()
        if not checked["passed"]:
            for phase in later:
                phase.withdraw(index)
            self.errors.append(
                f"{self.label}: compiled decode with {attention} attention failed its gate: "
                f"output {checked['grad_max_rel_error']} off float32's (tolerance "
                f"{checked['tolerance']}), finite: {checked['loss_finite']}; not measured. "
                "The eager step passed its own gate on this card: the compiler, not the "
                "card, is at fault; the eager figures stand")
            return None
        # Every GPU compiled and its warmer stopped: a capture has the device to itself.
        captured.arrive(index, timeout=600.0)
        try:
            with CAPTURE_LOCK:
                decoder.use_compiled()
        except Exception as exc:  # a compiled step no CUDA graph could capture
            measured.withdraw(index)
            self.errors.append(f"{self.label}: compiled decode at the {point} point could not "
                               f"be captured in a CUDA graph ({type(exc).__name__}: "
                               f"{str(exc).strip()[:300]}); its eager figures stand")
            return None
        self.say(f"decode at the {point} point compiled with {attention} attention in "
                 f"{compile_s:.1f} s, {checked['grad_max_rel_error']:.2%} off float32")
        measured.arrive(index, timeout=120.0)
        steps = cfg.decode_unit_steps

        def replay() -> None:
            for _ in range(steps):
                decoder.step()

        units = self.timer.units(replay)
        span = self._measure(units, measured, cfg.decode_s, cfg.decode_warm_s)
        units.close()
        self._sync()
        return self._result("decode", gate, span, decoder.shape.batch, steps, checked, None,
                            None, wall0, seen, busy_before, follows=first, point=point,
                            compiled=True, compile_s=compile_s)

    def _beside(self, trainer: Any, gate: Gate, tokens: int, first: Dict[str, Any],
                seen: List[Dict[str, Any]], busy_before: Optional[int]
                ) -> Optional[Dict[str, Any]]:
        """The training step with another backend, on the card the first soaked."""
        cfg = self.cfg
        phase = self.phases[f"beside:{gate.name}"]
        wall0 = time.perf_counter()
        trainer.use(gate.name, gate.gqa)
        try:
            trainer.step()
        except Exception as exc:  # passed its gate, failed at the full shape: said
            phase.withdraw(self.target.index)
            self.errors.append(f"{self.label}: the training step with {gate.name} attention "
                               f"did not run at the full shape ({type(exc).__name__}: "
                               f"{str(exc)[:300]}); the other backends stand")
            return None
        units = self.timer.units(lambda: _discard(trainer.step()))
        span = self._measure(units, phase, cfg.beside_s, cfg.beside_warm_s)
        units.close()
        self._sync()
        return self._result("train", gate, span, tokens, 1, gate.train, None, None, wall0,
                            seen, busy_before, trainer=trainer, follows=first)

    def _result(self, workload: str, gate: Gate, span: Span, tokens_per_step: int,
                steps_per_unit: int, checked: Dict[str, Any], loss: Optional[float],
                detail: Optional[Dict[str, Any]], wall0: float, seen: List[Dict[str, Any]],
                busy_before: Optional[int], trainer: Any = None,
                follows: Optional[Dict[str, Any]] = None,
                point: Optional[str] = None, compiled: bool = False,
                compile_s: Optional[float] = None) -> Dict[str, Any]:
        from agent.job import transformer

        torch = self.torch
        cfg = self.cfg
        attention = gate.name
        shape = self.shapes[workload] if point is None else self.shapes[workload][point]
        if not span.ms:
            raise JobError(f"{self.label}: no {workload} step finished inside the "
                           "measurement")
        # Rounded once, as stored: every figure below follows from the stored seconds.
        seconds = round(sum(span.ms) / 1e3, 6)
        steps = len(span.ms) * steps_per_unit
        tokens_per_s = tokens_per_step * steps / seconds
        per_step = [ms / steps_per_unit for ms in span.ms]
        summary = stats.summarise(per_step)
        tokens_per_unit = tokens_per_step * steps_per_unit
        measured = span.t1 - span.t0 if span.t1 > span.t0 else seconds
        levels = self._sub_levels(span, tokens_per_unit,
                                  min(cfg.sub_window_s, measured / SHORT_SUB_WINDOWS))
        # Clamped at 0: a few noisy sub-windows (the CPU path) can reach below it.
        within = [max(0.0, v) for v in stats.batch_interval(levels)] if len(levels) >= 2 \
            else None
        if workload == "train":
            flop, causal = shape.train_flop_per_token()
            source = transformer.FLOP_SOURCE
        else:
            flop = causal = shape.decode_flop_per_token()
            source = transformer.DECODE_FLOP_SOURCE
        datasheet = (self.gpu.get("variant") or {}).get("datasheet") or {}
        peak = (datasheet.get("peak_tflops") or {}).get("bf16") if self.timer.cuda else None
        tflops = tokens_per_s * flop / 1e12
        decode_bytes = shape.decode_bytes_per_step(2) if workload == "decode" else None
        gbs = decode_bytes * steps / seconds / 1e9 if decode_bytes else None
        hbm, hbm_source = links.hbm_figure(self.gpu) if decode_bytes and self.timer.cuda \
            else (None, None)
        samples = self.sampler.between(span.t0, span.t1)
        props = torch.cuda.get_device_properties(self.device) if self.timer.cuda else None
        followed = follows["flags"] if follows is not None else None
        lines = contention.reasons(seen, busy_before)
        return {
            "suite_version": SUITE_VERSION,
            "workload": workload,
            "gpu_index": self.target.nvml_index if self.target.nvml_index is not None
            else self.target.index,
            "gpu_uuid": self.target.uuid,
            "model": transformer.MODEL,
            "model_source": transformer.MODEL_SOURCE,
            "shape": shape.as_dict(),
            "point": point,
            "gqa": gate.gqa if workload == "train" else gate.decode_gqa,
            # Set once every backend is measured (mark_headlines).
            "headline": False,
            "params": shape.params,
            "dtype": "bf16",
            "attention": attention,
            "compiled": compiled,
            "compile_s": compile_s if compiled else None,
            "graph": workload == "decode" and cfg.graph and self.timer.cuda,
            "optimizer": ("adamw-fused" if trainer.fused else "adamw")
            if workload == "train" and trainer is not None else None,
            "concurrency": "sequential" if cfg.sequential
            or len(self.phases["train"].members) == 1 else "concurrent",
            "gpus_in_run": len(self.phases["train"].members),
            "thermal": "soaked",
            "follows": None if follows is None else f"train/{follows['attention']}",
            "tokens_per_step": tokens_per_step,
            "steps": steps,
            "seconds": seconds,
            "tokens_per_s": tokens_per_s,
            "step_ms": summary,
            "within_run_ci95": within,
            "flop_per_token": flop,
            "flop_per_token_causal": causal,
            "flop_source": source,
            "tflops": tflops,
            "tflops_causal": tokens_per_s * causal / 1e12,
            "peak_tflops": float(peak) if peak else None,
            "peak_source": datasheet.get("source") if peak else None,
            "mfu": tflops / float(peak) if peak else None,
            "bytes_per_step": decode_bytes,
            "gbs": gbs,
            "hbm_gbs": hbm,
            "hbm_source": hbm_source,
            "hbm_share": gbs / hbm if gbs and hbm else None,
            "peak_memory_bytes": self._peak(),
            "loss": loss,
            "correctness": checked,
            "flags": {
                "not_soaked": bool(followed["not_soaked"]) if followed is not None
                else not bool(detail and detail["soaked"]),
                "contended": bool(lines),
                "power_capped": telemetry.share_with(samples, telemetry.POWER_CAP) > 0.1,
                "thermal_throttled": telemetry.share_with(samples, telemetry.THERMAL) > 0,
                "hw_slowdown": telemetry.share_with(samples, telemetry.HW_SLOWDOWN) > 0,
            },
            "soak": detail,
            "telemetry": telemetry.summarise(samples),
            "contention": lines,
            "processes": list({p["pid"]: p for p in seen}.values()),
            "provenance": {
                "torch_version": str(torch.__version__),
                "cuda_runtime_version": torch.version.cuda,
                "cudnn_version": str(torch.backends.cudnn.version())
                if self.timer.cuda and torch.backends.cudnn.is_available() else None,
                "device_name": props.name if props is not None else "cpu",
            },
            "wall_s": round(time.perf_counter() - wall0, 3),
        }


class Phase(SoakCoordinator):
    """A phase every GPU of the node runs together; `members` counts them."""

    def __init__(self, members: Sequence[int]) -> None:
        super().__init__(len(members))
        self.members = list(members)


def run(cfg: Config, gpus: Sequence[Dict[str, Any]], nvml: Optional[Nvml],
        progress: Progress) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The suite on the selected GPUs, all at once (one after another with `sequential`);
    fleet-agent/1 job results and the failures, each naming its GPU."""
    torch = import_torch()
    targets = match_targets(torch, HarnessConfig(device=cfg.device, gpus=cfg.gpus), gpus,
                            nvml)
    cuda = cfg.device == "cuda"
    if cfg.compile:
        where = prepare_compile(torch, len(targets))
        progress(f"torch.compile's caches in {where}")
    if cuda:
        torch.cuda.empty_cache()
        # The matmul's load must have left the card before utilization is read: NVML
        # averages it over its last sample period.
        time.sleep(IDLE_BEFORE_UTILIZATION_S)
    busy = {t.index: contention.utilization(t.nvml, t.handle) for t in targets}
    results: List[Dict[str, Any]] = []
    errors: List[Dict[str, Any]] = []
    lock = threading.Lock()

    agreement = Agreement()

    def one(target: GpuTarget, phases: Dict[str, Phase]) -> None:
        node = agreement if len(phases["train"].members) > 1 else Agreement()
        job = Gpu(torch, cfg, target, target.fingerprint(gpus), phases, progress, node)
        gpu_index = target.nvml_index if target.nvml_index is not None else target.index
        try:
            if cuda:
                with torch.cuda.device(target.index):
                    got = job.run(busy.get(target.index))
            else:
                got = job.run(busy.get(target.index))
        except Exception as exc:  # one GPU's failure must not lose the others' figures
            message = str(exc) if isinstance(exc, JobError) else \
                f"{job.label}: {type(exc).__name__}: {exc}"
            with lock:
                errors.extend({"stage": "job", "gpu": gpu_index, "message": m[:4000]}
                              for m in job.errors)
                errors.append({"stage": "job", "gpu": gpu_index, "message": message[:4000]})
            return
        with lock:
            results.extend(got)
            errors.extend({"stage": "job", "gpu": gpu_index, "message": m[:4000]}
                          for m in job.errors)

    def phases_for(members: Sequence[int]) -> Dict[str, Phase]:
        # Each backend's gates, the gates' end, training, each backend beside it; per
        # decode point its start, its captures' end and each backend's measurement.
        names = [f"gate:{b}" for b in cfg.backends] + ["gated", "train"]
        names += [f"beside:{b}" for b in cfg.backends] + ["compile", "compiled"]
        for point in _shapes(cfg)["decode"]:
            names += [f"decode:{point}", f"decode:{point}:captured"]
            names += [f"decode:{point}:{b}" for b in cfg.backends]
            names += [f"decode:{point}:compile", f"decode:{point}:compiled:captured",
                      f"decode:{point}:compiled"]
        return {name: Phase(members) for name in names}

    if cfg.sequential or len(targets) == 1:
        for target in targets:
            one(target, phases_for([target.index]))
    else:
        phases = phases_for([t.index for t in targets])
        threads = [threading.Thread(target=one, args=(t, phases), name=f"fleet-job{t.index}")
                   for t in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    points = list(_shapes(cfg)["decode"])
    backends = list(cfg.backends)
    results.sort(key=lambda r: (int(r["gpu_index"]), r["workload"] != "train",
                                points.index(r["point"]) if r.get("point") in points else -1,
                                backends.index(r["attention"])
                                if r["attention"] in backends else len(backends),
                                bool(r["compiled"])))
    return results, errors


# The zipapp fleet uploads lies in the host's `cache_dir:` (fleet/payload.py); a run from
# it keeps torch.compile's caches beside it.
ZIPAPP_SUFFIX = ".pyz"
COMPILE_CACHE = "torchinductor"


def compile_cache_dir(module_path: str = __file__) -> Optional[str]:
    """Where torch.compile's caches go: TORCHINDUCTOR_CACHE_DIR where the run's
    environment sets it, else beside the agent's zipapp in fleet's cache directory on the
    host (its own, kept between runs: a second run loads the compiled step instead of
    compiling it again); None from a source tree (tests, `python -m agent`: torch's own
    default under /tmp)."""
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if given:
        return given
    marker = ZIPAPP_SUFFIX + os.sep
    path = os.path.abspath(module_path)
    if marker not in path:
        return None
    zipapp = path[:path.index(marker) + len(ZIPAPP_SUFFIX)]
    return os.path.join(os.path.dirname(zipapp), COMPILE_CACHE)


def prepare_compile(torch: Any, gpus: int) -> str:
    """Set torch.compile up for the suite: its caches' directory (`compile_cache_dir`,
    kept between runs: inductor keys what it stores by torch version, source and device,
    so a cached step is the step this torch would compile), and room for each GPU's
    compile of the same layers (Dynamo compiles a function again for each device, and
    stops at its recompile limit, 8). Returns the directory."""
    where = compile_cache_dir()
    if where is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = where
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    for name in ("recompile_limit", "cache_size_limit"):
        if config is not None and isinstance(getattr(config, name, None), int):
            setattr(config, name, max(getattr(config, name), 4 * gpus))
    return where or "torch's default directory"


def summary_line(results: Sequence[Dict[str, Any]]) -> str:
    """"train 94,160 (cudnn compiled) and decode 32,400 (flash) tokens/s a GPU (medians of
    the headlines)": each workload's headline, decode's at its bandwidth point."""
    parts = []
    for workload in ("train", "decode"):
        mine = [r for r in results if r["workload"] == workload and r.get("headline")
                and r.get("point") in (None, "bandwidth")]
        if mine:
            names = sorted({r["attention"] + (" compiled" if r.get("compiled") else "")
                            for r in mine})
            parts.append(f"{workload} {statistics.median(r['tokens_per_s'] for r in mine):,.0f}"
                         f" ({', '.join(names)})")
    return (" and ".join(parts) + " tokens/s a GPU (medians of the headlines)") if parts \
        else "no figure"


def _discard(value: Any) -> None:
    """A step's loss left on the device: reading it would wait for the GPU."""
