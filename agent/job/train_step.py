"""The job suite's training step: forward, backward and a fused AdamW step of the decoder
stack (agent/job/transformer.py) in bf16, and the gate a run passes before any step counts.

The step is what a data-parallel job's GPU does between gradient exchanges: the loss is
the mean squared error of the stack's output against a fixed random target (no LM head,
so no cross-entropy over a vocabulary), reduced in float32. Parameters, gradients and
AdamW's two moments are bf16, 12 GiB in all at the standard shape (a mixed-precision job
keeping float32 master weights would hold 14 GiB more and spend more of its step in the
optimizer: that is another configuration, not this one).

The gate runs the same code at a small shape twice, in bf16 with the pinned attention
backend and in float32 with the attention written out (agent/job/transformer.py), from the
same weights and inputs: the loss must be finite and every parameter's gradient within
`TOLERANCE` of float32's (relative, by norm). A card or stack that computes a wrong step
fails here, before its time is counted.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from agent.job.transformer import (
    GQA_EXPANDED,
    GQA_NATIVE,
    Shape,
    Stack,
    attention_backend,
    paired,
    relative_error,
)

# bf16 keeps 8 bits of mantissa (a rounding of 0.2-0.4%); through a forward and backward
# of two layers the gradients of a healthy run land 0.5-2% from float32's
# (bench/RESULTS.md, "What a GPU-hour buys"). 5% leaves room for that and still fails
# a wrong kernel, whose error is of order one.
TOLERANCE = 0.05
LEARNING_RATE = 1e-4
SEED = 0


class Trainer:
    """The stack, its input, target and optimizer on one device; `step` runs one step."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype, attention: str,
                 compiled: bool = False, seed: int = SEED, gqa: str = GQA_NATIVE) -> None:
        self.shape = shape
        self.attention = attention
        self.model = Stack(shape, device, dtype, seed)
        self.model.gqa = gqa
        generator = torch.Generator(device=device)
        generator.manual_seed(seed + 1)
        size = (shape.batch, shape.seq, shape.width)
        self.x = torch.randn(size, generator=generator, device=device).to(dtype)
        self.target = torch.randn(size, generator=generator, device=device)
        cuda = torch.device(device).type == "cuda"
        # Fused AdamW: one kernel for every parameter, as torchtitan runs it on CUDA.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE,
                                           fused=cuda)
        self.fused = cuda
        self.forward: Any = torch.compile(self.model) if compiled else self.model
        self.compiled = compiled
        self.compile_s: Optional[float] = None

    def use(self, attention: str, gqa: str) -> None:
        """Step with `attention` from now on, grouped-query attention handed over `gqa`."""
        self.attention = attention
        self.model.gqa = gqa

    def step(self) -> torch.Tensor:
        """One training step; the loss, not synchronized."""
        with attention_backend(self.attention):
            out = self.forward(self.x)
            loss = F.mse_loss(out.float(), self.target)
            loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def first_step(self, synchronize: Any) -> float:
        """The first step, timed apart (with torch.compile, it compiles): its loss."""
        started = time.perf_counter()
        loss = float(self.step())
        synchronize()
        if self.compiled:
            self.compile_s = round(time.perf_counter() - started, 3)
        return loss


def gate_backend(shape: Shape, device: Any, attention: str,
                 dtype: torch.dtype = torch.bfloat16
                 ) -> Tuple[str, Optional[Dict[str, Any]], Optional[str]]:
    """The gate with `attention`, grouped-query attention handed over natively where the
    backend takes it, else expanded: (how it ran, the verdict, None), or (GQA_EXPANDED,
    None, why) where the backend ran neither way (a torch without it, a shape it does not
    serve)."""
    why = None
    for gqa in (GQA_NATIVE, GQA_EXPANDED):
        try:
            return gqa, gate(shape, device, attention, dtype, gqa=gqa), None
        except Exception as exc:  # "No available kernel": the next way, or none
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}" \
                if str(exc).strip() else type(exc).__name__
    return GQA_EXPANDED, None, why


def gate(shape: Shape, device: Any, attention: str, dtype: torch.dtype = torch.bfloat16,
         seed: int = SEED, gqa: str = GQA_NATIVE) -> Dict[str, Any]:
    """The gate's verdict: the document's `correctness`."""
    low = Stack(shape, device, dtype, seed)
    low.gqa = gqa
    high = Stack(shape, device, torch.float32, seed, explicit=True)
    with torch.no_grad():
        for mine, theirs in paired(high.parameters(), low.parameters()):
            # The same weights: float32 holds the bf16 values exactly.
            mine.copy_(theirs.float())
    generator = torch.Generator(device=device)
    generator.manual_seed(seed + 1)
    x = torch.randn((shape.batch, shape.seq, shape.width), generator=generator,
                    device=device).to(dtype)
    target = torch.randn(x.shape, generator=generator, device=device)
    with attention_backend(attention):
        loss_low = F.mse_loss(low(x).float(), target)
        loss_low.backward()  # type: ignore[no-untyped-call]
    loss_high = F.mse_loss(high(x.float()), target)
    loss_high.backward()  # type: ignore[no-untyped-call]
    worst = 0.0
    for mine, theirs in paired(low.parameters(), high.parameters()):
        if mine.grad is None or theirs.grad is None:
            worst = math.inf
            break
        worst = max(worst, relative_error(mine.grad, theirs.grad))
    finite = math.isfinite(float(loss_low.detach()))
    return {"passed": finite and worst <= TOLERANCE, "loss_finite": finite,
            "grad_max_rel_error": worst if math.isfinite(worst) else None,
            "tolerance": TOLERANCE, "shape": shape.words(),
            "reference": "float32, attention written out, same weights and inputs"}
