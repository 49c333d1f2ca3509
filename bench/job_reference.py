"""A skeptic's cross-check of the transformer job benchmark: the same work, written again
in plain PyTorch eager code, measured by wall clock, one process per GPU, all at once.

Single file, torch and the standard library only, Python 3.8 and newer (no 3.9+ syntax
or API). Nothing from this project is imported, on purpose: it must not share a bug with
the code it checks.

What runs
---------
A decoder stack shaped as Meta Llama 3 8B, from its published config.json
(https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json: hidden_size
4096, num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336,
rms_norm_eps 1e-05, rope_theta 500000.0, rope_scaling null, no biases; the file has no
head_dim key, it is hidden_size / num_attention_heads = 128), cut to FOUR layers, with
no token embedding and no LM head. Each layer, as in Meta's reference code
(https://github.com/meta-llama/llama3, llama/model.py: RMSNorm, apply_rotary_emb,
repeat_kv, FeedForward with w1/w3 gate/up and w2 down):

    h   = x + wo(attention(rope(wq(rms1(x))), rope(wk(rms1(x))), wv(rms1(x))))
    out = h + w2(silu(w1(rms2(h))) * w3(rms2(h)))

and one final RMSNorm after the last layer. RMSNorm is computed in float32 and cast back
(Meta's `self._norm(x.float()).type_as(x) * self.weight`); RoPE is the rotate-half form
on q and k, angles in float32 (same rotation as Meta's interleaved complex form up to a
fixed permutation of the head dimension, so the same cost). Attention is grouped-query
(32 query heads over 8 key/value heads) through
torch.nn.functional.scaled_dot_product_attention, its backend pinned with
torch.nn.attention.sdpa_kernel (https://pytorch.org/docs/stable/generated/
torch.nn.attention.sdpa_kernel.html): flash by default, --attention
cudnn|flash|efficient|math. A pinned backend that cannot take the call raises (torch's
"No available kernel" / "No viable backend") instead of silently falling back. GQA is
passed natively (enable_gqa=True, torch >= 2.5) where the pinned backend takes it, else
the 8 k/v heads are expanded to 32 with repeat_interleave first, as Meta's repeat_kv
does; --gqa auto|native|expand, and the JSON says which ran. On Python 3.8 (torch <=
2.4) that is always expand, which costs decode a copy of its whole cache per layer.
Weights are random bf16 (nn.Linear's default init under torch.manual_seed(--seed)), on
the GPU.

Training: input hidden states random bf16 [batch 2, seq 4096, 4096], causal attention
(is_causal=True), loss = mean squared error of the stack's output against a fixed random
target, reduced in float32; loss.backward(); torch.optim.AdamW(fused=True, lr=1e-4)
.step(); zero_grad(set_to_none=True). Reported: tokens/s = batch * seq * steps /
elapsed; params (counted from the module, and checked against the shape formula); and
TFLOP/s by torchtitan's count, FLOP per token = 6 * params + 12 * layers * heads *
head_dim * seq (https://github.com/pytorch/torchtitan, torchtitan/utils.py
get_num_flop_per_token, e.g. at commit 0011fb905e9561a51af0f265e35d989f7448b1d8: 6N for
the dense matmuls forward and backward, 12*l*h*q*t for the attention scores and values,
causal sparsity deliberately not discounted, flash's recomputation not counted; N
excludes the embedding, which this stack has none of). At the full shape: 872,452,096
params (4 x 218,112,000 + 4,096), 6,040,018,944 FLOP per token, 49.48 TFLOP per step.

Decode: batch 64, a KV cache of 2048 positions per sequence per layer (bf16, random
contents), one new token per step. Its q, k, v are computed, RoPE'd at its position, its
k/v are written into one cache slot (slot = position mod 2048, so the context stays
2048: a rolling window), and it attends over all 2048 cached positions. That attention
runs with is_causal=False: torch's is_causal is the top-left-aligned mask
ones(L, S).tril() (see the scaled_dot_product_attention docs), which for one query
would see only key 0; every cached position precedes the new token, so no mask is the
causal answer. The whole step (position, RoPE angles, 4 layers, cache writes, final
norm) is captured once in a torch.cuda.CUDAGraph and replayed
(https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs); the position counter is
a device tensor advanced inside the graph. Reported: tokens/s = 64 * steps / elapsed,
and GB/s = (weight bytes + KV cache bytes) * steps / elapsed / 1e9, i.e. every weight
and the whole cache read once per step; activations, the one-slot cache writes and
re-reads are not counted. At the full shape: 1,744,904,192 weight bytes + 2,147,483,648
KV bytes (4 layers x k,v x 64 x 8 x 2048 x 128 x 2 B) = 3,892,387,840 bytes per step.

Timing: warm up for --warmup-s seconds (default 20) of the same steps, then
torch.cuda.synchronize(), time.perf_counter(), back-to-back steps until --seconds
(default 10) have passed on the host clock, torch.cuda.synchronize(), perf_counter()
again: rates are over that whole wall-clock span (deliberately not CUDA events). No
step synchronizes inside the span; the host may queue a few steps ahead of the GPU, and
the final synchronize waits for them, so the span is a little over --seconds and counts
exactly the steps it ran.

Every GPU at once: one process per GPU (multiprocessing, spawn start method, each pins
its device with torch.cuda.set_device), --gpus 0,1 (default: every GPU torch sees, in
torch's order, which is nvidia-smi's only with CUDA_DEVICE_ORDER=PCI_BUS_ID). All
processes build their model, then wait at a multiprocessing.Barrier and start the
train warm-up together; after training each frees its optimizer and builds its decode
graph, then all wait at the barrier again and start the decode warm-up together. One
JSON object per line per GPU and workload on stdout (progress goes to stderr):

    {"gpu": 0, "workload": "train", "tokens_per_s": ..., "tflops": ..., "params": ...,
     "steps": n, "seconds": s, "peak_memory_bytes": ..., "torch": "2.x", "device": "...",
     "gpus_in_run": k, ...}
    {"gpu": 0, "workload": "decode", "tokens_per_s": ..., "gbs": ..., ...}

peak_memory_bytes is torch.cuda.max_memory_allocated over that workload (stats reset
when it begins; on --cpu-tiny, the process's maximum resident set instead).

--cpu-tiny runs the same code on the CPU in float32 at a tiny shape (2 layers, width 64,
4 heads, 2 kv heads, head_dim 16, ffn 128, batch 2, seq 32; decode batch 4, context 16;
math attention; no CUDA graph), one process per entry of --gpus (default one), so that a
test can run it anywhere.

    python3 bench/job_reference.py                   # every GPU at once, train then decode
    python3 bench/job_reference.py --gpus 0          # GPU 0 alone
    python3 bench/job_reference.py --cpu-tiny --seconds 0.5 --warmup-s 0.2
"""

