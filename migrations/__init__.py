"""Alembic environment and versions of fleet's store (installed as fleet.store.migrations)."""
