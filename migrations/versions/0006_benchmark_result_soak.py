"""benchmark_result: the thermal state (soaked or cool-start) and the soak that explains a
soaked figure (harness 1.3); the summary index covers what the main query now groups by
(thermal state and software stack) and the first-20-s level and drop it shows.

Results stored before this revision were all measured from a cool start (docs/design.md,
"Thermal soak"): they are marked so, never soaked, and their temperature under load is
the telemetry's maximum, which is what they had.

Revision ID: 0006
Revises: 0005
Created: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_benchmark_result_summary"
# As fleet/store/models.py spells them on revisions 0005 and 0006.
BEFORE = ["correctness_failed", "provider_id", "variant", "harness_version", "dtype", "m",
          "n", "k", "mode", "cache", "concurrency", "gpu_id", "tflops"]
AFTER = ["correctness_failed", "provider_id", "variant", "harness_version", "dtype", "m",
         "n", "k", "mode", "cache", "thermal", "concurrency", "torch_version",
         "cuda_runtime_version", "cublas_version", "gpu_id", "tflops", "first_20s_tflops",
         "soak_drop"]
NULLABLE_FLOATS = ("temperature_load_c", "soak_s", "first_20s_tflops", "soak_drop")


def upgrade() -> None:
    op.drop_index(INDEX, table_name="benchmark_result")
    # Added nullable, filled, then made NOT NULL: the rows already stored need a value,
    # and a server default would stay behind in the schema where the models have none.
    with op.batch_alter_table("benchmark_result") as batch:
        batch.add_column(sa.Column("thermal", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("not_soaked", sa.Boolean(), nullable=True))
        for name in NULLABLE_FLOATS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch.add_column(sa.Column("soak_curve", sa.LargeBinary(), nullable=True))
    result = sa.table("benchmark_result", sa.column("thermal", sa.String()),
                      sa.column("not_soaked", sa.Boolean()),
                      sa.column("temperature_load_c", sa.Float()),
                      sa.column("temperature_c_max", sa.Float()),
                      sa.column("soak_curve", sa.LargeBinary()))
    op.execute(result.update().values(thermal="cool-start", not_soaked=False,
                                      temperature_load_c=result.c.temperature_c_max,
                                      soak_curve=b""))
    with op.batch_alter_table("benchmark_result") as batch:
        batch.alter_column("thermal", existing_type=sa.String(length=16), nullable=False)
        batch.alter_column("not_soaked", existing_type=sa.Boolean(), nullable=False)
        batch.alter_column("soak_curve", existing_type=sa.LargeBinary(), nullable=False)
    op.create_index(INDEX, "benchmark_result", AFTER)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="benchmark_result")
    with op.batch_alter_table("benchmark_result") as batch:
        for name in ("soak_curve", *reversed(NULLABLE_FLOATS), "not_soaked", "thermal"):
            batch.drop_column(name)
    op.create_index(INDEX, "benchmark_result", BEFORE)
