"""The node suite's findings on frames with a known truth (issue 32, "Tests with
constructed faults"): a node trained down to Gen4 x8, a node whose GPUs lack peer access,
a pair slower than its node's others, each flagged; healthy nodes, drawn with the lent
cards' spread, not, over many draws.

Healthy spreads (tests/report/node_synthetic.py): within a node 0.5% between GPUs or
pairs (the lent nodes: 3,010 GB/s on every H100, pairs 394.5-396); between nodes 0.5%
for pairs and memory, 2% for the all-reduce, and for host links 3 points around the
healthy 88% of the link (55.2-55.5 of 63 GB/s on the lent nodes; platforms differ).
"""

from __future__ import annotations

import pandas as pd
import pytest

from fleet.analysis.compare import GapOptions
from fleet.analysis.node.figures import nodes_as_found, prepare
from fleet.analysis.node.gaps import compare_node_figures
from fleet.analysis.node.hostlink import find_host_link_issues
from fleet.analysis.node.outliers import find_node_outliers
from fleet.analysis.node.peers import find_missing_peers, find_nodes_apart
from tests.report.node_synthetic import Node, fleet_of, gpu_frame, node_frame

LINKS_LOST = 16 / 18  # two NVLink 4 links of 18 down: every pair at 16/18


def figures(nodes: list[Node], seed: int = 0) -> pd.DataFrame:
    return prepare(node_frame(nodes, seed))


def test_a_healthy_node_as_found_beside_its_datasheet() -> None:
    node = Node("alpha", "alpha-01", 1, pinned_gbs=55.2, both_ways_gbs=768.0,
                busbw_gbs=361.0)
    (found,) = nodes_as_found(figures([node]))
    assert (found.provider, found.host, found.variant) == ("alpha", "alpha-01",
                                                           "H100 SXM5 80GB")
    # 3,010 / 3,350 = 89.9%; 55.2 / 63.02 = 87.6%; 395.2 / 450 = 87.8%; 768 / 900 =
    # 85.3%; 361 / 450 = 80.2%.
    assert found.memory is not None and found.memory.text == "3,010 GB/s, 90% of 3,350"
    assert found.host_link == "55.2 / 55.2 GB/s, 88% of 63.02"
    assert (found.link, found.link_below_max) == ("Gen5 x16", False)
    assert found.one_way is not None and found.one_way.text == "395 GB/s, 88% of 450"
    assert found.both_ways is not None and found.both_ways.text == "768 GB/s, 85% of 900"
    assert (found.peer_access, found.paths) == ("yes", "NVLINK")
    assert found.allreduce is not None and found.allreduce.text == "361 GB/s, 80% of 450"
    assert (found.allreduce_gpus, found.allreduce.size) == (4, "1 GiB")
    assert found.one_way.units == 6  # the pairs of four GPUs


def test_each_figure_is_kept_at_its_largest_size_and_configuration() -> None:
    frame = figures([Node("alpha", "alpha-01", 1)])
    reduce = frame[frame["kind"] == "allreduce"]
    assert reduce["size_bytes"].tolist() == [1 << 30]  # the 16 MiB all-reduce is dropped
    (config,) = set(reduce["config"])
    assert config.label == ("all-reduce bus bandwidth, 4 GPUs, 1 GiB bf16 (suite 1.0.0; "
                            "torch 2.9.0, CUDA 12.8, NCCL 2.28.9)")
    labels = {c.label for c in frame["config"]}
    assert "host to device (pinned), 256 MiB (suite 1.0.0; torch 2.9.0, CUDA 12.8)" in labels
    assert "host to device (pageable), 256 MiB (suite 1.0.0; torch 2.9.0, CUDA 12.8)" in labels
    assert len(labels) == 8  # memory, 2 x 2 host copies, 2 pair directions, all-reduce


