"""The job suite's stack (agent/job/transformer.py) against torchtitan's Llama 3 model code
(issue 55): from the same weights and inputs, the same output, loss and every gradient,
bit for bit, in float32 and in bf16, on the CPU at the suite's CPU shape (grouped-query
attention kept: 4 query heads over 2).

Against the torchtitan 0.3.0 wheel itself, as bench/job_titan.py builds it for the device
check (it needs spmd_types, tyro, docstring_parser, typeguard and Triton beside torch:
.ci/run installs them, pinned, without their training stack), and against the copy of its
code in tests/agent/titan_mirror.py, which is checked against the wheel too. Without
torchtitan these fail, saying what to install: a reference that is skipped checks
nothing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agent.job import transformer  # noqa: E402
from tests.agent import titan_mirror  # noqa: E402
from tests.conftest import ROOT  # noqa: E402

SHAPE = transformer.CPU_TRAIN
SCRIPT = ROOT / "bench" / "job_titan.py"
DTYPES = [torch.float32, torch.bfloat16]
Step = tuple[Any, Any, dict[str, Any]]


def _titan() -> tuple[ModuleType, Any] | None:
    """bench/job_titan.py and torchtitan's modules, where torchtitan imports."""
    if importlib.util.find_spec("torchtitan") is None:
        return None
    spec = importlib.util.spec_from_file_location("job_titan", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    try:
        tt, _ = script.import_torchtitan()
    except ImportError:
        return None
    return script, tt


INSTALL = ("pip install --no-deps torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 "
           "docstring_parser==0.18.0 typeguard==4.6.1 triton==3.9.0 (bash .ci/run does)")
# torchtitan and Triton imported by these tests, once, on the worker that runs them: not
# at collection, where every worker would import them for nothing.
pytestmark = pytest.mark.xdist_group("torchtitan")


@pytest.fixture(scope="session")
def titan() -> tuple[ModuleType, Any]:
    found = _titan()
    if found is None:
        pytest.fail(f"torchtitan does not import here: {INSTALL}", pytrace=False)
    return found


def _inputs(dtype: Any) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(SHAPE.batch, SHAPE.seq, SHAPE.width, generator=generator).to(dtype)
    labels = torch.randint(0, SHAPE.width, (SHAPE.batch, SHAPE.seq), generator=generator)
    return x, labels


def _suite_step(dtype: Any) -> tuple[Any, Step]:
    stack = transformer.Stack(SHAPE, "cpu", dtype, seed=3)
    x, labels = _inputs(dtype)
    with transformer.attention_backend("math"):
        out = stack(x)
        loss = transformer.token_loss(out, labels)
        loss.backward()
    return stack, (out, loss, {n: p.grad for n, p in stack.named_parameters()})


def _mirror_step(dtype: Any, weights: dict[str, Any]) -> Step:
    from torch.nn.attention import SDPBackend

    # Built under the dtype, as torchtitan's trainer builds its model: Module.to(dtype)
    # would cast the complex RoPE cache to real too.
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = titan_mirror.Decoder(SHAPE.layers, SHAPE.width, SHAPE.heads, SHAPE.kv_heads,
                                     SHAPE.ffn, SHAPE.seq, [SDPBackend.MATH])
    finally:
        torch.set_default_dtype(default)
    model.load_state_dict(weights, strict=True)
    x, labels = _inputs(dtype)
    out = model(x)
    loss = titan_mirror.loss(out, labels)
    loss.backward()
    return out, loss, {n: p.grad for n, p in model.named_parameters()}


def _titan_step(titan: tuple[ModuleType, Any], dtype: Any, weights: dict[str, Any]) -> Step:
    script, tt = titan
    tiny = {"layers": SHAPE.layers, "dim": SHAPE.width, "heads": SHAPE.heads,
            "kv_heads": SHAPE.kv_heads, "ffn": SHAPE.ffn, "batch": SHAPE.batch,
            "seq": SHAPE.seq}
    assert tiny == script.TINY  # the device check's CPU shape is the suite's
    model = script.build(tt, tiny, "math", torch.device("cpu"), dtype)
    # torchtitan's own names: its state dict takes the suite's as it is.
    model.load_state_dict(weights, strict=True)
    x, labels = _inputs(dtype)
    out = model(x, None, None)
    loss = script.loss_of(tt, tt.loss.cross_entropy_loss, out, labels)
    loss.backward()
    return out, loss, {n: p.grad for n, p in model.named_parameters()}


def _same(mine: Step, theirs: Step) -> None:
    assert torch.equal(mine[0], theirs[0])
    assert torch.equal(mine[1], theirs[1])
    assert sorted(mine[2]) == sorted(theirs[2])
    for name, grad in mine[2].items():
        assert grad is not None and torch.equal(grad, theirs[2][name]), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_suite_computes_torchtitans_step_as_copied(dtype: Any) -> None:
    stack, mine = _suite_step(dtype)
    _same(mine, _mirror_step(dtype, stack.state_dict()))
    # Not a vacuous match: the loss moved the weights' gradients, all of them.
    assert all(float(g.float().norm()) > 0 for g in mine[2].values())


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_suite_computes_torchtitans_own_step(titan: tuple[ModuleType, Any],
                                                 dtype: Any) -> None:
    stack, mine = _suite_step(dtype)
    weights = stack.state_dict()
    _same(mine, _titan_step(titan, dtype, weights))
    _same(_mirror_step(dtype, weights), _titan_step(titan, dtype, weights))


def test_the_device_check_trains_torchtitans_model_on_the_cpu(
        titan: tuple[ModuleType, Any]) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(SCRIPT), "--cpu-tiny", "--attention", "math",
         "--forms", "eager", "--seconds", "0.2", "--soak-min-s", "0.1", "--soak-cap-s",
         "0.5"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(text) for text in done.stdout.splitlines() if text.strip()]
    assert line["check"] == "torchtitan" and line["form"] == "eager"
    assert line["params"] == SHAPE.params and line["tokens_per_s"] > 0
    assert line["loss_finite"] and line["shims"] == []
