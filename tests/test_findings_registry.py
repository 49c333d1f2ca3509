"""The findings layer (fleet/findings/, issue 59): one registry of kinds that the report's
rules, `--fail-on`, the sweep's news and the metrics read, and one way of counting."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.analysis.sweep.history import FAIL_KINDS
from fleet.cli.report import parse_fail_on
from fleet.errors import InputError
from fleet.findings.count import counts, line
from fleet.findings.finding import PARTIES, Finding
from fleet.findings.kinds import FINDING_KINDS, KINDS, NEWS_KINDS, kind_named
from fleet.report.rules import RULES, Rule
from fleet.sweep.run import check_fail_on


def test_the_kinds_are_those_fail_on_named_before_the_registry_in_their_order() -> None:
    # The order is the order `fleet report --fail-on` lists them and the counts run in:
    # the registry took it over unchanged.
    assert FINDING_KINDS == (
        "mismatch", "gap", "cooling", "drift", "straggler", "regression", "duplicate",
        "health", "hostlink", "peer", "shortfall", "contention", "corruption",
        "job_shortfall", "network", "not_measured", "host_limit", "storage", "bulletin")
    assert NEWS_KINDS == FAIL_KINDS == ("regression", "mismatch", "change", "gone", "health")


def test_every_rule_finds_registered_kinds_on_a_side_the_registry_names() -> None:
    for rule in RULES:
        assert rule.party in PARTIES
        for name in rule.kinds:
            assert rule.party in kind_named(name).parties, (rule.name, name)


def test_every_kind_the_report_counts_has_a_rule_or_is_counted_from_the_history() -> None:
    found = {name for rule in RULES for name in rule.kinds}
    assert set(FINDING_KINDS) - found == {"regression"}
    # and every side a kind is registered on has a rule for it
    sides = {(name, rule.party) for rule in RULES for name in rule.kinds}
    for kind in KINDS:
        if kind.report and kind.name != "regression":
            assert {(kind.name, p) for p in kind.parties} <= sides, kind.name


def test_the_registry_names_modules_that_exist() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for kind in KINDS:
        for where in kind.where:
            assert (root / where).is_file(), (kind.name, where)
    for rule in RULES:
        assert (root / rule.source).exists(), (rule.name, rule.source)


def test_a_rule_that_yields_an_undeclared_kind_is_refused_not_miscounted() -> None:
    rule = Rule("test", "renter", ("contention",), "fleet/analysis/contention.py",
                lambda _: [("gap", "p", "title", "evidence")])
    with pytest.raises(ValueError, match="not among its kinds"):
        rule.apply(None)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"fleet/findings/kinds\.py"):
        kind_named("slow")


def test_a_rule_puts_its_findings_on_its_side_and_names_itself_the_source() -> None:
    rule = Rule("test", "unsettled", ("gap",), "fleet/analysis/matmul/gaps.py",
                lambda _: [("gap", "p", "title", "evidence", "why", ("a", "b"))])
    [found] = rule.apply(None)  # type: ignore[arg-type]
    assert (found.party, found.source, found.details) == (
        "unsettled", "fleet/analysis/matmul/gaps.py", ("a", "b"))


def test_counts_and_the_line_read_one_list() -> None:
    found = [Finding("job_shortfall", "p", "t", "e", party="renter"),
             Finding("job_shortfall", "p", "t", "e"),
             Finding("gap", "q", "t", "e", party="unsettled")]
    tally = counts(found, regressions=2)
    assert list(tally) == list(FINDING_KINDS)
    assert {k: n for k, n in tally.items() if n} == {
        "gap": 1, "regression": 2, "job_shortfall": 2}
    assert line(found, 2) == "gap 1 (not settled 1), regression 2, job_shortfall 2 " \
                             "(yours to fix 1)"
    assert line([]) == "none"
    # a kind the registry does not hold is still counted, after the registered ones
    assert list(counts([replace(found[0], kind="new")]))[-1] == "new"


def test_fail_on_takes_the_registrys_kinds() -> None:
    assert parse_fail_on("gap,not_measured") == ("gap", "not_measured")
    with pytest.raises(InputError, match="change is not a kind"):
        parse_fail_on("change")  # the sweep's news only
    assert check_fail_on("change,gap") == ("change", "gap")
    with pytest.raises(InputError, match="unknown slow"):
        check_fail_on("slow")
