"""The job suite's training step: forward, backward and a fused AdamW step of the decoder
stack (agent/job/transformer.py) in bf16, eager and under torch.compile, and the gates a
step passes before its time counts.

The step is what a data-parallel job's GPU does between gradient exchanges, as torchtitan
runs it with `training.dtype = "bfloat16"` (torchtitan/config/configs.py: parameters,
gradients and optimizer state in bf16, no float32 master copy; RoPE and the logits in
float32): the loss is torchtitan's cross-entropy over float32 logits, summed and divided
by the tokens (agent/job/transformer.py `token_loss`), against fixed random labels, the
stack's output standing for the logits (no LM head); AdamW fused, torchtitan's default
implementation. 12 GiB in all at the standard shape (torchtitan's default, float32 master
weights under bf16 mixed precision, holds 14 GiB more and spends more of its step in the
optimizer: another configuration, not this one).

Compiled (`Trainer.compile`), the stack is torch.compile'd as torchtitan's apply_compile
does it (each layer on its own with fullgraph, the loss apart; the final norm and the
optimizer eager), with one attention backend traced into the layers.

The eager gate runs the same code at a small shape twice, in bf16 with the pinned
attention backend and in float32 with the attention written out (agent/job/transformer.py),
from the same weights and inputs: the loss must be finite and every parameter's gradient
within `TOLERANCE` of float32's (relative, by norm). A card or stack that computes a wrong
step fails here, before its time is counted. The compiled step is gated the same way: the
small copy compiled as the step compiles, against float32.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Optional, Tuple

import torch

from agent.job.transformer import (
    GQA_EXPANDED,
    GQA_NATIVE,
    Shape,
    Stack,
    attention_backend,
    paired,
    relative_error,
    token_loss,
)

# bf16 keeps 8 bits of mantissa (a rounding of 0.2-0.4%); through a forward and backward
# of two layers the gradients of a healthy run land 0.5-2% from float32's
# (bench/RESULTS.md, "What a GPU-hour buys"). 5% leaves room for that and still fails
# a wrong kernel, whose error is of order one.
TOLERANCE = 0.05
LEARNING_RATE = 1e-4
SEED = 0


class Trainer:
    """The stack, its input, labels and optimizer on one device; `step` runs one step,
    eager or (once `compile` has run) compiled."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype, attention: str,
                 seed: int = SEED, gqa: str = GQA_NATIVE) -> None:
        self.shape = shape
        self.attention = attention
        self.model = Stack(shape, device, dtype, seed)
        self.model.gqa = gqa
        self.x, self.labels = _inputs(shape, device, dtype, seed)
        cuda = torch.device(device).type == "cuda"
        # Fused AdamW: one kernel for every parameter, torchtitan's default on CUDA.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE,
                                           fused=cuda)
        self.fused = cuda
        self.compile_s: Optional[float] = None

    def use(self, attention: str, gqa: str) -> None:
        """Step eager with `attention` from now on, grouped-query attention handed over
        `gqa`."""
        self.attention = attention
        self.model.gqa = gqa

    def _loss(self, compiled: bool) -> torch.Tensor:
        if compiled:
            out = self.model(self.x, compiled=True)
            assert self.model.compiled_loss is not None
            loss: torch.Tensor = self.model.compiled_loss(out, self.labels)
            loss.backward()  # type: ignore[no-untyped-call]
            return loss
        with attention_backend(self.attention):
            loss = token_loss(self.model(self.x), self.labels)
            loss.backward()  # type: ignore[no-untyped-call]
        return loss

    def step(self, compiled: bool = False) -> torch.Tensor:
        """One training step; the loss, not synchronized."""
        loss = self._loss(compiled)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def first_step(self, synchronize: Any) -> float:
        """The first eager step: its loss."""
        loss = float(self.step())
        synchronize()
        return loss

    def compile(self, attention: str, synchronize: Any, gate_shape: Shape) -> Dict[str, Any]:
        """Compile the step with `attention` (the stack's current GQA form) and gate it as
        the backends are gated (`gate` at `gate_shape`, the small copy compiled the same
        way, against float32). The compile's seconds (the first compiled step's wall at
        the full shape, the compile in it) go to `compile_s`; the gate's verdict is
        returned, the document's `correctness`.

        Against float32, not against the eager bf16 step: on a lent 2x H200 (2026-11-29)
        two bf16 steps of the full shape, eager and compiled, differed by 7.4-7.6% in
        their worst gradient, both rounding apart from the exact step; a gate between two
        roundings measures neither."""
        self.attention = attention
        checked = gate(gate_shape, self.x.device, attention, self.x.dtype,
                       gqa=self.model.gqa, compiled=True)
        self.model.compile_layers(attention)
        self.optimizer.zero_grad(set_to_none=True)
        started = time.perf_counter()
        got = self._loss(True)
        synchronize()
        self.compile_s = round(time.perf_counter() - started, 3)
        self.optimizer.zero_grad(set_to_none=True)
        if not math.isfinite(float(got.detach())):
            checked = {**checked, "passed": False, "loss_finite": False}
        return checked


def _inputs(shape: Shape, device: Any, dtype: torch.dtype, seed: int
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The step's input hidden states and its labels, one per token among `width`."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed + 1)
    x = torch.randn((shape.batch, shape.seq, shape.width), generator=generator,
                    device=device).to(dtype)
    labels = torch.randint(0, shape.width, (shape.batch, shape.seq), generator=generator,
                           device=device)
    return x, labels


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
         seed: int = SEED, gqa: str = GQA_NATIVE, compiled: bool = False) -> Dict[str, Any]:
    """The gate's verdict: the document's `correctness`; `compiled`: the bf16 stack under
    torch.compile as the step compiles it (Stack.compile_layers)."""
    low = Stack(shape, device, dtype, seed)
    low.gqa = gqa
    if compiled:
        low.compile_layers(attention)
    high = Stack(shape, device, torch.float32, seed, explicit=True)
    with torch.no_grad():
        for mine, theirs in paired(high.parameters(), low.parameters()):
            # The same weights: float32 holds the bf16 values exactly.
            mine.copy_(theirs.float())
    x, labels = _inputs(shape, device, dtype, seed)
    if compiled:
        assert low.compiled_loss is not None
        loss_low: torch.Tensor = low.compiled_loss(low(x, compiled=True), labels)
        loss_low.backward()  # type: ignore[no-untyped-call]
    else:
        with attention_backend(attention):
            loss_low = token_loss(low(x), labels)
            loss_low.backward()  # type: ignore[no-untyped-call]
    loss_high = token_loss(high(x.float()), labels)
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
            "reference": "float32, attention written out, same weights and inputs"
                         + ("; the bf16 stack compiled" if compiled else "")}
