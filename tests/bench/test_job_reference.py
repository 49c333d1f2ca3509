"""bench/job_reference.py, the independent plain-PyTorch cross-check of the transformer
job, on the CPU at its tiny shape: the JSON lines it prints (two processes, both
workloads), and that its decode step computes what its docstring says (the last token of
a causal forward, from a KV cache)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench import scripts
from tests.conftest import ROOT

if os.environ.get("CI"):
    import torch  # CI installs the CPU build: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch", reason="the reference needs torch: "
                                "pip install torch==2.13.0 (a CPU build)")

SCRIPT = ROOT / "bench" / "job_reference.py"
# The tiny shape, restated here rather than read from the script.
LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN = 2, 64, 4, 2, 16, 128
BATCH, SEQ, DECODE_BATCH, CONTEXT = 2, 32, 4, 16


def params_by_formula() -> int:
    attention = WIDTH * HEADS * HEAD_DIM + 2 * WIDTH * KV_HEADS * HEAD_DIM \
        + HEADS * HEAD_DIM * WIDTH
    return LAYERS * (attention + 3 * WIDTH * FFN + 2 * WIDTH) + WIDTH


@pytest.fixture(scope="module")
def lines() -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-tiny", "--seconds", "0.5", "--warmup-s", "0.2",
         "--gpus", "0,1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_one_line_per_process_and_workload(lines: list[dict[str, Any]]) -> None:
    assert sorted((line["gpu"], line["workload"]) for line in lines) == [
        (0, "decode"), (0, "train"), (1, "decode"), (1, "train")]
    for line in lines:
        assert line["gpus_in_run"] == 2
        assert line["device"] == "cpu" and line["torch"] == torch.__version__
        assert line["attention"] == "math" and line["dtype"] == "float32"
        assert isinstance(line["steps"], int) and line["steps"] >= 1
        assert line["seconds"] >= 0.5
        assert line["peak_memory_bytes"] > 0


def test_train_figures(lines: list[dict[str, Any]]) -> None:
    params = params_by_formula()
    assert params == 74048
    for line in (x for x in lines if x["workload"] == "train"):
        assert line["params"] == params
        assert line["flop_per_token"] == 6 * params + 12 * LAYERS * HEADS * HEAD_DIM * SEQ
        assert line["tokens_per_s"] == pytest.approx(BATCH * SEQ * line["steps"]
                                                     / line["seconds"])
        assert line["tflops"] == pytest.approx(line["tokens_per_s"] * line["flop_per_token"]
                                               / 1e12)
        for key in ("tokens_per_s", "tflops", "loss_last"):
            assert math.isfinite(line[key]) and line[key] > 0, key


def test_decode_figures(lines: list[dict[str, Any]]) -> None:
    weight_bytes = params_by_formula() * 4
    cache_bytes = LAYERS * 2 * DECODE_BATCH * KV_HEADS * CONTEXT * HEAD_DIM * 4
    for line in (x for x in lines if x["workload"] == "decode"):
        assert line["cuda_graph"] is False
        assert line["bytes_per_step"] == weight_bytes + cache_bytes
        assert line["tokens_per_s"] == pytest.approx(DECODE_BATCH * line["steps"]
                                                     / line["seconds"])
        assert line["gbs"] == pytest.approx(line["bytes_per_step"] * line["steps"]
                                            / line["seconds"] / 1e9)
        for key in ("tokens_per_s", "gbs"):
            assert math.isfinite(line[key]) and line[key] > 0, key


@pytest.mark.parametrize("gqa", ["native", "expand"])
def test_a_decode_step_is_the_last_token_of_a_causal_forward(gqa: str) -> None:
    ref = scripts.load("job_reference")
    shape = ref.tiny()
    torch.manual_seed(0)
    model = ref.Stack(shape, gqa, torch.device("cpu"), torch.float64)
    tokens = torch.randn(3, CONTEXT, WIDTH, dtype=torch.float64)
    cos, sin = ref.rope_tables(torch.arange(CONTEXT), HEAD_DIM, shape.rope_theta)
    inputs: list[torch.Tensor] = []
    hooks = [layer.attention.register_forward_pre_hook(
        lambda _module, args: inputs.append(args[0])) for layer in model.layers]
    with torch.no_grad():
        full = model(tokens, cos, sin)
        for hook in hooks:
            hook.remove()
        # Each layer's keys and values for every position, as the cache would hold them.
        caches = []
        for layer, x in zip(model.layers, inputs, strict=True):
            attention = layer.attention
            k = attention.wk(x).view(3, CONTEXT, KV_HEADS, HEAD_DIM).transpose(1, 2)
            v = attention.wv(x).view(3, CONTEXT, KV_HEADS, HEAD_DIM).transpose(1, 2)
            caches.append((ref.apply_rope(k, cos, sin).contiguous(), v.contiguous()))
        for k, v in caches:  # the slot the new token writes: spoil it, it must be rewritten
            k[:, :, -1].fill_(1e3)
            v[:, :, -1].fill_(1e3)
        last = torch.tensor([CONTEXT - 1])
        step_cos, step_sin = ref.rope_tables(last, HEAD_DIM, shape.rope_theta)
        one = model(tokens[:, -1:], step_cos, step_sin, caches,
                    torch.remainder(last, CONTEXT))
    torch.testing.assert_close(one[:, 0], full[:, -1])


def test_compiles_on_python_3_8(python38: str, tmp_path: Path) -> None:
    done = subprocess.run([python38, "-c", "import py_compile, sys; "
                           "py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
                           str(SCRIPT), str(tmp_path / "job_reference.pyc")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
