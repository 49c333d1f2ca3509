"""The independent check of the job suite's training figure (issue 55): torchtitan's own
Llama 3 model code, imported from its wheel, trained at the suite's shape on the same
card, eager and compiled, soaked, timed by the wall clock.

Nothing of fleet is imported: the model is torchtitan's, built by torchtitan's own config
code (torchtitan/models/llama3/__init__.py `llama3_configs["8B"]`: dim 4096, 32 query and
8 key-value heads, FFN compute_ffn_hidden_dim(4096, multiple_of=1024,
ffn_dim_multiplier=1.3) = 14336, ComplexRoPE theta 500000 with "llama" scaling, fused
QKV, nn.RMSNorm eps 1e-5), cut to its first `--layers` blocks, its RoPE cache sized to
the sequence (as Decoder.Config.update_from_config does for `training.seq_len`), built on
the meta device under bf16 as the trainer builds it for `training.dtype = "bfloat16"`
(trainer.py: `torch.device("meta")`, `set_default_dtype`; then `to_empty` and
`init_states`), and its token embedding and LM head set to None (Decoder.forward skips
either), so that a step is the suite's work: the blocks and the final norm over bf16
hidden states [batch, seq, dim].

Attention: torchtitan 0.3.0 builds its language models with FlexAttention or varlen
attention only (models/common/config_utils.py get_attention_config); `--attention
cudnn|flash|efficient` swaps each block's inner attention for torchtitan's own
ScaledDotProductAttention (models/common/attention.py, the one its Flux model uses) with
its `sdpa_backends` set to that one backend, as the suite pins it; `--attention sdpa`
keeps torchtitan's own list (cuDNN, flash, math, by priority); `--attention flex` keeps
the 8B flavor's FlexAttention with the block-causal mask its Decoder makes
(`get_attention_masks`, one document a sequence: causal). The loss is torchtitan's
cross_entropy_loss (components/loss.py: float32 logits, summed) divided by the tokens,
the stack's output standing for the logits against random labels, as the suite's; the
optimizer torch's fused AdamW with torchtitan's default_adamw settings (lr 8e-4, betas
0.9/0.95, eps 1e-8, weight decay 0.1). Compiled: torchtitan's own apply_compile
(distributed/compile.py: each block compiled in place, fullgraph) and the loss under
torch.compile, as its CrossEntropyLoss._maybe_compile does.

Timing, per form: steps back to back; soak windows of `--window-s` until `--soak-min-s`
have passed and the last three windows' tokens/s lie within `--soak-tolerance` of each
other (or `--soak-cap-s`), then `--seconds` measured between two synchronisations by
the wall clock. The compiled form's first step (the compile in it) is timed apart
(`compile_s`). One JSON line a form on stdout; the windows on stderr.

Where the host's torch lacks a name torchtitan imports (a torch older than the one the
wheel was built against), a stand-in that raises when called is put in its place and
named in the output (`shims`); a timed step that reached one would fail, not mislead.

    python3 bench/job_titan.py --attention cudnn --forms eager,compiled
    python3 bench/job_titan.py --cpu-tiny --seconds 0.3 --soak-min-s 0.2   # tests
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import math
import re
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

WIDTH, HEADS, KV_HEADS, FFN = 4096, 32, 8, 14336
# --cpu-tiny: the suite's CPU shape (agent/job/transformer.py CPU_TRAIN).
TINY = {"layers": 2, "dim": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "batch": 2, "seq": 32}
MAX_SHIMS = 32
_MISSING_NAME = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def _stand_in(name: str) -> type:
    """A class, so that torchtitan's annotations (`Name | None`, evaluated at import)
    and subclasses take it; calling or instantiating it raises."""
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is not in this torch ({torch.__version__})")
    return type(name.rsplit(".", 1)[-1], (), {"__init__": missing})


def _stand_in_module(name: str) -> types.ModuleType:
    stub = types.ModuleType(name)

    def attribute(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _stand_in(f"{name}.{attr}")

    stub.__getattr__ = attribute  # type: ignore[method-assign]
    return stub


def import_torchtitan() -> tuple[Any, list[str]]:
    """torchtitan's modules this check uses, and the torch names stood in for."""
    shims: list[str] = []
    for _ in range(MAX_SHIMS):
        try:
            modules = types.SimpleNamespace(
                llama3=importlib.import_module("torchtitan.models.llama3"),
                model=importlib.import_module("torchtitan.models.llama3.model"),
                common=importlib.import_module("torchtitan.models.common"),
                attention=importlib.import_module("torchtitan.models.common.attention"),
                loss=importlib.import_module("torchtitan.components.loss"),
                compile=importlib.import_module("torchtitan.distributed.compile"),
                config=importlib.import_module("torchtitan.config"),
                utils=importlib.import_module("torchtitan.tools.utils"))
            return modules, shims
        except ImportError as exc:
            text = str(exc)
            name = _MISSING_NAME.search(text)
            module = _MISSING_MODULE.search(text)
            if name and name.group(2).startswith("torch"):
                target = importlib.import_module(name.group(2))
                setattr(target, name.group(1), _stand_in(f"{name.group(2)}.{name.group(1)}"))
                shims.append(f"{name.group(2)}.{name.group(1)}")
            elif module and module.group(1).startswith("torch."):
                sys.modules[module.group(1)] = _stand_in_module(module.group(1))
                shims.append(module.group(1))
            else:
                raise
            for loaded in [m for m in sys.modules if m.startswith("torchtitan")]:
                del sys.modules[loaded]
    raise RuntimeError(f"torchtitan still does not import after {MAX_SHIMS} stand-ins")


