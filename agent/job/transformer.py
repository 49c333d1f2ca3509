"""The job suite's model: a fixed decoder stack written down here, and what it counts.

Four decoder layers shaped as Meta Llama 3 8B's (its published config.json: hidden_size
4096, num_attention_heads 32, num_key_value_heads 8, head_dim 128, intermediate_size
14336, rms_norm_eps 1e-5, rope_theta 500000): RMSNorm before attention and before the
MLP, RoPE on queries and keys, grouped-query attention through PyTorch's
scaled_dot_product_attention with the backend pinned by the caller, a SwiGLU MLP, no
biases, a final RMSNorm.

Grouped-query attention is written as current reference stacks write it: the eight
key-value heads go to SDPA as they are (`enable_gqa`, torch 2.5 and newer), each serving
its four query heads inside the kernel; torchtitan dropped its `repeat_kv` expansion in
January 2026 ("GQA without kv repeats"), and on a lent H100 the expansion cost a training
step 5-6% (issue 45). Where a backend or torch does not take it natively, the keys and
values are expanded first and the figure says so (`GQA_EXPANDED`).

No embedding and no LM head: a step is the stack's work, and the head's one large matmul
is what the matmul figure already measures. The weights are random (seeded, drawn on the
device): nothing is downloaded, and the time of a step does not depend on what the
weights are.

Counted as others count it, each with its source:
- training FLOP per token, torchtitan's (torchtitan/models/utils.py,
  get_dense_model_nparams_and_flops): 6 x parameters + 12 x layers x heads x head_dim x
  sequence; beside it Megatron-LM's causal count, which halves the attention term (only
  the lower triangle of the scores is computed by a causal flash kernel);
- decode FLOP per token: 2 x parameters + 4 x layers x heads x head_dim x context (the
  scores and the weighted sum over the cached positions);
- decode bytes per step: every weight once (bf16) and every cached key and value once:
  the floor of what a step must read, as nvbandwidth-style figures count; the one new
  key and value written a step and the activations are left out (under 0.1%).

Imported only once torch is known to import (agent/job/suite.py imports it inside its run).
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Tuple, cast

import torch
import torch.nn.functional as F
from torch import nn

MODEL = "llama3-8b"
MODEL_SOURCE = ("Meta Llama 3 8B, config.json (huggingface.co/meta-llama/Meta-Llama-3-8B): "
                "hidden_size 4096, num_attention_heads 32, num_key_value_heads 8, head_dim "
                "128, intermediate_size 14336, rms_norm_eps 1e-5, rope_theta 500000; 4 of its "
                "32 layers, no embedding or LM head, random bf16 weights")
FLOP_SOURCE = ("torchtitan (models/utils.py get_dense_model_nparams_and_flops): 6 x params + "
               "12 x layers x heads x head_dim x seq per token; causal: Megatron-LM's count, "
               "attention term halved")
DECODE_FLOP_SOURCE = ("2 x params + 4 x layers x heads x head_dim x context per token "
                      "(every cached position attended)")
NORM_EPS = 1e-5
ROPE_THETA = 500000.0


@dataclass(frozen=True)
class Shape:
    """The stack's shape and the work a step does: `seq` tokens per sequence for training,
    1 for decode, over `context` cached positions (decode only)."""

    layers: int
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    batch: int
    seq: int
    context: Optional[int] = None

    def as_dict(self) -> Dict[str, Optional[int]]:
        """The document's `shape`."""
        return asdict(self)

    def words(self) -> str:
        """"2 layers, width 256, batch 2 x 256"."""
        tail = f"batch {self.batch} x {self.seq}" if self.context is None else \
            f"batch {self.batch}, context {self.context}"
        return f"{self.layers} layers, width {self.width}, {tail}"

    @property
    def params(self) -> int:
        """Parameters: per layer the four attention projections, the three MLP ones and
        two norms; one final norm."""
        attention = self.width * self.heads * self.head_dim * 2 \
            + self.width * self.kv_heads * self.head_dim * 2
        return self.layers * (attention + 3 * self.width * self.ffn + 2 * self.width) \
            + self.width

    @property
    def attention_width(self) -> int:
        return self.heads * self.head_dim

    def train_flop_per_token(self) -> Tuple[float, float]:
        """torchtitan's count and Megatron's causal one."""
        dense = 6.0 * self.params
        attention = 12.0 * self.layers * self.attention_width * self.seq
        return dense + attention, dense + attention / 2.0

    def decode_flop_per_token(self) -> float:
        return 2.0 * self.params + 4.0 * self.layers * self.attention_width * \
            float(self.context or 0)

    def decode_bytes_per_step(self, element_bytes: int) -> int:
        """Every weight and every cached key and value, once."""
        cache = 2 * self.layers * self.batch * int(self.context or 0) * self.kv_heads * \
            self.head_dim
        return (self.params + cache) * element_bytes


