"""Session names unique per project, not per install (docs/contracts.md#names).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

``sessions.name`` was UNIQUE across the install, so ``conflict.name_taken``
told one project that another project had a session of that name. This
revision replaces that constraint with ``uq_sessions_project_name``, a
unique index on ``(project, name)``. Like the constraint it replaces it has
no partial condition: unnamed sessions (NULL) never collide, and an archived
session keeps its name.

* PostgreSQL: drop the constraint ``sessions_name_key`` (the name
  PostgreSQL gave 0001's column-level UNIQUE), create the index.
* SQLite cannot drop a constraint in place: a batch ALTER copies the table
  without it. That copy drops the FTS5 triggers of 0008 and may renumber
  rowids, so, as 0008 asks, the three ``sessions_fts`` triggers are created
  again and ``sessions_fts`` is rebuilt from the new rows. Foreign keys
  (``entries``, ``jobs``, ... reference ``sessions``) are off during the copy
  and checked before the commit (:func:`chaz.store.migrate.upgrade`).

The downgrade restores the install-wide UNIQUE; it fails, and changes
nothing, while two projects hold sessions of the same name.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_INDEX = "uq_sessions_project_name"
#: 0001's column-level UNIQUE, as PostgreSQL named it.
_PG_CONSTRAINT = "sessions_name_key"
#: SQLite reflects 0001's UNIQUE without a name: batch mode names it by this.
_NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}

# Written out, not imported: a revision keeps the schema of its day (0008's).
_SQLITE_FTS = [
    "CREATE TRIGGER sessions_fts_insert AFTER INSERT ON sessions BEGIN "
    "INSERT INTO sessions_fts(rowid, name, description) "
    "VALUES (new.rowid, new.name, new.description); END",
    "CREATE TRIGGER sessions_fts_delete AFTER DELETE ON sessions BEGIN "
    "INSERT INTO sessions_fts(sessions_fts, rowid, name, description) "
    "VALUES ('delete', old.rowid, old.name, old.description); END",
    "CREATE TRIGGER sessions_fts_update AFTER UPDATE OF name, description ON sessions BEGIN "
    "INSERT INTO sessions_fts(sessions_fts, rowid, name, description) "
    "VALUES ('delete', old.rowid, old.name, old.description); "
    "INSERT INTO sessions_fts(rowid, name, description) "
    "VALUES (new.rowid, new.name, new.description); END",
    # External content: the index is read again from the copied rows.
    "INSERT INTO sessions_fts(sessions_fts) VALUES ('rebuild')",
]


def _sqlite_rebuild(*, per_project: bool) -> None:
    """Copy ``sessions`` with the install-wide UNIQUE (``per_project`` False) or
    without it, then restore search's triggers and index over the copy."""
    with op.batch_alter_table("sessions", naming_convention=_NAMING, recreate="always") as batch:
        if per_project:
            batch.drop_constraint("uq_sessions_name", type_="unique")
        else:
            batch.create_unique_constraint("uq_sessions_name", ["name"])
    for statement in _SQLITE_FTS:
        op.execute(statement)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_rebuild(per_project=True)
    else:
        op.drop_constraint(_PG_CONSTRAINT, "sessions", type_="unique")
    op.create_index(_INDEX, "sessions", ["project", "name"], unique=True)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="sessions")
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_rebuild(per_project=False)
    else:
        op.create_unique_constraint(_PG_CONSTRAINT, "sessions", ["name"])
