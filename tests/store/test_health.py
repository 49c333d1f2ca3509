"""Each GPU's health stored on its fingerprint row, on SQLite and PostgreSQL: the verdict,
its reasons and the counters a sweep compares, flat; NULL for an agent that read none."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, select

from fleet.analysis.sweep.history import HEALTH_NEWS
from fleet.model.document import AgentDocument
from fleet.store.ingest import Ingest, Origin
from fleet.store.models import Fingerprint
from tests.store import factory
from tests.store.health import give_health, health


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _stored(engine: Engine) -> list[tuple[Any, ...]]:
    f = Fingerprint
    with engine.connect() as conn:
        rows = conn.execute(select(f.gpu_index, f.health, f.health_reasons,
                                   f.health_counters).order_by(f.gpu_index)).all()
    return [tuple(row) for row in rows]


def test_health_is_stored_flat_and_without_the_xid_lines(engine: Engine) -> None:
    reason = "2 uncorrectable ECC errors since the driver loaded"
    data = give_health(factory.document(gpus=3), {
        0: health(),
        1: health("failing", [reason], ecc_uncorrected_volatile=2,
                  ecc_uncorrected_aggregate=3, remapped_uncorrectable=1,
                  remapped_pending=True, throttle_ns={"thermal": 5_000}),
        # 2: none, as an agent before the health counters sent it
    })
    with Ingest(engine) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("lambda"))
    healthy, failing, old = _stored(engine)
    assert healthy[1:3] == ("healthy", [])
    assert failing[1:3] == ("failing", [reason])
    assert old[1:] == (None, None, None)
    assert _decoded(failing[3]) == {
        "ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 2,
        "ecc_corrected_aggregate": 0, "ecc_uncorrected_aggregate": 3,
        "remapped_correctable": 0, "remapped_uncorrectable": 1, "remapped_pending": True,
        "remapped_failure": False, "pcie_replays": 0, "energy_mj": 1_000_000,
        "throttle_power_ns": 9_000_000_000, "throttle_thermal_ns": 5_000,
        "throttle_reliability_ns": 0}
    # The sweep compares counters by these names: each must be one ingest writes.
    written = set(_decoded(failing[3])) | {"retired_single_bit", "retired_double_bit",
                                           "retired_pending"}
    assert set(HEALTH_NEWS) <= written
    assert "Xid" not in json.dumps(_decoded(failing[3]))


def test_counters_the_driver_did_not_give_are_left_out(engine: Engine) -> None:
    unknown = health("unknown", ["ECC and row remapping are not visible in this vGPU"],
                     counters=False)
    data = give_health(factory.document(gpus=1), {0: unknown})
    data["gpus"][0]["health"]["retired_pages"] = {"single_bit": 1, "double_bit": None,
                                                  "pending": None}
    with Ingest(engine) as ingest:
        ingest.store(AgentDocument.model_validate(data), Origin("lambda"))
    ((_, verdict, reasons, counters),) = _stored(engine)
    assert (verdict, reasons) == ("unknown",
                                  ["ECC and row remapping are not visible in this vGPU"])
    assert _decoded(counters) == {"retired_single_bit": 1}
