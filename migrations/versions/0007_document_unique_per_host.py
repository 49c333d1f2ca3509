"""document: unique by (content_hash, host) rather than by content_hash alone.

Two inventory hosts that are one machine (two aliases of one address, a provider listing
one node twice) can send the very same document. Unique by content alone, the second
host's answer was "already stored" under the first host's name and the second host had no
result of its own in the run (a Celery sweep then called it interrupted). Each host now
keeps its own copy, and the same document sent again for the same host is still one row.
The constraint leads with content_hash so that hand ingest, which still treats a document
given twice under two names as one, finds it by its hash through the same index.

Revision ID: 0007
Revises: 0006
Created: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = "uq_document_content_hash"
NEW = "uq_document_content_hash_host_id"


def upgrade() -> None:
    with op.batch_alter_table("document") as batch:
        batch.drop_constraint(OLD, type_="unique")
        batch.create_unique_constraint(NEW, ["content_hash", "host_id"])


def downgrade() -> None:
    # Fails, as it should, while two hosts hold the same document: which copy to drop is
    # the user's choice, not a migration's.
    with op.batch_alter_table("document") as batch:
        batch.drop_constraint(NEW, type_="unique")
        batch.create_unique_constraint(OLD, ["content_hash"])