def titan_config(tt: Any, shape: dict[str, int], attention: str) -> Any:
    """torchtitan's Llama 3 config at `shape` (its own 8B flavor at the full shape), its
    first `layers` blocks, the RoPE cache at the sequence, the inner attention as asked."""
    llama3, common = tt.llama3, tt.common
    full = shape["dim"] == WIDTH
    cfg = llama3.llama3_configs["8B"](attn_backend="flex") if full else tiny_config(tt, shape)
    cfg.layers = cfg.layers[: shape["layers"]]
    for block in cfg.layers:
        block.attention.rope = dataclasses.replace(block.attention.rope,
                                                   max_seq_len=shape["seq"])
        if attention != "flex":
            block.attention.inner_attention = common.ScaledDotProductAttention.Config()
    return cfg


def tiny_config(tt: Any, shape: dict[str, int]) -> Any:
    """The same builder torchtitan's flavors call (llama3 `_build_llama3_layers`) at a
    small shape, GQA kept."""
    llama3, common = tt.llama3, tt.common
    dim, heads = shape["dim"], shape["heads"]
    rope = common.ComplexRoPE.Config(dim=dim // heads, max_seq_len=shape["seq"],
                                     theta=500000, scaling="llama")
    layers = llama3._build_llama3_layers(
        fuse_qkv=True, n_layers=shape["layers"], dim=dim, n_heads=heads,
        n_kv_heads=shape["kv_heads"], hidden_dim=shape["ffn"], rope=rope,
        attn_backend="flex")
    vocab = 8
    return tt.model.Llama3Model.Config(
        dim=dim, vocab_size=vocab,
        tok_embeddings=common.Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                               param_init=llama3._EMBEDDING_INIT),
        norm=common.RMSNorm.Config(normalized_shape=dim, param_init=llama3._NORM_INIT),
        lm_head=common.Linear.Config(in_features=dim, out_features=vocab,
                                     param_init=llama3._output_linear_init(dim)),
        layers=layers)


def build(tt: Any, shape: dict[str, int], attention: str, device: torch.device,
          dtype: torch.dtype) -> Any:
    """torchtitan's model, as its trainer builds it, without embedding and LM head."""
    cfg = titan_config(tt, shape, attention)
    with torch.device("meta"), tt.utils.set_default_dtype(dtype):
        model = cfg.build()
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_states()
    model.tok_embeddings = None
    model.lm_head = None
    if attention not in ("flex", "sdpa"):
        from torch.nn.attention import SDPBackend
        member = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION",
                  "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[attention]
        for module in model.modules():
            if isinstance(module, tt.attention.ScaledDotProductAttention):
                module.sdpa_backends = [getattr(SDPBackend, member)]
    return model


def loss_of(tt: Any, fn: Callable[..., Any], pred: torch.Tensor, labels: torch.Tensor
            ) -> torch.Tensor:
    """torchtitan's summed cross-entropy over the tokens, divided by them."""
    loss: torch.Tensor = fn(pred, labels) / labels.numel()
    return loss


class Run:
    """One GPU's model, inputs, optimizer and step."""

    def __init__(self, tt: Any, shape: dict[str, int], attention: str, device: torch.device,
                 dtype: torch.dtype, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.tt = tt
        self.device = device
        self.model = build(tt, shape, attention, device, dtype)
        generator = torch.Generator(device=device).manual_seed(seed + 1)
        self.x = torch.randn(shape["batch"], shape["seq"], shape["dim"], generator=generator,
                             device=device).to(dtype)
        self.labels = torch.randint(0, shape["dim"], (shape["batch"], shape["seq"]),
                                    generator=generator, device=device)
        self.masks = None
        if attention == "flex":
            positions = torch.arange(shape["seq"], device=device).expand(shape["batch"], -1)
            self.masks = self.model.get_attention_masks(positions)
        self.loss_fn: Callable[..., Any] = tt.loss.cross_entropy_loss
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=8e-4, betas=(0.9, 0.95),
                                           eps=1e-8, weight_decay=0.1,
                                           fused=device.type == "cuda")

    def forward_backward(self) -> torch.Tensor:
        pred = self.model(self.x, None, self.masks)
        loss = loss_of(self.tt, self.loss_fn, pred, self.labels)
        loss.backward()
        return loss

    def step(self) -> torch.Tensor:
        loss = self.forward_backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def compile(self) -> None:
        """torchtitan's apply_compile on the blocks, and its loss compiled."""
        compile_config = self.tt.config.CompileConfig(enable=True)
        self.tt.compile.apply_compile(self.model, compile_config=compile_config,
                                      parallel_dims=types.SimpleNamespace(tp_enabled=False))
        self.loss_fn = torch.compile(self.tt.loss.cross_entropy_loss)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def soak(run: Run, tokens: int, args: argparse.Namespace, label: str) -> list[float]:
    """Steps until the last three windows agree (or the cap): the windows' tokens/s."""
    windows: list[float] = []
    start = time.perf_counter()
    while True:
        _sync(run.device)
        t0 = time.perf_counter()
        steps = 0
        while time.perf_counter() - t0 < args.window_s:
            run.step()
            steps += 1
        _sync(run.device)
        windows.append(tokens * steps / (time.perf_counter() - t0))
        elapsed = time.perf_counter() - start
        sys.stderr.write(f"{label}: {elapsed:5.1f} s {windows[-1]:,.0f} tokens/s\n")
        last = windows[-3:]
        if elapsed >= args.soak_cap_s or (
                elapsed >= args.soak_min_s and len(last) == 3
                and (max(last) - min(last)) / max(last) <= args.soak_tolerance):
            return windows


