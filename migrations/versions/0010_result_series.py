"""Each GPU's results packed per configuration, and each run's host with its document's
time, for the report to read at scale.

At 10,000 hosts x 8 GPUs x 30 nights the report read 2.4 M result rows, and the
database drivers spent 8-12 s building Python objects of them before any analysis
(bench/records/2026-11-25-report-scale-0009.md). `result_series` holds every result of
one GPU under one configuration, software stack, variant and verdict as packed records
(fleet/store/series.py), 80,000 rows for that store.

`run_host.collected_at` repeats the stored document's collection time, so that the
report picks each host's newest document from run_host alone: joining a document per run
to read its time cost it 1.5 s over 300,000 runs of hosts. Rows stored before this
revision are filled from their documents.

The series table is created empty. Its rows are derived data, built from the stored
results with the code of the newest revision (fleet.store.schema.upgrade does it in the
upgrade's transaction, once the schema is at head), so that what this revision writes
cannot fall behind a later change to the series' records.

Revision ID: 0010
Revises: 0009
Created: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "result_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("variant", sa.String(length=160), nullable=False),
        sa.Column("correctness_failed", sa.Boolean(), nullable=False),
        sa.Column("harness_version", sa.String(length=128), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("cache", sa.String(length=16), nullable=False),
        sa.Column("thermal", sa.String(length=16), nullable=False),
        sa.Column("concurrency", sa.String(length=16), nullable=False),
        sa.Column("torch_version", sa.String(length=128), nullable=True),
        sa.Column("cuda_runtime_version", sa.String(length=128), nullable=True),
        sa.Column("cublas_version", sa.String(length=128), nullable=True),
        sa.Column("packed", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpu.id"],
                                name="fk_result_series_gpu_id_gpu"),
        sa.PrimaryKeyConstraint("id", name="pk_result_series"),
        sa.UniqueConstraint("gpu_id", "key", name="uq_result_series_gpu_id_key"),
    )


    with op.batch_alter_table("run_host") as batch:
        batch.add_column(sa.Column("collected_at", sa.DateTime(timezone=True), nullable=True))
    run_host = sa.table("run_host", sa.column("document_id", sa.Integer()),
                        sa.column("collected_at", sa.DateTime(timezone=True)))
    document = sa.table("document", sa.column("id", sa.Integer()),
                        sa.column("collected_at", sa.DateTime(timezone=True)))
    op.execute(run_host.update().where(run_host.c.document_id.is_not(None)).values(
        collected_at=sa.select(document.c.collected_at)
        .where(document.c.id == run_host.c.document_id).scalar_subquery()))


def downgrade() -> None:
    with op.batch_alter_table("run_host") as batch:
        batch.drop_column("collected_at")
    op.drop_table("result_series")