# This file must run on Python 3.8: typing's List/Dict/Optional, not the 3.9+/3.10+ forms.
# ruff: noqa: UP006, UP035, UP045

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import queue
import resource
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


class Shape:
    """The stack's and the workloads' sizes."""

    def __init__(self, layers: int, width: int, heads: int, kv_heads: int, head_dim: int,
                 ffn: int, eps: float, rope_theta: float, batch: int, seq: int,
                 decode_batch: int, context: int) -> None:
        self.layers = layers
        self.width = width
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.ffn = ffn
        self.eps = eps
        self.rope_theta = rope_theta
        self.batch = batch
        self.seq = seq
        self.decode_batch = decode_batch
        self.context = context

    def params(self) -> int:
        """Parameters by formula: q, k, v, o projections, the three MLP matrices and two
        RMSNorm weights per layer, plus the final RMSNorm."""
        attention = (self.width * self.heads * self.head_dim          # wq
                     + 2 * self.width * self.kv_heads * self.head_dim  # wk, wv
                     + self.heads * self.head_dim * self.width)        # wo
        mlp = 3 * self.width * self.ffn                                # w1, w3, w2
        norms = 2 * self.width
        return self.layers * (attention + mlp + norms) + self.width

    def flop_per_token(self, params: int) -> int:
        """torchtitan's count: 6 * params + 12 * layers * heads * head_dim * seq."""
        return 6 * params + 12 * self.layers * self.heads * self.head_dim * self.seq

    def as_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def llama3_8b_four_layers() -> Shape:
    return Shape(layers=4, width=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
                 eps=1e-5, rope_theta=500000.0, batch=2, seq=4096, decode_batch=64,
                 context=2048)


