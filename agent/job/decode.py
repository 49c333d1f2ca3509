"""The job suite's decode: one new token per sequence a step, over a KV cache of fixed
length, with the decoder stack's weights (agent/job/transformer.py) in bf16.

A step reads every weight and every cached key and value once and does little
arithmetic on them: it is bound by memory bandwidth, which the matmul does not measure.
The context stays at its length (the new token's key and value overwrite the last
cached position), so every step does the same work and the figure does not drift with
how long the run went on. On CUDA a step is captured as a CUDA graph and replayed, as
serving stacks do, so the host's launch speed does not set the figure: one graph per
attention backend over the same weights and cache (`use` picks which one `step` replays),
since a graph keeps the kernels it was captured with.

Grouped-query attention goes to SDPA as it is (`enable_gqa`), as the training step's does
and as a stack on SDPA writes it, where the backend takes it for decode's shape; else each
key-value head's group of queries goes as `group` query rows over that head's cache
(GQA_GROUPED). Never expanded: that would copy the cache every step. On a lent H200 (suite
1.2.0, which ran every backend grouped) cuDNN read 4.8% less at the bandwidth point than a
plain script handing it the heads natively, and flash 1.1% less
(bench/records/2026-11-28-h200-job-figures).

The gate: the same step at a small shape in bf16 with the pinned backend and in float32
with the attention written out, from the same weights, input and cache: the output within
`agent.job.train_step.TOLERANCE` of float32's, and finite.

Compiled (`Decoder.compile`, where the suite is asked to compile): the whole step through
torch.compile (inductor on a GPU, the backend traced in, static shapes, one graph), then
captured in a CUDA graph and replayed as the eager step is. At one sequence the eager
step's ~90 small kernels (norms, RoPE, cache writes, SwiGLU, adds) were a fifth of its
time and inductor fuses them: +18.7% tokens/s at the latency point on a lent H200, +1.2%
at the bandwidth point, where attention's read of the cache is most of the step
(bench/records/2026-11-29-h200-decode-latency). gpt-fast, the field's reference for
decode in PyTorch, compiles its decode step whole in the same way.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from agent.job.train_step import SEED, TOLERANCE
from agent.job.transformer import (
    GQA_GROUPED,
    GQA_NATIVE,
    Shape,
    Stack,
    attention_backend,
    compile_backend,
    paired,
    relative_error,
    rope_cache,
)


def _cache(shape: Shape, device: Any, dtype: torch.dtype, generator: torch.Generator
           ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    size = (shape.batch, shape.kv_heads, int(shape.context or 0), shape.head_dim)
    return [(torch.randn(size, generator=generator, device=device).to(dtype),
             torch.randn(size, generator=generator, device=device).to(dtype))
            for _ in range(shape.layers)]


class Decoder:
    """The stack, a filled cache and one token's input on one device; `step` decodes with
    the backend `use` last chose."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype, attention: str,
                 graph: bool, seed: int = SEED, explicit: bool = False,
                 gqa: str = GQA_NATIVE) -> None:
        if shape.context is None or shape.seq != 1:
            raise ValueError(f"a decode shape has seq 1 and a context: {shape}")
        self.shape = shape
        self.attention = attention
        self.gqa = gqa
        self.explicit = explicit
        self.model = Stack(shape, device, dtype, seed, explicit).requires_grad_(False)
        generator = torch.Generator(device=device)
        generator.manual_seed(seed + 2)
        self.caches = _cache(shape, device, dtype, generator)
        self.x = torch.randn((shape.batch, 1, shape.width), generator=generator,
                             device=device).to(dtype)
        position = torch.tensor([shape.context - 1], device=device)
        self.slot = position.clone()
        self.rope = rope_cache(shape, position)
        self.out: Optional[torch.Tensor] = None
        self.graph: Optional[Any] = None
        self.graphs: Dict[str, Any] = {}
        self.graphed = graph
        # The step through torch.compile (`compile`), its backend, and whether `step`
        # runs it.
        self.compiled_step: Optional[Callable[[], torch.Tensor]] = None
        self.compiled_attention: Optional[str] = None
        self.compile_s: Optional[float] = None
        self.compiled = False
        self.use(attention, gqa)

    def use(self, attention: str, gqa: str = GQA_NATIVE) -> None:
        """Decode eager with `attention`, handed grouped-query attention as `gqa`, from now
        on: its graph, captured the first time (one form a backend)."""
        self.attention = attention
        self.gqa = gqa
        self.compiled = False
        self._use_graph(attention, self._eager)

    def _use_graph(self, key: str, run: Callable[[], None]) -> None:
        if not self.graphed:
            self.graph = None
            return
        if key not in self.graphs:
            self._capture(run)
            self.graphs[key] = self.graph
        self.graph = self.graphs[key]

    def compile(self, attention: str, gqa: str, synchronize: Callable[[], None]) -> float:
        """Compile the step with `attention` traced in and grouped-query attention handed
        over as `gqa` (the eager step's forms), and run it once: the seconds that took,
        the compile in them (also `compile_s`). `use_compiled` then decodes with it."""
        model, x, rope, caches, slot = self.model, self.x, self.rope, self.caches, self.slot

        def step() -> torch.Tensor:
            out: torch.Tensor = model.decode(x, rope, caches, slot, gqa, attention)
            return out

        self.compiled_step = torch.compile(step, fullgraph=True, dynamic=False,
                                           backend=compile_backend(x.device))
        self.compiled_attention = attention
        self.gqa = gqa
        started = time.perf_counter()
        self._compiled()
        synchronize()
        self.compile_s = round(time.perf_counter() - started, 3)
        return self.compile_s

    def use_compiled(self) -> None:
        """Decode with the compiled step from now on: its graph, captured the first time."""
        if self.compiled_step is None or self.compiled_attention is None:
            raise RuntimeError("the step is not compiled (Decoder.compile)")
        self.attention = self.compiled_attention
        self.compiled = True
        self._use_graph(f"compiled:{self.compiled_attention}", self._compiled)

    def _compiled(self) -> None:
        assert self.compiled_step is not None
        with torch.no_grad():
            self.out = self.compiled_step()

    def _eager(self) -> None:
        if self.explicit:
            with torch.no_grad():
                self.out = self.model.decode(self.x, self.rope, self.caches, self.slot,
                                             self.gqa)
            return
        with torch.no_grad(), attention_backend(self.attention):
            self.out = self.model.decode(self.x, self.rope, self.caches, self.slot,
                                         self.gqa)

    def _capture(self, run: Callable[[], None]) -> None:
        # Warmed on a side stream first, as torch.cuda.graphs asks: the first calls pick
        # kernels and allocate workspaces, which a capture must not.
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # This GPU's own capture stream: torch.cuda.graph's default is one stream made
        # once a process, on the device of whichever thread captured first, and another
        # GPU's capture on it fails (seen on a lent 2x H100). Thread-local: the node's
        # other GPUs, in threads of this process, may call CUDA meanwhile.
        capture = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        with torch.cuda.graph(self.graph, stream=capture, capture_error_mode="thread_local"):
            run()

    def step(self) -> None:
        """One decode step of every sequence, not synchronized."""
        if self.graph is not None:
            self.graph.replay()
        elif self.compiled:
            self._compiled()
        else:
            self._eager()