# Llama 3 8B's layers (MODEL_SOURCE). Training: two sequences of 4,096 tokens, 8,192 a
# step (~12 GiB with the optimizer's state).
TRAIN = Shape(layers=4, width=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
              batch=2, seq=4096)
# Decode at two points. The bandwidth point: 128 sequences over 8,192 cached positions,
# 17.2 GB of cache and 1.7 GB of weights a step, so the step's few dozen small kernels
# (norms, RoPE, the cache write) are a sliver of its time and the memory system sets it.
# Measured on a lent H100 (2026-11-28, bench/device_decode_shapes.sh, cuDNN, the plain
# script against the GPU's own copy of 3,006 GB/s): 128 x 8,192 read 91.5%, 256 x 4,096
# 88.8%, 32 x 16,384 87.0%, 64 x 8,192 86.4%, 128 x 4,096 83.8%; suite 1.1.0's 128 x
# 4,096 read 79.8% on an H200, whose faster memory leaves the fixed kernels a larger
# share of a step and which sat at its 700-W cap there. The earlier 64 x 2,048 read 65%
# pinned to flash (issue 45). The latency point: one sequence over 4,096 positions, whose
# step is the weights' read and the launch of every kernel: what an interactive user
# waits for a token.
DECODE = replace(TRAIN, batch=128, seq=1, context=8192)
DECODE_LATENCY = replace(TRAIN, batch=1, seq=1, context=4096)
DECODE_POINTS = {"bandwidth": DECODE, "latency": DECODE_LATENCY}
# The correctness gate's: the same code at a size whose float32 run takes milliseconds.
GATE = Shape(layers=2, width=256, heads=4, kv_heads=2, head_dim=64, ffn=512, batch=2, seq=256)
GATE_DECODE = replace(GATE, batch=4, seq=1, context=256)
# The CPU path's (CI): the same code on RAM in a fraction of a second.
CPU_TRAIN = Shape(layers=2, width=64, heads=4, kv_heads=2, head_dim=16, ffn=128, batch=2, seq=32)
CPU_DECODE = replace(CPU_TRAIN, batch=4, seq=1, context=16)
CPU_DECODE_POINTS = {"bandwidth": CPU_DECODE, "latency": replace(CPU_DECODE, batch=1)}
CPU_GATE = replace(CPU_TRAIN, seq=16)
CPU_GATE_DECODE = replace(CPU_DECODE, context=8)


