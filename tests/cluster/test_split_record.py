"""The controller's side on what a real agent sent: the step events of a lent 2x H100
split into two "nodes" by NCCL_HOSTID (bench/device_cluster_split.sh, record
bench/records/2026-11-28-h100x2-cluster-split), read and validated as `fleet cluster run`
reads them (fleet/cluster/step.py), and judged with the lent VM's own network
fingerprint (tests/fixtures/network/lent-h100-1x: virtio eth0, no fabric NIC).

What a healthy pair on a node without a fabric must be: information, never a fault, and
never put to the renter or the provider; a step whose peer was killed: failed, with the
surviving node's own reason, unsettled.
"""

from __future__ import annotations

import datetime as dt
import tarfile
from pathlib import Path

import pytest

from fleet.analysis.cluster.judgement import judge_cluster, transport_words
from fleet.cluster.step import StepRun, StepSpec, read_report
from tests.analysis.test_network_findings import load
from tests.conftest import ROOT

RECORD = ROOT / "bench/records/2026-11-28-h100x2-cluster-split/cluster-split.tgz"


def events(name: str) -> list[str]:
    with tarfile.open(RECORD) as packed:
        member = next(m for m in packed.getmembers() if Path(m.name).name == name)
        handle = packed.extractfile(member)
        assert handle is not None
        return handle.read().decode().splitlines()


def step(name: str) -> StepRun:
    spec = StepSpec("split", name, "pair", 1, ("a", "b"), "127.0.0.1", 29551, 1, 60.0,
                    algo="Ring")
    run = StepRun(spec, dt.datetime(2026, 11, 28, tzinfo=dt.UTC))
    for host in ("a", "b"):
        try:
            run.reports[host] = read_report(events(f"{name}-{host}.jsonl"), host)
        except Exception as exc:  # the killed half sent no report: the step's error
            run.error = run.error or str(exc)
    failed = [f"{h}: {e.message}" for h, r in run.reports.items() for e in r.errors]
    run.error = failed[0] if failed else run.error
    return run


@pytest.mark.parametrize("name", ["healthy", "socket"])
def test_a_real_pair_without_a_fabric_is_information(name: str) -> None:
    run = step(name)
    a, b = run.reports["a"], run.reports["b"]
    assert run.error is None and a.backend == b.backend == "nccl"
    assert a.figures == b.figures  # max-reduced over every rank: one step's figures
    result = run.result()
    assert transport_words(result, "NET/") == "NET/Socket"
    reduce = max((f for f in result.figures if f.op == "all_reduce"),
                 key=lambda f: f.size_bytes)
    assert reduce.size_bytes == 1 << 30 and 2.0 < reduce.busbw_gbs < 5.0
    vm = load("lent-h100-1x")
    judged = judge_cluster([result], {"a": vm, "b": vm}, run.settings())
    (pair,) = judged.pairs
    assert (pair.passed, pair.expected_gbs) == (None, None)
    assert [(f.rule, f.severity, f.whose) for f in judged.findings] == [
        ("pair-no-fabric", "info", None)]
    assert "sockets" in judged.findings[0].title + judged.findings[0].evidence


def test_a_real_peer_killed_mid_collective_fails_the_step_unsettled() -> None:
    run = step("failure")
    assert "b" not in run.reports  # killed: no report
    assert run.error is not None and run.error.startswith("a: the ranks said nothing")
    result = run.result()
    assert result.figures == ()
    vm = load("lent-h100-1x")
    judged = judge_cluster([result], {"a": vm, "b": vm}, run.settings())
    faults = [(f.rule, f.whose) for f in judged.findings if f.severity == "fault"]
    assert faults and all(whose == "unsettled" for _, whose in faults)
    assert judged.pairs[0].passed is False
