"""run_setting: the settings each document's run measured under, with where each came
from; node_result: the all-reduce measured again without them (issue 44, "whose is it").

The agent records its NCCL_*, CUDA_*, cuBLAS, cuDNN, PyTorch, NVSHMEM and OpenMP settings
from its environment, the inventory's `env:` and NCCL's configuration files
(`run_setting`: name, value or why it was withheld, source, family, whether it applied).
Where its all-reduce fell under the floor the controller calls it short by, with settings
that can move it in the run, it ran the all-reduce again without them: the rerun's bus
bandwidth, the settings taken out and kept, the floor, NCCL's transports
(`rerun_*` on node_result).

Documents stored before this revision have none of it: their runs read as having no
recorded settings (a report falls back on the all-reduce's `nccl_settings`) and no rerun.

Revision ID: 0018
Revises: 0017
Created: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NODE_COLUMNS = (("rerun_gbs", sa.Float()), ("rerun_without", sa.String(length=1024)),
                ("rerun_kept", sa.String(length=1024)), ("rerun_floor_gbs", sa.Float()),
                ("rerun_transport", sa.String(length=64)))


def upgrade() -> None:
    op.create_table(
        "run_setting",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("value", sa.String(length=256), nullable=True),
        sa.Column("withheld", sa.String(length=128), nullable=True),
        sa.Column("source", sa.String(length=512), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=False),
        sa.Column("applies", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_run_setting_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_run_setting"),
    )
    op.create_index("ix_run_setting_document_id", "run_setting", ["document_id"])
    with op.batch_alter_table("node_result") as batch:
        for name, kind in NODE_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_result") as batch:
        for name, _ in reversed(NODE_COLUMNS):
            batch.drop_column(name)
    op.drop_index("ix_run_setting_document_id", table_name="run_setting")
    op.drop_table("run_setting")