def test_a_node_trained_down_to_gen4_x8_is_flagged() -> None:
    """Gen4 x8 carries a quarter of Gen5 x16 (15.75 of 63.02 GB/s): the copies move the
    healthy 88% of that, so the link's state, not the copies' share, is the finding."""
    healthy = fleet_of("alpha", 2, 1, pinned_gbs=55.2)
    down = Node("beta", "beta-01", 9, link=(4, 8), pinned_gbs=55.2)
    frame = figures([*healthy, down])
    (issue,) = find_host_link_issues(frame)
    assert (issue.provider, issue.host, issue.problem) == ("beta", "beta-01", "below maximum")
    assert issue.gpus == (0, 1, 2, 3)
    assert (issue.link, issue.link_max) == ("Gen4 x8", "Gen5 x16")
    assert (issue.carries_gbs, issue.max_carries_gbs) == (15.75, 63.02)
    assert issue.title == "beta-01 GPUs 0, 1, 2, 3: host link trained down to Gen4 x8 " \
                          "(supports Gen5 x16)"
    # 55.2 x 15.75 / 63.02 = 13.8 GB/s, 87.6% of 15.75.
    assert issue.evidence == (
        "under load the link ran at Gen4 x8, below the Gen5 x16 the card and system "
        "support: 15.75 GB/s each way instead of 63.02; pinned copies to device 13.8 GB/s, "
        "from device 13.8 GB/s (medians of 4 GPUs; 88% of 15.75)")
    found = {n.host: n for n in nodes_as_found(frame)}
    assert found["beta-01"].link == "Gen4 x8 (max Gen5 x16)"
    assert found["beta-01"].link_below_max
    assert found["beta-01"].host_link == "13.8 / 13.8 GB/s, 88% of 15.75"


def test_one_gpu_trained_down_among_eight_is_named() -> None:
    node = Node("alpha", "alpha-01", 1, gpus=8, gpu_link={5: (4, 8)})
    (issue,) = find_host_link_issues(figures([node]))
    assert issue.gpus == (5,) and issue.problem == "below maximum"
    assert issue.title.startswith("alpha-01 GPU 5: host link trained down to Gen4 x8")
    (found,) = nodes_as_found(figures([node]))
    assert found.link == "Gen5 x16 on GPU 0, 1, 2, 3, 4, 6, 7; Gen4 x8 (max Gen5 x16) on GPU 5"


def test_copies_halved_on_a_full_link_are_slow_for_it() -> None:
    """An IOMMU or a vGPU layer halves copies on a link that negotiated in full."""
    node = Node("alpha", "alpha-01", 1, pinned_gbs=55.2, link_scale=0.5)
    (issue,) = find_host_link_issues(figures([node]))
    assert (issue.problem, issue.link, issue.gpus) == ("slow", "Gen5 x16", (0, 1, 2, 3))
    assert issue.evidence == (
        "pinned copies under 70% of what Gen5 x16 carries each way, where healthy copies "
        "reach 85-90%: to device 27.6 GB/s, from device 27.6 GB/s (medians of 4 GPUs; "
        "44% of 63.02)")


def test_a_card_at_the_most_its_system_supports_is_not_trained_down() -> None:
    """NVML's maximum is the card's and the system's together: a Gen5 card in a Gen4
    server runs at its maximum, and its copies are judged against Gen4."""
    node = Node("alpha", "alpha-01", 1, link=(4, 16), link_max=(4, 16))
    assert find_host_link_issues(figures([node])) == []


@pytest.mark.parametrize(("platform_sd", "most"), [(0.034, 0), (0.057, 2)])
def test_healthy_host_links_are_rarely_flagged(platform_sd: float, most: int) -> None:
    """1,000 healthy 8-GPU nodes, each its own draw, hosts 3 points apart (relative sd
    3.4% around 88%): none is called (measured 0 of 1,000 here and 0 of 2,000 nodes
    drawn one by one); 5 points apart, 1 of 1,000 (0 of 2,000 drawn one by one): 70%
    is 3.6 such sds under 88%."""
    nodes = [Node("a", f"a-{i:04d}", i + 1, gpus=8, gpu_sd=0.005, node_sd=platform_sd)
             for i in range(1000)]
    issues = find_host_link_issues(figures(nodes, seed=1))
    assert len(issues) <= most
    assert all(i.problem == "slow" for i in issues)


def test_halved_copies_are_flagged_on_every_draw() -> None:
    nodes = [Node("a", f"a-{i:04d}", i + 1, gpus=8, gpu_sd=0.005, node_sd=0.034,
                  link_scale=0.5) for i in range(300)]
    issues = find_host_link_issues(figures(nodes, seed=2))
    assert len({i.host for i in issues}) == 300


