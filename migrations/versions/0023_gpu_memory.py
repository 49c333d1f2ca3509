"""fingerprint: each GPU's memory in use and the processes on it when the run began
(issue 54).

A stage that failed on a GPU for want of memory is judged by what held it
(fleet/analysis/health/not_measured.py): a process the renter's run could see is the renter's
to free, memory in use with none is the provider's to explain. The fingerprint read both
(NVML's memory info and running processes, and /proc for whose each is); the store keeps
them beside the GPU, so that the error in `host_error` is judged where it is read.
`processes` is JSON: [[pid, MiB or null, visible or null, name or null, user or null]].
Documents stored before have none.

Revision ID: 0023
Revises: 0022
Created: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "fingerprint"
COLUMNS = (
    ("memory_used_mib", sa.Integer()),
    ("processes", sa.JSON().with_variant(JSONB(), "postgresql")),
)


def upgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
