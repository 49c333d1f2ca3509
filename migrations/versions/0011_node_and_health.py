"""node_result: the node suite's figures; fingerprint: each GPU's health verdict.

The node suite (agent/node/suite.py) measures, beside the matmul, each GPU's memory and host
link, each pair's copies and the node's all-reduce: one row per figure, with what it is
compared by (kind, size, direction, pinned or pageable, GPU count, software stack) as
columns, and the datasheet figure it stands beside.

A GPU's health (agent/health/card.py) is its verdict (healthy, degraded, failing, unknown),
the reasons that decided it, and the counters it was drawn from, so that a sweep can say
which counter rose since the previous night. Rows stored before this revision have none:
their agents did not read the counters, and a missing verdict reads as "not read", never
as healthy.

Revision ID: 0011
Revises: 0010
Created: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.create_table(
        "node_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("probe_run_id", sa.Integer(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=True),
        sa.Column("peer_gpu_id", sa.Integer(), nullable=True),
        sa.Column("variant", sa.String(length=160), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("peer_index", sa.Integer(), nullable=True),
        sa.Column("suite_version", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=True),
        sa.Column("memory", sa.String(length=16), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("gpus_in_run", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=True),
        sa.Column("gbs", sa.Float(), nullable=False),
        sa.Column("algbw_gbs", sa.Float(), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("min_gbs", sa.Float(), nullable=False),
        sa.Column("max_gbs", sa.Float(), nullable=False),
        sa.Column("cv", sa.Float(), nullable=False),
        sa.Column("ci95_low_gbs", sa.Float(), nullable=True),
        sa.Column("ci95_high_gbs", sa.Float(), nullable=True),
        sa.Column("peer_access", sa.Boolean(), nullable=True),
        sa.Column("topology", sa.String(length=32), nullable=True),
        sa.Column("link_gen", sa.Integer(), nullable=True),
        sa.Column("link_width", sa.Integer(), nullable=True),
        sa.Column("link_gen_max", sa.Integer(), nullable=True),
        sa.Column("link_width_max", sa.Integer(), nullable=True),
        sa.Column("datasheet_gbs", sa.Float(), nullable=True),
        sa.Column("datasheet_source", sa.String(length=512), nullable=True),
        sa.Column("torch_version", sa.String(length=128), nullable=True),
        sa.Column("cuda_runtime_version", sa.String(length=128), nullable=True),
        sa.Column("nccl_version", sa.String(length=128), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_node_result_document_id_document"),
        sa.ForeignKeyConstraint(["provider_id"], ["provider.id"],
                                name="fk_node_result_provider_id_provider"),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name="fk_node_result_host_id_host"),
        sa.ForeignKeyConstraint(["probe_run_id"], ["probe_run.id"],
                                name="fk_node_result_probe_run_id_probe_run"),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpu.id"], name="fk_node_result_gpu_id_gpu"),
        sa.ForeignKeyConstraint(["peer_gpu_id"], ["gpu.id"],
                                name="fk_node_result_peer_gpu_id_gpu"),
        sa.PrimaryKeyConstraint("id", name="pk_node_result"),
    )
    op.create_index("ix_node_result_document_id", "node_result", ["document_id"])
    op.create_index("ix_node_result_host_id", "node_result", ["host_id"])
    op.create_index("ix_node_result_probe_run_id", "node_result", ["probe_run_id"])
    with op.batch_alter_table("fingerprint") as batch:
        batch.add_column(sa.Column("health", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("health_reasons", json_type, nullable=True))
        batch.add_column(sa.Column("health_counters", json_type, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fingerprint") as batch:
        batch.drop_column("health_counters")
        batch.drop_column("health_reasons")
        batch.drop_column("health")
    op.drop_index("ix_node_result_probe_run_id", table_name="node_result")
    op.drop_index("ix_node_result_host_id", table_name="node_result")
    op.drop_index("ix_node_result_document_id", table_name="node_result")
    op.drop_table("node_result")
