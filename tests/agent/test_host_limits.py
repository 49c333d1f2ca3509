"""The host's limits as the agent reads them (agent/host/): each case of
tests/fixtures/host_limits/ read as its expected.json says, the parsers on the kernel's own
formats, and the block read on this machine, by the agent command on the oldest Python
it supports too, valid under the controller's model."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from typing import Any

import pytest

from agent.gpu import host
from agent.host import acs, limits, software
from agent.host.document import host_limits
from fleet.model.document import parse_document
from fleet.model.host_limits import HostLimits
from tests.conftest import FIXTURES, ROOT

CASES = FIXTURES / "host_limits"


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_each_case_reads_as_expected(case: str) -> None:
    root = str(CASES / case)
    expected: dict[str, Any] = json.loads((CASES / case / "expected.json").read_text())
    found = limits.read_limits(root)
    read_acs = acs.read_acs(root)
    want_acs = expected.pop("acs")
    for key, value in expected.items():
        assert found[key] == value, key
    assert (read_acs["endpoints"], read_acs["readable"]) == (want_acs["endpoints"],
                                                             want_acs["readable"])
    assert [b["address"] for b in read_acs["bridges"] if b["redirect"]] == want_acs.get(
        "redirecting", [])
    block = host_limits(root, software=False)
    assert HostLimits.model_validate(block).acs.redirecting == [
        b for b in HostLimits.model_validate(block).acs.bridges if b.redirect]


def test_acs_needs_the_extended_space_and_follows_the_capability_list() -> None:
    assert acs.acs_control(bytes(256)) is None  # not root: only the first 256 bytes
    space = bytearray(4096)
    assert acs.acs_control(bytes(space)) == {}  # no extended capability at all
    struct.pack_into("<I", space, 0x100, 0x0001 | (1 << 16) | (0x200 << 20))
    struct.pack_into("<I", space, 0x200, 0x000D | (1 << 16))
    struct.pack_into("<H", space, 0x206, 0x0004)  # RR alone
    bits = acs.acs_control(bytes(space))
    assert bits is not None and [k for k, v in bits.items() if v] == ["RR"]


@pytest.mark.parametrize(("text", "cpus"), [("max 100000", None), ("800000 100000", 8.0),
                                             ("150000 100000", 1.5), ("", None)])
def test_cgroup_cpu_max(text: str, cpus: float | None) -> None:
    assert limits.parse_cpu_max(text) == cpus


def test_memory_limits_and_tmpfs_sizes() -> None:
    assert limits.parse_memory_max("max") is None
    assert limits.parse_memory_max("9223372036854771712") is None  # cgroup v1's none
    assert limits.parse_memory_max("68719476736\n") == 64 << 30
    assert limits.tmpfs_size("rw,size=65536k,inode64") == 64 << 20
    assert limits.tmpfs_size("rw,size=16g") == 16 << 30
    assert limits.tmpfs_size("rw,size=50%") is None
    assert limits.tmpfs_size("rw,inode64") is None


def test_mountinfo_paths_are_unescaped() -> None:
    (mount,) = limits.parse_mountinfo(
        r"36 25 0:32 / /mnt/my\040data rw - nfs4 srv:/a\040b rw,vers=4.2")
    assert (mount["mount_point"], mount["source"], mount["fs_type"]) == (
        "/mnt/my data", "srv:/a b", "nfs4")


def test_memlock_unlimited_and_missing() -> None:
    assert limits.parse_memlock("Max locked memory   unlimited   unlimited   bytes") == (
        None, None)
    assert limits.parse_memlock("Max open files  1024  4096  files") is None


def test_software_answers() -> None:
    smi = ("+---------------------------------------------+\n"
           "| GPU  Boost Slider    Current Value  Max Value |\n"
           "|=============================================|\n"
           "|   0  vboost          0              4         |\n"
           "|   1  vboost          2              4         |\n")
    assert software.parse_vboost(smi) == {0: {"current": 0, "max": 4},
                                          1: {"current": 2, "max": 4}}
    # The columns as the header orders them; the lent H200's rows read "0 vboost 4 0".
    swapped = smi.replace("Current Value  Max Value", "Max Value  Current Value")
    assert software.parse_vboost(swapped) == {0: {"current": 4, "max": 0},
                                              1: {"current": 4, "max": 2}}
    assert software.parse_vboost("0  vboost  4  0\n") == {0: {"current": 4, "max": 0}}
    assert software.parse_version("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: x") \
        == "1.17.8"
    assert software.parse_version("Fabric Manager version is : 550.127.05") == "550.127.05"


def test_the_torch_probe_times_its_import_for_the_limits() -> None:
    # The probe's child is the run's first import of torch: its time, not a second one.
    timings: dict[str, float | None] = {}
    found = host.run_torch_probe(timings=timings)
    assert found["torch_version"] is not None  # the tests' venv has torch
    seconds = timings["import_torch_s"]
    assert seconds is not None and seconds > 0
    assert host.parse_import_seconds("FLEET-TORCH-PROBE {\"error\": \"x\"}\n") is None
    assert host.parse_import_seconds("nothing\n") is None


@pytest.mark.parametrize("python", ["current", "3.8"])
def test_the_agent_command_sends_this_machines_limits(python: str,
                                                     request: pytest.FixtureRequest) -> None:
    exe = sys.executable if python == "current" else str(request.getfixturevalue("python38"))
    done = subprocess.run([exe, "-m", "agent", "fingerprint", "--no-torch"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    document = events[-1]["document"]
    parsed = parse_document(document, "this machine")
    assert parsed.host_limits is not None
    assert parsed.host_limits.memory_total_mib == parsed.host.memory_total_mib
    assert parsed.host_limits.cpus_usable is not None
    assert parsed.host_limits.import_torch_error == "not probed"
    assert not [e for e in document["errors"] if e["stage"] == "host_limits"]