def rope_tables(shape: Shape, positions: torch.Tensor, dtype: torch.dtype
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, [positions, head_dim], halves repeated (the rotate-half form)."""
    half = shape.head_dim // 2
    freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, half, device=positions.device,
                                               dtype=torch.float32) / half))
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


GQA_NATIVE, GQA_EXPANDED = "native", "expanded"
# Decode's queries of a key-value head's group attend as `group` rows of one head
# (Layer.decode): no copy of the cache, whatever the backend.
GQA_GROUPED = "grouped"


def expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Keys or values [b, kv_heads, t, d] repeated to `heads` heads (torchtitan's former
    repeat_kv): each key-value head once per query head it serves."""
    group = heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
                       ) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v written out, the gates' float32 reference. Not through
    scaled_dot_product_attention: its backend switch is process-wide, and the node's
    other GPUs, in threads of the same process, are running the pinned backend."""
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if causal:
        rows, cols = scores.shape[-2], scores.shape[-1]
        mask = torch.ones(rows, cols, dtype=torch.bool, device=q.device).tril(cols - rows)
        scores = scores.masked_fill(~mask, float("-inf"))
    out: torch.Tensor = scores.softmax(-1) @ v
    return out


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
            explicit: bool, gqa: str = GQA_NATIVE) -> torch.Tensor:
    if explicit:
        return explicit_attention(q, k, v, causal)
    if k.shape[1] != q.shape[1]:
        if gqa == GQA_NATIVE:
            return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    return sdpa(q, k, v, is_causal=causal)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    def __init__(self, width: int, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In float32, as Llama's reference does: bf16 squares lose the small values.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return normed.to(x.dtype) * self.weight


class Layer(nn.Module):
    """One decoder layer."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype,
                 explicit: bool = False) -> None:
        super().__init__()
        self.shape = shape
        self.explicit = explicit
        # How grouped-query attention reaches SDPA in training (Stack.gqa sets it).
        self.gqa = GQA_NATIVE

        def linear(out: int, into: int) -> nn.Linear:
            return nn.Linear(into, out, bias=False, device=device, dtype=dtype)

        self.attention_norm = RMSNorm(shape.width, device, dtype)
        self.wq = linear(shape.attention_width, shape.width)
        self.wk = linear(shape.kv_heads * shape.head_dim, shape.width)
        self.wv = linear(shape.kv_heads * shape.head_dim, shape.width)
        self.wo = linear(shape.width, shape.attention_width)
        self.mlp_norm = RMSNorm(shape.width, device, dtype)
        self.w1 = linear(shape.ffn, shape.width)
        self.w3 = linear(shape.ffn, shape.width)
        self.w2 = linear(shape.width, shape.ffn)

    def _qkv(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = self.shape
        b, t, _ = h.shape
        q = self.wq(h).view(b, t, s.heads, s.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mlp_norm(x)
        out: torch.Tensor = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return out

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        s = self.shape
        b, t, _ = x.shape
        q, k, v = self._qkv(self.attention_norm(x), cos, sin)
        attended = _attend(q, k, v, True, self.explicit, self.gqa)
        x = x + self.wo(attended.transpose(1, 2).reshape(b, t, s.attention_width))
        return self._mlp(x)

    def decode(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               cache_k: torch.Tensor, cache_v: torch.Tensor, slot: torch.Tensor,
               gqa: str = GQA_NATIVE) -> torch.Tensor:
        """One new token per sequence: its key and value written into the cache at `slot`
        (a device tensor, so that a CUDA graph replays it), then attention over every
        cached position. Grouped-query attention without copying the cache: handed to
        SDPA as it is (GQA_NATIVE, `enable_gqa`), or, for a backend that does not take
        that, the queries of a key-value head's group as one block of `group` query rows
        (GQA_GROUPED)."""
        s = self.shape
        b = x.shape[0]
        q, k, v = self._qkv(self.attention_norm(x), cos, sin)
        cache_k.index_copy_(2, slot, k)
        cache_v.index_copy_(2, slot, v)
        if gqa == GQA_GROUPED:
            q = q.reshape(b, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
            attended = _attend(q, cache_k, cache_v, False, self.explicit)
            x = x + self.wo(attended.reshape(b, 1, s.attention_width))
        else:
            attended = _attend(q, cache_k, cache_v, False, self.explicit, GQA_NATIVE)
            x = x + self.wo(attended.transpose(1, 2).reshape(b, 1, s.attention_width))
        return self._mlp(x)


class Stack(nn.Module):
    """`shape.layers` decoder layers and a final norm."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype, seed: int = 0,
                 explicit: bool = False) -> None:
        super().__init__()
        self.shape = shape
        self.layers = nn.ModuleList(Layer(shape, device, dtype, explicit)
                                    for _ in range(shape.layers))
        self.norm = RMSNorm(shape.width, device, dtype)
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    continue
                # Drawn on the device: 0.9 billion values from the CPU's generator would
                # take seconds of the suite's minute.
                p.copy_(torch.randn(p.shape, generator=generator, device=device,
                                    dtype=torch.float32).mul_(p.shape[1] ** -0.5))

    @property
    def gqa(self) -> str:
        """How the layers hand grouped-query attention to SDPA: GQA_NATIVE or
        GQA_EXPANDED."""
        return str(cast(Layer, self.layers[0]).gqa) if len(self.layers) else GQA_NATIVE

    @gqa.setter
    def gqa(self, mode: str) -> None:
        for layer in self.layers:
            cast(Layer, layer).gqa = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)
        cos, sin = rope_tables(self.shape, positions, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        out: torch.Tensor = self.norm(x)
        return out

    def decode(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               caches: List[Tuple[torch.Tensor, torch.Tensor]], slot: torch.Tensor,
               gqa: str = GQA_NATIVE) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = cast(Layer, layer).decode(x, cos, sin, caches[i][0], caches[i][1], slot, gqa)
        out: torch.Tensor = self.norm(x)
        return out


def paired(mine: Any, theirs: Any) -> List[Tuple[Any, Any]]:
    """Two models' parameters (or caches) side by side; they must be as many. Indexed, not
    zip(strict=...): the agent runs on Python 3.8."""
    a, b = list(mine), list(theirs)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} against {len(b)}: not the same model")
    return [(a[i], b[i]) for i in range(len(a))]


def count_parameters(model: nn.Module) -> int:
    """What the model holds, to check Shape.params against."""
    return sum(p.numel() for p in model.parameters())


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, in float64; inf where either is not finite."""
    g = got.detach().double()
    w = want.detach().double()
    if not bool(torch.isfinite(g).all()) or not bool(torch.isfinite(w).all()):
        return math.inf
    norm = float(w.norm())
    return float((g - w).norm()) / norm if norm > 0 else float((g - w).norm())


BACKENDS = ("flash", "cudnn", "efficient", "math")


# scaled_dot_product_attention's backend switch is process-wide (torch.backends.cuda's
# flags, read when a call dispatches), and the node's GPUs run in threads of one process.
# Switched around each step, one thread restoring the flags it found could leave them set
# for another thread's backend: on a lent 2x H100 (2026-11-28) a cuDNN step on GPU 1 found
# them set for a backend that refuses its shape ("No available kernel"). So the backend a
# thread wants is its own (thread-local), and each call sets the switch, dispatches and
# restores it under one lock: microseconds of the host's time a call, and the backward
# pass runs the kernel its forward chose without reading the switch again.
_WANTED = threading.local()
_SWITCH = threading.Lock()


def _switch(name: str) -> Any:
    """torch's context that lets scaled_dot_product_attention use `name` alone."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch before 2.3: the older switch, without cuDNN
        if name == "cudnn":
            raise RuntimeError("this torch has no cuDNN attention backend") from None
        return torch.backends.cuda.sdp_kernel(
            enable_flash=name == "flash", enable_mem_efficient=name == "efficient",
            enable_math=name == "math")
    member = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
              "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[name]
    if not hasattr(SDPBackend, member):
        raise RuntimeError(f"this torch ({torch.__version__}) has no {name} attention backend")
    return sdpa_kernel([getattr(SDPBackend, member)])


@contextlib.contextmanager
def attention_backend(name: str) -> Iterator[None]:
    """Within it, this thread's scaled_dot_product_attention uses `name` alone: a shape
    or torch the backend cannot serve raises instead of falling back silently. Other
    threads keep their own."""
    _switch(name)  # a backend this torch lacks raises here, before anything runs
    previous = getattr(_WANTED, "name", None)
    _WANTED.name = name
    try:
        yield
    finally:
        _WANTED.name = previous


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options: Any) -> torch.Tensor:
    """scaled_dot_product_attention with this thread's backend (`attention_backend`)."""
    name = getattr(_WANTED, "name", None)
    if name is None:
        out: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **options)
        return out
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if compiling is not None and compiling():
        # torch.compile traces the switch into its graph; a lock is not traceable.
        with _switch(name):
            traced: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **options)
        return traced
    with _SWITCH, _switch(name):
        chosen: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **options)
    return chosen
