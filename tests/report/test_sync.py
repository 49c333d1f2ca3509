"""The synchronous figure: GPU count x the slowest GPU beside GPU count x the median, per
node and in what a GPU-hour buys."""

from __future__ import annotations

import pytest

from fleet.analysis.dataset import Dataset, HostState, Listing, Scope
from fleet.analysis.matmul.cost import cost_table
from fleet.analysis.sync import synchronous_nodes, synchronous_tflops
from tests.report.synthetic import WHEN, measure

# The lent 4x H100 of issue 32: two GPUs soaked at 79 °C, the slowest at 660.4 TFLOP/s,
# the median of the four 668.2 ((667.4 + 669.0) / 2).
LENT = [669.0, 667.4, 660.4, 670.0]


def test_the_issues_node_gives_a_data_parallel_job_four_times_its_slowest_gpu() -> None:
    measures = [measure("lent", "h100x4", i, tflops) for i, tflops in enumerate(LENT)]
    (node,) = synchronous_nodes(measures)
    assert (node.gpus, node.slowest_gpu) == (4, 2)
    assert node.median_tflops == pytest.approx(668.2)
    assert node.sync_tflops == pytest.approx(2641.6)  # 4 x 660.4
    assert node.node_median_tflops == pytest.approx(2672.8)  # 4 x 668.2
    assert node.loss == pytest.approx(1 - 660.4 / 668.2)  # 1.17%
    assert node.evidence == ("4 x 660.4 = 2,641.6 TFLOP/s waiting for GPU 2, against "
                             "4 x 668.2 = 2,672.8 at the per-GPU median (1.2% less)")


def test_one_gpu_nodes_have_no_synchronous_figure_of_their_own() -> None:
    assert synchronous_nodes([measure("a", "a-01", 0, 700.0)]) == []
    assert synchronous_tflops([]) is None


def test_what_a_gpu_hour_buys_at_the_median_and_synchronously() -> None:
    """Eight GPUs on two hosts at 2.00 USD: the median of the eight is (670.0 + 700.0) / 2
    = 685.0 TFLOP/s, 2.00 / 0.685 = 2.9197 USD per effective PFLOP-hour; counted at their
    node's slowest, four GPUs give 660.4 and four 700.0, median 680.2, 2.00 / 0.6802 =
    2.9403 USD."""
    measures = ([measure("lent", "h100x4", i, tflops) for i, tflops in enumerate(LENT)]
                + [measure("lent", "even", i, 700.0) for i in range(4)])
    listing = Listing({"variant": "H100 SXM5 80GB"}, 2.00, "USD", ())
    hosts = tuple(HostState("lent", host, None, WHEN, listing, i + 1, 4)
                  for i, host in enumerate(("even", "h100x4")))
    data = Dataset(Scope(), hosts, (), tuple(measures), (), 1, WHEN, WHEN)
    (row,) = cost_table(data)
    assert row.median_tflops == pytest.approx(685.0)
    assert row.sync_tflops == pytest.approx(680.2)
    assert row.cost_per_pflop_hour == pytest.approx(2.0 / 0.685)
    assert row.sync_cost_per_pflop_hour == pytest.approx(2.0 / 0.6802)
    assert round(row.sync_cost_per_pflop_hour or 0, 4) == 2.9403
