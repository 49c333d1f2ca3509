"""What bounds the job suite's decode latency point (one sequence over 4,096 cached
positions, Llama 3 8B's layers, bf16) and whether a tuned stack reads more (issue 55,
item 4). On one GPU, every figure from CUDA events over many steps:

- copy: the GPU's own device-to-device copy of 2 GiB (read and written bytes), the
  figure the suite states decode's share of;
- suite: the suite's own decode step (agent/job/decode.py), a CUDA graph replayed, per
  attention backend: ms a step, tokens/s, GB/s read (every weight and cached key and
  value once, as the suite counts);
- kernels: the suite's step profiled (torch.profiler, eager and replayed): GPU time a step
  by kind of kernel (the weights' matrix-vector products, attention, the rest) and how
  many, against the replay's wall: what the gaps between kernels cost;
- gemv: each of a layer's five weight products alone at batch 1 (a ring of eight weight
  copies, so that none is read from the L2), GB/s: what cuBLAS reads a weight at;
- compiled: the suite's decode under torch.compile (inductor's kernels, CUDA graphs),
  as a tuned stack would run it;
- gptfast: pytorch-labs/gpt-fast's own model code (model.py, carried beside the repo, not
  committed: `--gptfast PATH`), its layers at the same shape and cache, compiled as its
  generate.py compiles decode (mode "reduce-overhead", fullgraph), and eager: the
  field's reference for batch-1 decode in PyTorch. Its attention repeats the cached keys
  and values to every query head (repeat_interleave), which the suite does not.

    python3 bench/decode_latency.py --gptfast .gptfast/model.py --out decode.json
    python3 bench/decode_latency.py --point bandwidth --out bandwidth.json

`--point bandwidth` looks at the suite's other point (128 x 8,192) the same way, without
the batch-1 products alone and without gpt-fast (its repeated cache would not fit).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.job.decode import Decoder
from agent.job.transformer import DECODE_POINTS

SHAPE = DECODE_POINTS["latency"]
BYTES = SHAPE.decode_bytes_per_step(2)
ITERATIONS = 2000  # steps timed: 200 at the bandwidth point, whose step is ~4 ms


def timed_ms(step: Callable[[], Any], iterations: int, warmup: int = 50) -> float:
    """Milliseconds a call, CUDA events around `iterations` calls back to back."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    stop = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    for _ in range(iterations):
        step()
    stop.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(stop)) / iterations


def figures(ms: float) -> dict[str, float]:
    return {"ms": round(ms, 4), "tokens_per_s": round(SHAPE.batch / ms * 1e3, 1),
            "gbs": round(BYTES / ms / 1e6, 1)}


