"""``INSERT ... ON CONFLICT``, the same statement on PostgreSQL and SQLite.

SQLAlchemy's core ``insert`` has no ``ON CONFLICT`` clause: each dialect's
own ``insert`` does, with the same method names. A conflict handled in the
statement never raises, so it cannot abort the caller's transaction on
PostgreSQL, and a concurrent writer cannot slip between a check and a write.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table


def insert(conn: Connection, table: Table | Any) -> Any:
    """An insert into ``table`` for ``conn``'s dialect, with
    ``on_conflict_do_nothing`` and ``on_conflict_do_update``."""
    # Imported here: the PostgreSQL dialect's package is a few hundredths of
    # a second that an embedded worker's start never needs.
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)
