"""bench/job_forms.py, which times the job suite's step with each of its torchtitan forms
put back as suite 1.3.0 wrote it (issue 55), on the CPU at the suite's CPU shape: every
form runs, and each put-back form computes what it stands for."""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agent.job import train_step, transformer  # noqa: E402
from tests.bench import scripts  # noqa: E402

forms = scripts.load("job_forms")


def test_every_form_is_timed_and_the_suites_own_twice(capsys: Any) -> None:
    assert forms.main(["--cpu-tiny", "--seconds", "0.05", "--warmup-s", "0.01"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["form"] for line in lines] == [
        "torchtitan", "norm as suite 1.3.0", "rope as suite 1.3.0", "qkv as suite 1.3.0",
        "loss as suite 1.3.0", "torchtitan"]
    assert lines[0]["change"] == 0.0 and all(line["tokens_per_s"] > 0 for line in lines)
    # Each put back, and nothing left patched after it.
    assert transformer.make_norm is not forms.transformer.WrittenRMSNorm
    assert train_step.token_loss is transformer.token_loss


def test_the_put_back_forms_compute_the_same_functions() -> None:
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(2, 8, 4, 16, generator=generator)
    k = torch.randn(2, 8, 2, 16, generator=generator)
    cache = transformer.rope_cache(transformer.CPU_TRAIN, torch.arange(8))
    # The rotation of halves is the complex one up to a permutation of the head's dims.
    perm = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])
    rq, rk = transformer.apply_rope(q, k, cache)
    hq, hk = forms._halves(q[..., perm], k[..., perm], cache)
    assert torch.allclose(rq[..., perm], hq, atol=1e-5)
    assert torch.allclose(rk[..., perm], hk, atol=1e-5)
    x = torch.randn(3, 64, generator=generator)
    torch_norm = transformer.make_norm(64, "cpu", torch.float32)
    written = transformer.WrittenRMSNorm(64, "cpu", torch.float32)
    assert torch.allclose(torch_norm(x), written(x), atol=1e-6)