def test_a_node_whose_gpus_lack_peer_access_is_flagged() -> None:
    healthy = fleet_of("alpha", 3, 1)
    broken = Node("beta", "beta-01", 9, peer_access=False, topology="SYS", one_way_gbs=20.0,
                  both_ways_gbs=38.0, busbw_gbs=40.0)
    nodes = [*healthy, broken]
    frame = figures(nodes)
    (missing,) = find_missing_peers(frame, gpu_frame(nodes))
    assert (missing.provider, missing.host, missing.every_pair) == ("beta", "beta-01", True)
    assert missing.pairs == 6 and len(missing.without_access) == 6
    assert (missing.paths, missing.one_way_gbs) == (("SYS",), 20.0)
    assert missing.title == "beta-01: no peer access between GPUs on 6 of 6 pairs of an " \
                            "NVLink node"
    assert missing.evidence == (
        "H100 SXM5 80GB: an SXM board of this generation links every pair; pairs 0-1, "
        "0-2, 0-3, 1-2, 1-3, 2-3 lack peer access, NVML path SYS; 20.0 GB/s one way "
        "between them")
    # Its pairs and all-reduce stand far apart from the other nodes too, and are not
    # called again once the missing peer access is.
    apart = find_nodes_apart(frame)
    assert {(a.host, a.config.figure) for a in apart} == {
        ("beta-01", "GPU pairs, one way"), ("beta-01", "GPU pairs, both ways"),
        ("beta-01", "all-reduce bus bandwidth, 4 GPUs")}
    assert find_nodes_apart(frame, skip=frozenset({("beta", "beta-01")})) == []
    (found,) = [n for n in nodes_as_found(frame) if n.host == "beta-01"]
    assert (found.peer_access, found.paths) == ("no", "SYS")


def test_peer_access_over_pcie_on_an_sxm_node_is_flagged() -> None:
    node = Node("alpha", "alpha-01", 1, topology="PXB", one_way_gbs=48.0)
    (missing,) = find_missing_peers(figures([node]), gpu_frame([node]))
    assert missing.without_access == () and len(missing.without_nvlink) == 6
    assert missing.title == "alpha-01: GPUs reach each other without NVLink on 6 of 6 pairs"


def test_a_single_sxm_card_passed_through_without_links_is_still_an_nvlink_node() -> None:
    node = Node("alpha", "alpha-01", 1, gpus=2, peer_access=False, topology="SYS")
    (missing,) = find_missing_peers(figures([node]), gpu_frame([node], nvlink_links=0))
    assert missing.without_access == ((0, 1),)


def test_bridged_and_older_boards_need_some_pairs_linked_only() -> None:
    """H100 NVL bridges pairs of cards; V100 SXM2 links some pairs: other pairs without
    NVLink or peer access are how the board is built. Called only when no pair has it."""
    bridged = {(a, b): (False, "SYS") for a in range(4) for b in range(a + 1, 4)
               if (a, b) not in ((0, 1), (2, 3))}
    nvl = Node("alpha", "alpha-01", 1, variant="H100 SXM5 80GB", pair_path=bridged)
    assert find_missing_peers(figures([nvl]), gpu_frame([nvl], form_factor="NVL",
                                                         nvlink_links=12)) == []
    older = Node("alpha", "alpha-02", 2, pair_path=bridged)
    assert find_missing_peers(figures([older]), gpu_frame([older], architecture="Volta")) == []
    none = Node("alpha", "alpha-03", 3, peer_access=False, topology="SYS")
    (missing,) = find_missing_peers(figures([none]), gpu_frame([none], form_factor="NVL",
                                                               nvlink_links=12))
    assert not missing.every_pair and len(missing.without_access) == 6
    # A PCIe node without NVLink is not sold for it: its paths are not judged.
    pcie = Node("alpha", "alpha-04", 4, peer_access=False, topology="PHB")
    assert find_missing_peers(figures([pcie]), gpu_frame([pcie], form_factor="PCIe",
                                                         nvlink_links=0)) == []


