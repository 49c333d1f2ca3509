"""The agent document's "network" block (agent/network/document.py through
agent/collect.py): read on this machine it validates as the controller's model; made from
a recording it says whose network it is; a failure costs the block, never the document;
a host with more interfaces than the model's bound keeps its fabric NICs."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import agent.network.document as block
from agent.collect import collect
from fleet.model.document import parse_document
from fleet.model.network import NetworkFingerprint
from tests.conftest import GPU_CASES, ROOT
from tests.store.network_factory import fingerprint


@pytest.mark.parametrize("python", ["current", "3.8"])
def test_the_agent_command_sends_this_machines_network(python: str,
                                                       request: pytest.FixtureRequest) -> None:
    # The agent runs on the host's Python from 3.8 up: the oldest too.
    exe = sys.executable if python == "current" else str(request.getfixturevalue("python38"))
    done = subprocess.run([exe, "-m", "agent", "fingerprint", "--no-torch"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(e["event"] == "progress" and e["stage"] == "network" for e in events)
    document = events[-1]["document"]
    parsed = parse_document(document, "this machine")
    assert parsed.network is not None
    assert parsed.network == NetworkFingerprint.model_validate(document["network"])
    assert not [e for e in document["errors"] if e["stage"] == "network"]
    # Every machine has an interface (loopback at least), live, without a note.
    assert parsed.network.devices and not parsed.network.notes


def test_a_replayed_document_says_whose_network_it_is() -> None:
    document = collect(str(GPU_CASES / "h200-sxm-x2-passthrough" / "nvml-recording.json"),
                       probe_torch=False)
    parsed = parse_document(document, "replayed")
    assert parsed.network is not None
    assert parsed.network.notes[0].startswith(
        "read on the machine that replayed the recording file, as the host facts are")


def test_a_failure_costs_the_block_not_the_document(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: str = "/", run: Any = None) -> dict[str, Any]:
        raise PermissionError("/sys/class/net: denied")

    monkeypatch.setattr(block, "network", broken)
    document = collect(probe_torch=False)
    assert document["network"] is None
    assert [e for e in document["errors"] if e["stage"] == "network"] == [{
        "stage": "network", "message": "network not read (PermissionError: /sys/class/net: "
                                       "denied); the rest of the document stands"}]
    assert parse_document(document, "broken").network is None


def test_a_host_with_hundreds_of_veths_keeps_its_fabric_and_stays_valid() -> None:
    found = fingerprint("h100-8x-ib-ndr")
    lo = next(d for d in found["devices"] if d["name"] == "lo")
    veths = [dict(lo, name=f"veth{i:04x}", netdev=f"veth{i:04x}") for i in range(700)]
    found["devices"] = veths[:350] + found["devices"] + veths[350:]
    bounded = block._bounded(found)
    model = NetworkFingerprint.model_validate(bounded)
    assert len(model.devices) == block.MAX_DEVICES
    assert [d.name for d in model.fabric] == [f"mlx5_{i}" for i in range(8)]
    assert any(d.name == "eno1" for d in model.devices)
    assert model.notes[-1] == ("198 of 710 interfaces not listed (virtual ones first): a "
                               "document lists at most 512")
