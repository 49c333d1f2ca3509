"""The job suite's model: a fixed decoder stack written down here, and what it counts.

Four decoder layers shaped as Meta Llama 3 8B's (its published config.json: hidden_size
4096, num_attention_heads 32, num_key_value_heads 8, head_dim 128, intermediate_size
14336, rms_norm_eps 1e-5, rope_theta 500000; torchtitan's "8B" flavor gives the same:
dim 4096, 32 and 8 heads, compute_ffn_hidden_dim(4096, multiple_of=1024,
ffn_dim_multiplier=1.3) = 14336), written as the field's training stack writes them:
torchtitan 0.3.0's Llama 3 model (PyPI's torchtitan-0.3.0 wheel; the same forms at
github.com/pytorch/torchtitan commit b5bcd76c66d0, 2026-08-21), each choice here with its
file there (torchtitan/...), and the parameters named as its, so that one's state dict
loads into the other (tests/agent/test_job_titan.py compares the two):

- the block (models/llama3/model.py Llama3TransformerBlock): h = x +
  attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h)); a final norm after
  the last (models/common/decoder.py Decoder.forward);
- RMSNorm (models/common/nn_modules.py RMSNorm): torch's own nn.RMSNorm, eps 1e-5:
  F.rms_norm, the variance and the weight's product in float32 and one cast back, one
  fused kernel each way on CUDA. On a lent 4x H200 (issue 55) a plain training script
  of these shapes read 84.7-86.0k tokens/s a GPU with the norm written out in separate
  kernels (Meta's reference form, suite 1.3.0's), 93.7-95.1k with torch's;
- RoPE (models/common/rope.py ComplexRoPE, the 8B flavor's scaling "llama"): the Llama
  3.1 frequency scaling, a complex64 cache computed once, adjacent dimensions paired as
  complex numbers and rotated in float32 on [batch, positions, heads, head_dim], cast
  back (suite 1.3.0 rotated halves in bf16: the same rotation up to a permutation of a
  head's dimensions, other kernels);
- the projections (models/common/attention.py FusedQKVLinear; the Llama 3 flavors set
  fuse_qkv=True): queries, keys and values from one matmul, grouped by key-value head,
  each made contiguous (suite 1.3.0: three matmuls);
- attention (GQAttention with its ScaledDotProductAttention): SDPA on the transposed
  [batch, heads, positions, head_dim] views, causal, the default scale, `enable_gqa`, the
  output made contiguous before `wo`. torchtitan 0.3.0 itself trains its language models
  with FlexAttention or varlen attention only (models/common/config_utils.py
  get_attention_config: "sdpa is no longer supported for language models", its packed
  documents needing masks); a step of one document a sequence is causal attention, which
  SDPA's backends serve, so the suite times every SDPA backend the torch offers and
  heads with the fastest (agent/job/suite.py) as before;
- SwiGLU (models/common/feed_forward.py FeedForward): w2(silu(w1(x)) * w3(x));
- the loss (components/loss.py cross_entropy_loss): cross-entropy over the logits cast
  to float32, summed over the tokens, then divided by them (BaseLoss.__call__ by the
  valid tokens); the stack's output stands for the logits (`token_loss`);
- bf16 throughout, as torchtitan's `training.dtype = "bfloat16"` (config/configs.py:
  parameters, gradients and optimizer state in bf16; RoPE and the logits in float32).

Grouped-query attention goes to SDPA as reference stacks write it: the eight key-value
heads as they are (`enable_gqa`, torch 2.5 and newer), each serving its four query heads
inside the kernel; torchtitan dropped its `repeat_kv` expansion in January 2026 ("GQA
without kv repeats"), and on a lent H100 the expansion cost a training step 5-6% (issue
45). Where a backend or torch does not take it natively, the keys and values are
expanded first and the figure says so (`GQA_EXPANDED`).

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
                "32 layers, no embedding or LM head, random bf16 weights; written as "
                "torchtitan 0.3.0's Llama 3 (nn.RMSNorm, complex RoPE with Llama 3.1 "
                "scaling in float32, fused QKV, SDPA, SwiGLU, float32 cross-entropy)")
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


# torchtitan's Llama 3 flavors rotate by ComplexRoPE with the Llama 3.1 frequency scaling
# (torchtitan/models/llama3/__init__.py, `_8b`: scaling "llama", theta 500000; its defaults
# in models/common/rope.py: factor 8, low 1, high 4, 8,192 original positions).
ROPE_SCALING_FACTOR = 8.0
ROPE_LOW_FREQ_FACTOR = 1.0
ROPE_HIGH_FREQ_FACTOR = 4.0
ROPE_ORIGINAL_POSITIONS = 8192


def rope_frequencies(head_dim: int) -> torch.Tensor:
    """Each pair of a head's dimensions' rotation frequency, float32, scaled as torchtitan's
    ComplexRoPE._precompute_cache scales them (scaling "llama")."""
    freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float()
                                  / head_dim))
    wavelen = 2 * math.pi / freqs
    high_freq_wavelen = ROPE_ORIGINAL_POSITIONS / ROPE_HIGH_FREQ_FACTOR
    low_freq_wavelen = ROPE_ORIGINAL_POSITIONS / ROPE_LOW_FREQ_FACTOR
    freqs = torch.where(wavelen > low_freq_wavelen, freqs / ROPE_SCALING_FACTOR, freqs)
    smooth = (ROPE_ORIGINAL_POSITIONS / wavelen - ROPE_LOW_FREQ_FACTOR) / (
        ROPE_HIGH_FREQ_FACTOR - ROPE_LOW_FREQ_FACTOR)
    smoothed = (1 - smooth) * freqs / ROPE_SCALING_FACTOR + smooth * freqs
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, freqs)


def rope_cache(shape: Shape, positions: torch.Tensor) -> torch.Tensor:
    """The rotations at `positions`: complex64, [positions, head_dim / 2] (torchtitan's
    `freqs_cis`, torch.polar of the angles)."""
    freqs = rope_frequencies(shape.head_dim).to(positions.device)
    angles = torch.outer(positions, freqs).float()
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(q: torch.Tensor, k: torch.Tensor, cache: torch.Tensor
               ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys [batch, positions, heads, head_dim] rotated by `cache` as
    torchtitan's ComplexRoPE.apply_rotary_emb does: adjacent dimensions as one complex
    number, multiplied in float32, cast back to the input's dtype."""
    rotation = cache.view(1, cache.shape[0], 1, cache.shape[1])
    xq = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    xk = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    return (torch.view_as_real(xq * rotation).flatten(3).type_as(q),
            torch.view_as_real(xk * rotation).flatten(3).type_as(k))


