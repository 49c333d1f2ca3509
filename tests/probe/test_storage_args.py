"""The storage suite's folders reach the agent from the inventory's `expect` (issue 58):
the scratch and each shared filesystem listed, for a benchmark that runs the suite only."""

from __future__ import annotations

from fleet.inventory import Expect
from fleet.probe.local import BenchOptions
from fleet.probe.storage_args import storage_args


def test_the_listed_folders_become_the_agents_options() -> None:
    expect = Expect(scratch="/scratch", shared_fs=["/mnt/data", "/lustre/team"])
    assert storage_args(expect, BenchOptions()) == [
        "--scratch", "/scratch", "--shared-fs", "/mnt/data", "--shared-fs", "/lustre/team"]
    assert storage_args(expect, BenchOptions(suite="storage"))[:2] == ["--scratch", "/scratch"]
    assert storage_args(Expect(shared_fs="/mnt/data"), BenchOptions()) == [
        "--shared-fs", "/mnt/data"]


def test_nothing_where_the_suite_does_not_run_or_nothing_is_listed() -> None:
    expect = Expect(scratch="/scratch")
    assert storage_args(expect, None) == []  # a fingerprint
    assert storage_args(expect, BenchOptions(suite="gemm")) == []
    assert storage_args(None, BenchOptions()) == []
    assert storage_args(Expect(gpu_count=8), BenchOptions()) == []
