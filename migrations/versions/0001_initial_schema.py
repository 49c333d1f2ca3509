"""Initial schema: providers, hosts, GPUs, probe runs, documents, fingerprints,
benchmark results and host errors.

Revision ID: 0001
Revises: (none)
Created: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Binary JSONB on PostgreSQL, text on SQLite (as fleet.store.models.Json). Written out
# here, not imported, so this revision keeps meaning what it meant when models change.
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "probe_run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sweep", sa.String(length=128), nullable=True),
        sa.Column("inventory", sa.String(length=4096), nullable=True),
        sa.Column("controller_version", sa.String(length=64), nullable=False),
        sa.Column("agent_version", sa.String(length=128), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_run")),
    )
    op.create_index(op.f("ix_probe_run_sweep"), "probe_run", ["sweep"])

    op.create_table(
        "provider",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider")),
        sa.UniqueConstraint("name", name=op.f("uq_provider_name")),
    )
    op.create_table(
        "host",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(
            ["provider_id"], ["provider.id"], name=op.f("fk_host_provider_id_provider")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host")),
        sa.UniqueConstraint("provider_id", "name", name=op.f("uq_host_provider_id_name")),
    )
    op.create_table(
        "document",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("probe_run_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stored_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("agent_version", sa.String(length=128), nullable=False),
        sa.Column("hostname", sa.String(length=128), nullable=True),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("source_kind", sa.String(length=32), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("benchmark_count", sa.Integer(), nullable=False),
        sa.Column("error_count", sa.Integer(), nullable=False),
        sa.Column("body", JSON, nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name=op.f("fk_document_host_id_host")),
        sa.ForeignKeyConstraint(
            ["probe_run_id"], ["probe_run.id"], name=op.f("fk_document_probe_run_id_probe_run")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_document")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_document_content_hash")),
    )
    op.create_index(
        op.f("ix_document_host_id_collected_at"), "document", ["host_id", "collected_at"]
    )
    op.create_index(op.f("ix_document_probe_run_id"), "document", ["probe_run_id"])
    if op.get_bind().dialect.name == "postgresql":
        # A document is ~65 KB of JSON, always compressed out of line (TOAST): lz4 stored
        # it in 3.4 ms against pglz's 4.9 ms, and 25% smaller. Servers built without lz4
        # (or older than 14) keep pglz.
        op.execute(
            "DO $$ BEGIN ALTER TABLE document ALTER COLUMN body SET COMPRESSION lz4; "
            "EXCEPTION WHEN OTHERS THEN NULL; END $$"
        )

    op.create_table(
        "gpu",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("identity", sa.String(length=160), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=True),
        sa.Column("host_id", sa.Integer(), nullable=True),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name=op.f("fk_gpu_host_id_host")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu")),
        sa.UniqueConstraint("identity", name=op.f("uq_gpu_identity")),
    )
    op.create_index(op.f("ix_gpu_uuid"), "gpu", ["uuid"])

    op.create_table(
        "fingerprint",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column("serial", sa.String(length=128), nullable=True),
        sa.Column("pci_device_id", sa.String(length=128), nullable=True),
        sa.Column("variant", sa.String(length=160), nullable=False),
        sa.Column("variant_label", sa.String(length=128), nullable=True),
        sa.Column("variant_matched_by", sa.String(length=16), nullable=False),
        sa.Column("family", sa.String(length=128), nullable=True),
        sa.Column("form_factor", sa.String(length=16), nullable=False),
        sa.Column("memory_gb", sa.BigInteger(), nullable=True),
        sa.Column("memory_total_mib", sa.BigInteger(), nullable=True),
        sa.Column("architecture", sa.String(length=128), nullable=True),
        sa.Column("driver_version", sa.String(length=128), nullable=True),
        sa.Column("cuda_driver_version", sa.String(length=128), nullable=True),
        sa.Column("vbios_version", sa.String(length=128), nullable=True),
        sa.Column("power_limit_w", sa.Float(), nullable=True),
        sa.Column("power_limit_default_w", sa.Float(), nullable=True),
        sa.Column("max_sm_clock_mhz", sa.Integer(), nullable=True),
        sa.Column("max_mem_clock_mhz", sa.Integer(), nullable=True),
        sa.Column("virtualization_mode", sa.String(length=16), nullable=True),
        sa.Column("mig_enabled", sa.Boolean(), nullable=True),
        sa.Column("ecc_enabled", sa.Boolean(), nullable=True),
        sa.Column("persistence_mode", sa.Boolean(), nullable=True),
        sa.Column("pcie_gen_max", sa.Integer(), nullable=True),
        sa.Column("pcie_width_max", sa.Integer(), nullable=True),
        sa.Column("nvlink_links_active", sa.Integer(), nullable=False),
        sa.Column("capabilities", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"], ["document.id"], name=op.f("fk_fingerprint_document_id_document")
        ),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpu.id"], name=op.f("fk_fingerprint_gpu_id_gpu")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fingerprint")),
        sa.UniqueConstraint(
            "document_id", "gpu_index", name=op.f("uq_fingerprint_document_id_gpu_index")
        ),
    )
    op.create_index(op.f("ix_fingerprint_gpu_id"), "fingerprint", ["gpu_id"])
    op.create_index(
        op.f("ix_fingerprint_variant_form_factor"), "fingerprint", ["variant", "form_factor"]
    )

    op.create_table(
        "host_error",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("probe_run_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=True),
        sa.Column("stage", sa.String(length=128), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"], ["document.id"], name=op.f("fk_host_error_document_id_document")
        ),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name=op.f("fk_host_error_host_id_host")),
        sa.ForeignKeyConstraint(
            ["probe_run_id"], ["probe_run.id"], name=op.f("fk_host_error_probe_run_id_probe_run")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_error")),
    )
    op.create_index(op.f("ix_host_error_document_id"), "host_error", ["document_id"])
    op.create_index(op.f("ix_host_error_host_id"), "host_error", ["host_id"])
    op.create_index(op.f("ix_host_error_probe_run_id"), "host_error", ["probe_run_id"])

    op.create_table(
        "benchmark_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint_id", sa.Integer(), nullable=True),
        sa.Column("provider_id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("probe_run_id", sa.Integer(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("variant", sa.String(length=160), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("harness_version", sa.String(length=128), nullable=False),
        sa.Column("timing_method", sa.String(length=128), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("pause_ms", sa.Float(), nullable=False),
        sa.Column("cache", sa.String(length=16), nullable=False),
        sa.Column("concurrency", sa.String(length=16), nullable=False),
        sa.Column("gpus_in_run", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("tflops", sa.Float(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("median_ms", sa.Float(), nullable=False),
        sa.Column("trimmed_mean_ms", sa.Float(), nullable=False),
        sa.Column("mean_ms", sa.Float(), nullable=False),
        sa.Column("min_ms", sa.Float(), nullable=False),
        sa.Column("max_ms", sa.Float(), nullable=False),
        sa.Column("stdev_ms", sa.Float(), nullable=False),
        sa.Column("cv", sa.Float(), nullable=False),
        sa.Column("ci95_low_ms", sa.Float(), nullable=False),
        sa.Column("ci95_high_ms", sa.Float(), nullable=False),
        sa.Column("warmup_steady", sa.Boolean(), nullable=False),
        sa.Column("warmup_s", sa.Float(), nullable=False),
        sa.Column("correctness_passed", sa.Boolean(), nullable=False),
        sa.Column("max_rel_error", sa.Float(), nullable=True),
        sa.Column("power_capped", sa.Boolean(), nullable=False),
        sa.Column("thermal_throttled", sa.Boolean(), nullable=False),
        sa.Column("hw_slowdown", sa.Boolean(), nullable=False),
        sa.Column("contended", sa.Boolean(), nullable=False),
        sa.Column("not_steady", sa.Boolean(), nullable=False),
        sa.Column("correctness_failed", sa.Boolean(), nullable=False),
        sa.Column("clocks_locked", sa.Boolean(), nullable=False),
        sa.Column("clock_lock_mhz", sa.Integer(), nullable=True),
        sa.Column("telemetry_samples", sa.BigInteger(), nullable=False),
        sa.Column("sm_clock_mhz_median", sa.Float(), nullable=True),
        sa.Column("mem_clock_mhz_median", sa.Float(), nullable=True),
        sa.Column("power_w_median", sa.Float(), nullable=True),
        sa.Column("temperature_c_max", sa.Float(), nullable=True),
        sa.Column("reason_shares", JSON, nullable=False),
        sa.Column("torch_version", sa.String(length=128), nullable=True),
        sa.Column("cuda_runtime_version", sa.String(length=128), nullable=True),
        sa.Column("cublas_version", sa.String(length=128), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("samples_ms", sa.LargeBinary(), nullable=False),
        sa.Column("telemetry_series", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"], ["document.id"], name=op.f("fk_benchmark_result_document_id_document")
        ),
        sa.ForeignKeyConstraint(
            ["fingerprint_id"],
            ["fingerprint.id"],
            name=op.f("fk_benchmark_result_fingerprint_id_fingerprint"),
        ),
        sa.ForeignKeyConstraint(
            ["gpu_id"], ["gpu.id"], name=op.f("fk_benchmark_result_gpu_id_gpu")
        ),
        sa.ForeignKeyConstraint(
            ["host_id"], ["host.id"], name=op.f("fk_benchmark_result_host_id_host")
        ),
        sa.ForeignKeyConstraint(
            ["probe_run_id"],
            ["probe_run.id"],
            name=op.f("fk_benchmark_result_probe_run_id_probe_run"),
        ),
        sa.ForeignKeyConstraint(
            ["provider_id"], ["provider.id"], name=op.f("fk_benchmark_result_provider_id_provider")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark_result")),
    )
    op.create_index(op.f("ix_benchmark_result_collected_at"), "benchmark_result", ["collected_at"])
    op.create_index(op.f("ix_benchmark_result_document_id"), "benchmark_result", ["document_id"])
    op.create_index(op.f("ix_benchmark_result_gpu_id"), "benchmark_result", ["gpu_id"])
    op.create_index(op.f("ix_benchmark_result_host_id"), "benchmark_result", ["host_id"])
    op.create_index(op.f("ix_benchmark_result_probe_run_id"), "benchmark_result", ["probe_run_id"])
    op.create_index(
        op.f("ix_benchmark_result_provider_id_variant_collected_at"),
        "benchmark_result",
        ["provider_id", "variant", "collected_at"],
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_benchmark_result_provider_id_variant_collected_at"), table_name="benchmark_result"
    )
    op.drop_index(op.f("ix_benchmark_result_probe_run_id"), table_name="benchmark_result")
    op.drop_index(op.f("ix_benchmark_result_host_id"), table_name="benchmark_result")
    op.drop_index(op.f("ix_benchmark_result_gpu_id"), table_name="benchmark_result")
    op.drop_index(op.f("ix_benchmark_result_document_id"), table_name="benchmark_result")
    op.drop_index(op.f("ix_benchmark_result_collected_at"), table_name="benchmark_result")

    op.drop_table("benchmark_result")
    op.drop_index(op.f("ix_host_error_probe_run_id"), table_name="host_error")
    op.drop_index(op.f("ix_host_error_host_id"), table_name="host_error")
    op.drop_index(op.f("ix_host_error_document_id"), table_name="host_error")

    op.drop_table("host_error")
    op.drop_index(op.f("ix_fingerprint_variant_form_factor"), table_name="fingerprint")
    op.drop_index(op.f("ix_fingerprint_gpu_id"), table_name="fingerprint")

    op.drop_table("fingerprint")
    op.drop_index(op.f("ix_gpu_uuid"), table_name="gpu")

    op.drop_table("gpu")
    op.drop_index(op.f("ix_document_probe_run_id"), table_name="document")
    op.drop_index(op.f("ix_document_host_id_collected_at"), table_name="document")

    op.drop_table("document")
    op.drop_table("host")
    op.drop_table("provider")
    op.drop_index(op.f("ix_probe_run_sweep"), table_name="probe_run")

    op.drop_table("probe_run")
