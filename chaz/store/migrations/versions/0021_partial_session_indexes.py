"""Partial session indexes: fewer index entries per admission (docs/performance.md).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07

An admission's session update sets ``active_at``, which
``ix_sessions_project_active`` holds, so it is never HOT and writes an
entry into every index of ``sessions``. This makes three of them hold only
the rows a reader can look for:

* ``ix_sessions_parent_job_id``: ``WHERE parent_job_id IS NOT NULL`` (a
  root session, one no turn spawned, adds nothing; every reader asks for
  one parent);
* PostgreSQL's trigram indexes of ``name`` and ``description``:
  ``WHERE name IS NOT NULL``, ``WHERE description IS NOT NULL`` (GIN
  indexes a NULL too; a search's ``ILIKE`` on either column implies it is
  not NULL, so its plans keep them).

And on PostgreSQL ``jobs`` and ``sessions`` get ``fillfactor`` 80: a turn
updates its job twice and its session three times soon after writing
them, and with full pages each of those first prunes the page or moves
the row's new version to another one.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

# Written out, not imported: a revision keeps the schema of its day.
_HAS_PARENT = "parent_job_id IS NOT NULL"

_PG_UP = [
    # Room on each page for a row's next versions (see the docstring).
    "ALTER TABLE jobs SET (fillfactor = 80)",
    "ALTER TABLE sessions SET (fillfactor = 80)",
    "DROP INDEX IF EXISTS ix_sessions_name_trgm",
    "DROP INDEX IF EXISTS ix_sessions_description_trgm",
    "CREATE INDEX ix_sessions_name_trgm ON sessions "
    "USING gin (name gin_trgm_ops) WHERE name IS NOT NULL",
    "CREATE INDEX ix_sessions_description_trgm ON sessions "
    "USING gin (description gin_trgm_ops) WHERE description IS NOT NULL",
]

_PG_DOWN = [
    "ALTER TABLE jobs RESET (fillfactor)",
    "ALTER TABLE sessions RESET (fillfactor)",
    "DROP INDEX IF EXISTS ix_sessions_name_trgm",
    "DROP INDEX IF EXISTS ix_sessions_description_trgm",
    "CREATE INDEX ix_sessions_name_trgm ON sessions USING gin (name gin_trgm_ops)",
    "CREATE INDEX ix_sessions_description_trgm ON sessions USING gin (description gin_trgm_ops)",
]


def _where(sql: str) -> dict[str, Any]:
    return {"postgresql_where": sa.text(sql), "sqlite_where": sa.text(sql)}


def upgrade() -> None:
    """Make the three indexes partial (and leave room on the two tables' pages)."""
    op.drop_index("ix_sessions_parent_job_id", table_name="sessions")
    op.create_index(
        "ix_sessions_parent_job_id", "sessions", ["parent_job_id"], **_where(_HAS_PARENT)
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in _PG_UP:
            op.execute(statement)


def downgrade() -> None:
    """Make them full again (and the pages too)."""
    if op.get_bind().dialect.name == "postgresql":
        for statement in _PG_DOWN:
            op.execute(statement)
    op.drop_index("ix_sessions_parent_job_id", table_name="sessions")
    op.create_index("ix_sessions_parent_job_id", "sessions", ["parent_job_id"])