GQA_NATIVE, GQA_EXPANDED = "native", "expanded"
# Decode's queries of a key-value head's group attend as `group` rows of one head
# (Attention.decode): no copy of the cache, whatever the backend.
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
            explicit: bool, gqa: str = GQA_NATIVE, pinned: Optional[str] = None
            ) -> torch.Tensor:
    if explicit:
        return explicit_attention(q, k, v, causal)
    if k.shape[1] != q.shape[1]:
        if gqa == GQA_NATIVE:
            return sdpa(q, k, v, pinned, is_causal=causal, enable_gqa=True)
        k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    return sdpa(q, k, v, pinned, is_causal=causal)


def make_norm(width: int, device: Any, dtype: torch.dtype) -> nn.Module:
    """torch's own RMSNorm (torchtitan's models/common/nn_modules.py RMSNorm is nn.RMSNorm,
    eps 1e-5): F.rms_norm, the variance and the weight's product in float32 and one cast
    back, a fused kernel each way on CUDA. A torch before 2.4 has none: the same sum
    written out (`WrittenRMSNorm`); the torch is part of the figure's configuration."""
    if hasattr(nn, "RMSNorm"):
        return nn.RMSNorm(width, eps=NORM_EPS, device=device, dtype=dtype)
    return WrittenRMSNorm(width, device, dtype)


