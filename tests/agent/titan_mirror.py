"""torchtitan 0.3.0's Llama 3 model code, the parts a step of the job suite runs, copied
here so that CI, which has no torchtitan (its model imports spmd_types, tyro and Triton:
a gigabyte beside a CPU torch), can check the suite against it. BSD-3-Clause, (c) Meta
Platforms, Inc. and affiliates; from the PyPI wheel torchtitan-0.3.0 (the same forms at
github.com/pytorch/torchtitan b5bcd76c66d0), each piece with its file. What is left out
moves nothing at this size: sharding (spmd_types, DTensor), parameter init (the test
loads the suite's weights), the embedding and LM head (Decoder.forward skips them when
None), positions and masks (None: one document a sequence).

tests/agent/test_job_titan.py checks this copy against the wheel itself wherever it
imports (a developer's `pip install --no-deps torchtitan==0.3.0 spmd_types==0.2.3
tyro==1.0.17 docstring_parser==0.18.0 triton`), so that it cannot drift from it unseen.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


# torchtitan/models/common/rope.py, ComplexRoPE._precompute_cache (scaling "llama", the
# RoPE.Config defaults: factor 8, low 1, high 4, 8192 original positions).
def precompute_cache(dim: int, end: int, theta: float = 500000.0) -> torch.Tensor:
    scaling_factor, low_freq_factor, high_freq_factor = 8.0, 1.0, 4.0
    original_max_position_embeddings = 8192
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    wavelen = 2 * math.pi / freqs
    high_freq_wavelen = original_max_position_embeddings / high_freq_factor
    low_freq_wavelen = original_max_position_embeddings / low_freq_factor
    freqs = torch.where(wavelen > low_freq_wavelen, freqs / scaling_factor, freqs)
    smooth_factor = (original_max_position_embeddings / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_freqs = (1 - smooth_factor) * freqs / scaling_factor + smooth_factor * freqs
    is_medium_freqs = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    freqs = torch.where(is_medium_freqs, smoothed_freqs, freqs)
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


# rope.py, _reshape_for_broadcast (positions None) and ComplexRoPE.apply_rotary_emb.
def apply_rotary_emb(query: torch.Tensor, key: torch.Tensor, cache: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    seqlen, ndim = query.shape[1], query.ndim
    cache = cache[0:seqlen]
    shape = [d if i == 1 else cache.shape[-1] if i == ndim - 1 else 1
             for i, d in enumerate(query.shape)]
    rope_cache = cache.view(*shape)
    xq_ = torch.view_as_complex(query.float().reshape(*query.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(key.float().reshape(*key.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * rope_cache).flatten(3)
    xk_out = torch.view_as_real(xk_ * rope_cache).flatten(3)
    return xq_out.type_as(query), xk_out.type_as(key)


# torchtitan/models/common/attention.py, FusedQKVLinear.forward (no DTensor).
class FusedQKVLinear(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.heads_per_kv = n_heads // n_kv_heads
        self.r_dim = self.heads_per_kv + 2
        self.wqkv = nn.Linear(dim, (n_heads + 2 * n_kv_heads) * head_dim, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bs, seqlen, _ = x.shape
        qkv = self.wqkv(x).view(bs, seqlen, -1, self.r_dim, self.head_dim)
        hpk, hd = self.heads_per_kv, self.head_dim
        b, s = qkv.shape[0], qkv.shape[1]
        xq, xk, xv = torch.split(qkv, [hpk, 1, 1], dim=-2)
        return (xq.reshape(b, s, -1, hd).contiguous(), xk.reshape(b, s, -1, hd).contiguous(),
                xv.reshape(b, s, -1, hd).contiguous())


# attention.py, ScaledDotProductAttention.forward (its backends' list given).
def scaled_dot_product_attention(q_BLNH: torch.Tensor, k_BLNH: torch.Tensor,
                                 v_BLNH: torch.Tensor, backends: list[SDPBackend],
                                 enable_gqa: bool) -> torch.Tensor:
    q_BNLH, k_BNLH, v_BNLH = (q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2),
                              v_BLNH.transpose(1, 2))
    with sdpa_kernel(backends, set_priority=True):
        out_BNLH = F.scaled_dot_product_attention(q_BNLH, k_BNLH, v_BNLH, scale=None,
                                                  is_causal=True, enable_gqa=enable_gqa)
    return out_BNLH.transpose(1, 2)


# attention.py, GQAttention.forward (no qk_norm, head_dim from dim: scaling None).
class GQAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, seq: int,
                 backends: list[SDPBackend]) -> None:
        super().__init__()
        self.head_dim = dim // n_heads
        self.enable_gqa = n_heads > n_kv_heads
        self.backends = backends
        self.register_buffer("cache", precompute_cache(self.head_dim, seq), persistent=False)
        self.qkv_linear = FusedQKVLinear(dim, n_heads, n_kv_heads, self.head_dim)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        xq_BLNH, xk_BLNH, xv_BLNH = self.qkv_linear(x_BLD)
        xq_BLNH, xk_BLNH = apply_rotary_emb(xq_BLNH, xk_BLNH, self.cache)
        out_BLNH = scaled_dot_product_attention(xq_BLNH, xk_BLNH, xv_BLNH, self.backends,
                                                self.enable_gqa).contiguous()
        out: torch.Tensor = self.wo(out_BLNH.flatten(2))
        return out


# torchtitan/models/common/feed_forward.py, FeedForward.forward.
class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


# torchtitan/models/llama3/model.py, Llama3TransformerBlock (norms: nn_modules.py RMSNorm,
# which is nn.RMSNorm with eps 1e-5).
class Llama3TransformerBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, hidden_dim: int, seq: int,
                 backends: list[SDPBackend]) -> None:
        super().__init__()
        self.attention = GQAttention(dim, n_heads, n_kv_heads, seq, backends)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out


# torchtitan/models/common/decoder.py, Decoder.forward with no embedding and no LM head.
class Decoder(nn.Module):
    def __init__(self, n_layers: int, dim: int, n_heads: int, n_kv_heads: int,
                 hidden_dim: int, seq: int, backends: list[SDPBackend]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({str(i): Llama3TransformerBlock(
            dim, n_heads, n_kv_heads, hidden_dim, seq, backends) for i in range(n_layers)})
        self.norm = nn.RMSNorm(dim, eps=1e-5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            h = layer(h)
        out: torch.Tensor = self.norm(h)
        return out


# torchtitan/components/loss.py, cross_entropy_loss, divided by the tokens as
# BaseLoss.__call__ divides by the valid ones.
def loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    summed = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1),
                             reduction="sum", ignore_index=-100)
    return summed / labels.numel()