def gate_backend(shape: Shape, device: Any, attention: str,
                 dtype: torch.dtype = torch.bfloat16) -> Tuple[str, Dict[str, Any]]:
    """The gate with `attention`, grouped-query attention handed over natively where the
    backend takes it at decode's shape, else as query rows: (how it ran, the verdict).
    Raises where the backend ran neither way."""
    try:
        return GQA_NATIVE, gate(shape, device, attention, dtype, gqa=GQA_NATIVE)
    except Exception:  # "No available kernel" for enable_gqa: the query rows
        return GQA_GROUPED, gate(shape, device, attention, dtype, gqa=GQA_GROUPED)


def gate(shape: Shape, device: Any, attention: str, dtype: torch.dtype = torch.bfloat16,
         seed: int = SEED, gqa: str = GQA_NATIVE, compiled: bool = False) -> Dict[str, Any]:
    """The gate's verdict: the document's `correctness` (the output's error stands in the
    gradient's place). `compiled`: the bf16 step through torch.compile, as
    `Decoder.compile` compiles the timed one."""
    low = Decoder(shape, device, dtype, attention, graph=False, seed=seed, gqa=gqa)
    high = Decoder(shape, device, torch.float32, "math", graph=False, seed=seed,
                   explicit=True)
    with torch.no_grad():
        for mine, theirs in paired(high.model.parameters(), low.model.parameters()):
            mine.copy_(theirs.float())
        for (hk, hv), (lk, lv) in paired(high.caches, low.caches):
            hk.copy_(lk.float())
            hv.copy_(lv.float())
        high.x.copy_(low.x.float())
    if compiled:
        low.compile(attention, gqa, lambda: None)
    else:
        low.step()
    high.step()
    assert low.out is not None and high.out is not None
    error = relative_error(low.out, high.out)
    finite = bool(torch.isfinite(low.out).all())
    return {"passed": finite and error <= TOLERANCE, "loss_finite": finite,
            "grad_max_rel_error": error if error != float("inf") else None,
            "tolerance": TOLERANCE, "shape": shape.words(),
            "reference": "float32, attention written out, same weights, input and cache"
                         + ("; the bf16 step compiled" if compiled else "")}
