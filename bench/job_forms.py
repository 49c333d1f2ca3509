"""Which of the job suite's torchtitan forms move its training figure (issue 55): the
suite's own step (agent/job/train_step.py, eager) on one GPU, as suite 1.4.0 writes it,
then with each form put back the way suite 1.3.0 wrote it, one at a time, on the same
hot card, then as written again (the drift over the run):

- norm: torch's RMSNorm (a fused kernel each way) or the same arithmetic written out in
  separate kernels (agent/job/transformer.py WrittenRMSNorm);
- rope: torchtitan's complex rotation in float32, or suite 1.3.0's rotate-half in the
  activations' bf16 (the same rotation up to a permutation of a head's dimensions);
- qkv: torchtitan's fused projection (one matmul, three contiguous copies) or three
  matmuls viewed without copies;
- loss: torchtitan's cross-entropy over float32 logits, or suite 1.3.0's mean squared
  error against a random float32 target.

Each: built, `--warmup-s` of steps, then `--seconds` between two synchronisations by the
wall clock. One JSON line a form, its change against the first run of the suite's own.

    python3 bench/job_forms.py --attention cudnn
    python3 bench/job_forms.py --cpu-tiny --seconds 0.2 --warmup-s 0.1   # tests
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.job import train_step, transformer

FORMS = ("norm", "rope", "qkv", "loss")


def _halves(q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Suite 1.3.0's RoPE: halves rotated in the activations' dtype."""
    cos = torch.cat([cache.real, cache.real], dim=-1).to(q.dtype)[None, :, None, :]
    sin = torch.cat([cache.imag, cache.imag], dim=-1).to(q.dtype)[None, :, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin
    return rotate(q), rotate(k)


class SeparateQKV(nn.Module):
    """Suite 1.3.0's projections: three matmuls, their outputs viewed, not copied."""

    def __init__(self, shape: transformer.Shape, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.head_dim = shape.head_dim
        self.wq = nn.Linear(shape.width, shape.heads * shape.head_dim, bias=False,
                            device=device, dtype=dtype)
        self.wk = nn.Linear(shape.width, shape.kv_heads * shape.head_dim, bias=False,
                            device=device, dtype=dtype)
        self.wv = nn.Linear(shape.width, shape.kv_heads * shape.head_dim, bias=False,
                            device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t = x.shape[0], x.shape[1]
        return (self.wq(x).view(b, t, -1, self.head_dim),
                self.wk(x).view(b, t, -1, self.head_dim),
                self.wv(x).view(b, t, -1, self.head_dim))


_TARGETS: dict[tuple[Any, ...], torch.Tensor] = {}


def _mse(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Suite 1.3.0's loss: mean squared error against a fixed float32 target."""
    key = (tuple(out.shape), out.device)
    if key not in _TARGETS:
        generator = torch.Generator(device=out.device).manual_seed(2)
        _TARGETS[key] = torch.randn(out.shape, generator=generator, device=out.device)
    return F.mse_loss(out.float(), _TARGETS[key])


@contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def _as_before(form: str) -> list[tuple[Any, str, Any]]:
    """What to put back for `form`: (module, name, suite 1.3.0's)."""
    written: Callable[..., nn.Module] = transformer.WrittenRMSNorm
    return {"norm": [(transformer, "make_norm", written)],
            "rope": [(transformer, "apply_rope", _halves)],
            "qkv": [(transformer, "FusedQKV", SeparateQKV)],
            "loss": [(train_step, "token_loss", _mse)]}[form]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_form(form: str, shape: transformer.Shape, device: torch.device,
              dtype: torch.dtype, args: argparse.Namespace) -> float:
    with ExitStack() as stack:
        for owner, name, value in ([] if form == "torchtitan" else _as_before(form)):
            stack.enter_context(_patched(owner, name, value))
        trainer = train_step.Trainer(shape, device, dtype, args.attention)
        start = time.perf_counter()
        while time.perf_counter() - start < args.warmup_s:
            trainer.step()
        _sync(device)
        t0 = time.perf_counter()
        steps = 0
        while time.perf_counter() - t0 < args.seconds:
            trainer.step()
            steps += 1
        _sync(device)
        seconds = time.perf_counter() - t0
    del trainer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return shape.batch * shape.seq * steps / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attention", default="cudnn")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--warmup-s", type=float, default=8.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--cpu-tiny", action="store_true")
    args = parser.parse_args(argv)
    if args.cpu_tiny:
        shape, device, dtype = transformer.CPU_TRAIN, torch.device("cpu"), torch.float32
        args.attention = "math"
    else:
        shape, device, dtype = transformer.TRAIN, torch.device(f"cuda:{args.gpu}"), \
            torch.bfloat16
        torch.cuda.set_device(device)
    order = ["torchtitan", *[f for f in args.forms.split(",") if f], "torchtitan"]
    first = None
    for i, form in enumerate(order):
        rate = time_form(form, shape, device, dtype, args)
        first = rate if first is None else first
        print(json.dumps({"check": "forms", "form": form if form == "torchtitan" else
                          f"{form} as suite 1.3.0", "run": i, "attention": args.attention,
                          "tokens_per_s": rate, "change": rate / first - 1,
                          "torch": torch.__version__}, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
