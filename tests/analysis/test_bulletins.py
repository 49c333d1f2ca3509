"""NVIDIA's security bulletins as data (fleet/analysis/host/bulletins.json): the file fleet
ships validates and each entry names its bulletin, CVE, date, source and when it was
read; each range holds exactly the versions its source says; a wrong entry is refused
naming it; a fabric manager not at its driver's version is called."""

from __future__ import annotations

import json

import pytest

from fleet.analysis.host.bulletins import (
    NodeVersions,
    judge_versions,
    load_bulletins,
    parse_version,
)
from fleet.errors import InputError

KNOWN = load_bulletins()


def test_every_entry_says_where_it_was_read() -> None:
    assert {b.cve for b in KNOWN.bulletins} == {
        "CVE-2024-0132", "CVE-2025-23359", "CVE-2025-23266", "CVE-2024-0126"}
    for bulletin in KNOWN.bulletins:
        assert bulletin.url == ("https://nvidia.custhelp.com/app/answers/detail/a_id/"
                                + bulletin.bulletin)
        assert "CVEProject/cvelistV5" in bulletin.source and bulletin.read_at == "2026-11-29"


@pytest.mark.parametrize(("toolkit", "under"), [
    ("1.16.1", ["5582", "5616", "5659"]), ("1.16.2", ["5616", "5659"]),
    ("1.17.3", ["5616", "5659"]), ("1.17.4", ["5659"]), ("1.17.7", ["5659"]),
    ("1.17.8", []), ("1.18.0", []), ("not-a-version", [])])
def test_the_container_toolkit_ranges(toolkit: str, under: list[str]) -> None:
    found = judge_versions(NodeVersions("n", None, toolkit, None), KNOWN)
    named = [b.bulletin for b in KNOWN.bulletins for f in found if b.bulletin in f.title]
    assert sorted(set(named)) == under


@pytest.mark.parametrize(("driver", "called"), [
    ("550.127.04", True), ("550.127.05", False), ("550.90.07", True), ("535.216.01", False),
    ("535.183.06", True), ("565.57.01", False), ("560.35.03", False), ("580.159.04", False)])
def test_the_driver_branches(driver: str, called: bool) -> None:
    found = judge_versions(NodeVersions("n", driver, None, None), KNOWN)
    assert bool(found) is called
    if called:
        assert found[0].title == f"n: driver {driver} under NVIDIA bulletin 5586 (CVE-2024-0126)"
        assert found[0].action == (
            "ask the provider to patch the driver")


def test_a_fabric_manager_off_its_driver_is_called() -> None:
    (found,) = judge_versions(NodeVersions("n", "580.95.05", None, "580.82.07"), KNOWN)
    assert found.rule == "fabric-manager"
    assert judge_versions(NodeVersions("n", "580.95.05", None, "580.95.05"), KNOWN) == []


def test_a_wrong_entry_is_refused_naming_it() -> None:
    data = json.loads(json.dumps(KNOWN.model_dump()))
    data["bulletins"][1]["affected"][0] = {"component": "driver", "below": "550.1"}
    with pytest.raises(InputError) as caught:
        load_bulletins(json.dumps(data), "bulletins.json")
    assert "bulletins.json: not a fleet-bulletins/1 file" in str(caught.value)
    assert "bulletins.1.affected.0" in str(caught.value)
    assert "names its branch" in str(caught.value)


def test_versions_parse_as_numbers() -> None:
    assert parse_version("550.127.05") == (550, 127, 5)
    assert parse_version("1.17.8") < parse_version("1.17.10")  # type: ignore[operator]
    assert parse_version("1.17.8-rc.1") is None and parse_version(None) is None
