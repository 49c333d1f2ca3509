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
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch

from agent.job.train_step import SEED, TOLERANCE
from agent.job.transformer import (
    GQA_GROUPED,
    GQA_NATIVE,
    Shape,
    Stack,
    attention_backend,
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
        self.use(attention, gqa)

    def use(self, attention: str, gqa: str = GQA_NATIVE) -> None:
        """Decode with `attention`, handed grouped-query attention as `gqa`, from now on:
        its graph, captured the first time (one form a backend)."""
        self.attention = attention
        self.gqa = gqa
        if not self.graphed:
            return
        if attention not in self.graphs:
            self._capture()
            self.graphs[attention] = self.graph
        self.graph = self.graphs[attention]

    def _eager(self) -> None:
        if self.explicit:
            with torch.no_grad():
                self.out = self.model.decode(self.x, self.rope, self.caches, self.slot,
                                             self.gqa)
            return
        with torch.no_grad(), attention_backend(self.attention):
            self.out = self.model.decode(self.x, self.rope, self.caches, self.slot,
                                         self.gqa)

    def _capture(self) -> None:
        # Warmed on a side stream first, as torch.cuda.graphs asks: the first calls pick
        # kernels and allocate workspaces, which a capture must not.
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._eager()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # This GPU's own capture stream: torch.cuda.graph's default is one stream made
        # once a process, on the device of whichever thread captured first, and another
        # GPU's capture on it fails (seen on a lent 2x H100). Thread-local: the node's
        # other GPUs, in threads of this process, may call CUDA meanwhile.
        capture = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        with torch.cuda.graph(self.graph, stream=capture, capture_error_mode="thread_local"):
            self._eager()

    def step(self) -> None:
        """One decode step of every sequence, not synchronized."""
        if self.graph is not None:
            self.graph.replay()
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
         seed: int = SEED, gqa: str = GQA_NATIVE) -> Dict[str, Any]:
    """The gate's verdict: the document's `correctness` (the output's error stands in the
    gradient's place)."""
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
    low.step()
    high.step()
    assert low.out is not None and high.out is not None
    error = relative_error(low.out, high.out)
    finite = bool(torch.isfinite(low.out).all())
    return {"passed": finite and error <= TOLERANCE, "loss_finite": finite,
            "grad_max_rel_error": error if error != float("inf") else None,
            "tolerance": TOLERANCE, "shape": shape.words(),
            "reference": "float32, attention written out, same weights, input and cache"}
