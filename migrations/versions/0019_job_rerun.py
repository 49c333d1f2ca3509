"""job_result: a short headline measured again without the run's settings (issue 44).

Where a GPU's headline training step fell under its MFU floor, or its bandwidth-point
decode under its HBM floor, and the run's settings held some that can move a job, the
agent ran the job suite again in a child process without them (agent/rerun/job.py): the
rerun's tokens/s and share, the settings taken out, the floor, and whether another
process was on the GPU around it (`rerun_*`). Documents stored before have none.

Revision ID: 0019
Revises: 0018
Created: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "job_result"
COLUMNS = (
    ("rerun_tokens_per_s", sa.Float()),
    ("rerun_share", sa.Float()),
    ("rerun_floor", sa.Float()),
    ("rerun_without", sa.String(length=1024)),
    ("rerun_contended", sa.Boolean()),
)


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
