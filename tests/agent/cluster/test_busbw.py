"""Bus bandwidth as nccl-tests computes it, read from its own source (tests/fixtures/
nccl-tests/busbw.cu: each collective's GetCollByteCount and GetBw at NVIDIA/nccl-tests
a0b82b2, NCCL_TESTS_VERSION 2.19.6): the factor of each collective, and which buffer the
size is, against agent/cluster/step.py's, so that a busbw fleet prints is the figure a
user's nccl-tests run prints."""

from __future__ import annotations

import re

import pytest

from agent.cluster.step import BUSBW_FACTORS, figure
from tests.conftest import FIXTURES

SOURCE = (FIXTURES / "nccl-tests" / "busbw.cu").read_text()
NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather",
         "reduce_scatter": "ReduceScatter", "all_to_all": "AlltoAll"}


def _c(expression: str, **values: int) -> float:
    """A C expression of nccl-tests', in Python: a (double) cast as 1.0 x, and without
    one, integer division as C's over size_t."""
    if "(double)" in expression:
        python = expression.replace("(double)", "1.0*")
    else:
        python = expression.replace("/", "//")
    return float(eval(python, {}, dict(values)))


def _body(name: str, function: str) -> str:
    found = re.search(rf"void {NAMES[name]}{function}\(.*?\n}}", SOURCE, re.S)
    assert found is not None, f"{NAMES[name]}{function} is not in {SOURCE[:40]}"
    return found.group(0)


@pytest.mark.parametrize("op", sorted(NAMES))
@pytest.mark.parametrize("ranks", [2, 8, 16, 1024])
def test_the_factor_is_nccl_tests(op: str, ranks: int) -> None:
    bw = _body(op, "GetBw")
    [factor] = re.findall(r"double factor = (.*);", bw)
    assert BUSBW_FACTORS[op](ranks) == pytest.approx(_c(factor, nranks=ranks))


@pytest.mark.parametrize("op", sorted(NAMES))
def test_the_size_is_the_whole_buffer(op: str) -> None:
    # GetBw's bytes over the buffer nccl-tests sizes (its -b/-e size, `count` elements):
    # for every collective the whole buffer, as fleet's size_bytes is.
    counts, bw = _body(op, "GetCollByteCount"), _body(op, "GetBw")
    count, size, ranks = 1 << 20, 4, 8
    values = {"count": count, "eltSize": size, "nranks": ranks}
    base = re.search(r"size_t base = (.*);", counts)
    param = re.search(r"\*paramcount = (.*);", counts)
    assert param is not None
    if base is not None:
        values["base"] = int(_c(base.group(1), **values))  # (count/nranks) & ~3
    expression = param.group(1).replace("*sendcount", "sendcount")
    per_param = int(_c(expression, sendcount=count, **values))
    [bytes_] = re.findall(r"double baseBw = \(double\)\((.*)\) / 1\.0E9 / sec;", bw)
    moved = _c(bytes_, count=per_param, typesize=size, nranks=ranks)
    assert moved == count * size


def test_figure_takes_the_factor() -> None:
    row = {"op": "all_gather", "size_bytes": 1 << 30, "dtype": "float32", "ranks": 16,
           "warmup": 5, "iterations": 20, "checked": True, "ms": [10.0] * 20}
    made = figure(row)
    assert made["algbw_gbs"] == pytest.approx((1 << 30) / 0.01 / 1e9, rel=1e-5)
    assert made["busbw_gbs"] == pytest.approx(made["algbw_gbs"] * 15 / 16, rel=1e-5)
    reduce = figure({**row, "op": "all_reduce"})
    assert reduce["busbw_gbs"] == pytest.approx(made["algbw_gbs"] * 30 / 16, rel=1e-5)