class WrittenRMSNorm(nn.Module):
    """F.rms_norm's arithmetic in separate kernels, for a torch without it."""

    def __init__(self, width: int, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        upcast = x.float()
        normed = upcast * torch.rsqrt(upcast.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return (normed * self.weight.float()).type_as(x)


def _linear(out: int, into: int, device: Any, dtype: torch.dtype) -> nn.Linear:
    return nn.Linear(into, out, bias=False, device=device, dtype=dtype)


class FusedQKV(nn.Module):
    """Queries, keys and values from one matmul, as torchtitan's FusedQKVLinear (its Llama 3
    flavors set fuse_qkv=True): the weight's rows grouped by key-value head, each group its
    `heads / kv_heads` query heads, then its key head, then its value head; each of the
    three made contiguous [batch, positions, heads, head_dim]."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.head_dim = shape.head_dim
        self.group = shape.heads // shape.kv_heads
        self.wqkv = _linear((shape.heads + 2 * shape.kv_heads) * shape.head_dim,
                            shape.width, device, dtype)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t = x.shape[0], x.shape[1]
        qkv = self.wqkv(x).view(b, t, -1, self.group + 2, self.head_dim)
        q, k, v = torch.split(qkv, [self.group, 1, 1], dim=-2)
        return (q.reshape(b, t, -1, self.head_dim).contiguous(),
                k.reshape(b, t, -1, self.head_dim).contiguous(),
                v.reshape(b, t, -1, self.head_dim).contiguous())


class Attention(nn.Module):
    """Grouped-query attention as torchtitan's GQAttention with its SDPA inner attention:
    the fused projection, RoPE on [batch, positions, heads, head_dim], the three handed to
    SDPA transposed (causal, the default scale, `enable_gqa`), its output made contiguous
    and projected by `wo`."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype, explicit: bool) -> None:
        super().__init__()
        self.shape = shape
        self.explicit = explicit
        # How grouped-query attention reaches SDPA in training (Stack.gqa sets it).
        self.gqa = GQA_NATIVE
        self.qkv_linear = FusedQKV(shape, device, dtype)
        self.wo = _linear(shape.width, shape.attention_width, device, dtype)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, pinned: Optional[str] = None
                ) -> torch.Tensor:
        q, k, v = self.qkv_linear(x)
        q, k = apply_rope(q, k, rope)
        out = _attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True,
                      self.explicit, self.gqa, pinned)
        attended: torch.Tensor = self.wo(out.transpose(1, 2).contiguous().flatten(2))
        return attended

    def decode(self, x: torch.Tensor, rope: torch.Tensor, cache_k: torch.Tensor,
               cache_v: torch.Tensor, slot: torch.Tensor, gqa: str = GQA_NATIVE,
               pinned: Optional[str] = None) -> torch.Tensor:
        """One new token per sequence: its key and value written into the cache at `slot`
        (a device tensor, so that a CUDA graph replays it), then attention over every
        cached position. Grouped-query attention without copying the cache: handed to
        SDPA as it is (GQA_NATIVE, `enable_gqa`), or, for a backend that does not take
        that, the queries of a key-value head's group as one block of `group` query rows
        (GQA_GROUPED). `pinned`: the backend traced into a compiled step (`sdpa`)."""
        s = self.shape
        b = x.shape[0]
        q, k, v = self.qkv_linear(x)
        q, k = apply_rope(q, k, rope)
        cache_k.index_copy_(2, slot, k.transpose(1, 2))
        cache_v.index_copy_(2, slot, v.transpose(1, 2))
        if gqa == GQA_GROUPED:
            rows = q.reshape(b, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
            attended = _attend(rows, cache_k, cache_v, False, self.explicit,
                               pinned=pinned)
        else:
            attended = _attend(q.transpose(1, 2), cache_k, cache_v, False, self.explicit,
                               GQA_NATIVE, pinned).transpose(1, 2)
        out: torch.Tensor = self.wo(attended.reshape(b, 1, s.attention_width))
        return out


class FeedForward(nn.Module):
    """SwiGLU, as torchtitan's FeedForward: w2(silu(w1(x)) * w3(x))."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.w1 = _linear(shape.ffn, shape.width, device, dtype)
        self.w2 = _linear(shape.width, shape.ffn, device, dtype)
        self.w3 = _linear(shape.ffn, shape.width, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class Layer(nn.Module):
    """One decoder layer, as torchtitan's Llama3TransformerBlock: h = x +
    attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h)). Its parameters are
    named as torchtitan's, so that one's state dict loads into the other."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype,
                 explicit: bool = False) -> None:
        super().__init__()
        self.shape = shape
        self.attention_norm = make_norm(shape.width, device, dtype)
        self.attention = Attention(shape, device, dtype, explicit)
        self.ffn_norm = make_norm(shape.width, device, dtype)
        self.feed_forward = FeedForward(shape, device, dtype)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, pinned: Optional[str] = None
                ) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope, pinned)
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out

    def decode(self, x: torch.Tensor, rope: torch.Tensor, cache_k: torch.Tensor,
               cache_v: torch.Tensor, slot: torch.Tensor, gqa: str = GQA_NATIVE,
               pinned: Optional[str] = None) -> torch.Tensor:
        h = x + self.attention.decode(self.attention_norm(x), rope, cache_k, cache_v, slot,
                                      gqa, pinned)
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out


