"""benchmark_result: the product checked bit for bit under load.

Soaked results from agents that check the product under load (agent/matmul/integrity.py) carry
how many checks compared the latest product with the GPU's first one, how many found it
changed, the first such (seconds of load, the card's temperature, elements differing),
the first product's digest (equal digests, equal bits: the node's GPUs of one device and
stack are compared by it, fleet/analysis/matmul/integrity.py) and whether the corruption was
the test hook's.

Rows stored before this revision have none of it: NULL, their agents did not check.

Revision ID: 0015
Revises: 0014
Created: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (("integrity_checks", sa.Integer()), ("integrity_mismatches", sa.Integer()),
           ("integrity_first_s", sa.Float()), ("integrity_temperature_c", sa.Float()),
           ("integrity_elements", sa.BigInteger()), ("integrity_digest", sa.String(length=16)),
           ("integrity_injected", sa.Boolean()))


def upgrade() -> None:
    with op.batch_alter_table("benchmark_result") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmark_result") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