def copy_gbs() -> float:
    size = 2 << 30
    a = torch.empty(size, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    return 2 * size / timed_ms(lambda: b.copy_(a), 20, 5) / 1e6


def kind(name: str) -> str:
    low = name.lower()
    if any(s in low for s in ("flash", "fmha", "attention", "cudnn", "sdpa", "attn")):
        return "attention"
    if any(s in low for s in ("gemv", "gemm", "sm90", "nvjet", "cutlass", "xmma",
                              "splitk")):
        return "weights (matrix products)"
    return "other (norms, RoPE, cache write, SwiGLU, adds)"


def profiled(step: Callable[[], Any], steps: int) -> dict[str, Any]:
    """GPU time a step by kind of kernel, and kernels a step."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    by_kind: dict[str, float] = {}
    count = 0
    top: list[tuple[float, str, int]] = []
    for event in prof.key_averages():
        device_us = float(getattr(event, "device_time_total", 0.0)
                          or getattr(event, "cuda_time_total", 0.0))
        if device_us <= 0:
            continue
        if getattr(event, "device_type", None) is not None and \
                str(event.device_type).endswith("CPU"):
            continue
        by_kind[kind(event.key)] = by_kind.get(kind(event.key), 0.0) + device_us / steps
        count += event.count
        top.append((device_us / steps, event.key[:90], event.count // steps))
    top.sort(reverse=True)
    return {"us_a_step": {k: round(v, 1) for k, v in by_kind.items()},
            "kernel_us_a_step": round(sum(by_kind.values()), 1),
            "kernels_a_step": round(count / steps, 1),
            "top": [{"us": round(us, 1), "kernel": name, "a_step": n} for us, name, n in top[:12]]}


def gemv_figures() -> list[dict[str, Any]]:
    s = SHAPE
    shapes = {"wqkv": ((s.heads + 2 * s.kv_heads) * s.head_dim, s.width),
              "wo": (s.width, s.heads * s.head_dim), "w1": (s.ffn, s.width),
              "w3": (s.ffn, s.width), "w2": (s.width, s.ffn)}
    found = []
    for name, (out, inner) in shapes.items():
        weights = [torch.randn(out, inner, device="cuda", dtype=torch.bfloat16)
                   for _ in range(8)]
        x = torch.randn(1, inner, device="cuda", dtype=torch.bfloat16)

        def ring(weights: list[torch.Tensor] = weights, x: torch.Tensor = x) -> None:
            for w in weights:
                F.linear(x, w)

        ms = timed_ms(ring, 200, 20) / len(weights)
        found.append({"weight": name, "shape": [out, inner], "us": round(ms * 1e3, 2),
                      "gbs": round(out * inner * 2 / ms / 1e6, 1)})
    return found


def suite(attention: str, graph: bool) -> Decoder:
    return Decoder(SHAPE, torch.device("cuda"), torch.bfloat16, attention, graph=graph)


def soaked(step: Callable[[], Any], seconds: float) -> dict[str, Any]:
    """`step` replayed back to back for `seconds`, timed in windows of ITERATIONS steps:
    the figure of the last three windows (the card settled), the first window's beside it
    and each window's tokens/s, so that a drift under continuous load shows."""
    windows: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(windows) < 4:
        windows.append(timed_ms(step, ITERATIONS, warmup=0))
    last = sorted(windows[-3:])[1]
    return {**figures(last), "soak_s": round(time.perf_counter() - started, 1),
            "first_window": figures(windows[0]),
            "windows_tokens_per_s": [round(SHAPE.batch / ms * 1e3, 1) for ms in windows]}


def compiled_graph() -> tuple[Any, float]:
    """The suite's step through inductor (default mode), captured in a CUDA graph: the
    graph and the seconds the first compiled calls took."""
    decoder = suite("cudnn", graph=False)
    model, x, rope, caches, slot = (decoder.model, decoder.x, decoder.rope, decoder.caches,
                                    decoder.slot)

    def step() -> torch.Tensor:
        out: torch.Tensor = model.decode(x, rope, caches, slot)
        return out

    fast = torch.compile(step, fullgraph=False)
    started = time.perf_counter()
    with torch.no_grad():
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fast()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - started
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fast()
    return graph, compile_s


def compiled_suite() -> dict[str, Any]:
    """The suite's step through inductor, replayed as the suite replays its eager step."""
    graph, compile_s = compiled_graph()
    with torch.no_grad():
        ms = timed_ms(graph.replay, ITERATIONS)
        kernels = profiled(graph.replay, 20)
    return {**figures(ms), "compile_s": round(compile_s, 1), "kernels": kernels}


def gptfast(path: str, compiled: bool) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("gptfast_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Dynamo looks the module's globals up by its name
    spec.loader.exec_module(module)
    s = SHAPE
    config = dict(module.transformer_configs["llama-3.1-8b"])
    config.update(n_layer=s.layers, block_size=8192)
    args = module.ModelArgs(**config)
    assert (args.dim, args.n_head, args.n_local_heads, args.intermediate_size) == (
        s.width, s.heads, s.kv_heads, s.ffn), args
    with torch.device("cuda"):
        model = module.Transformer(args)
        model.setup_caches(max_batch_size=s.batch, max_seq_length=int(s.context or 0))
    model = model.to(dtype=torch.bfloat16).eval().requires_grad_(False)
    assert model.max_seq_length == s.context
    for layer in model.layers:
        layer.attention.kv_cache.k_cache.normal_()
        layer.attention.kv_cache.v_cache.normal_()
    x = torch.randn(s.batch, 1, s.width, device="cuda", dtype=torch.bfloat16)
    position = torch.tensor([int(s.context or 0) - 1], device="cuda")

    def layers(h: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        # The model's forward without its embedding, final norm and output head, which the
        # suite's four layers do not have.
        mask = model.causal_mask[None, None, input_pos]
        freqs = model.freqs_cis[input_pos]
        for layer in model.layers:
            h = layer(h, input_pos, freqs, mask)
        return h

    run = torch.compile(layers, mode="reduce-overhead", fullgraph=True) if compiled else layers
    started = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):
            run(x, position)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - started
        ms = timed_ms(lambda: run(x, position), 2000)
        kernels = profiled(lambda: run(x, position), 20)
    return {**figures(ms), "compile_s": round(first_s, 1) if compiled else None,
            "kernels": kernels}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gptfast", help="gpt-fast's model.py")
    parser.add_argument("--point", choices=sorted(DECODE_POINTS), default="latency")
    parser.add_argument("--soak-s", type=float, default=0.0,
                        help="instead: the suite's cuDNN graph and its compiled graph each "
                             "replayed back to back this long, in timed windows (the "
                             "reference for the suite's soaked decode figures)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    global SHAPE, BYTES, ITERATIONS
    SHAPE = DECODE_POINTS[args.point]
    BYTES = SHAPE.decode_bytes_per_step(2)
    ITERATIONS = 2000 if args.point == "latency" else 200
    found: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                             "shape": SHAPE.as_dict(), "bytes_a_step": BYTES}
    steps: list[tuple[str, Callable[[], Any]]] = [("copy_gbs", lambda: round(copy_gbs(), 1))]
    if args.soak_s > 0:
        def eager_soak() -> dict[str, Any]:
            with torch.no_grad():
                return soaked(suite("cudnn", graph=True).step, args.soak_s)

        def compiled_soak() -> dict[str, Any]:
            graph, compile_s = compiled_graph()
            with torch.no_grad():
                return {**soaked(graph.replay, args.soak_s), "compile_s": round(compile_s, 1)}

        steps += [("soaked_suite_cudnn", eager_soak), ("soaked_compiled_suite", compiled_soak)]
    for attention in ("cudnn", "flash", "efficient") if args.soak_s <= 0 else ():
        def one(attention: str = attention) -> dict[str, Any]:
            replayed = suite(attention, graph=True)
            with torch.no_grad():
                result = {**figures(timed_ms(replayed.step, ITERATIONS)),
                          "replayed": profiled(replayed.step, 20)}
                eager = suite(attention, graph=False)
                result["eager_ms"] = round(timed_ms(eager.step, ITERATIONS // 4), 4)
                result["eager"] = profiled(eager.step, 20)
            return result
        steps.append((f"suite_{attention}", one))
    if args.point == "latency" and args.soak_s <= 0:
        steps.append(("gemv", gemv_figures))
    if args.soak_s <= 0:
        steps.append(("compiled_suite", compiled_suite))
    if args.gptfast and args.point == "latency" and args.soak_s <= 0:
        steps += [("gptfast_eager", lambda: gptfast(args.gptfast, False)),
                  ("gptfast_compiled", lambda: gptfast(args.gptfast, True))]
    for name, step in steps:
        started = time.perf_counter()
        try:
            found[name] = step()
        except Exception as exc:  # one figure failing leaves the others
            found[name] = {"error": f"{type(exc).__name__}: {str(exc)[:600]}",
                           "trace": traceback.format_exc()[-1500:]}
        print(json.dumps({name: found[name]})[:3000], f"({time.perf_counter() - started:.1f} s)",
              flush=True)
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
