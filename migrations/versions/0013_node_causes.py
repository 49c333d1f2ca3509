"""node_result: what was seen around each figure, and the causes a finding names;
benchmark_result: the matmul's contention in words.

Node suite 1.1.0 (agent/node/suite.py) records, per figure, the other processes on its GPUs
and a busy GPU before it (`contention`; `contended` where anything was seen), where a
host copy ran from (`numa_node`), which transports NCCL took for the all-reduce
(`transport`, most used first) and the NCCL_* / CUDA_VISIBLE_DEVICES settings it ran
under (`nccl_settings`), and for a pair the NVLink links that join it and whether
through NVSwitch or directly (`nvlink_links`, `nvlink_fabric`). The matmul's result has
long carried `contended`; its words (whose process, how busy) join it so that the report
can say what it saw without reading document bodies.

Rows stored before this revision have none of it: their agents did not look, and
`contended` reads false for them, as their own flag said.

Revision ID: 0013
Revises: 0012
Created: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NODE_COLUMNS = (("contention", sa.String(length=1024)), ("numa_node", sa.Integer()),
                ("transport", sa.String(length=64)),
                ("nccl_settings", sa.String(length=1024)),
                ("nvlink_links", sa.Integer()), ("nvlink_fabric", sa.String(length=16)))


def upgrade() -> None:
    with op.batch_alter_table("node_result") as batch:
        batch.add_column(sa.Column("contended", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        for name, kind in NODE_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("benchmark_result") as batch:
        batch.add_column(sa.Column("contention", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmark_result") as batch:
        batch.drop_column("contention")
    with op.batch_alter_table("node_result") as batch:
        for name, _ in reversed(NODE_COLUMNS):
            batch.drop_column(name)
        batch.drop_column("contended")
