"""Alembic's environment for class mode: run by `store.upgrade` with an open connection
(`config.attributes["connection"]`), never from a command line with a URL of its own.

Replicas that start at once must not both create the tables: the migrations run in one
transaction that takes the database's write lock first (SQLite: `BEGIN IMMEDIATE`, set by the
store's engine; PostgreSQL: an advisory lock), and Alembic reads the current version inside
it, so the second replica finds the tables made and does nothing."""

from alembic import context

from xai_core.classroom.schema import Base

MIGRATION_LOCK = 410041  # any fixed number: PostgreSQL's advisory lock for the migrations

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata,
                  transactional_ddl=True)
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
    context.run_migrations()
