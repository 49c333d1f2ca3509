"""Cooling as evidence, on data sets with a known truth: hotter GPUs that lose more from
their first 20 s of load to the soaked level, at the same power cap."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from fleet.analysis.matmul.cooling import (
    CoolingOptions,
    compare_cooling,
    difference_interval,
    thermal_table,
)
from fleet.analysis.matmul.gaps import explain
from tests.report.synthetic import dataset, measure, provider_gpus, provider_soak


def _called(seed: int, common: dict[str, float], **hot: float) -> bool:
    rng = random.Random(seed)
    data = dataset(provider_soak(rng, "cool", **common)  # type: ignore[arg-type]
                   + provider_soak(rng, "hot", **common, **hot))  # type: ignore[arg-type]
    (comparison,) = compare_cooling(data)
    return comparison.called


def test_hotter_gpus_that_lose_more_at_the_same_cap_are_a_finding() -> None:
    rng = random.Random(3)
    data = dataset(provider_soak(rng, "alpha") + provider_soak(rng, "omega", temperature_c=79.0,
                                                               drop=0.021))
    (c,) = compare_cooling(data)
    assert c.called and c.verdict == "cooling"
    assert (c.hotter.provider, c.cooler.provider) == ("omega", "alpha")
    assert 6.0 < c.temperature_difference_c < 12.0 and 0.007 < c.drop_difference < 0.015
    assert 0.0 < c.temperature_interval_c[0] < c.temperature_difference_c
    assert 0.0 < c.drop_interval[0] < c.drop_difference < c.drop_interval[1]
    assert c.temperature_p_adjusted < 0.05 and c.drop_p_adjusted < 0.05
    # The finding states what it rests on: GPUs and hosts, the medians, caps, thresholds.
    text = c.evidence
    for words in ("omega: 8 GPUs on 4 hosts", "alpha: 8 GPUs on 4 hosts",
                  f"median {c.hotter.temperature_c:.1f} °C under load",
                  f"drop {c.cooler.drop:.2%} from the first 20 s to soaked", "700 W cap",
                  "Called at 3 °C and 0.5 points or more", "2+ hosts a side",
                  "hosts resampled with their GPUs"):
        assert words in text, words


def test_a_real_cooling_difference_is_called_in_almost_every_draw() -> None:
    """8 °C hotter and one point more drop, four hosts a side: called in 199 of 200."""
    assert sum(_called(seed, {}, temperature_c=78.0, drop=0.02) for seed in range(200)) >= 190


@pytest.mark.parametrize("common", [
    {},  # nodes differ by 1.5 °C and 0.15 points (sd), GPUs by 2 °C and 0.2 points
    {"node_temperature_c": 3.0, "node_drop": 0.003},  # nodes that differ twice as much
    {"hosts": 2, "per_host": 8, "node_temperature_c": 3.0, "node_drop": 0.003},
])
def test_providers_from_one_distribution_are_rarely_called(common: dict[str, float]) -> None:
    """Measured: 0, 1 and 3 of 300 draws."""
    draws = 300
    called = sum(_called(seed, common) for seed in range(draws))
    assert called / draws <= 0.02


def test_hot_alone_or_losing_more_alone_is_not_cooling() -> None:
    """Measured: 1 in 100 draws each, where chance moved the other quantity too."""
    assert sum(_called(seed, {}, temperature_c=80.0) for seed in range(100)) <= 3
    assert sum(_called(seed, {}, drop=0.025) for seed in range(100)) <= 3


def test_different_power_caps_are_never_called_cooling() -> None:
    rng = random.Random(4)
    data = dataset(provider_soak(rng, "a", power_limit_w=700.0)
                   + provider_soak(rng, "b", power_limit_w=650.0, temperature_c=80.0,
                                   drop=0.025))
    (c,) = compare_cooling(data)
    assert not c.same_power_cap and not c.called and c.verdict == "different power caps"
    assert c.temperature_difference_c > 5 and c.drop_difference > 0.01


def test_one_node_a_side_is_shown_but_never_called() -> None:
    rng = random.Random(5)
    data = dataset(provider_soak(rng, "a", hosts=1, per_host=8)
                   + provider_soak(rng, "b", hosts=1, per_host=8, temperature_c=85.0,
                                   drop=0.03))
    (c,) = compare_cooling(data)
    assert c.single_node and not c.called and c.verdict == "too few hosts"
    assert "8 GPUs on 1 host" in c.evidence


def test_cool_start_results_and_small_groups_are_not_compared() -> None:
    rng = random.Random(6)
    quick = provider_gpus(rng, "a", 700, 0.01) + provider_gpus(rng, "b", 700, 0.01)
    assert compare_cooling(dataset(quick)) == []
    assert thermal_table(dataset(quick)) == []
    few = provider_soak(rng, "a") + provider_soak(rng, "b", hosts=1)
    assert compare_cooling(dataset(few), CoolingOptions(min_gpus=3)) == []


def test_the_thermal_table_gives_each_providers_soak() -> None:
    gpus = [measure("a", f"a-{i // 2}", i % 2, 690.0 + i, temperature_c=70.0 + i,
                    drop=0.01 + i / 1000, config=provider_soak(random.Random(0), "x")[0].config)
            for i in range(5)]
    (row,) = thermal_table(dataset(gpus))
    assert (row.provider, row.gpus, row.hosts) == ("a", 5, 3)
    assert row.tflops == 692.0 and row.temperature_c == 72.0
    assert (row.temperature_low_c, row.temperature_high_c) == (70.0, 74.0)
    assert row.drop == pytest.approx(0.012)
    assert (row.drop_low, row.drop_high) == pytest.approx((0.010, 0.014))
    assert row.first_20s_tflops == pytest.approx(692.0 / 0.988)
    assert row.power_limit_w == 700.0 and row.not_soaked == 0


def test_a_gap_lists_temperature_drop_and_stack_among_what_differs() -> None:
    rng = random.Random(8)
    faster = provider_soak(rng, "a")
    slower = [replace(m, stack="torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4")
              for m in provider_soak(rng, "b", temperature_c=80.0, drop=0.025)]
    differs = {d.what: (d.slower, d.faster) for d in explain(faster, slower)}
    assert differs["software stack"] == ("torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4",
                                         "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2")
    slow_t, fast_t = differs["temperature under load"]
    assert slow_t.endswith(" °C") and float(slow_t[:-3]) - float(fast_t[:-3]) >= 7
    assert "drop from the first 20 s to soaked" in differs
    # The same GPUs against themselves differ in nothing.
    assert explain(faster, faster) == ()


def test_difference_interval_on_plain_numbers() -> None:
    options = CoolingOptions()
    low, high = difference_interval([[80.0, 81.0], [79.0, 80.5]], [[70.0, 71.0], [70.5, 69.0]],
                                    options)
    assert 8.0 <= low <= high <= 12.0
    same = difference_interval([[70.0, 71.0], [70.5, 69.5]], [[70.0, 71.0], [70.5, 69.5]],
                               options)
    assert same[0] < 0.0 < same[1]
