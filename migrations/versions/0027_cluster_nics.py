"""cluster_step_node: each node's side of a pair's per-NIC RDMA test (issue 57).

With `fleet cluster run --nic-test`, after a pair's collectives each RDMA port of its
first node is tested against the second node's port of the same rank with perftest's
ib_write_bw (agent/network/perftest.py); a port under 90% of its rate is named. JSON:
{"role": "server" | "client", "skipped": why none ran or null, "tests": [[device, port,
rate_gbps, gbps, gdr, error, peer], ...]}. Steps stored before, and steps run without the test,
have none (NULL).

Revision ID: 0027
Revises: 0026
Created: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "cluster_step_node"


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.add_column(sa.Column("nics", sa.JSON().with_variant(JSONB(), "postgresql"),
                                   nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column("nics")
