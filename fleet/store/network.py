"""The node's network in the store (tables `network` and `network_device`, revision 0021):
the rows ingest writes from a validated document, and the fingerprints read back.

    networks = read_networks(engine, documents=[12, 13])  # {document id: fingerprint}

What is read back is the document's own block, validated again by the model it was
validated by on the way in (fleet/model/network.py), so the analysis
(fleet/analysis/node/network.py) reads the same shape whether it came from an agent or from
the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from sqlalchemy import Connection, Engine, insert, select

from fleet.model.network import Level, NetworkDevice, NetworkFingerprint
from fleet.store import models
from fleet.store.query import in_chunks

# The columns of network_device that are the model's fields, as the agent sent them.
DEVICE_FIELDS = tuple(NetworkDevice.model_fields)
LEVEL_ORDER: tuple[str, ...] = get_args(Level)  # nearest first


def _nearest(device: NetworkDevice) -> tuple[str | None, str | None]:
    if not device.gpu_distance:
        return None, None
    level = min(device.gpu_distance.values(), key=LEVEL_ORDER.index)
    gpus = sorted((int(i) for i, lv in device.gpu_distance.items() if lv == level))
    return level, ",".join(map(str, gpus))[:256]


def network_rows(network: NetworkFingerprint | None) -> dict[str, Any] | None:
    """The rows of one document's network, without its document id: {"network": row,
    "devices": [row, ...]}; None for a document without one."""
    if network is None:
        return None
    gdr = network.gdr
    devices = []
    for position, device in enumerate(network.devices):
        level, gpus = _nearest(device)
        devices.append(dict(device.model_dump(mode="json"), position=position,
                            nearest_level=level, nearest_gpus=gpus))
    return {"network": {
        "format": network.format, "fabric_nics": network.fabric_nics,
        "device_count": len(network.devices), "gdr_state": gdr.state,
        "peermem": gdr.peermem, "dmabuf": gdr.dmabuf, "gdr_basis": gdr.basis,
        "gpus": [g.model_dump(mode="json") for g in network.gpus],
        "sources": list(network.sources), "notes": list(network.notes)},
        "devices": devices}


def store_network(conn: Connection, document_id: int, rows: dict[str, Any]) -> None:
    """Write `network_rows`' rows for `document_id`, in the open transaction."""
    conn.execute(insert(models.Network), [dict(rows["network"], document_id=document_id)])
    if rows["devices"]:
        conn.execute(insert(models.NetworkDevice),
                     [dict(row, document_id=document_id) for row in rows["devices"]])


def read_networks(engine_or_conn: Engine | Connection, *,
                  documents: Sequence[int]) -> dict[int, NetworkFingerprint]:
    """The network of each of `documents` that has one, by document id."""
    n, d = models.Network, models.NetworkDevice
    wanted = sorted(set(documents))
    heads: list[Any] = []
    devices: list[Any] = []

    def fetch(conn: Connection) -> None:
        for chunk in in_chunks(wanted):
            heads.extend(conn.execute(select(n.__table__).where(n.document_id.in_(chunk))))
            devices.extend(conn.execute(
                select(*(getattr(d, f) for f in DEVICE_FIELDS), d.document_id)
                .where(d.document_id.in_(chunk))
                .order_by(d.document_id, d.position)).all())

    if isinstance(engine_or_conn, Engine):
        with engine_or_conn.connect() as conn:
            fetch(conn)
    else:
        fetch(engine_or_conn)
    by_document: dict[int, list[dict[str, Any]]] = {}
    for row in devices:
        fields = dict(zip(DEVICE_FIELDS, row, strict=False))
        by_document.setdefault(int(row.document_id), []).append(fields)
    return {int(h.document_id): NetworkFingerprint.model_validate({
        "format": h.format, "devices": by_document.get(int(h.document_id), []),
        "gpus": h.gpus, "gdr": {"state": h.gdr_state, "peermem": h.peermem,
                                "dmabuf": h.dmabuf, "basis": h.gdr_basis},
        "fabric_nics": h.fabric_nics, "sources": h.sources, "notes": h.notes})
        for h in heads}
