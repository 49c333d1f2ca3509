"""Verdicts only from evidence (issue 57): a step that failed and a pair nothing could
judge say nothing of the fabric; a node is accused by its pairs that failed against
pairs without it that went through; a shared fault only where no node explains the
failures. Pure data: step results as the store hands them over."""

from __future__ import annotations

import pytest

from fleet.analysis.cluster.judgement import judge_cluster
from fleet.analysis.cluster.pair_evidence import failure_words
from fleet.model.step import StepFigure, StepResult
from tests.analysis.test_cluster_judge import FOUR, fp, only, pair, step

MIB = 1 << 20


def gloo(hosts: str, error: str | None = None, kind: str = "pair") -> StepResult:
    """A step between loopback nodes through gloo on the CPU, as the tests run them."""
    figures = () if error else (StepFigure("all_reduce", MIB, 0.15, 0.15, 7000.0),
                                StepFigure("all_gather", MIB, 0.2, 0.4, 5000.0))
    return StepResult("pod", f"run-{kind}-{hosts}", kind,  # type: ignore[arg-type]
                      None if kind == "cluster" else 1, tuple(hosts), 1, "gloo",
                      None if kind == "cluster" else "Ring", figures, (), error)


CRASH = "2: rank 1 of 2 died: killed by signal 9 (SIGKILL); its stderr: ..."
NO_TORCH = "2: the agent ended without a report: ModuleNotFoundError: No module named 'torch'"
HANG = "2: no report within 80 s; stopped"


@pytest.mark.parametrize("error", [CRASH, NO_TORCH, HANG])
def test_one_bad_node_among_three_is_named_not_the_fabric(error: str) -> None:
    # The case: node 2 crashes, hangs or has no torch; pair 1-3 ran (gloo: not
    # judged). Before issue 57: "the fault is likely shared ... the fabric and its
    # switches (the provider's)" and every node suspect at 0%.
    results = [gloo("123", error, kind="cluster"), gloo("12", error), gloo("13"),
               gloo("23", error)]
    j = judge_cluster(results, {}, {})
    rules = [f.rule for f in j.findings]
    assert "shared-fault" not in rules
    assert not any("switches" in f.action for f in j.findings)
    nodes = {n.host: n for n in j.nodes}
    assert nodes["2"].failing and (nodes["2"].failed, nodes["2"].unjudged) == (2, 0)
    for host in "13":
        assert not nodes[host].failing and not nodes[host].suspect
        assert (nodes[host].ratio, nodes[host].failed, nodes[host].unjudged) == (None, 1, 1)
    assert not any(n.slow for n in j.nodes)  # no figure judged a fabric: no slow node
    f = only(j, "node-steps-failed")
    assert (f.hosts, f.whose) == (("2",), "unsettled")
    assert f.title == ("2: every pair step it was in failed (2 of 2), where its partners "
                       "ran with others")
    assert "pair steps without 2 ran: 1 and 3" in f.evidence
    assert failure_words(error, ("1", "2")) in f.evidence
    # The unjudged pair says why.
    assert pair(j, "run-pair-13").cause == ("not judged: no network fingerprint for 1, 3: "
                                            "nothing says what its fabric can carry")


def test_failure_words_name_what_happened_and_where() -> None:
    assert failure_words(CRASH, ("1", "2")) == "a rank crashed on 2"
    assert failure_words(NO_TORCH, ("1", "2")) == "no torch to run the ranks on 2"
    assert failure_words(HANG, ("1", "2")) == "a rank hung on 2"
    assert failure_words("1: could not join the rendezvous 10.0.0.1:29550 within 20 s: "
                         "rank 0 of 2: DistNetworkError: EADDRINUSE", ("1", "2")) == (
        "its meeting port was taken when the step started on 1")
    assert failure_words("something else") == "the step failed"


def test_steps_failing_whoever_met_is_shared_but_not_the_fabrics() -> None:
    refused = "could not join the rendezvous: Connection refused"
    j = judge_cluster([gloo("12", refused), gloo("13", refused), gloo("23", refused),
                       gloo("123", kind="cluster")], {}, {})
    f = only(j, "shared-fault")
    assert f.whose == "unsettled" and "fabric" not in f.action
    assert "says nothing of the fabric" in f.evidence
    assert "node-steps-failed" not in {x.rule for x in j.findings}


def test_one_node_in_every_short_pair_is_the_suspect_not_a_shared_fault() -> None:
    # a-d and c-d short, a-c not judged (gloo): the fabric's question clears no node,
    # but d is in every short pair: test d again, not the switches.
    results = [step("ad", 185.0), step("cd", 185.0),
               step("ac", 2.0, backend="gloo", transports=[])]
    j = judge_cluster(results, {h: fp(c) for h, c in FOUR.items()}, {h: {} for h in FOUR})
    assert pair(j, "a-c").passed is None
    assert "the step ran gloo" in (pair(j, "a-c").cause or "")
    assert "shared-fault" not in {f.rule for f in j.findings}
    suspect = only(j, "suspect")
    assert suspect.hosts == ("d",)


def test_a_node_lost_before_its_steps_is_named_and_the_rest_judged() -> None:
    lost = StepResult("pod", "run-lost-3", "cluster", None, ("3",), 1, "gloo", None, (), (),
                      "3: lost before its steps: lab/3: 127.0.0.1:2222 refused the "
                      "connection: is sshd running there")
    j = judge_cluster([lost, gloo("12", kind="cluster"), gloo("12")], {}, {})
    f = only(j, "node-lost")
    assert (f.hosts, f.severity, f.whose) == (("3",), "fault", "unsettled")
    assert f.title == "3: lost before its steps, not measured"
    assert "refused the connection" in f.evidence
    assert "the other 2 nodes were measured without it" in f.evidence
    assert {n.host: n.lost for n in j.nodes}["3"] is not None
    assert {f.rule for f in j.findings} >= {"node-lost", "cluster-figure"}
    assert "every-step-failed" not in {x.rule for x in j.findings}
    assert "step-failed" not in {x.rule for x in j.findings}
