"""job_result: what a job figure's headline rests on (issue 45, "the job figure is the
card's").

Every attention backend the torch offers is gated and timed; the fastest that passed its
gate is its GPU's headline for the workload and shape (`headline`). Training says whether
grouped-query attention ran natively or with keys and values expanded (`gqa`); decode
says which of its points a figure is (`point`: "bandwidth", "latency") and what share of
the same GPU's memory copy of the same run it read (`copy_gbs`, `copy_share`).

Documents stored before this revision have none of these: their rows read as missing,
and a reader takes the pinned backend (the suite's first) as their headline.

Revision ID: 0017
Revises: 0016
Created: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "job_result"
COLUMNS = (
    ("headline", sa.Boolean()),
    ("gqa", sa.String(length=16)),
    ("point", sa.String(length=16)),
    ("copy_gbs", sa.Float()),
    ("copy_share", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