def test_a_node_that_lost_two_nvlink_links_stands_apart() -> None:
    nodes = fleet_of("alpha", 8, 1, gpus=8)
    nodes[3].pair_scale = {(a, b): LINKS_LOST for a in range(8) for b in range(a + 1, 8)}
    apart = find_nodes_apart(figures(nodes))
    assert {(a.host, a.config.figure) for a in apart} == {
        ("alpha-03", "GPU pairs, one way"), ("alpha-03", "GPU pairs, both ways")}
    one_way = next(a for a in apart if a.config.direction == "one_way")
    assert one_way.others == 7 and one_way.deficit == pytest.approx(1 - LINKS_LOST)
    assert one_way.evidence.startswith(
        "GPU pairs, one way: 351.3 GB/s (the median of its pairs) against 395.2, the median "
        "of 7 other H100 SXM5 80GB nodes (11.1% lower;")


def test_healthy_nodes_rarely_stand_apart_from_their_variant() -> None:
    """150 draws of a variant's eight 8-GPU nodes (pairs 0.5% apart between nodes, the
    all-reduce 2%): no node called in any (0 of 1,000 measured drawing them one by one).
    Two NVLink links lost on one node are called on its pairs in 98.8% of those 1,000
    draws, on its all-reduce (11% lower, against the all-reduce's 2% spread) in 64.5%."""
    draws = 150
    nodes = [node for d in range(draws) for node in fleet_of(
        f"d{d}", 8, d * 8 + 1, gpus=8, variant=f"H100 SXM5 80GB #{d}", gpu_sd=0.002,
        node_sd=0.005, busbw_sd=0.02)]
    assert find_nodes_apart(figures(nodes, seed=3)) == []
    for d in range(draws):
        nodes[d * 8 + 3].pair_scale = {(a, b): LINKS_LOST for a in range(8)
                                       for b in range(a + 1, 8)}
    caught = {a.variant for a in find_nodes_apart(figures(nodes, seed=3))
              if a.config.kind == "peer_copy" and a.host.endswith("-03")}
    assert len(caught) >= 0.95 * draws


def test_a_pair_slower_than_its_nodes_others_is_flagged() -> None:
    node = Node("alpha", "alpha-01", 1, pair_scale={(0, 3): 0.9})
    outliers = find_node_outliers(figures([node]))
    assert [(o.name, o.others) for o in outliers] == [("GPUs 0 and 3 (both ways)", 5),
                                                      ("GPU 0 to GPU 3", 5)]
    assert outliers[1].deficit == pytest.approx(0.1)
    assert outliers[1].evidence.startswith(
        "GPU pairs, one way 355.7 GB/s against 395.2, the median of the node's 5 other "
        "pair figures (10.0% lower;")


def test_an_eight_gpu_node_healthy_and_with_one_slow_pair() -> None:
    """28 pairs: one 5.6% slower (one NVLink link of 18 lost) is found among 27 others."""
    healthy = Node("alpha", "alpha-01", 1, gpus=8, gpu_sd=0.002)
    assert find_node_outliers(figures([healthy])) == []
    slow = Node("alpha", "alpha-02", 2, gpus=8, gpu_sd=0.002, pair_scale={(2, 5): 17 / 18})
    outliers = find_node_outliers(figures([slow]))
    assert {(o.gpu_index, o.peer_index, o.others) for o in outliers} == {(2, 5, 27)}
    assert {o.config.direction for o in outliers} == {"one_way", "both_ways"}


def test_a_gpu_whose_memory_runs_slow_is_flagged_and_two_gpus_say_nothing() -> None:
    node = Node("alpha", "alpha-01", 1, gpus=8, memory_scale={6: 0.92})
    (outlier,) = find_node_outliers(figures([node]))
    assert (outlier.name, outlier.config.kind) == ("GPU 6", "memory_copy")
    assert outlier.gbs == pytest.approx(3010 * 0.92)
    pair = Node("alpha", "alpha-02", 2, gpus=2, memory_scale={1: 0.8})
    assert find_node_outliers(figures([pair])) == []


