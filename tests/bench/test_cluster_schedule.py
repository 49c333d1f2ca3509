"""bench/cluster_schedule.py's durations from a record of real steps: the split H100's
(bench/records/2026-11-28-h100x2-cluster-split), as schedule.Durations' defaults cite."""

from __future__ import annotations

import pytest

from fleet.cluster.schedule import Durations
from tests.bench import scripts
from tests.conftest import ROOT

cs = scripts.load("cluster_schedule")
SPLIT = ROOT / "bench" / "records" / "2026-11-28-h100x2-cluster-split"


def test_the_record_gives_the_start_and_the_collectives_durations_rests_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    steps = cs.recorded_steps(SPLIT)
    # The healthy and the NCCL_NET=Socket steps, both nodes each; the killed one has none.
    assert sorted((s["step"]["id"], s["step"]["node_rank"]) for s in steps) == [
        ("healthy", 0), ("healthy", 1), ("socket", 0), ("socket", 1)]
    for step in steps:
        own = cs.collectives_s(step["figures"])
        assert 17.0 < own < 17.3 < step["wall_s"]
        # Timed again at each figure's own busbw, the collectives take their own time:
        # the arithmetic is nccl-tests' (2(n-1)/n for an all-reduce, (n-1)/n a gather).
        again = sum(cs.collectives_s([f], f["busbw_gbs"], 2) for f in step["figures"])
        assert again == pytest.approx(own, rel=0.01)
    start, at = cs.from_record(SPLIT, 360.0, 16)
    assert "start (median) 7.7 s" in capsys.readouterr().out
    assert round(start, 1) == Durations.start_s
    # The same collectives at a passing pair's 360 GB/s over two 8-GPU nodes are what
    # the fabric model prices a pair at, less its 25 us a call.
    assert at == pytest.approx(Durations().pair_collectives_s() - 150 * 25e-6, rel=1e-3)
