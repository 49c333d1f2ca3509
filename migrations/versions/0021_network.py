"""network, network_device: the node's network from its agent document (issue 46).

The agent fingerprints the node's network (agent/network/): each RDMA port and network
interface with its kind, state, rate, firmware, PCI address, NUMA node and PCI distance
to each GPU (`network_device`, one row per device in the agent's order), and per
document GPUDirect RDMA, the fabric NIC count, the GPUs the distances name, what was
read and the agent's notes (`network`).

Documents stored before this revision have no rows: their nodes read as not fingerprinted
for the network, never as nodes without a fabric.

Revision ID: 0021
Revises: 0020
Created: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Binary JSONB on PostgreSQL, text on SQLite (as fleet.store.models.Json).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "network",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("fabric_nics", sa.Integer(), nullable=False),
        sa.Column("device_count", sa.Integer(), nullable=False),
        sa.Column("gdr_state", sa.String(length=16), nullable=False),
        sa.Column("peermem", sa.String(length=16), nullable=False),
        sa.Column("dmabuf", sa.String(length=16), nullable=False),
        sa.Column("gdr_basis", sa.String(length=512), nullable=False),
        sa.Column("gpus", JSON, nullable=False),
        sa.Column("sources", JSON, nullable=False),
        sa.Column("notes", JSON, nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_network_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_network"),
        sa.UniqueConstraint("document_id", name="uq_network_document_id"),
    )
    op.create_table(
        "network_device",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("device", sa.String(length=128), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("netdev", sa.String(length=128), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("fabric", sa.Boolean(), nullable=False),
        sa.Column("link_layer", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=64), nullable=True),
        sa.Column("physical_state", sa.String(length=64), nullable=True),
        sa.Column("up", sa.Boolean(), nullable=True),
        sa.Column("rate_gbps", sa.Float(), nullable=True),
        sa.Column("width", sa.String(length=64), nullable=True),
        sa.Column("speed", sa.String(length=64), nullable=True),
        sa.Column("firmware", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=64), nullable=True),
        sa.Column("driver", sa.String(length=64), nullable=True),
        sa.Column("pci_address", sa.String(length=16), nullable=True),
        sa.Column("numa_node", sa.Integer(), nullable=True),
        sa.Column("mtu", sa.Integer(), nullable=True),
        sa.Column("nearest_level", sa.String(length=8), nullable=True),
        sa.Column("nearest_gpus", sa.String(length=256), nullable=True),
        sa.Column("gpu_distance", JSON, nullable=False),
        sa.Column("distance_source", sa.String(length=32), nullable=True),
        sa.Column("sources", JSON, nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["document.id"],
                                name="fk_network_device_document_id_document"),
        sa.PrimaryKeyConstraint("id", name="pk_network_device"),
        sa.UniqueConstraint("document_id", "position",
                            name="uq_network_device_document_id_position"),
    )


def downgrade() -> None:
    op.drop_table("network_device")
    op.drop_table("network")
