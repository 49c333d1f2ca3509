"""fingerprint: what the report's "fleet as found" and its listing checks read per GPU.

The report judged each host by its newest document body, re-read and re-validated, which
took most of its time on a large store. The columns it still lacked come here: the power
limit the driver enforces and the range the tenant may set it in, the application SM clock
target, the PCIe link as it runs, how many NVLink links there are, the MIG instances'
profiles and the vGPU profile. Rows stored before this revision are filled from the body
they came from.

Revision ID: 0008
Revises: 0007
Created: 2026-11-25
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FLOATS = ("power_limit_enforced_w", "power_limit_min_w", "power_limit_max_w")
INTEGERS = ("app_sm_clock_target_mhz", "pcie_gen_current", "pcie_width_current",
            "nvlink_links_total")
BATCH = 500  # documents per round trip while filling


def _columns(gpu: dict[str, Any]) -> dict[str, Any]:
    """The new columns as the ingest path fills them (fleet/store/ingest.py)."""
    variant = gpu.get("variant") or {}
    profile = variant.get("vgpu_profile") or {}
    migs = gpu.get("mig_devices") or []
    return {
        **{name: gpu.get(name) for name in (*FLOATS, *INTEGERS)},
        "mig_devices": [m.get("profile") or m.get("name") or "?" for m in migs
                        if isinstance(m, dict)],
        "vgpu_profile": profile.get("profile"),
    }


def upgrade() -> None:
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    with op.batch_alter_table("fingerprint") as batch:
        for name in FLOATS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        for name in INTEGERS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=True))
        batch.add_column(sa.Column("mig_devices", json_type, nullable=True))
        batch.add_column(sa.Column("vgpu_profile", sa.String(length=64), nullable=True))
    fingerprint = sa.table(
        "fingerprint", sa.column("id", sa.Integer()), sa.column("document_id", sa.Integer()),
        sa.column("gpu_index", sa.Integer()),
        *(sa.column(name, sa.Float()) for name in FLOATS),
        *(sa.column(name, sa.Integer()) for name in INTEGERS),
        sa.column("mig_devices", json_type), sa.column("vgpu_profile", sa.String()))
    document = sa.table("document", sa.column("id", sa.Integer()),
                        sa.column("body", json_type))
    conn = op.get_bind()
    ids = [row[0] for row in conn.execute(
        sa.select(fingerprint.c.document_id).distinct().order_by(fingerprint.c.document_id))]
    update = (fingerprint.update()
              .where(fingerprint.c.document_id == sa.bindparam("doc"),
                     fingerprint.c.gpu_index == sa.bindparam("index"))
              .values({name: sa.bindparam(f"new_{name}")
                       for name in (*FLOATS, *INTEGERS, "mig_devices", "vgpu_profile")}))
    for start in range(0, len(ids), BATCH):
        chunk = ids[start:start + BATCH]
        params = []
        for doc_id, body in conn.execute(
                sa.select(document.c.id, sa.cast(document.c.body, sa.Text))
                .where(document.c.id.in_(chunk))):
            # A body that is not the shape this fleet wrote leaves its columns empty, as an
            # old agent's missing fields would: the report then says "not visible".
            try:
                gpus = json.loads(body).get("gpus") or []
            except (TypeError, ValueError, AttributeError):
                continue
            for gpu in gpus:
                if isinstance(gpu, dict) and isinstance(gpu.get("index"), int):
                    params.append({"doc": doc_id, "index": gpu["index"],
                                   **{f"new_{k}": v for k, v in _columns(gpu).items()}})
        if params:
            conn.execute(update, params)


def downgrade() -> None:
    with op.batch_alter_table("fingerprint") as batch:
        for name in ("vgpu_profile", "mig_devices", *reversed(INTEGERS), *reversed(FLOATS)):
            batch.drop_column(name)
