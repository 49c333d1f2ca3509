"""Per-run host listing and status: run_host.

Revision ID: 0002
Revises: 0001
Created: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_host",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("probe_run_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=True),
        sa.Column("expect", JSON, nullable=True),
        sa.Column("price_per_gpu_hour", sa.Float(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("tags", JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name=op.f("fk_run_host_document_id_document")),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name=op.f("fk_run_host_host_id_host")),
        sa.ForeignKeyConstraint(["probe_run_id"], ["probe_run.id"],
                                name=op.f("fk_run_host_probe_run_id_probe_run")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_host")),
        sa.UniqueConstraint("probe_run_id", "host_id",
                            name=op.f("uq_run_host_probe_run_id_host_id")),
    )
    op.create_index(op.f("ix_run_host_document_id"), "run_host", ["document_id"])
    op.create_index(op.f("ix_run_host_host_id"), "run_host", ["host_id"])
    # Hosts stored before this revision keep no listing: one row each, as stored, so that
    # every document belongs to its run's hosts whichever version stored it.
    op.execute(
        "INSERT INTO run_host (probe_run_id, host_id, status, document_id, tags, updated_at) "
        "SELECT d.probe_run_id, d.host_id, 'stored', MAX(d.id), '[]', MAX(d.stored_at) "
        "FROM document d GROUP BY d.probe_run_id, d.host_id"
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_run_host_host_id"), table_name="run_host")
    op.drop_index(op.f("ix_run_host_document_id"), table_name="run_host")
    op.drop_table("run_host")
