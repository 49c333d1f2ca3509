"""The node's network through the real ingest path, on SQLite and PostgreSQL: stored a
row per device beside its document and read back as the agent sent it; a malformed
block refuses the whole document with the field named, and nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, select

from fleet.cli import main
from fleet.errors import AgentError
from fleet.model.document import parse_document
from fleet.model.network import NetworkFingerprint
from fleet.store import models
from fleet.store.ingest import Ingest, Origin, RunInfo, parse_text
from fleet.store.network import read_networks
from tests.store import network_factory
from tests.store.conftest import row_counts


def _store(engine: Engine, data: dict[str, Any], host: str = "h200x4") -> int:
    document = parse_document(data, "test")
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        return ingest.store(document, Origin("lent", host)).document_id


def test_a_network_is_stored_and_read_back_as_sent(engine: Engine) -> None:
    data = network_factory.document("h100-8x-ib-far-nic")
    document_id = _store(engine, data)
    with engine.connect() as conn:
        head = conn.execute(select(models.Network.__table__)).one()
        rows = conn.execute(select(models.NetworkDevice.__table__).order_by(
            models.NetworkDevice.position)).all()
    assert (head.document_id, head.fabric_nics, head.gdr_state, head.peermem) == (
        document_id, 8, "on", "loaded")
    assert [r.name for r in rows][:8] == [f"mlx5_{i}" for i in range(8)]
    far = next(r for r in rows if r.name == "mlx5_3")
    assert (far.kind, far.fabric, far.rate_gbps, far.nearest_level, far.nearest_gpus) == (
        "infiniband", True, 400.0, "NODE", "4,5,6,7")
    near = next(r for r in rows if r.name == "mlx5_0")
    assert (near.nearest_level, near.nearest_gpus, near.firmware) == ("PIX", "0",
                                                                     "28.43.2026")
    back = read_networks(engine, documents=[document_id])
    assert back == {document_id: NetworkFingerprint.model_validate(data["network"])}


def test_a_document_without_a_network_stores_none(engine: Engine) -> None:
    data = network_factory.document("h100-8x-ib-ndr")
    del data["network"]
    document_id = _store(engine, data)
    counts = row_counts(engine)
    assert (counts["network"], counts["network_device"], counts["document"]) == (0, 0, 1)
    assert read_networks(engine, documents=[document_id]) == {}


@pytest.mark.parametrize("change, field", [
    (lambda net: net["devices"][0].update(name="x" * 10_000),
     "network.devices.0.name: String should have at most 128 characters"),
    (lambda net: net["devices"][0].update(kind="warp-drive"),
     "network.devices.0.kind: Input should be 'infiniband', 'roce'"),
    (lambda net: net["devices"][0].update(fabric=False),
     "network.devices.0: Value error, mlx5_0: fabric must be true exactly for"),
    (lambda net: net.update(fabric_nics=9),
     "network: Value error, fabric_nics says 9, the devices list 8 fabric NICs"),
    (lambda net: net["devices"][0].update(colour="blue"),
     "network.devices.0.colour: Extra inputs are not permitted"),
])
def test_a_malformed_network_refuses_the_document(change: Any, field: str,
                                                  store_url: str, tmp_path: Path) -> None:
    data = network_factory.document("h100-8x-ib-ndr")
    change(data["network"])
    with pytest.raises(AgentError, match="invalid agent document") as refused:
        parse_text(json.dumps(data), "h200x4.json")
    assert field in str(refused.value)
    # As a user ingests it: rejected with the field named, nothing stored.
    path = tmp_path / "h200x4.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["ingest", "--provider", "lent", str(path),
                                       "--db", store_url], catch_exceptions=False)
    assert result.exit_code == 2
    assert f"rejected        {path}: invalid agent document: " in result.stdout
    assert field.split(":")[0] in result.stdout
    from fleet.store.database import open_engine, resolve

    engine = open_engine(resolve(store_url))
    try:
        assert not any(row_counts(engine).values())
    finally:
        engine.dispose()
