"""The floors the agent carries (agent/node/floors.json) are the catalog's and the
shortfall rule's, as fleet/analysis/node/floors.py makes them: one source of truth."""

from __future__ import annotations

from agent.node import floors as agent_floors
from fleet.analysis.node import floors as floors
from fleet.analysis.node.shortfall import ShortfallOptions


def test_the_committed_floors_are_what_the_catalog_gives() -> None:
    assert floors.PATH.read_text() == floors.text(), (
        "agent/node/floors.json is stale: python -m fleet.analysis.node.floors > "
        "agent/node/floors.json")


def test_the_agent_calls_the_issues_all_reduce_short_and_a_healthy_one_not() -> None:
    table = agent_floors.load()
    floor, basis = agent_floors.allreduce_floor(table, "H200-SXM-141GB", 4, 1 << 30, "bf16",
                                                "nccl", 450.0) or (0.0, "")
    # 354 GB/s expected, called under 90% of it: 251 (NCCL_ALGO=Tree) short, 352 not.
    assert 251 < floor < 352 and basis.startswith("records: 353.7 GB/s expected")
    # A variant without records: its datasheet share.
    share = ShortfallOptions().allreduce_share
    assert agent_floors.allreduce_floor(table, "B200", 8, 1 << 30, "bf16", "nccl",
                                        900.0) == (share * 900.0, "datasheet: called under "
                                                   "40% of 900 GB/s")
    assert agent_floors.allreduce_floor(table, "B200", 8, 1 << 30, "bf16", "nccl",
                                        None) is None


def test_a_short_small_size_alone_makes_the_agent_measure_again() -> None:
    # The issue's node healthy at 1 GiB and short at 16 MiB only: each size is judged by
    # its own floor, not the largest's.
    from agent.rerun import allreduce as rerun

    table = agent_floors.load()
    sizes = (16 << 20, 64 << 20, 256 << 20, 1 << 30)
    floor = {s: (agent_floors.allreduce_floor(table, "H200-SXM-141GB", 4, s, "bf16", "nccl",
                                              450.0) or (0.0, ""))[0] for s in sizes}
    figures = [{"size_bytes": s, "gbs": floor[s] * (0.5 if s == sizes[0] else 1.1),
                "dtype": "bf16", "backend": "nccl", "datasheet_gbs": 450.0} for s in sizes]
    tree = [{"name": "NCCL_ALGO", "value": "Tree", "source": "environment", "applies": True}]
    plan = rerun.decide(figures, tree, table, "H200-SXM-141GB", 4)
    assert plan is not None and plan["short"] == [sizes[0]]
    assert plan["without"] == ["NCCL_ALGO"]
    assert {s: f[0] for s, f in plan["floors"].items()} == floor
