"""The rerun layer's one protocol (agent/rerun/): every kind with a child has its bound and
registers what its child measures, and every rerun is a `Rerun` whose `settle` does
nothing in a child or where nothing is short."""

from __future__ import annotations

import importlib

import pytest

from agent import suites
from agent.rerun import bounds, child
from agent.rerun.allreduce import AllreduceRerun
from agent.rerun.job import JobRerun
from agent.rerun.links import LinksRerun
from agent.rerun.matmul import MatmulRerun
from agent.rerun.memory import MemoryRerun
from agent.rerun.protocol import Rerun
from agent.timing.contention import PARENT_ENV

WITH_A_CHILD = (MatmulRerun, JobRerun, MemoryRerun, LinksRerun)


def test_every_child_kind_has_its_bound_and_its_measurement() -> None:
    for kind in bounds.TIMEOUT_S:
        importlib.import_module(f"agent.rerun.{kind}")
    assert sorted(child.MEASURES) == sorted(bounds.TIMEOUT_S) == sorted(
        r.kind for r in WITH_A_CHILD)
    assert len({child.prefix(kind) for kind in child.MEASURES}) == len(child.MEASURES)
    # The all-reduce's child is its own ranks: no bound of the child's, no registration.
    assert issubclass(AllreduceRerun, Rerun) and AllreduceRerun.kind not in child.MEASURES


def test_the_suite_table_names_each_suites_configuration_run_and_rerun() -> None:
    assert [s.name for s in suites.SUITES] == ["matmul", "job", "node"]
    assert sorted(suites.SUITES, key=id) == sorted(suites.WITHOUT_GPU, key=id)
    assert suites.MATMUL.rerun is not None and suites.JOB.rerun is not None
    assert suites.NODE.rerun is None  # its three run inside it: agent/rerun/node.py


def test_a_child_never_reruns_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    class Short(MemoryRerun):
        def plan(self) -> dict[str, list[str]]:
            raise AssertionError("a child must not even plan a rerun")

    monkeypatch.setenv(PARENT_ENV, "1")
    assert Short([], [], {}, {}, "cpu", 1, 1).settle(lambda _: None) is None
    monkeypatch.delenv(PARENT_ENV)
    with pytest.raises(AssertionError, match="must not even plan"):
        Short([], [], {}, {}, "cpu", 1, 1).settle(lambda _: None)
