"""The report's reads over millions of rows: each result's power-cap share, each
fingerprint's run and host.

At 10,000 hosts x 8 GPUs x 30 nights (2.4 M results), the report spent seconds extracting
two throttle reasons from every result's `reason_shares` JSON, and as long again looking
up a document per fingerprint to find the GPUs two hosts held in one run. The share gets
a column of its own (benchmark_result.power_cap_share, the share of telemetry samples
under "sw_power_cap" or "hw_power_brake_slowdown"), and a fingerprint repeats its
document's run and host, as a result already does, under one index. Rows stored before
this revision are filled from what is stored beside them.

Revision ID: 0009
Revises: 0008
Created: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# fleet/store/config.py's POWER_CAP_REASONS as of this revision.
POWER_CAP_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")


def upgrade() -> None:
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    with op.batch_alter_table("benchmark_result") as batch:
        batch.add_column(sa.Column("power_cap_share", sa.Float(), nullable=True))
    with op.batch_alter_table("fingerprint") as batch:
        batch.add_column(sa.Column("probe_run_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("host_id", sa.Integer(), nullable=True))
    result = sa.table("benchmark_result", sa.column("reason_shares", json_type),
                      sa.column("power_cap_share", sa.Float()))
    share = sum((sa.func.coalesce(result.c.reason_shares[name].as_float(), 0.0)
                 for name in POWER_CAP_REASONS), start=sa.literal(0.0))
    op.execute(result.update().values(power_cap_share=share))
    fingerprint = sa.table("fingerprint", sa.column("document_id", sa.Integer()),
                           sa.column("probe_run_id", sa.Integer()),
                           sa.column("host_id", sa.Integer()))
    document = sa.table("document", sa.column("id", sa.Integer()),
                        sa.column("probe_run_id", sa.Integer()),
                        sa.column("host_id", sa.Integer()))
    of_document = document.c.id == fingerprint.c.document_id
    op.execute(fingerprint.update().values(
        probe_run_id=sa.select(document.c.probe_run_id).where(of_document).scalar_subquery(),
        host_id=sa.select(document.c.host_id).where(of_document).scalar_subquery()))
    with op.batch_alter_table("benchmark_result") as batch:
        batch.alter_column("power_cap_share", existing_type=sa.Float(), nullable=False)
    with op.batch_alter_table("fingerprint") as batch:
        batch.alter_column("probe_run_id", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("host_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key("fk_fingerprint_probe_run_id_probe_run", "probe_run",
                                 ["probe_run_id"], ["id"])
        batch.create_foreign_key("fk_fingerprint_host_id_host", "host", ["host_id"], ["id"])
        batch.create_index("ix_fingerprint_probe_run_id_gpu_id_host_id",
                           ["probe_run_id", "gpu_id", "host_id"])


def downgrade() -> None:
    with op.batch_alter_table("fingerprint") as batch:
        batch.drop_index("ix_fingerprint_probe_run_id_gpu_id_host_id")
        batch.drop_constraint("fk_fingerprint_host_id_host", type_="foreignkey")
        batch.drop_constraint("fk_fingerprint_probe_run_id_probe_run", type_="foreignkey")
        batch.drop_column("host_id")
        batch.drop_column("probe_run_id")
    with op.batch_alter_table("benchmark_result") as batch:
        batch.drop_column("power_cap_share")