def token_loss(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """torchtitan's cross_entropy_loss (components/loss.py: the logits cast to float32,
    summed over the tokens) divided by the tokens, as its trainer divides by the valid
    tokens; the stack's output stands for the logits, there being no LM head."""
    loss = F.cross_entropy(out.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum")
    return loss / labels.numel()


class Stack(nn.Module):
    """`shape.layers` decoder layers and a final norm: torchtitan's Decoder without its
    token embedding and LM head (its forward skips either when it is None)."""

    def __init__(self, shape: Shape, device: Any, dtype: torch.dtype, seed: int = 0,
                 explicit: bool = False) -> None:
        super().__init__()
        self.shape = shape
        self.layers = nn.ModuleList(Layer(shape, device, dtype, explicit)
                                    for _ in range(shape.layers))
        self.norm = make_norm(shape.width, device, dtype)
        # Computed once, as torchtitan keeps its RoPE cache as a buffer: not a parameter.
        self.register_buffer("rope", rope_cache(shape, torch.arange(
            shape.seq if shape.context is None else 1, device=device)), persistent=False)
        # torch.compile's wrappers of the layers and the loss (`compile_layers`), and the
        # attention backend traced into them.
        self.compiled: Optional[List[Any]] = None
        self.compiled_loss: Optional[Any] = None
        self.compiled_attention: Optional[str] = None
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
        return str(self._attentions()[0].gqa) if len(self.layers) else GQA_NATIVE

    @gqa.setter
    def gqa(self, mode: str) -> None:
        for attention in self._attentions():
            attention.gqa = mode

    def _attentions(self) -> List[Attention]:
        return [cast(Layer, layer).attention for layer in self.layers]

    def compile_layers(self, attention: str) -> None:
        """torch.compile as torchtitan applies it (distributed/compile.py apply_compile:
        each layer on its own, fullgraph; the loss apart), with `attention` traced in.

        Static shapes (dynamic=False): the gate compiles the same layer code first at its
        small shape, and Dynamo's automatic dynamic shapes would then compile the timed
        full shape as a dynamic-shape graph, unlike torchtitan's one static compile and
        unlike the graph the gate checked."""
        self.compiled_attention = attention
        # Inductor on a GPU, as torchtitan. On the CPU path, the stand-in that tests the
        # suite without a GPU, Dynamo and AOTAutograd alone: inductor would generate and
        # build C++ there, code that neither a GPU (Triton kernels) nor a user runs, and
        # that took 35 s a run on an idle 2-core machine and 140 s beside the other tests.
        backend = compile_backend(cast(torch.Tensor, self.rope).device)
        self.compiled = [torch.compile(layer, fullgraph=True, dynamic=False, backend=backend)
                         for layer in self.layers]
        self.compiled_loss = torch.compile(token_loss, dynamic=False, backend=backend)

    def forward(self, x: torch.Tensor, compiled: bool = False) -> torch.Tensor:
        rope = cast(torch.Tensor, self.rope)
        if rope.shape[0] != x.shape[1]:
            rope = rope_cache(self.shape, torch.arange(x.shape[1], device=x.device))
        if compiled:
            if self.compiled is None:
                raise RuntimeError("the stack is not compiled (Stack.compile_layers)")
            for layer in self.compiled:
                x = layer(x, rope, self.compiled_attention)
        else:
            for layer in self.layers:
                x = layer(x, rope)
        out: torch.Tensor = self.norm(x)
        return out

    def decode(self, x: torch.Tensor, rope: torch.Tensor,
               caches: List[Tuple[torch.Tensor, torch.Tensor]], slot: torch.Tensor,
               gqa: str = GQA_NATIVE, pinned: Optional[str] = None) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = cast(Layer, layer).decode(x, rope, caches[i][0], caches[i][1], slot, gqa,
                                          pinned)
        out: torch.Tensor = self.norm(x)
        return out


def compile_backend(device: Any) -> str:
    """torch.compile's backend on `device`: inductor on a GPU, as torchtitan and
    gpt-fast compile; Dynamo and AOTAutograd alone on the CPU path (`Stack.compile_layers`
    says why)."""
    return "inductor" if torch.device(device).type == "cuda" else "aot_eager"


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


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pinned: Optional[str] = None,
         **options: Any) -> torch.Tensor:
    """scaled_dot_product_attention with this thread's backend (`attention_backend`), or,
    in a layer torch.compile traces, with `pinned`: the switch goes into its graph (as
    torchtitan's ScaledDotProductAttention puts its sdpa_kernel into its compiled blocks),
    where a lock could not."""
    if pinned is not None:
        with _switch(pinned):
            traced: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **options)
        return traced
    name = getattr(_WANTED, "name", None)
    if name is None:
        out: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **options)
        return out
    with _SWITCH, _switch(name):
        chosen: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **options)
    return chosen
