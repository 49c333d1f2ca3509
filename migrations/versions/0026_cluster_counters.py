"""cluster_step_node: each node's RDMA error counters around the step and the NCCL its
ranks loaded; cluster_step: how the step was launched (issue 57).

The agent reads every RDMA port's error counters before and after the step's ranks run
(agent/network/counters.py): a link that flapped (`link_downed`) or erred while the step
ran is named, NIC and port, even where it kept its rate. JSON: {"ports": n, "rose":
[[port, counter, rise], ...], "reset": ["PORT COUNTER", ...]}. Steps stored before have
none (NULL: not read). `launcher` is "ssh" (fleet's own connections) or "slurm" (srun on
the cluster's own Slurm, the node's job environment); NULL before, when every step went
over SSH. `nccl_version` is what NCCL's log said of itself; NULL where it said nothing
(gloo) or before.

Revision ID: 0026
Revises: 0025
Created: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "cluster_step_node"


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.add_column(sa.Column("counters", sa.JSON().with_variant(JSONB(), "postgresql"),
                                   nullable=True))
        batch.add_column(sa.Column("nccl_version", sa.String(length=64), nullable=True))
    with op.batch_alter_table("cluster_step") as batch:
        batch.add_column(sa.Column("launcher", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cluster_step") as batch:
        batch.drop_column("launcher")
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column("nccl_version")
        batch.drop_column("counters")
