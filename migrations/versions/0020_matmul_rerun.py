"""benchmark_result: a short soaked matmul measured again without the run's settings,
then with them (issue 44).

Where a GPU's soaked figure fell under its floor and the run's settings held some that
can move a matmul, the agent measured it again quick on the card still hot from the soak,
in a child process without them and then with them (agent/rerun/matmul.py): both figures,
the settings taken out, the floor, and whether another process was on the GPU around the
pair (`rerun_*`). Documents stored before have none.

Revision ID: 0020
Revises: 0019
Created: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "benchmark_result"
COLUMNS = (
    ("rerun_tflops", sa.Float()),
    ("rerun_with_tflops", sa.Float()),
    ("rerun_without", sa.String(length=1024)),
    ("rerun_floor_tflops", sa.Float()),
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
