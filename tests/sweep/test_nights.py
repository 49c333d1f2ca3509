"""A week of nightly sweeps over loopback SSH hosts: each change is reported on the night it
happens, and nothing else is.

Host lambda/a replays an NVML recording that the test edits between nights (driver upgraded,
power limit lowered, card swapped for another variant); coreweave/b is the timing side, whose
documents are built for the test and stored into each night's run before the sweep, which
then resumes the run (the loopback hosts have no GPU to time); nebius/c leaves the inventory
on the last night and nebius/d joins it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.sweeps import create_run, documents_stored, newest_run
from tests.probe.conftest import Workspace
from tests.store import factory
from tests.store.conftest import migrated_sqlite
from tests.sweep.conftest import engine_of, recording_copy

NAME = "nightly"
BASE_TFLOPS = 680.0


def _driver(version: str) -> Any:
    def edit(data: dict[str, Any]) -> None:
        data["system"]["nvmlSystemGetDriverVersion"] = version
    return edit


def _power(milliwatts: int) -> Any:
    def edit(data: dict[str, Any]) -> None:
        _driver("590.44.01")(data)
        for device in data["devices"]:
            device["nvmlDeviceGetPowerManagementLimit"] = milliwatts
            device["nvmlDeviceGetEnforcedPowerLimit"] = milliwatts
    return edit


def _night(workspace: Workspace, night: int, recording: Path, hosts_c: bool, host_d: bool,
           tflops: float) -> dict[str, Any]:
    servers = workspace.servers
    hosts = {
        "lambda/a": workspace.ssh_host(servers[0], expect={"variant": "H100 SXM5 80GB"},
                                       env={"FLEET_NVML_REPLAY": str(recording)}),
        # Stored before the sweep each night, so never contacted.
        "coreweave/b": workspace.ssh_host(servers[1]),
    }
    if hosts_c:
        hosts["nebius/c"] = workspace.ssh_host(servers[2], "h200-sxm-x2-passthrough")
    if host_d:
        hosts["nebius/d"] = workspace.ssh_host(servers[3], "provider-b-a100-sxm4")
    inventory = workspace.inventory(hosts, f"night-{night}.yaml")
    # At the newest schema from the first night on: the sweeps keep it there.
    if not workspace.db.exists():
        migrated_sqlite(workspace.db)
    engine = engine_of(f"sqlite:///{workspace.db}")
    run_id = create_run(engine, RunInfo(kind="sweep", sweep=NAME, inventory=str(inventory)))
    document = factory.document(
        host="b", gpus=2, tflops=tflops, seed=night,
        collected_at=dt.datetime(2026, 11, night, 3, 0, tzinfo=dt.UTC))
    with Ingest(engine, RunInfo(kind="sweep", sweep=NAME, run_id=run_id)) as ingest:
        ingest.store(AgentDocument.model_validate(document),
                     Origin("coreweave", "b", Listing()))
    engine.dispose()
    result = workspace.fleet("sweep", str(inventory), "--name", NAME, "--resume",
                             "--fingerprint-only", "--accept-new-host-keys", "--json",
                             "--db", str(workspace.db))
    assert result.returncode == 0, result.stderr[-3000:]
    report = result.report
    assert report["run_id"] == run_id
    assert "coreweave/b" not in report["probed"]
    assert all(h["ok"] for h in report["hosts"]), report["hosts"]
    findings: dict[str, Any] = report["findings"]
    return findings


def _changes(findings: dict[str, Any]) -> set[tuple[str, int | None, str]]:
    return {(f"{c['provider']}/{c['host']}", c["gpu_index"], c["field"])
            for c in findings["changes"]}


def _quiet(findings: dict[str, Any], *, except_: tuple[str, ...] = ()) -> None:
    for kind in ("changes", "mismatches", "gone", "new"):
        if kind not in except_:
            assert not findings[kind], (kind, findings[kind])
    if "regressions" not in except_:
        assert not [r for r in findings["regressions"] if r["new"]], findings["regressions"]


def test_each_change_is_reported_on_its_night_and_nothing_else(workspace: Workspace) -> None:
    root = workspace.root
    h100 = "h100-sxm5-passthrough"
    nights = [
        # (recording of lambda/a, nebius/c listed, nebius/d listed, coreweave/b TFLOP/s)
        (recording_copy(root, h100, "n1"), True, False, BASE_TFLOPS),
        (recording_copy(root, h100, "n2", _driver("590.44.01")), True, False, BASE_TFLOPS),
        (recording_copy(root, h100, "n3", _power(500_000)), True, False, BASE_TFLOPS),
        (recording_copy(root, h100, "n4", _power(500_000)), True, False, BASE_TFLOPS),
        (recording_copy(root, h100, "n5", _power(500_000)), True, False, BASE_TFLOPS),
        (recording_copy(root, h100, "n6", _power(500_000)), True, False, BASE_TFLOPS * 0.75),
        (recording_copy(root, "provider-a-a100-pcie", "n7"), False, True, BASE_TFLOPS * 0.75),
    ]
    seen = [_night(workspace, i + 1, *night) for i, night in enumerate(nights)]
    one, two, three, four, five, six, seven = seen

    assert set(one["new"]) == {"lambda/a", "coreweave/b", "nebius/c"}
    _quiet(one, except_=("new",))

    assert _changes(two) == {("lambda/a", 0, "driver_version")}
    (change,) = two["changes"]
    assert (change["before"], change["after"]) == ("580.159.04", "590.44.01")
    _quiet(two, except_=("changes",))

    assert _changes(three) == {("lambda/a", 0, "power_limit_w")}
    (change,) = three["changes"]
    assert (change["before"], change["after"]) == (700.0, 500.0)
    _quiet(three, except_=("changes",))

    _quiet(four)
    _quiet(five)

    # Both of b's GPUs, 25% under their own median of five nights (min_history).
    assert {(r["host"], r["gpu_index"], r["new"]) for r in six["regressions"]} == {
        ("b", 0, True), ("b", 1, True)}
    assert all(r["tflops"] < r["threshold"] < r["baseline"] for r in six["regressions"])
    _quiet(six, except_=("regressions",))

    fields = {field for host, _, field in _changes(seven) if host == "lambda/a"}
    assert {"variant", "uuid"} <= fields
    assert {host for host, _, _ in _changes(seven)} == {"lambda/a"}
    assert [m["host"] for m in seven["mismatches"]] == ["a"]
    assert "listed variant H100 SXM5 80GB" in seven["mismatches"][0]["problem"]
    assert seven["gone"] == ["nebius/c"] and seven["new"] == ["nebius/d"]
    # Still slow: reported as lasting since night 6, not as news.
    lasting = seven["regressions"]
    assert lasting and all(not r["new"] and r["began_run_id"] == six["run_id"]
                           for r in lasting)

    engine = engine_of(f"sqlite:///{workspace.db}")
    for findings in seen:
        assert set(documents_stored(engine, findings["run_id"]).values()) == {1}
    engine.dispose()


def test_fail_on_exits_non_zero_on_the_night_of_a_change(workspace: Workspace) -> None:
    root = workspace.root
    exits = []
    for night, edit in enumerate([None, _driver("590.44.01")], start=1):
        recording = recording_copy(root, "h100-sxm5-passthrough", f"f{night}", edit)
        inventory = workspace.inventory({"lambda/a": workspace.ssh_host(
            workspace.servers[0], env={"FLEET_NVML_REPLAY": str(recording)})},
            f"fail-{night}.yaml")
        result = workspace.fleet("sweep", str(inventory), "--fingerprint-only",
                                 "--accept-new-host-keys", "--db", str(workspace.db),
                                 "--fail-on", "change,gone")
        exits.append(result.returncode)
        if night == 2:
            assert "driver_version 580.159.04 -> 590.44.01" in result.stdout
            assert "--fail-on: tonight shows change" in result.stderr
    assert exits == [0, 6]


def test_a_report_path_that_cannot_be_written_is_refused_before_probing(
        workspace: Workspace) -> None:
    recording = recording_copy(workspace.root, "h100-sxm5-passthrough", "r1", None)
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0], env={"FLEET_NVML_REPLAY": str(recording)})}, "report.yaml")
    missing = workspace.root / "no-such-dir" / "night.html"
    refused = workspace.fleet("sweep", str(inventory), "--fingerprint-only",
                              "--accept-new-host-keys", "--db", str(workspace.db),
                              "--report", str(missing))
    assert refused.returncode == 2
    assert f"--report {missing}: the directory {missing.parent} does not exist" in \
        refused.stderr
    assert not workspace.db.exists() or newest_run(engine_of(f"sqlite:///{workspace.db}"),
                                                   "nightly") is None
