"""benchmark_result: the interval a repeat run falls inside, and the series carry its sd.

A soaked result (harness 1.4 and later) carries where a repeat run of the same card
should land (95%): built at ingest from the variant's measured run-to-run spread, the
GPU's earlier figures and the run's own wander (agent/timing/repeat.py), with the relative
standard deviation it rests on and which of those set its width. Rows stored before
this revision have none: their interval was never stated, and is not made up after the
fact.

The series' records gain the repeat sd (fleet/store/series.py, VALUE_COLUMNS), so their
rows are emptied here and rebuilt from the results with the newest code once the schema
is at head (fleet.store.schema._derive), as 0010 built them.

Revision ID: 0012
Revises: 0011
Created: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (("repeat_low_tflops", sa.Float()), ("repeat_high_tflops", sa.Float()),
           ("repeat_sd", sa.Float()), ("repeat_basis", sa.String(length=16)),
           ("wander", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("benchmark_result") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    op.execute("DELETE FROM result_series")


def downgrade() -> None:
    with op.batch_alter_table("benchmark_result") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
    # The records of 0011's series lack the repeat sd: built again by `fleet db repair`.
    op.execute("DELETE FROM result_series")
