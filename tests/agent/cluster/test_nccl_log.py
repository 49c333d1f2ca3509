"""agent/cluster/nccl_log.py: what NCCL's INFO log says about the network between nodes.
One case a file: `nccl_logs/<case>.log` (a rank's log as NCCL 2.x prints it) and
`<case>.json` beside it (the `transport` object expected)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cluster import nccl_log

LOGS = Path(__file__).parent / "nccl_logs"
CASES = sorted(p.stem for p in LOGS.glob("*.log"))


def test_every_case_has_its_expectation() -> None:
    assert len(CASES) >= 6
    assert sorted(p.stem for p in LOGS.glob("*.json")) == CASES


@pytest.mark.parametrize("case", CASES)
def test_the_transport_read_from_a_log(case: str) -> None:
    expected = json.loads((LOGS / f"{case}.json").read_text())
    assert nccl_log.transport([(LOGS / f"{case}.log").read_text()]) == expected


def test_every_rank_of_the_node_is_counted_and_paths_are_said_once() -> None:
    log = (LOGS / "ib-gdrdma.log").read_text()
    seen = nccl_log.transport([log, log])
    assert seen["transports"] == {"NET": 8, "P2P": 2}
    assert seen["paths"] == ["NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA", "P2P/CUMEM/read"]


def test_one_channel_without_gdrdma_among_many_still_says_gdrdma() -> None:
    # "any NET path with GDRDMA": the controller compares nodes, and the paths list says
    # the rest.
    with_gdr = (LOGS / "ib-gdrdma.log").read_text()
    without = (LOGS / "ib-without-gdrdma.log").read_text()
    seen = nccl_log.transport([with_gdr, without])
    assert seen["gdrdma"] is True
    assert "NET/IB/0" in seen["paths"] and "NET/IB/0/GDRDMA" in seen["paths"]


def test_a_hostile_log_is_bounded() -> None:
    nics = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(200))
    lines = [f"h:1:1 [0] NCCL INFO NET/IB : Using {nics} ; OOB eth0:10.0.0.5<0>"]
    lines += [f"h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/{i}/GDRDMA"
              for i in range(200)]
    lines += ["h:1:1 [0] NCCL INFO Using network " + "X" * 10_000]
    lines += [f"h:1:1 [0] NCCL INFO NCCL_V{i} set by environment to {i}" for i in range(100)]
    seen = nccl_log.transport(["\n".join(lines)])
    assert len(seen["interfaces"]) == nccl_log.MAX_INTERFACES
    assert len(seen["paths"]) == nccl_log.MAX_PATHS
    assert len(seen["set_by_environment"]) <= 16
    assert seen["network"] == "X" * nccl_log.MAX_TEXT
    assert seen["transports"] == {"NET": 200} and seen["gdrdma"] is True


def test_the_nccl_the_ranks_loaded_is_read_from_its_own_line() -> None:
    # A real rank's log from a lent 2x H100 (tests/fixtures/nccl/): NCCL names itself once
    # a rank; the cases above were written without that line and say none.
    real = (Path(__file__).parents[2] / "fixtures" / "nccl" / "h100x2-healthy.log").read_text()
    assert "NCCL INFO NCCL version 2.28.9+cuda13.0" in real
    assert nccl_log.transport([real])["version"] == "2.28.9+cuda13.0"
    assert nccl_log.transport([(LOGS / "ib-gdrdma.log").read_text()])["version"] is None