def test_healthy_eight_gpu_nodes_have_no_outliers_over_many_draws() -> None:
    """1,000 healthy 8-GPU nodes (0.5% between GPUs and pairs): none has an outlier (0 of
    1,000 measured drawing them one by one too). One pair 10% slow is found on every
    draw; one NVLink link lost (5.6%) on 294 of these 300 (98.8% of 1,000 drawn one by
    one), by its one-way or its both-ways figure (one way alone: 256 of 300, the
    threshold being 5%); a GPU's memory 8% slow on every draw (1,000 of 1,000)."""
    nodes = [Node("a", f"a-{i:04d}", i + 1, gpus=8, gpu_sd=0.005, node_sd=0.005)
             for i in range(1000)]
    assert find_node_outliers(figures(nodes, seed=4)) == []
    for node in nodes[:300]:
        node.pair_scale = {(2, 5): 17 / 18}
    caught = {o.host for o in find_node_outliers(figures(nodes[:300], seed=5))
              if (o.gpu_index, o.peer_index) == (2, 5)}
    assert len(caught) >= 0.95 * 300


def test_a_provider_whose_memory_runs_five_percent_slower_is_a_gap() -> None:
    nodes = (fleet_of("alpha", 4, 1, gpu_sd=0.003, node_sd=0.01)
             + fleet_of("beta", 4, 11, gpu_sd=0.003, node_sd=0.01, memory_gbs=3010 * 0.95))
    comparisons = compare_node_figures(figures(nodes, seed=1))
    called = [c for c in comparisons if c.systematic]
    assert [(c.config.kind, c.slower, c.faster) for c in called] == [
        ("memory_copy", "beta", "alpha")]
    (memory,) = called
    assert (memory.slower_units, memory.slower_hosts, memory.config.unit) == (16, 4, "GPU")
    assert 0.04 < memory.gap < 0.06
    assert memory.evidence.startswith("memory copy: beta ")
    # The all-reduce is one figure per node: four a side, compared, and alike.
    (reduce,) = [c for c in comparisons if c.config.kind == "allreduce"]
    assert (reduce.faster_units, reduce.config.unit) == (4, "node")
    assert not reduce.systematic


def test_providers_from_one_distribution_are_rarely_a_node_gap() -> None:
    """The memory copy, 4 hosts x 4 GPUs a side (nodes 1% apart, GPUs 0.3%), 60 draws (200
    when measured): none called; a 5% slower provider called in every draw. Over every
    figure of the suite at once (8 comparisons a draw, one Holm family; the all-reduce 2%
    apart between nodes), 0 of 300 draws called anything, and the 5% slower memory was
    called in 280 of 300: Holm's correction over eight figures costs power."""
    flagged = caught = 0
    draws = 60
    for seed in range(draws):
        nodes = (fleet_of("a", 4, 1, gpu_sd=0.003, node_sd=0.01)
                 + fleet_of("b", 4, 11, gpu_sd=0.003, node_sd=0.01))
        frame = figures(nodes, seed)
        memory = frame[frame["kind"] == "memory_copy"]
        (same,) = compare_node_figures(memory)
        flagged += same.systematic
        for node in nodes[4:]:
            node.memory_gbs = 3010 * 0.95
        frame = figures(nodes, seed)
        (slower,) = compare_node_figures(frame[frame["kind"] == "memory_copy"])
        caught += slower.systematic and slower.slower == "b"
    assert flagged / draws <= 0.02
    assert caught == draws


def test_figures_of_different_configurations_are_never_compared() -> None:
    nodes = (fleet_of("alpha", 3, 1, gpus=4) + fleet_of("beta", 3, 11, gpus=2)
             + fleet_of("gamma", 3, 21, gpus=4, nccl="2.27.3"))
    comparisons = compare_node_figures(figures(nodes), GapOptions())
    reduce = [c for c in comparisons if c.config.kind == "allreduce"]
    # 4 GPUs and 2 are different all-reduces; NCCL 2.27.3 and 2.28.9 different stacks.
    assert reduce == []
    memory = [c for c in comparisons if c.config.kind == "memory_copy"]
    assert {frozenset((c.faster, c.slower)) for c in memory} == {
        frozenset(("alpha", "beta")), frozenset(("alpha", "gamma")),
        frozenset(("beta", "gamma"))}
    assert {(c.config.memory, c.config.kind) for c in comparisons
            if c.config.kind in ("host_to_device", "device_to_host")} == {
        ("pinned", "host_to_device"), ("pageable", "host_to_device"),
        ("pinned", "device_to_host"), ("pageable", "device_to_host")}
