"""Agent documents with a network block: the lent 4x H200 node's own document, its
network replaced by a case of tests/fixtures/network/ as the agent reads it
(agent.network.fingerprint.network on the case's sys tree and tool outputs)."""

from __future__ import annotations

import json
from typing import Any

from agent.network.fingerprint import network, replay
from tests.conftest import FIXTURES

NODE = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
CASES = FIXTURES / "network"


def fingerprint(case: str) -> dict[str, Any]:
    """The network block the agent makes of `case`."""
    return network(str(CASES / case / "sys"), replay(str(CASES / case / "text")))


def document(case: str, hostname: str = "h200x4") -> dict[str, Any]:
    """The lent node's document, its hostname `hostname`, with `case`'s network."""
    data: dict[str, Any] = json.loads(NODE.read_text())
    data["host"]["hostname"] = hostname
    data["network"] = fingerprint(case)
    return data