def tiny() -> Shape:
    return Shape(layers=2, width=64, heads=4, kv_heads=2, head_dim=16, ffn=128, eps=1e-5,
                 rope_theta=500000.0, batch=2, seq=32, decode_batch=4, context=16)


# ---------------------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(positions: torch.Tensor, head_dim: int,
                theta: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, float32 [len(positions), head_dim], for the rotate-half form."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.float32) / head_dim))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [batch, heads, seq, head_dim]; cos, sin [seq, head_dim] float32."""
    x32 = x.float()
    first, second = x32.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return (x32 * cos + rotated * sin).type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: Shape, gqa: str, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.heads = shape.heads
        self.kv_heads = shape.kv_heads
        self.head_dim = shape.head_dim
        self.gqa = gqa  # "native" or "expand", chosen per workload (choose_gqa)
        kw = dict(bias=False, device=device, dtype=dtype)
        self.wq = nn.Linear(shape.width, shape.heads * shape.head_dim, **kw)
        self.wk = nn.Linear(shape.width, shape.kv_heads * shape.head_dim, **kw)
        self.wv = nn.Linear(shape.width, shape.kv_heads * shape.head_dim, **kw)
        self.wo = nn.Linear(shape.heads * shape.head_dim, shape.width, **kw)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                slot: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        causal = True
        if cache is not None:
            assert slot is not None
            cache_k, cache_v = cache
            cache_k.index_copy_(2, slot, k)
            cache_v.index_copy_(2, slot, v)
            k, v = cache_k, cache_v
            causal = False  # one query after every cached position: see the docstring
        out = attend(q, k, v, causal, self.gqa)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
           gqa: str) -> torch.Tensor:
    """SDPA under whatever backend the caller pinned; GQA native or expanded."""
    if q.shape[1] != k.shape[1]:
        if gqa == "native":
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=True)
        repeat = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class MLP(nn.Module):
    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.w1 = nn.Linear(shape.width, shape.ffn, **kw)  # gate
        self.w3 = nn.Linear(shape.width, shape.ffn, **kw)  # up
        self.w2 = nn.Linear(shape.ffn, shape.width, **kw)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, shape: Shape, gqa: str, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(shape.width, shape.eps, device, dtype)
        self.attention = Attention(shape, gqa, device, dtype)
        self.mlp_norm = RMSNorm(shape.width, shape.eps, device, dtype)
        self.mlp = MLP(shape, device, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                slot: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, cache, slot)
        return h + self.mlp(self.mlp_norm(h))


class Stack(nn.Module):
    """The decoder layers and the final RMSNorm; SDPA runs under whatever backend the
    caller pinned."""

    def __init__(self, shape: Shape, gqa: str, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(shape, gqa, device, dtype)
                                     for _ in range(shape.layers)])
        self.norm = RMSNorm(shape.width, shape.eps, device, dtype)

    def set_gqa(self, gqa: str) -> None:
        for layer in self.layers:
            layer.attention.gqa = gqa

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                caches: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None,
                slot: Optional[torch.Tensor] = None) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if caches is None else caches[i], slot)
        return self.norm(x)


# ------------------------------------------------------------------------ the workloads


BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def sdpa_backend(name: str) -> Any:
    try:
        from torch.nn.attention import SDPBackend
    except ImportError as exc:  # torch < 2.3
        raise SystemExit(f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel "
                         "(torch >= 2.3 needed)") from exc
    member = getattr(SDPBackend, BACKENDS[name], None)
    if member is None:
        raise SystemExit(f"torch {torch.__version__} has no SDPBackend.{BACKENDS[name]}")
    return member


def pinned(backend: Any) -> Any:
    from torch.nn.attention import sdpa_kernel
    return sdpa_kernel(backend)


def sdpa_takes_enable_gqa() -> bool:
    q = torch.zeros(1, 2, 1, 4)
    kv = torch.zeros(1, 1, 1, 4)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except TypeError:  # torch < 2.5: no such keyword
        return False
    return True


