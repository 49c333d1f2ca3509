"""The product checked bit for bit under load (agent/matmul/integrity.py), on the CPU path.

A healthy run records its checks and no mismatch; a constructed corruption (the test
hook flips one element of the product) is recorded with when, how many elements and that
it was constructed; the digest is the bits' and nothing else's.
"""

from __future__ import annotations

import os
import re

import pytest

if os.environ.get("CI"):
    import torch
else:
    torch = pytest.importorskip("torch", reason="the harness tests need torch: "
                                "pip install torch==2.13.0 (a CPU build)")

from agent.matmul import integrity
from fleet.model.document import Integrity
from tests.agent.test_harness import cpu_target, measure, small, soaked


def test_a_healthy_soak_records_its_checks_and_no_mismatch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(integrity.FLIP_ENV, raising=False)
    result = measure(soaked(), cpu_target())
    checked = result["integrity"]
    assert checked["checks"] >= 3 and checked["mismatches"] == 0
    assert checked["first_mismatch_s"] is None and checked["max_elements"] == 0
    assert checked["elements"] == 96 * 80 and not checked["injected"]
    assert re.fullmatch(r"[0-9a-f]{16}", checked["digest"])
    # One check a soak window: the cost is set by the window, not by the run's length.
    assert checked["interval_s"] == 0.02
    assert Integrity.model_validate(checked).checks == checked["checks"]


def test_a_constructed_corruption_is_recorded_with_when_and_how_many(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(integrity.FLIP_ENV, "2")
    result = measure(soaked(), cpu_target())
    # The document's own model, which bounds what an agent may send.
    checked = Integrity.model_validate(result["integrity"])
    assert checked.mismatches == 1 and checked.checks >= 3
    assert checked.first_mismatch_elements == 1 and checked.max_elements == 1
    assert checked.first_mismatch_s is not None and checked.first_mismatch_s > 0
    assert checked.injected


def test_a_cool_start_result_has_no_integrity() -> None:
    assert measure(small(), cpu_target())["integrity"] is None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_digest_is_the_bits(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    product = torch.randn(300, 200, generator=gen).to(dtype)
    same = integrity.digest(torch, product.clone())
    assert integrity.digest(torch, product) == same
    flipped = product.clone()
    flipped.view(torch.int16).view(-1)[12345] ^= 1
    assert integrity.digest(torch, flipped) != same
    # Two elements swapped: the same values, other bits in their places.
    swapped = product.clone()
    swapped[0, 0], swapped[0, 1] = product[0, 1], product[0, 0]
    assert integrity.digest(torch, swapped) != same


def test_the_first_mismatch_takes_the_temperature_then() -> None:
    product = torch.ones(4, 4, dtype=torch.bfloat16)
    check = integrity.Check(torch, product, None, 100.0, 1.0, lambda at: at - 40.0)
    check.after_chunk(100.5)  # the first product: the reference
    check.after_chunk(101.0)  # too soon
    product[1, 1] = 3.0
    product[2, 2] = 3.0
    check.after_chunk(101.6)
    check.after_chunk(103.0)
    found = check.finish()
    assert (found["checks"], found["mismatches"]) == (2, 2)
    assert found["first_mismatch_s"] == 1.6
    assert found["first_mismatch_temperature_c"] == pytest.approx(61.6)
    assert found["first_mismatch_elements"] == 2 and not found["injected"]


def test_the_temperature_is_the_nearest_sample_nvml_answered() -> None:
    samples = [[1.0, 0, 0, 0, 60.0, 0], [2.0, 0, 0, 0, float("nan"), 0],
               [2.9, 0, 0, 0, 63.0, 0]]
    assert integrity.temperature_near(samples, 2.1) == 63.0
    assert integrity.temperature_near([], 2.1) is None
