"""probe_run.ended_at: the controller reached the end of the run, even if hosts stay open.

A sweep via Celery whose queue had no worker ends with hosts unprobed; the run stays
unfinished (`finished_at` NULL) so `fleet sweep --resume` can probe them into it, but it is
a whole night for the history: its unreached hosts are settled as failed.

Revision ID: 0004
Revises: 0003
Created: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("probe_run") as batch:
        batch.add_column(sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True))
    # Every run finished before this revision also ended.
    op.execute("UPDATE probe_run SET ended_at = finished_at WHERE finished_at IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("probe_run") as batch:
        batch.drop_column("ended_at")