def choose_gqa(requested: str, shape: Shape, backend: Any, device: torch.device,
               dtype: torch.dtype, train: bool) -> str:
    """"auto": native if this torch and the pinned backend take enable_gqa at this head
    layout (tried once, forward and for training backward, on a short sequence), else
    expand."""
    if requested != "auto" or shape.heads == shape.kv_heads:
        return requested if requested != "auto" else "native"
    if not sdpa_takes_enable_gqa():
        return "expand"
    q_len, kv_len = (128, 128) if train else (1, 128)
    q = torch.randn(1, shape.heads, q_len, shape.head_dim, device=device, dtype=dtype,
                    requires_grad=train)
    k = torch.randn(1, shape.kv_heads, kv_len, shape.head_dim, device=device, dtype=dtype,
                    requires_grad=train)
    v = torch.randn(1, shape.kv_heads, kv_len, shape.head_dim, device=device, dtype=dtype,
                    requires_grad=train)
    try:
        with pinned(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=train, enable_gqa=True)
            if train:
                out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except RuntimeError:
        return "expand"
    return "native"


class Context:
    """What a worker process knows: its device, shape, options, and the shared barrier."""

    def __init__(self, index: int, gpus_in_run: int, args: argparse.Namespace,
                 barrier: Any) -> None:
        self.index = index
        self.gpus_in_run = gpus_in_run
        self.args = args
        self.barrier = barrier
        self.cpu = bool(args.cpu_tiny)
        self.shape = tiny() if self.cpu else llama3_8b_four_layers()
        for name in ("layers", "batch", "seq", "decode_batch", "context"):
            value = getattr(args, name)
            if value is not None:
                setattr(self.shape, name, value)
        self.device = torch.device("cpu") if self.cpu else torch.device("cuda", index)
        self.dtype = torch.float32 if self.cpu else torch.bfloat16
        self.attention = args.attention or ("math" if self.cpu else "flash")
        self.backend = sdpa_backend(self.attention)
        self.graph = not self.cpu and not args.no_cuda_graph

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def log(self, message: str) -> None:
        print(f"[gpu {self.index}] {message}", file=sys.stderr, flush=True)

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory(self) -> int:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux

    def device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return "cpu"

    def together(self, what: str) -> None:
        self.log(f"waiting for every process before {what}")
        self.barrier.wait()

    def run_timed(self, step: Callable[[], Any], what: str) -> Tuple[int, float]:
        """Warm up for --warmup-s, then back-to-back steps for --seconds between two
        synchronizes, by wall clock: (steps, elapsed seconds)."""
        self.log(f"{what}: warm-up {self.args.warmup_s:g} s")
        start = time.perf_counter()
        while True:
            step()
            if time.perf_counter() - start >= self.args.warmup_s:
                break
        self.sync()
        self.log(f"{what}: timing {self.args.seconds:g} s")
        steps = 0
        self.sync()
        start = time.perf_counter()
        while True:
            step()
            steps += 1
            if time.perf_counter() - start >= self.args.seconds:
                break
        self.sync()
        return steps, time.perf_counter() - start

    def common(self, workload: str, steps: int, seconds: float) -> Dict[str, Any]:
        return {"gpu": self.index, "workload": workload, "steps": steps,
                "seconds": seconds, "peak_memory_bytes": self.peak_memory(),
                "torch": torch.__version__, "device": self.device_name(),
                "gpus_in_run": self.gpus_in_run, "attention": self.attention,
                "dtype": str(self.dtype).replace("torch.", ""),
                "python": ".".join(str(part) for part in sys.version_info[:3])}


def build_model(ctx: Context) -> Stack:
    torch.manual_seed(ctx.args.seed)
    model = Stack(ctx.shape, "expand", ctx.device, ctx.dtype)
    counted = sum(p.numel() for p in model.parameters())
    if counted != ctx.shape.params():
        raise RuntimeError(f"the module has {counted} parameters, the shape formula "
                           f"{ctx.shape.params()}")
    return model


def make_optimizer(ctx: Context, model: Stack) -> Tuple[torch.optim.Optimizer, bool]:
    try:
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True), True
    except (RuntimeError, ValueError):
        if ctx.device.type == "cuda":
            raise
        # An old torch without a fused CPU AdamW: only --cpu-tiny ever gets here.
        return torch.optim.AdamW(model.parameters(), lr=1e-4), False


