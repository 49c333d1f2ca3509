"""host_limits, storage, storage_target: the host's limits and storage (issue 58).

The agent reads the limits a job meets (agent/host/: CPUs and memory it may use,
/dev/shm, the locked-memory limit, the governor, IOMMU and ACS, the time to import
torch, the container toolkit's and fabric manager's versions) and measures storage
(agent/storage/: each folder's sequential write and read, small files, a checkpoint).
Each block is kept whole in `body`, validated again when read; the figures the metrics
and the sweeps follow are columns too. Documents stored before have no rows: their hosts
read as not read, never as hosts without limits.

Revision ID: 0024
Revises: 0023
Created: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Binary JSONB on PostgreSQL, text on SQLite (as fleet.store.models.Json).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "host_limits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("cpus_available", sa.Float(), nullable=True),
        sa.Column("memory_available_mib", sa.BigInteger(), nullable=True),
        sa.Column("shm_bytes", sa.BigInteger(), nullable=True),
        sa.Column("memlock_bytes", sa.BigInteger(), nullable=True),
        sa.Column("governor", sa.String(length=64), nullable=True),
        sa.Column("import_torch_s", sa.Float(), nullable=True),
        sa.Column("container_toolkit", sa.String(length=64), nullable=True),
        sa.Column("fabric_manager", sa.String(length=64), nullable=True),
        sa.Column("body", JSON, nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_host_limits_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_host_limits"),
        sa.UniqueConstraint("document_id", name="uq_host_limits_document_id"),
    )
    op.create_table(
        "storage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("body", JSON, nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_storage_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_storage"),
        sa.UniqueConstraint("document_id", name="uq_storage_document_id"),
    )
    op.create_table(
        "storage_target",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=256), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("fs_type", sa.String(length=64), nullable=True),
        sa.Column("refused", sa.String(length=512), nullable=True),
        sa.Column("direct", sa.Boolean(), nullable=True),
        sa.Column("write_gbps", sa.Float(), nullable=True),
        sa.Column("read_gbps", sa.Float(), nullable=True),
        sa.Column("small_read_per_s", sa.Float(), nullable=True),
        sa.Column("checkpoint_write_gbps", sa.Float(), nullable=True),
        sa.Column("checkpoint_read_gbps", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_storage_target_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_storage_target"),
        sa.UniqueConstraint("document_id", "position",
                            name="uq_storage_target_document_id_position"),
    )


def downgrade() -> None:
    op.drop_table("storage_target")
    op.drop_table("storage")
    op.drop_table("host_limits")
