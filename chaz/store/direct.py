"""Reads on the database driver alone (psycopg, or the standard library's
sqlite3), for commands that must answer fast.

``chaz sessions ls``, ``chaz sessions show`` and ``chaz jobs ls`` are a few
``SELECT``s; through :class:`~chaz.store.facade.Store` they first import
SQLAlchemy, the mapped models and the prebuilt statements, most of a
command's start-up (docs/performance.md#cli-read-commands-on-postgresql).
:class:`DirectReads` sends the same statements on one psycopg or sqlite3
connection and builds the same models (:mod:`chaz.store.records`), importing
neither. On SQLite it reads the column values as SQLAlchemy's types would
(JSON text parsed, timestamps from their ISO text, naive as stored).

It answers only what it can answer exactly like the store: a database at the
newest bundled revision, rows that exist. Everything else (an old schema, a
missing session, a URL it does not parse, a connection refused) is ``None``
or an exception, and its caller then takes the full path, which migrates or
reports the error as it always has. Each statement is one autocommit read,
as each of the store's reads is one transaction of its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chaz.domain.kinds import ACTIVE, JobStatus
from chaz.store.migrate import bundled_head, connect_args, is_current_file

if TYPE_CHECKING:
    from chaz.domain.entries import Entry
    from chaz.domain.jobs import Job
    from chaz.domain.sessions import Session

#: The unfinished states as literals, as the store's partial-index predicate
#: writes them (chaz.store.models.unfinished).
_UNFINISHED = "status IN (" + ", ".join(f"'{v}'" for v in sorted(s.value for s in ACTIVE)) + ")"


#: The columns SQLAlchemy reads as JSON and as timestamps, by table: on
#: SQLite they are text, which the store's types parse.
_JSON = {
    "sessions": ("limits", "tools", "members"),
    "entries": ("metadata",),
    "jobs": ("checkpoint", "error", "grants", "usage"),
}
_TIMES = {
    "sessions": ("created_at", "archived_at", "active_at"),
    "entries": ("created_at",),
    "jobs": ("created_at", "started_at", "finished_at", "hidden_at", "rolled_back_at"),
}
_SQLITE = "sqlite:///"


class DirectReads:
    """A few of the store's reads, on one psycopg or sqlite3 connection."""

    def __init__(self, conn: Any, *, sqlite: bool = False, views: bool = False) -> None:
        self._conn = conn
        self._sqlite = sqlite
        # Views (chaz.store.views) build each model only when a field beyond
        # a listing's is read, and import pydantic only then.
        self._views = views

    @classmethod
    def open(cls, url: str, *, views: bool = False) -> DirectReads | None:
        """Connected to ``url`` if it is a database at the newest revision, else None.

        A connection that fails raises the driver's error: the caller's full
        path reports it as it would have. With ``views``, the reads answer
        :mod:`chaz.store.views` rows that stand for the models.
        """
        if url.startswith(_SQLITE):
            if not is_current_file(url):
                return None  # not there, behind, or with options: the engine's path
            conn = sqlite3.connect(url.removeprefix(_SQLITE), timeout=60, isolation_level=None)
            conn.row_factory = sqlite3.Row
            return cls(conn, sqlite=True, views=views)
        args = connect_args(url)
        head = bundled_head()
        if args is None or head is None:
            return None
        import psycopg
        from psycopg.rows import dict_row

        options: dict[str, Any] = dict(args)
        reads = cls(psycopg.connect(autocommit=True, row_factory=dict_row, **options), views=views)
        try:
            versions = reads._rows("SELECT version_num FROM alembic_version", (), "")
        except psycopg.errors.UndefinedTable:
            versions = []
        except BaseException:
            reads.close()
            raise
        if [row["version_num"] for row in versions] != [head]:
            reads.close()
            return None
        return reads

    def _session(self, row: dict[str, Any]) -> Session:
        if self._views:
            from chaz.store.views import session_view

            return session_view(row)
        from chaz.store.records import as_session

        return as_session(row)

    def _entry(self, row: dict[str, Any]) -> Entry:
        if self._views:
            from chaz.store.views import entry_view

            return entry_view(row)
        from chaz.store.records import as_entry

        return as_entry(row)

    def _job(self, row: dict[str, Any]) -> Job:
        if self._views:
            from chaz.store.views import job_view

            return job_view(row)
        from chaz.store.records import as_job

        return as_job(row)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def _rows(self, sql: str, params: Sequence[Any], table: str) -> list[dict[str, Any]]:
        """``sql`` (``%s`` placeholders) on the connection; ``table``'s rows as the
        store's types would give them."""
        if not self._sqlite:
            with self._conn.cursor() as cur:
                cur.execute(sql, params)
                rows: list[dict[str, Any]] = cur.fetchall()
                return rows
        found = [dict(row) for row in self._conn.execute(sql.replace("%s", "?"), params)]
        for row in found:
            for column in _JSON.get(table, ()):
                if isinstance(row[column], str):
                    row[column] = json.loads(row[column])
            for column in _TIMES.get(table, ()):
                if isinstance(row[column], str):
                    row[column] = datetime.fromisoformat(row[column])
        return found

    def session(self, ref: str, *, project: str) -> Session | None:
        """The project's session of id ``ref``, else of name ``ref``
        (``Store.get_session``); None when there is none."""
        for column in ("id", "name"):
            sql = f"SELECT * FROM sessions WHERE {column} = %s AND project = %s"
            rows = self._rows(sql, (ref, project), "sessions")
            if rows:
                return self._session(rows[0])
        return None

    def sessions(
        self, *, agent_id: str | None, limit: int, tree_id: str | None, archived: bool, project: str
    ) -> list[Session]:
        """``Store.list_sessions``: the project's sessions, newest first."""
        where, params = ["project = %s"], [project]
        if agent_id:
            where.append("agent_id = %s")
            params.append(agent_id)
        if tree_id is not None:
            where.append("tree_id = %s")
            params.append(tree_id)
        where.append("archived_at IS NOT NULL" if archived else "archived_at IS NULL")
        sql = (
            f"SELECT * FROM sessions WHERE {' AND '.join(where)} ORDER BY created_at DESC LIMIT %s"
        )
        return [self._session(row) for row in self._rows(sql, (*params, limit), "sessions")]

    def entries(self, session_id: str, *, after: int) -> list[Entry]:
        """``Store.entries``: the session's entries with ``seq > after``, in order."""
        sql = "SELECT * FROM entries WHERE session_id = %s AND seq > %s ORDER BY seq"
        return [self._entry(row) for row in self._rows(sql, (session_id, after), "entries")]

    def jobs(
        self,
        *,
        session_id: str | None,
        statuses: Sequence[JobStatus] | None,
        limit: int,
        newest_first: bool,
        project: str | None,
    ) -> list[Job]:
        """``Store.list_jobs`` with these filters: jobs in admission order (or newest first)."""
        where: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            where.append("session_id = %s")
            params.append(session_id)
        if statuses is not None:
            where.append(f"status IN ({', '.join('%s' for _ in statuses)})")
            params.extend(s.value for s in statuses)
            if statuses and all(s in ACTIVE for s in statuses):
                # As the store says it, so that a queue reads the partial index.
                where.append(_UNFINISHED)
        if project is not None:
            where.append("project = %s")
            params.append(project)
        order = "DESC" if newest_first else "ASC"
        sql = (
            "SELECT * FROM jobs"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + f" ORDER BY created_at {order}, ordinal {order} LIMIT %s"
        )
        return [self._job(row) for row in self._rows(sql, (*params, limit), "jobs")]