def train(ctx: Context, model: Stack) -> Dict[str, Any]:
    shape = ctx.shape
    gqa = choose_gqa(ctx.args.gqa, shape, ctx.backend, ctx.device, ctx.dtype, train=True)
    model.set_gqa(gqa)
    model.train()
    generator = torch.Generator(device=ctx.device)
    generator.manual_seed(ctx.args.seed + 1)
    x = torch.randn(shape.batch, shape.seq, shape.width, device=ctx.device,
                    dtype=ctx.dtype, generator=generator)
    target = torch.randn(shape.batch, shape.seq, shape.width, device=ctx.device,
                         dtype=ctx.dtype, generator=generator).float()
    cos, sin = rope_tables(torch.arange(shape.seq, device=ctx.device), shape.head_dim,
                           shape.rope_theta)
    optimizer, fused = make_optimizer(ctx, model)
    last: Dict[str, torch.Tensor] = {}

    def step() -> None:
        out = model(x, cos, sin)
        loss = F.mse_loss(out.float(), target)  # float32 reduction
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        last["loss"] = loss.detach()  # read once, after the timed span

    ctx.reset_peak()
    ctx.together("the train warm-up")
    with pinned(ctx.backend):
        steps, seconds = ctx.run_timed(step, "train")
    params = sum(p.numel() for p in model.parameters())
    flop_per_token = shape.flop_per_token(params)
    tokens_per_s = shape.batch * shape.seq * steps / seconds
    result = ctx.common("train", steps, seconds)
    result.update({"tokens_per_s": tokens_per_s,
                   "tflops": tokens_per_s * flop_per_token / 1e12,
                   "params": params, "flop_per_token": flop_per_token,
                   "batch": shape.batch, "seq": shape.seq, "layers": shape.layers,
                   "gqa": gqa, "adamw_fused": fused,
                   "loss_last": float(last["loss"].item())})
    return result  # the optimizer's state and the batch go with this frame


