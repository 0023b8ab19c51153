"""The ``projects`` table: each project's limits (docs/security.md#project-quotas).

A project without a row has the install's defaults; a row's NULL limit is
the default too, and ``-1`` is no limit (:mod:`chaz.domain.projects`).

Every admission needs its project's limits. Reading the row in every
admission would add a query to the hottest path, so :meth:`ProjectStore.stored`
keeps each project's row in this process for :data:`CACHE_SECONDS`: a change
made by ``set_limits`` is seen at once by the process that made it and
within that many seconds by every other producer and worker.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, case, func, select

from chaz.domain.jobs import ACTIVE
from chaz.ids import as_utc, utcnow
from chaz.store import upsert
from chaz.store.models import JobRow, ProjectRow, SessionRow

if TYPE_CHECKING:
    from chaz.store.db import Database

#: How long a process trusts the limits it read for a project.
CACHE_SECONDS = 5.0

#: A project's stored ``(max_live, max_jobs, turns_per_minute, tokens_per_minute,
#: max_tokens, max_cost)``; None: it has no row.
Stored = tuple[int | None, int | None, int | None, int | None, int | None, float | None] | None

_ACTIVE = [s.value for s in ACTIVE]


def read_stored(conn: Connection, project: str) -> Stored:
    """The project's stored limits, read on ``conn``; None: no row."""
    row = conn.execute(
        select(
            ProjectRow.max_live,
            ProjectRow.max_jobs,
            ProjectRow.turns_per_minute,
            ProjectRow.tokens_per_minute,
            ProjectRow.max_tokens,
            ProjectRow.max_cost,
        ).where(ProjectRow.id == project)
    ).first()
    return None if row is None else (row[0], row[1], row[2], row[3], row[4], row[5])


def read_counts(conn: Connection, project: str) -> tuple[list[str], int]:
    """The ids of the project's unfinished jobs and how many jobs it ever
    admitted, read on ``conn`` (to rebuild its quota keys)."""
    live = conn.scalars(
        select(JobRow.id).where(JobRow.project == project, JobRow.status.in_(_ACTIVE))
    ).all()
    total = conn.scalar(select(func.count()).select_from(JobRow).where(JobRow.project == project))
    return list(live), int(total or 0)


class ProjectStore:
    """Read and write projects' limits (``Store.projects``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Stored]] = {}

    def stored(self, project: str, read: Callable[[], Stored] | None = None) -> Stored:
        """The project's stored limits, from this process's cache when fresh.

        ``read`` reads them on a miss (an admission passes one that reads in
        its own transaction: a second connection could wait for a pool that
        its fellow admitters hold); default: a read of its own.
        """
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(project)
        if hit is not None and hit[0] > now:
            return hit[1]
        if read is None:
            with self._db.read() as conn:
                value = read_stored(conn, project)
        else:
            value = read()
        with self._lock:
            self._cache[project] = (now + CACHE_SECONDS, value)
        return value

    def counts(self, project: str) -> tuple[builtins.list[str], int]:
        """The ids of the project's unfinished jobs and how many it ever admitted."""
        with self._db.read() as conn:
            return read_counts(conn, project)

    def get(self, project: str) -> dict[str, Any]:
        """The project's row and use: ``id``, ``max_live``, ``max_jobs``,
        ``turns_per_minute``, ``tokens_per_minute`` (as stored), ``live`` and
        ``jobs`` (counted), ``created_at``, ``updated_at`` (None without a row)."""
        with self._db.read() as conn:
            row = (
                conn.execute(select(ProjectRow).where(ProjectRow.id == project)).mappings().first()
            )
            live, total = _usage(conn, [project]).get(project, (0, 0))
        return _view(project, row, live, total)

    def put(
        self,
        project: str,
        max_live: int | None,
        max_jobs: int | None,
        turns_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
    ) -> dict[str, Any]:
        """Set every limit of a project (None: the default), creating its row."""
        now = utcnow()
        values = {
            "max_live": max_live,
            "max_jobs": max_jobs,
            "turns_per_minute": turns_per_minute,
            "tokens_per_minute": tokens_per_minute,
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "updated_at": now,
        }
        with self._db.write() as conn:
            # One statement: a concurrent put of the same new project cannot
            # fail between a check and an insert.
            conn.execute(
                upsert.insert(conn, ProjectRow.__table__)
                .values(id=project, created_at=now, **values)
                .on_conflict_do_update(index_elements=["id"], set_=values)
            )
        with self._lock:
            self._cache.pop(project, None)
        return self.get(project)

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every project that has a row or a session, by id, as :meth:`get` shows it."""
        with self._db.read() as conn:
            rows = {r["id"]: r for r in conn.execute(select(ProjectRow)).mappings()}
            named = set(conn.scalars(select(SessionRow.project).distinct()).all())
            ids = sorted(set(rows) | named)
            usage = _usage(conn, ids)
        return [_view(p, rows.get(p), *usage.get(p, (0, 0))) for p in ids]


def _usage(conn: Connection, projects: builtins.list[str]) -> dict[str, tuple[int, int]]:
    """``project -> (unfinished jobs, all jobs)``, in one grouped query."""
    if not projects:
        return {}
    live = func.sum(case((JobRow.status.in_(_ACTIVE), 1), else_=0))
    stmt = (
        select(JobRow.project, live, func.count())
        .where(JobRow.project.in_(projects))
        .group_by(JobRow.project)
    )
    return {p: (int(a or 0), int(t)) for p, a, t in conn.execute(stmt)}


def _view(project: str, row: Any, live: int, total: int) -> dict[str, Any]:
    return {
        "id": project,
        "max_live": row["max_live"] if row is not None else None,
        "max_jobs": row["max_jobs"] if row is not None else None,
        "turns_per_minute": row["turns_per_minute"] if row is not None else None,
        "tokens_per_minute": row["tokens_per_minute"] if row is not None else None,
        "max_tokens": row["max_tokens"] if row is not None else None,
        "max_cost": row["max_cost"] if row is not None else None,
        "live": live,
        "jobs": total,
        "created_at": as_utc(row["created_at"]) if row is not None else None,
        "updated_at": as_utc(row["updated_at"]) if row is not None else None,
    }
