"""Provider gaps and stragglers on data sets with a known truth."""

from __future__ import annotations

import random

import pytest

from fleet.analysis.compare import GapOptions, holm, rank_test, ratio_interval
from fleet.analysis.matmul.gaps import compare_providers
from fleet.analysis.matmul.stragglers import find_stragglers
from tests.report.synthetic import dataset, measure, provider_gpus, provider_nodes


def test_a_three_percent_gap_between_eight_gpu_providers_is_found() -> None:
    rng = random.Random(7)
    slower = provider_gpus(rng, "beta", 700 * 0.97, 0.01, power_limit_w=650.0,
                           sm_clock_mhz=1330.0)
    data = dataset(provider_gpus(rng, "alpha", 700, 0.01) + slower)
    (gap,) = compare_providers(data)
    assert gap.systematic
    assert (gap.faster, gap.slower) == ("alpha", "beta")
    assert 0.02 < gap.gap < 0.04
    assert gap.ci_high < 1.0 and gap.ci_low < gap.ratio < gap.ci_high
    assert gap.p_adjusted < 0.05
    differs = {d.what: (d.slower, d.faster) for d in gap.differences}
    assert differs["power limit"] == ("650 W", "700 W")
    assert differs["SM clock under load"] == ("1330 MHz", "1410 MHz")
    assert "driver" not in differs


def test_a_three_percent_gap_is_found_for_almost_every_draw() -> None:
    """With 1% GPU-to-GPU spread the rule's power is ~95% (measured 0.955 over 200
    draws); the misses are draws whose point estimate falls under the 2% threshold."""
    found = 0
    for seed in range(200):
        rng = random.Random(seed)
        data = dataset(provider_gpus(rng, "a", 700, 0.01)
                       + provider_gpus(rng, "b", 700 * 0.97, 0.01))
        (gap,) = compare_providers(data)
        found += gap.systematic
    assert found >= 180


@pytest.mark.parametrize("spread", [0.01, 0.02])
def test_providers_from_one_distribution_are_rarely_flagged(spread: float) -> None:
    flagged = 0
    draws = 300
    for seed in range(draws):
        rng = random.Random(seed)
        data = dataset(provider_gpus(rng, "a", 700, spread) + provider_gpus(rng, "b", 700, spread))
        (comparison,) = compare_providers(data)
        flagged += comparison.systematic
    assert flagged / draws <= 0.02


def test_one_node_a_side_is_shown_but_never_called() -> None:
    """Eight GPUs of one node against eight of another: 5% apart, ranges far apart, and
    still a node-to-node difference as much as a provider's."""
    rng = random.Random(5)
    data = dataset(provider_gpus(rng, "a", 700, 0.005, per_host=8)
                   + provider_gpus(rng, "b", 665, 0.005, per_host=8))
    (comparison,) = compare_providers(data)
    assert comparison.single_node and (comparison.faster_hosts, comparison.slower_hosts) == (1, 1)
    # Welch's test between hosts cannot run on one host a side: no p-value, not p = 1.
    assert comparison.host_p_adjusted is None
    assert "between hosts p: not testable" in comparison.evidence
    assert comparison.ci_high < 1.0 and comparison.p_adjusted < 0.05
    assert not comparison.systematic
    assert "on 1 host" in comparison.evidence


@pytest.mark.parametrize(("hosts", "per_host", "node_spread"), [(4, 2, 0.01), (3, 8, 0.02)])
def test_node_to_node_differences_are_not_called_provider_gaps(hosts: int, per_host: int,
                                                                node_spread: float) -> None:
    """Two providers from one distribution whose nodes differ among themselves (1% node
    spread): the GPU-level tests alone called them apart in 14% of draws with one 8-GPU
    node a side and 7% with two; with the node-level test and the cluster bootstrap it
    stays under 3%."""
    flagged = 0
    draws = 200
    for seed in range(draws):
        rng = random.Random(seed)
        data = dataset(provider_nodes(rng, "a", 700, 0.005, hosts, per_host, node_spread)
                       + provider_nodes(rng, "b", 700, 0.005, hosts, per_host, node_spread))
        (comparison,) = compare_providers(data)
        flagged += comparison.systematic
    assert flagged / draws <= 0.03


def test_a_small_real_gap_is_measured_but_not_called_systematic() -> None:
    """1% slower on every GPU is real (the interval excludes 1) but under the threshold."""
    rng = random.Random(3)
    data = dataset(provider_gpus(rng, "a", 700, 0.001) + provider_gpus(rng, "b", 693, 0.001))
    (comparison,) = compare_providers(data)
    assert comparison.ci_high < 1.0
    assert not comparison.systematic
    lowered = compare_providers(data, GapOptions(threshold=0.005))
    assert lowered[0].systematic


def test_one_slow_gpu_is_a_straggler_not_a_provider_gap() -> None:
    rng = random.Random(11)
    alpha = provider_gpus(rng, "alpha", 700, 0.005, gpus=16, per_host=8)
    alpha[5] = measure("alpha", alpha[5].host, 5, 640.0)
    data = dataset(alpha + provider_gpus(rng, "beta", 700, 0.005, gpus=16, per_host=8))
    assert not any(c.systematic for c in compare_providers(data))
    (straggler,) = find_stragglers(data)
    assert (straggler.provider, straggler.gpu_index) == ("alpha", 5)
    assert 0.07 < straggler.deficit < 0.10
    assert "node's 7 other GPUs" in straggler.evidence


def test_no_straggler_among_alike_gpus_or_on_two_gpu_nodes() -> None:
    rng = random.Random(5)
    alike = provider_gpus(rng, "alpha", 700, 0.005)
    pair = [measure("beta", "b-00", 0, 700.0), measure("beta", "b-00", 1, 600.0)]
    assert find_stragglers(dataset(alike + pair)) == []


def test_groups_need_enough_gpus_and_never_mix_variants() -> None:
    rng = random.Random(1)
    data = dataset(provider_gpus(rng, "a", 700, 0.01)
                   + provider_gpus(rng, "b", 600, 0.01, gpus=2)
                   + provider_gpus(rng, "c", 500, 0.01, variant="H100-PCIe-80GB"))
    assert compare_providers(data) == []


def test_holm_adjustment() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_interval_and_rank_test_on_plain_numbers() -> None:
    options = GapOptions()
    low, high = ratio_interval([97.0, 96.5, 97.2, 96.8], [100.0, 100.5, 99.7, 100.2], options)
    assert 0.95 < low < high < 0.98
    assert ratio_interval([1.0, 1.0], [2.0, 2.0], options) == (0.5, 0.5)
    assert rank_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert rank_test([5.0] * 3, [5.0] * 3) == 1.0
    assert rank_test([10.0, 11, 12, 13, 14, 15], [1.0, 2, 3, 4, 5, 6]) < 0.01

