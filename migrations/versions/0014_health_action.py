"""fingerprint: what a buyer asks the provider for about each GPU's health.

Issue 36: the agent's verdict now carries an action (agent/health/card.py RULE): none, reset,
drain_and_reset or replace. The fingerprint table keeps it beside the verdict, so that the
report's health finding asks for it and a sweep tells a change of it as news.

Rows stored before this revision have none: their agents judged no action.

Revision ID: 0014
Revises: 0013
Created: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("fingerprint") as batch:
        batch.add_column(sa.Column("health_action", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fingerprint") as batch:
        batch.drop_column("health_action")
