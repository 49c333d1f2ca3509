"""Findings on network fingerprints (fleet/analysis/node/network.py), driven by the fixtures of
tests/fixtures/network/: each folder's expected.json lists the findings its facts call
for, as [rule, severity, devices]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agent.network.fingerprint import network, replay
from fleet.analysis.node.network import (
    NetworkExpectation,
    NodeNetwork,
    compare_siblings,
    judge_network,
)
from fleet.model.network import NetworkFingerprint

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "network"
FOLDERS = sorted(p.name for p in CASES.iterdir() if (p / "expected.json").exists())


def doc(case: str) -> dict[str, Any]:
    return network(str(CASES / case / "sys"), replay(str(CASES / case / "text")))


def load(case: str) -> NetworkFingerprint:
    return NetworkFingerprint.model_validate(doc(case))


def rows(findings: list[Any]) -> list[list[Any]]:
    return [[f.rule, f.severity, list(f.devices)] for f in findings]


@pytest.mark.parametrize("case", FOLDERS)
def test_fixture_findings(case: str) -> None:
    expected = json.loads((CASES / case / "expected.json").read_text())
    findings = judge_network(case, load(case))
    assert rows(findings) == expected["findings"]
    for finding in findings:
        assert finding.action and finding.source and finding.evidence


def test_lent_node_blamed_only_when_sold_with_a_fabric() -> None:
    lent = load("lent-h100-1x")
    assert [f.severity for f in judge_network("lent", lent)] == ["info"]
    sold = judge_network("lent", lent, NetworkExpectation(expected_nics=8))
    expected = json.loads((CASES / "lent-h100-1x/expected.json").read_text())
    assert rows(sold) == expected["sold_with_8"]


def test_expected_rate_judges_every_port() -> None:
    # an NDR node sold as XDR (800): every port is below what was sold
    findings = judge_network("n", load("h100-8x-ib-ndr"),
                             NetworkExpectation(expected_rate_gbps=800))
    assert rows(findings) == [["below-rate", "fault", [f"mlx5_{i}" for i in range(8)]]]
    assert judge_network("n", load("h100-8x-ib-ndr"),
                         NetworkExpectation(expected_nics=8, expected_rate_gbps=400)) == []


def test_fewer_nics_than_siblings() -> None:
    full = load("h100-8x-ib-ndr")
    short = doc("h100-8x-ib-ndr")
    short["devices"] = [d for d in short["devices"] if d["name"] != "mlx5_6"]
    short["fabric_nics"] = 7
    nodes = [NodeNetwork("a", "p", "H100", full), NodeNetwork("b", "p", "H100", full),
             NodeNetwork("c", "p", "H100", NetworkFingerprint.model_validate(short)),
             # another provider's node is no sibling
             NodeNetwork("d", "q", "H100", load("efa-p4d"))]
    findings = compare_siblings(nodes)
    assert [(f.host, f.rule) for f in findings] == [("c", "fewer-than-siblings")]
    assert "7 fabric NICs" in findings[0].title
    assert compare_siblings(nodes[3:]) == []


def test_model_refuses_what_the_agent_never_sends() -> None:
    good = doc("h100-8x-ib-ndr")
    bad = json.loads(json.dumps(good))
    bad["devices"][0]["colour"] = "red"
    with pytest.raises(ValidationError):
        NetworkFingerprint.model_validate(bad)
    bad = json.loads(json.dumps(good))
    bad["devices"][0]["fabric"] = False  # an InfiniBand port is a fabric NIC
    with pytest.raises(ValidationError):
        NetworkFingerprint.model_validate(bad)
    bad = json.loads(json.dumps(good))
    bad["fabric_nics"] = 9
    with pytest.raises(ValidationError):
        NetworkFingerprint.model_validate(bad)
    bad = json.loads(json.dumps(good))
    bad["devices"][0]["gpu_distance"] = {"0": "NEAR"}
    with pytest.raises(ValidationError):
        NetworkFingerprint.model_validate(bad)
