"""An index that covers the report's main query (per provider, variant and configuration,
the median of per-GPU medians): read from the index alone, it no longer reads every
result's row with its raw samples, which over 100,000 results took 9 s from a cold cache.

Revision ID: 0005
Revises: 0004
Created: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As fleet/store/models.py spells them on this revision; later models may change.
COLUMNS = ["correctness_failed", "provider_id", "variant", "harness_version", "dtype", "m",
           "n", "k", "mode", "cache", "concurrency", "gpu_id", "tflops"]


def upgrade() -> None:
    op.create_index("ix_benchmark_result_summary", "benchmark_result", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_benchmark_result_summary", table_name="benchmark_result")
