"""Every case under tests/fixtures/gpus: replay its recording, check the expected facts.

Adding a GPU is adding a folder (nvml-recording.json + expected.json), not a test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.collect import collect
from agent.health import card as health
from fleet.model.document import parse_document
from tests.conftest import GPU_CASES

CASES = sorted(p.name for p in GPU_CASES.iterdir() if (p / "expected.json").is_file())


def mismatches(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where `actual` differs from `expected`; dicts compare only the expected keys."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{path}.{key}: missing")
            else:
                out += mismatches(value, actual[key], f"{path}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} items, got {actual!r}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for m in mismatches(e, a, f"{path}[{i}]")]
    if isinstance(expected, float) or isinstance(actual, float):
        ok = expected is not None and actual is not None and abs(expected - actual) < 1e-6
        return [] if ok else [f"{path}: expected {expected!r}, got {actual!r}"]
    return [] if expected == actual else [f"{path}: expected {expected!r}, got {actual!r}"]


def verdicts(gpu: dict[str, Any]) -> dict[str, str]:
    return {name: cap["verdict"] for name, cap in gpu["capabilities"].items()}


def probed(gpu: dict[str, Any]) -> dict[str, str]:
    return {name: cap["probe"]["result"] for name, cap in gpu["capabilities"].items()
            if cap["probe"] is not None}


@pytest.mark.parametrize("case", CASES)
def test_case_fingerprint_matches_its_facts(case: str) -> None:
    folder = GPU_CASES / case
    expected = json.loads((folder / "expected.json").read_text())
    document = collect(str(folder / "nvml-recording.json"), probe_torch=False)
    parse_document(document, case)  # the controller accepts what the agent sends
    gpus = document["gpus"]
    assert len(gpus) == len(expected["gpus"])
    problems: list[str] = []
    for i, (want, got) in enumerate(zip(expected["gpus"], gpus, strict=True)):
        want = dict(want)
        want_caps = want.pop("capabilities", None)
        want.pop("probed", None)
        problems += mismatches(want, got, f"gpu[{i}]")
        if want_caps is not None:
            problems += mismatches(want_caps, verdicts(got), f"gpu[{i}].capabilities")
    assert not problems, "\n".join(problems)


PROBED = [c for c in CASES
          if any("probed" in g for g in json.loads((GPU_CASES / c / "expected.json").read_text())[
              "gpus"])]


@pytest.mark.parametrize("case", PROBED)
def test_write_probes_record_what_the_driver_answered(case: str) -> None:
    folder = GPU_CASES / case
    expected = json.loads((folder / "expected.json").read_text())
    document = collect(str(folder / "nvml-recording.json"), probe_writes=True, probe_torch=False)
    parse_document(document, case)
    for want, got in zip(expected["gpus"], document["gpus"], strict=True):
        assert probed(got) == want["probed"]
        for setting, result in want["probed"].items():
            cap = got["capabilities"][setting]
            assert cap["method"] == "probed"
            assert cap["verdict"] == ("yes" if result == "accepted" else "no")


def test_a_wrong_field_is_caught() -> None:
    """The matcher itself must fail on a wrong value, a missing key and a wrong length."""
    assert mismatches({"a": 1}, {"a": 2})
    assert mismatches({"a": 1}, {})
    assert mismatches([1, 2], [1])
    assert mismatches({"w": 700.0}, {"w": 699.0})
    assert not mismatches({"a": {"b": [1]}}, {"a": {"b": [1], "c": 3}})


def test_recording_written_while_fingerprinting_replays_to_the_same_fingerprint(
    tmp_path: Path, h100_recording: Path
) -> None:
    """What `--record` writes must give back the same fingerprint, field for field."""
    out = tmp_path / "again.json"
    first = collect(str(h100_recording), record_path=str(out), probe_torch=False)
    second = collect(str(out), probe_torch=False)
    assert first["gpus"] == second["gpus"]
    # The verdicts depend on the user the agent ran as: the recording keeps it.
    assert json.loads(out.read_text())["context"] == json.loads(h100_recording.read_text())[
        "context"]


LENT = GPU_CASES / "h100-sxm5-lent-device"


def before_health(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fingerprints as agents before the health counters sent them: no `health`, and none
    of its calls among the getters that gave no answer; nor the NVLink far ends and the
    variant's link count (issue 38), which came later still."""
    out = []
    for gpu in gpus:
        gpu = {k: v for k, v in gpu.items()
               if k not in ("health", "nvlink_remotes", "nvlink_links_variant")}
        gpu["unavailable"] = {k: v for k, v in gpu["unavailable"].items()
                              if k.split("(")[0] not in health.CALLS}
        out.append(gpu)
    return out


def test_the_lent_h100s_recording_replays_to_what_the_live_driver_said() -> None:
    """Recorded on the device tool with `python3 -m agent fingerprint --record` (see
    bench/RESULTS.md): replaying it here must give the live fingerprint, field for field.
    The live document predates the health counters, whose answers were added to the
    recording from the same machine's nvidia-smi -q (tests/fixtures/gpus/README.md)."""
    live = json.loads((LENT / "live-document.json").read_text())
    replayed = collect(str(LENT / "nvml-recording.json"), probe_torch=False)
    assert live["source"]["kind"] == "nvml"
    assert "health" not in live["gpus"][0]
    assert before_health(replayed["gpus"]) == live["gpus"]
    assert replayed["gpus"][0]["health"]["verdict"] == "healthy"


@pytest.mark.parametrize("form", ["nvidia-smi-q.xml", "nvidia-smi-q.txt"])
def test_nvidia_smi_output_of_the_lent_h100_gives_the_same_identity(form: str) -> None:
    live = json.loads((LENT / "live-document.json").read_text())["gpus"][0]
    from_smi = collect(str(LENT / form), probe_torch=False)["gpus"][0]
    for field in ("name", "uuid", "serial", "pci_device_id", "pci_bus_id", "driver_version",
                  "cuda_driver_version", "power_limit_w", "power_limit_default_w",
                  "power_limit_min_w", "power_limit_max_w", "max_sm_clock_mhz",
                  "virtualization_mode", "mig_enabled", "ecc_enabled", "persistence_mode",
                  "memory_total_mib", "variant"):
        assert from_smi[field] == live[field], field
