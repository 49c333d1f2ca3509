"""Health news between nights: a verdict that changed and a counter of harm that rose are
news, naming the GPU, the counter and both nights' values; counters that rise with use
(energy, time at the power cap), a volatile counter reset with the driver, another card
at the same index and nights without counters are not."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.analysis.dataset import Scope
from fleet.analysis.sweep.history import GpuState, HealthNews, HostNight, Night, compare_night
from fleet.analysis.sweep.nights import read_nights
from fleet.errors import InputError
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.sweeps import create_run, finish_run
from fleet.sweep.run import check_fail_on
from tests.probe.conftest import Workspace
from tests.store import factory
from tests.store.conftest import migrated_sqlite
from tests.store.health import give_health, health
from tests.sweep.conftest import engine_of

START = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC)
ECC = "2 uncorrectable ECC errors since the driver loaded"


def _store_night(engine: Engine, night: int, by_index: dict[int, dict[str, Any]]) -> int:
    """One sweep night of host lambda/a (2 GPUs), each GPU's health from `by_index`
    (none where missing: an agent before the health counters)."""
    run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly"))
    data = give_health(factory.document(host="a", gpus=2, seed=night,
                                        collected_at=START + dt.timedelta(days=night)),
                       by_index)
    with Ingest(engine, RunInfo(kind="sweep", sweep="nightly", run_id=run_id)) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("lambda", "a"))
    finish_run(engine, run_id)
    return run_id


def test_a_rise_in_uncorrected_ecc_is_news_and_a_rise_in_energy_is_not(
        engine: Engine) -> None:
    _store_night(engine, 1, {})  # before the health counters: nothing to compare with
    second = _store_night(engine, 2, {
        0: health(energy_mj=1_000_000),
        1: health(energy_mj=2_000_000, throttle_ns={"power": 1_000})})
    # Tonight GPU 0's driver counted two uncorrectable errors; GPU 1 only worked.
    third = _store_night(engine, 3, {
        0: health("failing", [ECC], ecc_uncorrected_volatile=2, energy_mj=1_500_000),
        1: health(energy_mj=9_000_000, throttle_ns={"power": 50_000_000_000})})
    nights = read_nights(engine, "nightly")
    assert [n.run_id for n in nights] == [1, second, third]
    assert compare_night(nights, 1).health == ()  # the night before had no counters
    findings = compare_night(nights)
    assert [(h.gpu_index, h.counter, h.before, h.after, h.since_run_id)
            for h in findings.health] == [(0, "health", "healthy", "failing", second),
                                          (0, "ecc_uncorrected_volatile", 0, 2, second)]
    assert findings.health[1].describe() == (
        "lambda/a GPU 0: ecc_uncorrected_volatile 0 -> 2")
    assert findings.kinds() == {"health"}
    assert findings.changes == ()  # health news is its own kind, not a config change
    assert findings.as_dict()["health"][1] == {
        "provider": "lambda", "host": "a", "gpu_index": 0,
        "counter": "ecc_uncorrected_volatile", "before": 0, "after": 2,
        "since_run_id": second}

    # The report's history tells the night it began, in every form.
    report = build_report(engine, ReportOptions(scope=Scope(sweep="nightly")), "test")
    assert report.history is not None
    events = [(e.run_id, e.kind, e.text) for e in report.history.events
              if e.kind == "health"]
    assert events == [(third, "health", "lambda/a GPU 0: health healthy -> failing"),
                      (third, "health", "lambda/a GPU 0: ecc_uncorrected_volatile 0 -> 2")]
    md = render(report, "md")
    assert ", health: lambda/a GPU 0: ecc\\_uncorrected\\_volatile 0 -&gt; 2" in md
    assert "lambda/a GPU 1" not in md


def _night(run_id: int, *gpus: GpuState) -> Night:
    return Night(run_id, START + dt.timedelta(days=run_id),
                 {"lambda/a": HostNight("lambda", "a", "stored", gpus)})


def _gpu(counters: dict[str, Any] | None, verdict: str | None = "healthy",
         uuid: str = "GPU-0", action: str | None = None) -> GpuState:
    return GpuState(0, uuid, "H100 SXM5 80GB", {"uuid": uuid}, {}, verdict, counters,
                    action=action)


@pytest.mark.parametrize(("why", "before", "after", "news"), [
    ("a volatile count that fell was reset with the driver",
     _gpu({"ecc_corrected_volatile": 7}), _gpu({"ecc_corrected_volatile": 0}), []),
    ("corrected errors that rose are news",
     _gpu({"ecc_corrected_aggregate": 7}), _gpu({"ecc_corrected_aggregate": 9}),
     [("ecc_corrected_aggregate", 7, 9)]),
    ("a remap that became pending is news",
     _gpu({"remapped_pending": False}), _gpu({"remapped_pending": True}),
     [("remapped_pending", False, True)]),
    ("replays and thermal throttle time that rose are news; power throttle and energy not",
     _gpu({"pcie_replays": 0, "throttle_thermal_ns": 0, "throttle_power_ns": 5,
           "energy_mj": 1}),
     _gpu({"pcie_replays": 3, "throttle_thermal_ns": 10, "throttle_power_ns": 500,
           "energy_mj": 9}),
     [("pcie_replays", 0, 3), ("throttle_thermal_ns", 0, 10)]),
    ("a counter the earlier night lacked compares with nothing",
     _gpu({}), _gpu({"retired_double_bit": 1}), []),
    ("another card at the same index: its counters are its own",
     _gpu({"ecc_uncorrected_aggregate": 0}),
     _gpu({"ecc_uncorrected_aggregate": 4}, "failing", uuid="GPU-1"), []),
    ("a verdict back to healthy after a reset is news too",
     _gpu({}, "failing"), _gpu({}, "healthy"), [("health", "failing", "healthy")]),
    ("what to ask the provider for changed: news, beside the verdict that changed",
     _gpu({}, "healthy", action="none"), _gpu({}, "degraded", action="reset"),
     [("health", "healthy", "degraded"), ("action", "none", "reset")]),
    ("the same action on both nights is not news",
     _gpu({}, "degraded", action="reset"), _gpu({}, "degraded", action="reset"), []),
    ("a night stored before actions compares with nothing",
     _gpu({}, "degraded"), _gpu({}, "degraded", action="reset"), []),
    ("an older agent's night (no verdict, no counters) is not news",
     _gpu(None, None), _gpu({"ecc_uncorrected_volatile": 5}, "failing"), []),
])
def test_which_rise_is_news(why: str, before: GpuState, after: GpuState,
                            news: list[tuple[str, Any, Any]]) -> None:
    found: tuple[HealthNews, ...] = compare_night([_night(1, before), _night(2, after)]
                                                  ).health
    assert [(h.counter, h.before, h.after) for h in found] == news, why


def test_fail_on_health_is_a_sweep_kind_with_or_without_the_report() -> None:
    assert check_fail_on("health,change", report=False) == ("health", "change")
    assert check_fail_on("health") == ("health",)
    with pytest.raises(InputError, match="unknown healthy"):
        check_fail_on("healthy")


def test_fleet_sweep_fails_on_the_night_a_health_counter_rose(workspace: Workspace) -> None:
    """`fleet sweep --fail-on health` as a user runs it: host b's documents are stored into
    each night's run before the sweep resumes it (the loopback host has no GPU), on night
    2 only its energy rose, on night 3 its corrected ECC count too."""
    inventory = workspace.inventory({"coreweave/b": workspace.ssh_host(workspace.servers[0])})
    exits = []
    for night, block in enumerate([health(energy_mj=1_000), health(energy_mj=5_000),
                                   health(energy_mj=9_000, ecc_corrected_volatile=3)],
                                  start=1):
        # At the newest schema from the first night on: the sweeps keep it there.
        if not workspace.db.exists():
            migrated_sqlite(workspace.db)
        engine = engine_of(f"sqlite:///{workspace.db}")
        run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly",
                                            inventory=str(inventory)))
        data = give_health(factory.document(host="b", gpus=1, seed=night,
                                            collected_at=START + dt.timedelta(days=night)),
                           {0: block})
        with Ingest(engine, RunInfo(kind="sweep", sweep="nightly", run_id=run_id)) as ingest:
            ingest.store(AgentDocument.model_validate(data), Origin("coreweave", "b"))
        engine.dispose()
        done = workspace.fleet("sweep", str(inventory), "--resume", "--fingerprint-only",
                               "--accept-new-host-keys", "--db", str(workspace.db),
                               "--fail-on", "health")
        exits.append(done.returncode)
        if night == 3:
            assert "health: coreweave/b GPU 0: ecc_corrected_volatile 0 -> 3" in done.stdout
            assert "--fail-on: tonight shows health" in done.stderr
        elif night == 2:
            assert "nothing changed" in done.stdout, done.stdout
    assert exits == [0, 0, 6]
