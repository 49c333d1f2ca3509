"""cluster_step, cluster_step_node, cluster_figure: the steps between a cluster's nodes
(issue 46).

One row of `cluster_step` per step of a cluster run as it ran (the whole cluster, a pair
of a round, a suspect against a known-good node), grouped by the controller's `run_id`;
`cluster_step_node` holds each node of a step in node-rank order, with its agent document
of the same probe, what NCCL said it used and the settings its ranks ran under;
`cluster_figure` each collective at each size of a step that ran. A failed step keeps its
error and has no figures.

Stores before this revision held no cluster step: nothing to fill.

Revision ID: 0022
Revises: 0021
Created: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Binary JSONB on PostgreSQL, text on SQLite (as fleet.store.models.Json).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "cluster_step",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=128), nullable=True),
        sa.Column("step_id", sa.String(length=128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("round", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.Column("ranks_per_node", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("algo", sa.String(length=32), nullable=True),
        sa.Column("error", sa.String(length=4096), nullable=True),
        sa.CheckConstraint("kind IN ('cluster', 'pair', 'suspect')",
                           name=op.f("ck_cluster_step_kind")),
        sa.CheckConstraint("ranks_per_node > 0", name=op.f("ck_cluster_step_ranks_per_node")),
        sa.PrimaryKeyConstraint("id", name="pk_cluster_step"),
        sa.UniqueConstraint("run_id", "step_id", name="uq_cluster_step_run_id_step_id"),
    )
    op.create_index("ix_cluster_step_cluster_run_id", "cluster_step", ["cluster", "run_id"])
    op.create_table(
        "cluster_step_node",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_step_id", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=True),
        sa.Column("reported", sa.Boolean(), nullable=False),
        sa.Column("network", sa.String(length=64), nullable=True),
        sa.Column("plugin", sa.String(length=128), nullable=True),
        sa.Column("gdrdma", sa.Boolean(), nullable=True),
        sa.Column("paths", JSON, nullable=False),
        sa.Column("interfaces", JSON, nullable=False),
        sa.Column("set_by_environment", JSON, nullable=False),
        sa.Column("settings", JSON, nullable=True),
        sa.ForeignKeyConstraint(["cluster_step_id"], ["cluster_step.id"],
                                name="fk_cluster_step_node_cluster_step_id_cluster_step"),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_cluster_step_node_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_cluster_step_node"),
        sa.UniqueConstraint("cluster_step_id", "node_rank",
                            name="uq_cluster_step_node_cluster_step_id_node_rank"),
    )
    op.create_index("ix_cluster_step_node_cluster_step_id", "cluster_step_node",
                    ["cluster_step_id"])
    op.create_index("ix_cluster_step_node_document_id", "cluster_step_node", ["document_id"])
    op.create_table(
        "cluster_figure",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_step_id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("busbw_gbs", sa.Float(), nullable=False),
        sa.Column("algbw_gbs", sa.Float(), nullable=False),
        sa.Column("time_us", sa.Float(), nullable=False),
        sa.Column("busbw_min_gbs", sa.Float(), nullable=True),
        sa.Column("busbw_max_gbs", sa.Float(), nullable=True),
        sa.CheckConstraint("op IN ('all_reduce', 'all_gather')", name=op.f("ck_cluster_figure_op")),
        sa.CheckConstraint("size_bytes > 0", name=op.f("ck_cluster_figure_size_bytes")),
        sa.CheckConstraint("busbw_gbs >= 0 AND algbw_gbs >= 0 AND time_us >= 0",
                           name=op.f("ck_cluster_figure_figures")),
        sa.ForeignKeyConstraint(["cluster_step_id"], ["cluster_step.id"],
                                name="fk_cluster_figure_cluster_step_id_cluster_step"),
        sa.PrimaryKeyConstraint("id", name="pk_cluster_figure"),
    )
    op.create_index("ix_cluster_figure_cluster_step_id", "cluster_figure",
                    ["cluster_step_id"])


def downgrade() -> None:
    op.drop_index("ix_cluster_figure_cluster_step_id", table_name="cluster_figure")
    op.drop_table("cluster_figure")
    op.drop_index("ix_cluster_step_node_document_id", table_name="cluster_step_node")
    op.drop_index("ix_cluster_step_node_cluster_step_id", table_name="cluster_step_node")
    op.drop_table("cluster_step_node")
    op.drop_index("ix_cluster_step_cluster_run_id", table_name="cluster_step")
    op.drop_table("cluster_step")
