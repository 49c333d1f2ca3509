"""job_result: the job suite's figures (issue 37, "what a GPU-hour buys for a real job").

The job suite (agent/job/suite.py) times a transformer's training step and decode step on each
GPU, under each attention backend, and gives tokens a second with the FLOP (and for
decode the bytes) a token costs: one row per figure. What a figure is compared within
(the model, every dimension of its shape, data type, attention, compile, CUDA graph,
optimizer, concurrency, GPUs in the run, thermal state, and the torch, CUDA and cuDNN
stack) is columns, so that readers group by them and never mix configurations.

Documents stored before this revision have no job results, and their agents ran none.

Revision ID: 0016
Revises: 0015
Created: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "job_result"
INDEXED = ("document_id", "host_id", "probe_run_id")
# (name, type, nullable), in the model's order (fleet/store/models.py JobResult).
COLUMNS = (
    ("variant", sa.String(length=160), False), ("gpu_index", sa.Integer(), False),
    ("suite_version", sa.String(length=128), False),
    ("workload", sa.String(length=16), False), ("model", sa.String(length=128), False),
    ("layers", sa.Integer(), False), ("width", sa.Integer(), False),
    ("heads", sa.Integer(), False), ("kv_heads", sa.Integer(), False),
    ("head_dim", sa.Integer(), False), ("ffn", sa.Integer(), False),
    ("batch", sa.Integer(), False), ("seq", sa.Integer(), False),
    ("context", sa.Integer(), True), ("params", sa.BigInteger(), False),
    ("dtype", sa.String(length=16), False), ("attention", sa.String(length=16), False),
    ("compiled", sa.Boolean(), False), ("graph", sa.Boolean(), False),
    ("optimizer", sa.String(length=32), True), ("concurrency", sa.String(length=16), False),
    ("gpus_in_run", sa.Integer(), False), ("thermal", sa.String(length=16), False),
    ("follows", sa.String(length=32), True),
    ("torch_version", sa.String(length=128), True),
    ("cuda_runtime_version", sa.String(length=128), True),
    ("cudnn_version", sa.String(length=128), True),
    ("tokens_per_step", sa.BigInteger(), False), ("steps", sa.Integer(), False),
    ("seconds", sa.Float(), False), ("tokens_per_s", sa.Float(), False),
    ("step_median_ms", sa.Float(), False), ("step_cv", sa.Float(), False),
    ("within_low", sa.Float(), True), ("within_high", sa.Float(), True),
    ("flop_per_token", sa.Float(), False), ("flop_per_token_causal", sa.Float(), False),
    ("tflops", sa.Float(), False), ("tflops_causal", sa.Float(), False),
    ("peak_tflops", sa.Float(), True), ("mfu", sa.Float(), True),
    ("bytes_per_step", sa.BigInteger(), True), ("gbs", sa.Float(), True),
    ("hbm_gbs", sa.Float(), True), ("hbm_share", sa.Float(), True),
    ("peak_memory_bytes", sa.BigInteger(), True), ("loss", sa.Float(), True),
    ("correctness_passed", sa.Boolean(), False), ("max_rel_error", sa.Float(), True),
    ("soaked", sa.Boolean(), True), ("soak_s", sa.Float(), True),
    ("not_soaked", sa.Boolean(), False), ("contended", sa.Boolean(), False),
    ("power_capped", sa.Boolean(), False), ("thermal_throttled", sa.Boolean(), False),
    ("hw_slowdown", sa.Boolean(), False), ("contention", sa.String(length=1024), True),
    ("temperature_c", sa.Float(), True), ("sm_clock_mhz", sa.Float(), True),
    ("power_w", sa.Float(), True), ("compile_s", sa.Float(), True),
    ("wall_s", sa.Float(), False),
    # The run's own wander (agent/timing/repeat.py), what may widen its repeat interval.
    ("wander", sa.Float(), True),
)


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("probe_run_id", sa.Integer(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        *(sa.Column(name, kind, nullable=nullable) for name, kind, nullable in COLUMNS),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_job_result_document_id_document"),
        sa.ForeignKeyConstraint(["provider_id"], ["provider.id"],
                                name="fk_job_result_provider_id_provider"),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name="fk_job_result_host_id_host"),
        sa.ForeignKeyConstraint(["probe_run_id"], ["probe_run.id"],
                                name="fk_job_result_probe_run_id_probe_run"),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpu.id"], name="fk_job_result_gpu_id_gpu"),
        sa.PrimaryKeyConstraint("id", name="pk_job_result"),
    )
    for column in INDEXED:
        op.create_index(f"ix_{TABLE}_{column}", TABLE, [column])


def downgrade() -> None:
    for column in reversed(INDEXED):
        op.drop_index(f"ix_{TABLE}_{column}", table_name=TABLE)
    op.drop_table(TABLE)
