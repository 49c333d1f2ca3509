"""The store: agent documents kept in SQLite (default) or PostgreSQL (teams).

`database` finds and opens the database, `schema` migrates it with Alembic, `models` is
the schema, `ingest` stores validated documents, `query` reads results back, and
`commands` holds the click commands (`fleet db`, `fleet ingest`, `fleet results`).
"""
