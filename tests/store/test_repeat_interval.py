"""Each soaked result carries where a repeat run of its card lands (issue 31): stored at
ingest from the variant's spread, then the GPU's own earlier figures once it has two."""

from __future__ import annotations

import datetime as dt
import math
import statistics

import pytest
from sqlalchemy import Engine, select

from fleet.store.ingest import Ingest, Origin, parse_text
from fleet.store.models import BenchmarkResult
from tests.store import factory

T975 = {9: 2.262, 11: 2.201}
# The factory's variant is no catalog label: the widest measured spread stands in, the
# H100 SXM5's (sd 0.571% over 9 dof).
SD, DOF = 0.00571, 9


def _store(engine: Engine, night: int, tflops: float) -> None:
    import json

    data = factory.document(host="h1", gpus=1, harness="1.3.0", gpu_tflops=[tflops],
                            collected_at=dt.datetime(2026, 11, 1 + night, 3, tzinfo=dt.UTC))
    with Ingest(engine) as ingest:
        ingest.store(parse_text(json.dumps(data), f"night {night}"), Origin("p", "h1"))


def _rows(engine: Engine) -> list[tuple[float, float, float, float, str]]:
    r = BenchmarkResult
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(  # type: ignore[misc]
            select(r.tflops, r.repeat_low_tflops, r.repeat_high_tflops, r.repeat_sd,
                   r.repeat_basis).order_by(r.collected_at))]


def test_the_interval_pools_the_gpus_own_history_once_it_has_two_nights(
        engine: Engine) -> None:
    figures = []
    for night, level in enumerate((680.0, 672.0, 688.0, 676.0)):
        _store(engine, night, level)
        figures.append(_rows(engine)[-1][0])
    rows = _rows(engine)
    # Nights 0 and 1: the variant's spread alone.
    for tflops, low, high, sd, basis in rows[:2]:
        half = T975[DOF] * math.sqrt(2) * SD
        assert (basis, sd) == ("variant", pytest.approx(SD))
        assert (low, high) == (pytest.approx(tflops * (1 - half)),
                               pytest.approx(tflops * (1 + half)))
    # Night 3 sees nights 0-2: their sd about their mean, pooled with the variant's as
    # its 9 dof: sqrt((9 x 0.571%^2 + 2 x own^2) / 11), t over 11 dof.
    earlier = figures[:3]
    own = statistics.stdev(earlier) / statistics.fmean(earlier)
    pooled = math.sqrt((DOF * SD ** 2 + 2 * own ** 2) / (DOF + 2))
    tflops, low, high, sd, basis = rows[3]
    assert basis == "history" and sd == pytest.approx(pooled)
    assert own > 0.01 and sd > SD  # a card that moved 1% a night widens its own interval
    assert high - low == pytest.approx(2 * tflops * T975[DOF + 2] * math.sqrt(2) * pooled)


def test_a_cool_start_result_carries_no_repeat_interval(engine: Engine) -> None:
    import json

    data = factory.document(host="q1", gpus=1, harness="1.3.0", thermal="cool-start")
    with Ingest(engine) as ingest:
        ingest.store(parse_text(json.dumps(data), "quick"), Origin("p", "q1"))
    [(_, low, high, sd, basis)] = _rows(engine)
    assert (low, high, sd, basis) == (None, None, None, None)
