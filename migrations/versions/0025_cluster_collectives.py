"""cluster_figure: reduce-scatter and all-to-all beside all-reduce and all-gather
(issue 57).

The whole cluster's step now measures the four collectives large jobs run (data
parallel's all-reduce, FSDP's all-gather and reduce-scatter, a mixture of experts'
all-to-all); the check on `op` admits the two new ones. Rows stored before are all
all-reduce and all-gather: nothing to fill. Going down deletes the new collectives' rows,
which the old check cannot hold.

Revision ID: 0025
Revises: 0024
Created: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "cluster_figure"
NAME = "ck_cluster_figure_op"
OLD = "op IN ('all_reduce', 'all_gather')"
NEW = "op IN ('all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all')"


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_constraint(op.f(NAME), type_="check")
        batch.create_check_constraint(op.f(NAME), NEW)


def downgrade() -> None:
    op.execute(sa.text(f"DELETE FROM {TABLE} WHERE NOT ({OLD})"))
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_constraint(op.f(NAME), type_="check")
        batch.create_check_constraint(op.f(NAME), OLD)