def measure(run: Run, tokens: int, seconds: float) -> tuple[int, float]:
    _sync(run.device)
    t0 = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < seconds:
        run.step()
        steps += 1
    _sync(run.device)
    return steps, time.perf_counter() - t0


@contextlib.contextmanager
def _peak(device: torch.device) -> Iterator[list[int | None]]:
    box: list[int | None] = [None]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    yield box
    if device.type == "cuda":
        box[0] = int(torch.cuda.max_memory_allocated(device))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attention", default="cudnn",
                        choices=("cudnn", "flash", "efficient", "math", "sdpa", "flex"))
    parser.add_argument("--forms", default="eager,compiled")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--soak-min-s", type=float, default=30.0)
    parser.add_argument("--soak-cap-s", type=float, default=120.0)
    parser.add_argument("--soak-tolerance", type=float, default=0.005)
    parser.add_argument("--cpu-tiny", action="store_true",
                        help="the suite's CPU shape on the CPU in float32 (tests)")
    args = parser.parse_args(argv)
    tt, shims = import_torchtitan()
    import torchtitan

    if args.cpu_tiny:
        shape, device, dtype = dict(TINY), torch.device("cpu"), torch.float32
        args.window_s = min(args.window_s, 0.1)
    else:
        shape = {"layers": args.layers, "dim": WIDTH, "heads": HEADS, "kv_heads": KV_HEADS,
                 "ffn": FFN, "batch": args.batch, "seq": args.seq}
        device, dtype = torch.device(f"cuda:{args.gpu}"), torch.bfloat16
        torch.cuda.set_device(device)
    run = Run(tt, shape, args.attention, device, dtype)
    params = sum(p.numel() for p in run.model.parameters())
    per_layer = 2 * shape["dim"] * shape["heads"] * (shape["dim"] // shape["heads"]) \
        + 2 * shape["dim"] * shape["kv_heads"] * (shape["dim"] // shape["heads"]) \
        + 3 * shape["dim"] * shape["ffn"] + 2 * shape["dim"]
    assert params == shape["layers"] * per_layer + shape["dim"], params
    tokens = shape["batch"] * shape["seq"]
    head_dim = shape["dim"] // shape["heads"]
    flop = 6.0 * params + 12.0 * shape["layers"] * shape["heads"] * head_dim * shape["seq"]
    forms = [f for f in args.forms.split(",") if f]
    for form in forms:
        compile_s = None
        if form == "compiled":
            run.compile()
            _sync(device)
            t0 = time.perf_counter()
            run.step()
            _sync(device)
            compile_s = time.perf_counter() - t0
        elif form != "eager":
            raise SystemExit(f"no such form: {form}")
        windows = soak(run, tokens, args, f"{form} {args.attention}")
        with _peak(device) as peak:
            steps, seconds = measure(run, tokens, args.seconds)
        rate = tokens * steps / seconds
        props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
        print(json.dumps({
            "check": "torchtitan", "torchtitan": getattr(torchtitan, "__version__", None)
            or _version("torchtitan"), "torch": torch.__version__, "form": form,
            "attention": args.attention, "gpu": args.gpu,
            "device": props.name if props is not None else "cpu",
            "shape": shape, "params": params, "dtype": str(dtype).replace("torch.", ""),
            "tokens_per_s": rate, "tflops": rate * flop / 1e12, "steps": steps,
            "seconds": seconds, "step_ms": seconds / steps * 1e3, "compile_s": compile_s,
            "soak_windows": [round(w, 1) for w in windows], "peak_memory_bytes": peak[0],
            "shims": shims, "loss_finite": math.isfinite(float(run.step()))},
            sort_keys=True), flush=True)
    return 0


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
