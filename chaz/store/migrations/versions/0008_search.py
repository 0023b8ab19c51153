"""Session search: the lexical indexes of ``session_search``
(docs/sessions.md#session_search).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

The indexes live outside the models (the schema comparison ignores exactly
them, see :data:`chaz.store.search.SEARCH_OBJECTS`):

* PostgreSQL: ``pg_trgm`` and three trigram GIN indexes, on the content of
  Message entries (a partial index) and on session names and descriptions.
* SQLite: two FTS5 tables with the trigram tokenizer, ``entries_fts`` (the
  content of Message entries) and ``sessions_fts`` (name, description). Both
  are external-content tables (they store no second copy of the text; the
  rowid is the source row's) kept in sync by triggers on ``entries`` and
  ``sessions``.

A later migration that rebuilds ``entries`` or ``sessions`` on SQLite (a
batch ALTER copies the table) drops these triggers and may renumber rowids:
it must recreate the triggers and refill both FTS tables as ``_SQLITE_UP``
does.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_SQLITE_UP = [
    # External content: the text stays in entries/sessions; snippets read it there.
    "CREATE VIRTUAL TABLE entries_fts USING fts5("
    "content, content='entries', content_rowid='rowid', tokenize='trigram')",
    "CREATE VIRTUAL TABLE sessions_fts USING fts5("
    "name, description, content='sessions', content_rowid='rowid', tokenize='trigram')",
    # Only Message entries are searched; the WHEN clauses keep the others out,
    # and an external-content delete must name exactly what was indexed.
    "CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries WHEN new.type = 'message' BEGIN "
    "INSERT INTO entries_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries WHEN old.type = 'message' BEGIN "
    "INSERT INTO entries_fts(entries_fts, rowid, content) "
    "VALUES ('delete', old.rowid, old.content); END",
    # One trigger, in this order: the old row leaves the index before the new
    # one enters it (two triggers would fire in an unspecified order).
    "CREATE TRIGGER entries_fts_update AFTER UPDATE OF content, type ON entries BEGIN "
    "INSERT INTO entries_fts(entries_fts, rowid, content) "
    "SELECT 'delete', old.rowid, old.content WHERE old.type = 'message'; "
    "INSERT INTO entries_fts(rowid, content) "
    "SELECT new.rowid, new.content WHERE new.type = 'message'; END",
    "CREATE TRIGGER sessions_fts_insert AFTER INSERT ON sessions BEGIN "
    "INSERT INTO sessions_fts(rowid, name, description) "
    "VALUES (new.rowid, new.name, new.description); END",
    "CREATE TRIGGER sessions_fts_delete AFTER DELETE ON sessions BEGIN "
    "INSERT INTO sessions_fts(sessions_fts, rowid, name, description) "
    "VALUES ('delete', old.rowid, old.name, old.description); END",
    # Only a change of the searched columns: sessions are updated on every
    # append (last_seq), and those updates must not touch the index.
    "CREATE TRIGGER sessions_fts_update AFTER UPDATE OF name, description ON sessions BEGIN "
    "INSERT INTO sessions_fts(sessions_fts, rowid, name, description) "
    "VALUES ('delete', old.rowid, old.name, old.description); "
    "INSERT INTO sessions_fts(rowid, name, description) "
    "VALUES (new.rowid, new.name, new.description); END",
    # Rows written before this revision.
    "INSERT INTO entries_fts(rowid, content) "
    "SELECT rowid, content FROM entries WHERE type = 'message'",
    "INSERT INTO sessions_fts(rowid, name, description) "
    "SELECT rowid, name, description FROM sessions",
]

_SQLITE_DOWN = [
    *(
        f"DROP TRIGGER IF EXISTS {t}"
        for t in (
            "entries_fts_insert",
            "entries_fts_delete",
            "entries_fts_update",
            "sessions_fts_insert",
            "sessions_fts_delete",
            "sessions_fts_update",
        )
    ),
    "DROP TABLE IF EXISTS entries_fts",
    "DROP TABLE IF EXISTS sessions_fts",
]

_PG_UP = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    # Partial: only Message entries are searched (a literal predicate, so the
    # search's literal ``type = 'message'`` lets the planner use it).
    "CREATE INDEX ix_entries_message_trgm ON entries "
    "USING gin (content gin_trgm_ops) WHERE type = 'message'",
    "CREATE INDEX ix_sessions_name_trgm ON sessions USING gin (name gin_trgm_ops)",
    "CREATE INDEX ix_sessions_description_trgm ON sessions USING gin (description gin_trgm_ops)",
]

_PG_DOWN = [
    "DROP INDEX IF EXISTS ix_entries_message_trgm",
    "DROP INDEX IF EXISTS ix_sessions_name_trgm",
    "DROP INDEX IF EXISTS ix_sessions_description_trgm",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_UP if dialect == "sqlite" else _PG_UP:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_DOWN if dialect == "sqlite" else _PG_DOWN:
        op.execute(statement)