def decode(ctx: Context, model: Stack) -> Dict[str, Any]:
    shape = ctx.shape
    gqa = choose_gqa(ctx.args.gqa, shape, ctx.backend, ctx.device, ctx.dtype, train=False)
    model.set_gqa(gqa)
    model.eval()
    ctx.reset_peak()
    generator = torch.Generator(device=ctx.device)
    generator.manual_seed(ctx.args.seed + 2)
    cache_shape = (shape.decode_batch, shape.kv_heads, shape.context, shape.head_dim)
    caches = [(torch.randn(cache_shape, device=ctx.device, dtype=ctx.dtype,
                           generator=generator),
               torch.randn(cache_shape, device=ctx.device, dtype=ctx.dtype,
                           generator=generator))
              for _ in range(shape.layers)]
    x = torch.randn(shape.decode_batch, 1, shape.width, device=ctx.device, dtype=ctx.dtype,
                    generator=generator)
    out = torch.empty_like(x)
    # The new token's position: just after the 2048 cached ones, advanced every step.
    position = torch.full((1,), shape.context, device=ctx.device, dtype=torch.long)

    def eager_step() -> None:
        cos, sin = rope_tables(position, shape.head_dim, shape.rope_theta)
        slot = torch.remainder(position, shape.context)
        out.copy_(model(x, cos, sin, caches, slot))
        position.add_(1)

    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    cache_bytes = sum(t.numel() * t.element_size() for pair in caches for t in pair)
    step: Callable[[], Any] = eager_step
    with torch.no_grad(), pinned(ctx.backend):
        if ctx.graph:
            side = torch.cuda.Stream(ctx.device)
            side.wait_stream(torch.cuda.current_stream(ctx.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    eager_step()
            torch.cuda.current_stream(ctx.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                eager_step()
            step = graph.replay
        ctx.together("the decode warm-up")
        steps, seconds = ctx.run_timed(step, "decode")
    if not bool(torch.isfinite(out).all()):
        ctx.log("warning: the decode output is not finite")
    bytes_per_step = weight_bytes + cache_bytes
    result = ctx.common("decode", steps, seconds)
    result.update({"tokens_per_s": shape.decode_batch * steps / seconds,
                   "gbs": bytes_per_step * steps / seconds / 1e9,
                   "bytes_per_step": bytes_per_step, "weight_bytes": weight_bytes,
                   "kv_cache_bytes": cache_bytes, "batch": shape.decode_batch,
                   "context": shape.context, "layers": shape.layers, "gqa": gqa,
                   "params": sum(p.numel() for p in model.parameters()),
                   "cuda_graph": ctx.graph})
    return result


def worker(index: int, gpus_in_run: int, args: argparse.Namespace, barrier: Any,
           results: Any) -> None:
    """One process, one device: train then decode, each started with every other."""
    try:
        ctx = Context(index, gpus_in_run, args, barrier)
        if ctx.cpu:
            torch.set_num_threads(1)
        else:
            torch.cuda.set_device(ctx.device)
        model = build_model(ctx)
        if args.workload in ("train", "both"):
            results.put(train(ctx, model))
        if args.workload in ("decode", "both"):
            results.put(decode(ctx, model))
    except BaseException:  # every failure, SystemExit included, goes back to the parent
        barrier.abort()  # the others must not wait for this one at the barrier
        results.put({"gpu": index, "error": traceback.format_exc()})
        raise SystemExit(1) from None


# ---------------------------------------------------------------------------- the parent


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Plain-PyTorch reference: a 4-layer Llama 3 8B-shaped stack, train and "
                    "decode, one process per GPU, all at once. JSON lines on stdout.")
    parser.add_argument("--gpus", default=None,
                        help="comma-separated device indices (default: every visible GPU; "
                             "with --cpu-tiny, one CPU process per entry, default one)")
    parser.add_argument("--workload", choices=("train", "decode", "both"), default="both")
    parser.add_argument("--attention", choices=sorted(BACKENDS), default=None,
                        help="the SDPA backend pinned (default flash; math with --cpu-tiny)")
    parser.add_argument("--gqa", choices=("auto", "native", "expand"), default="auto",
                        help="GQA through enable_gqa=True (native) or repeat_interleave "
                             "(expand); auto: native where the backend takes it")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed span per workload")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="warm-up per workload")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=None, help="override (default 4)")
    parser.add_argument("--batch", type=int, default=None, help="train batch (default 2)")
    parser.add_argument("--seq", type=int, default=None, help="train sequence (default 4096)")
    parser.add_argument("--decode-batch", type=int, default=None, help="default 64")
    parser.add_argument("--context", type=int, default=None, help="KV positions (default 2048)")
    parser.add_argument("--no-cuda-graph", action="store_true",
                        help="decode eagerly instead of replaying a CUDA graph")
    parser.add_argument("--cpu-tiny", action="store_true",
                        help="the tiny float32 shape on the CPU, for tests")
    return parser.parse_args(argv)


def device_indices(args: argparse.Namespace) -> List[int]:
    if args.gpus is not None:
        indices = [int(part) for part in args.gpus.split(",") if part.strip()]
    elif args.cpu_tiny:
        indices = [0]
    else:
        indices = list(range(torch.cuda.device_count()))
    if not indices:
        raise SystemExit("no GPU visible to torch (and no --gpus given)")
    if len(set(indices)) != len(indices):
        raise SystemExit(f"--gpus repeats a device: {args.gpus}")
    if not args.cpu_tiny:
        count = torch.cuda.device_count()
        bad = [i for i in indices if i < 0 or i >= count]
        if bad:
            raise SystemExit(f"--gpus {args.gpus}: torch sees {count} GPUs")
    return indices


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    indices = device_indices(args)
    spawn = mp.get_context("spawn")
    barrier = spawn.Barrier(len(indices))
    results = spawn.Queue()
    processes = []
    for index in indices:
        process = spawn.Process(target=worker, name=f"job-reference-{index}",
                                args=(index, len(indices), args, barrier, results))
        process.start()
        processes.append(process)
    failed = False
    aborted = False

    def handle(item: Dict[str, Any]) -> None:
        nonlocal failed
        if "error" in item:
            failed = True
            print(f"GPU {item['gpu']} failed:\n{item['error']}", file=sys.stderr, flush=True)
        else:
            print(json.dumps(item), flush=True)

    while any(p.is_alive() for p in processes):
        with contextlib.suppress(queue.Empty):
            handle(results.get(timeout=0.5))
        dead = [p for p in processes if p.exitcode not in (None, 0)]
        if dead and not aborted:
            # A process that died without reaching its own abort (killed, out of memory):
            # release the others from the barrier rather than leave them waiting there.
            aborted = True
            failed = True
            barrier.abort()
    for process in processes:
        process.join()
    while True:
        try:
            handle(results.get(timeout=0.5))
        except queue.Empty:
            break
    failed = failed or any(p.exitcode != 0 for p in processes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
