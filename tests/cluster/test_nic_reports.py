"""A pair's per-NIC RDMA test as the controller reads it (fleet/cluster/step.py): a real
agent's step events (the lent split H100's, bench/records/2026-11-28-h100x2-cluster-split)
with each node's `nics` added as agent/network/perftest.py writes them, validated before
anything is kept; a report that breaks the bounds fails the node with where and why."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from fleet.cluster.step import NodeFailed, StepRun, StepSpec, agent_args, read_report
from fleet.model.step import NicFigure, NodeNics
from tests.cluster.test_split_record import events


def with_nics(host: str, nics: dict[str, Any] | None) -> list[str]:
    lines = []
    for line in events(f"healthy-{host}.jsonl"):
        event = json.loads(line)
        if event.get("event") == "cluster":
            event["cluster"]["nics"] = nics
        lines.append(json.dumps(event))
    return lines


def side(role: str, figures: list[float | None], **extra: Any) -> dict[str, Any]:
    return {"tool": "ib_write_bw", "role": role, "skipped": None, "paired_by": "name",
            "tests": [{"device": f"mlx5_{i}", "port": 1, "peer": f"mlx5_{i}/1",
                       "rate_gbps": 400.0, "gbps": g, "peak_gbps": None, "gdr": True,
                       "seconds": 5.4, "error": None if g is not None else "no figure"}
                      for i, g in enumerate(figures)], **extra}


def test_each_nodes_side_is_kept_in_its_order() -> None:
    spec = StepSpec("pod", "p1", "pair", 1, ("a", "b"), "127.0.0.1", 29551, 1, 60.0,
                    algo="Ring", nic_test=True)
    run = StepRun(spec, dt.datetime(2026, 11, 29, tzinfo=dt.UTC))
    run.reports["a"] = read_report(with_nics("a", side("server", [391.2, None])), "a")
    run.reports["b"] = read_report(with_nics("b", side("client", [390.8, 12.5])), "b")
    result = run.result()
    assert result.nics == (
        NodeNics("a", "server", None, (
            NicFigure(0, "mlx5_0", 1, 400.0, 391.2, True, None, "mlx5_0/1"),
            NicFigure(1, "mlx5_1", 1, 400.0, None, True, "no figure", "mlx5_1/1"))),
        NodeNics("b", "client", None, (
            NicFigure(0, "mlx5_0", 1, 400.0, 390.8, True, None, "mlx5_0/1"),
            NicFigure(1, "mlx5_1", 1, 400.0, 12.5, True, None, "mlx5_1/1"))))
    # The agent is asked for it on a pair, with more time for its ports.
    assert "--nic-test" in agent_args(spec, 0, None)
    plain = StepSpec("pod", "p1", "pair", 1, ("a", "b"), "127.0.0.1", 29551, 1, 60.0)
    assert "--nic-test" not in agent_args(plain, 0, None)
    assert spec.budget_s > plain.budget_s


@pytest.mark.parametrize(("nics", "where"), [
    (side("server", [391.0], tool="iperf3"), "nics.tool"),
    ({**side("server", [391.0]), "tests": [{**side("server", [1.0])["tests"][0],
                                            "device": "mlx5_0; rm -rf /"}]},
     "nics.tests.0.device"),
    ({**side("server", [391.0]), "skipped": "x" * 301}, "nics.skipped"),
    (side("server", [-1.0]), "nics.tests.0.gbps"),
    ({**side("server", [391.0]), "tests": [{**side("server", [1.0])["tests"][0],
                                            "gbps": True}]}, "nics.tests.0.gbps"),
    ({**side("server", [391.0]), "skipped": "no active RDMA port"}, "nics"),
    ({**side("server", [391.0]), "tests": [{**side("server", [1.0])["tests"][0],
                                            "peer": "10.0.0.2:29550"}]}, "nics.tests.0.peer"),
    ({**side("server", [391.0] * 33)}, "nics.tests"),
])
def test_a_report_out_of_bounds_fails_the_node(nics: dict[str, Any], where: str) -> None:
    with pytest.raises(NodeFailed, match=f"a: the agent's report is not valid at {where}"):
        read_report(with_nics("a", nics), "a")
