"""Sessions as collaboration reads and changes them: addresses, lineage,
archive, names and listings (docs/collaboration.md).

One of the concepts the :class:`~chaz.store.facade.Store` is composed of:
``store.find_sessions``, ``store.archive_session``, ... (creating and
reading one session is :mod:`chaz.store.sessions`). :func:`archive_auto` is
the archive a completion policy applies inside a job's end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, bindparam, case, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from chaz.domain.events import SESSION_ARCHIVED, SESSION_RENAMED
from chaz.domain.read_scope import ReadScope
from chaz.domain.sessions import ArchivedBy, NameSource, Session, missing_session
from chaz.domain.validation import check_session_name
from chaz.errors import NameTaken, SessionArchived
from chaz.ids import utcnow
from chaz.store import statements as st
from chaz.store.db import Database
from chaz.store.events import record
from chaz.store.models import EntryRow, JobRow, SessionRow
from chaz.store.rows import as_session, session_row


@dataclass(frozen=True)
class SessionSummary:
    """A session as ``list_agents`` shows it (:meth:`Store.session_summaries`)."""

    session: Session
    #: Finished turns: jobs that started and reached a terminal state.
    turns: int
    #: Characters of its context entries (Messages, Directives, Summaries).
    size: int
    #: The start of its latest Message or Directive (None before the first).
    tip: str | None
    #: Whether a job of it is queued, running or stopping.
    busy: bool


@dataclass(frozen=True)
class Outline:
    """One entry without its content (:meth:`Store.entry_outline`)."""

    seq: int
    type: str
    sender: str
    job_id: str | None
    length: int


class SessionDirectory:
    """Reads and changes of sessions beyond the write path (a concept of ``Store``)."""

    db: Database

    def list_sessions(
        self,
        *,
        agent_id: str | None = None,
        limit: int = 50,
        tree_id: str | None = None,
        archived: bool | None = None,
        project: str | None = None,
    ) -> list[Session]:
        """Sessions, newest first. ``archived``: True only archived ones, False only
        the others, None both; ``project``: only that project's."""
        stmt = select(SessionRow).order_by(SessionRow.created_at.desc()).limit(limit)
        if project is not None:
            stmt = stmt.where(SessionRow.project == project)
        if agent_id:
            stmt = stmt.where(SessionRow.agent_id == agent_id)
        if tree_id is not None:
            stmt = stmt.where(SessionRow.tree_id == tree_id)
        if archived is not None:
            stmt = stmt.where(archived_filter(archived))
        with self.db.read() as conn:
            return [as_session(r) for r in conn.execute(stmt).mappings()]

    def find_sessions(self, ref: str, *, project: str | None = None) -> list[Session]:
        """The session whose id is ``ref``, then those named ``ref``.

        Names are unique per project: with ``project``, 0, 1 or 2 sessions of
        that project; without, one named ``ref`` in each project that has one.
        """
        stmt = (
            select(SessionRow)
            .where(or_(SessionRow.id == ref, SessionRow.name == ref))
            .order_by(case((SessionRow.id == ref, 0), else_=1), SessionRow.project)
        )
        if project is not None:
            stmt = stmt.where(SessionRow.project == project)
        with self.db.read() as conn:
            return [as_session(r) for r in conn.execute(stmt).mappings()]

    def sessions_by_name_prefix(
        self,
        prefix: str,
        *,
        limit: int,
        within_tree: str | None = None,
        or_ids: Iterable[str] = (),
        project: str | None = None,
    ) -> list[Session]:
        """Non-archived sessions whose name starts with ``prefix`` (exactly, in every
        dialect: no LIKE, whose case rules differ), by name; ``within_tree`` keeps
        only that tree's and those in ``or_ids``; ``project`` only that project's."""
        name = SessionRow.name
        stmt = (
            select(SessionRow)
            .where(
                name.is_not(None),
                func.substr(name, 1, len(prefix)) == prefix,
                SessionRow.archived_at.is_(None),
            )
            .order_by(name)
            .limit(limit)
        )
        if project is not None:
            stmt = stmt.where(SessionRow.project == project)
        if within_tree is not None:
            ids = list(or_ids)
            stmt = stmt.where(
                or_(SessionRow.tree_id == within_tree, SessionRow.id.in_(ids))
                if ids
                else SessionRow.tree_id == within_tree
            )
        with self.db.read() as conn:
            return [as_session(r) for r in conn.execute(stmt).mappings()]

    def descendant_sessions(self, session_id: str, max_hops: int) -> dict[str, str]:
        """Sessions made (through ``parent_job_id``) by a job of ``session_id``, or of
        one of those, at most ``max_hops`` generations down, with their tree ids.

        One recursive query, which the hop bound ends even on a corrupt cycle.
        """
        # The session queries' statements are built when a method here first
        # needs them: a worker's start and its plain turns never do.
        from chaz.store import session_queries as sq

        with self.db.read() as conn:
            rows = conn.execute(sq.DESCENDANTS, {"sid": session_id, "hops": max_hops})
            return {r[0]: r[1] for r in rows if r[0] != session_id}

    def job_ancestor_sessions(self, job_id: str, max_hops: int) -> list[str]:
        """The sessions of ``job_id``'s ancestor jobs (``parent_job_id`` upwards, the
        nearest first, at most ``max_hops``): one recursive query, cycle-safe."""
        from chaz.store import session_queries as sq

        with self.db.read() as conn:
            rows = conn.execute(sq.JOB_ANCESTORS, {"jid": job_id, "hops": max_hops})
            return [r[0] for r in rows]

    def unfinished_ancestor_in(self, job_id: str, session_id: str, max_hops: int) -> str | None:
        """The nearest unfinished ancestor job of ``job_id`` (``parent_job_id``
        upwards, at most ``max_hops``) that runs in ``session_id``, if any."""
        from chaz.store import session_queries as sq

        with self.db.read() as conn:
            params = {"jid": job_id, "sid": session_id, "hops": max_hops}
            found: str | None = conn.scalar(sq.UNFINISHED_ANCESTOR_IN, params)
            return found

    def archive_session(
        self, session_id: str, *, reason: str | None, by: ArchivedBy
    ) -> tuple[Session, bool]:
        """Archive a session; the session as it is now and whether anything changed.

        One UPDATE, so concurrent archives cannot interleave a read and a write:
        the first ``archived_at`` stays; a manual archive takes over an
        automatic record (its reason replaces an automatic one); otherwise a
        later request only fills a missing reason. A change writes a
        ``session.archived`` event in the same transaction.
        """
        c = SessionRow
        unarchived = c.archived_at.is_(None)
        now = bindparam("now", utcnow(), type_=c.archived_at.type)
        changes: list[ColumnElement[bool]] = [unarchived]
        values: dict[str, Any] = {"archived_at": case((unarchived, now), else_=c.archived_at)}
        if by is ArchivedBy.MANUAL:
            automatic = c.archived_by.is_distinct_from(ArchivedBy.MANUAL.value)
            changes.append(automatic)
            values["archived_by"] = ArchivedBy.MANUAL.value
            takes_reason = or_(unarchived, automatic, c.archive_reason.is_(None))
        else:
            values["archived_by"] = case((unarchived, ArchivedBy.AUTO.value), else_=c.archived_by)
            takes_reason = or_(unarchived, c.archive_reason.is_(None))
        if reason is not None:
            changes.append(c.archive_reason.is_(None))
            values["archive_reason"] = case((takes_reason, reason), else_=c.archive_reason)
        stmt = (
            update(SessionRow)
            .where(c.id == session_id, or_(*changes))
            .values(**values)
            .returning(*st.SESSIONS.c)
        )
        with self.db.write() as conn:
            row = conn.execute(stmt).mappings().first()
            if row is None:
                return as_session(session_row(conn, session_id)), False
            session = as_session(row)
            record(
                conn,
                session_id,
                SESSION_ARCHIVED,
                {
                    "archived_at": iso(session.archived_at),
                    "archived_by": row["archived_by"],
                    "reason": session.archive_reason,
                    "requested_by": by.value,
                },
            )
            return session, True

    def rename_session(
        self,
        session_id: str,
        name: str,
        *,
        source: NameSource,
        only_if_auto: bool = False,
        live_only: bool = False,
    ) -> Session | None:
        """Set a session's name and who named it, with a ``session.renamed`` event.

        ``only_if_auto`` is a compare-and-set in the same UPDATE: the name is
        written only while ``name_source`` is still ``auto`` and the session
        is not archived, so a person's concurrent rename (or archive) wins;
        None when it was not written. A name in use is
        :class:`~chaz.errors.NameTaken`. ``live_only`` refuses an archived
        session in the same UPDATE (:class:`~chaz.errors.SessionArchived`).
        """
        name = check_session_name(name)
        stmt = update(SessionRow).where(SessionRow.id == session_id)
        if only_if_auto:
            stmt = stmt.where(
                SessionRow.name_source == NameSource.AUTO.value, SessionRow.archived_at.is_(None)
            )
        if live_only:
            stmt = stmt.where(SessionRow.archived_at.is_(None))
        stmt = stmt.values(name=name, name_source=source.value).returning(*st.SESSIONS.c)
        try:
            with self.db.write() as conn:
                row = conn.execute(stmt).mappings().first()
                if row is None:
                    if only_if_auto:
                        return None
                    if live_only and conn.scalar(
                        select(SessionRow.archived_at).where(SessionRow.id == session_id)
                    ):
                        raise SessionArchived(
                            f"session {session_id} is archived and cannot be renamed",
                            session_id=session_id,
                        )
                    raise missing_session(session_id)
                record(conn, session_id, SESSION_RENAMED, {"name": name, "source": source.value})
        except IntegrityError as exc:
            raise NameTaken(f"a session is already named {name!r}", name=name) from exc
        return as_session(row)

    def names_with_prefix(self, prefix: str, *, project: str, limit: int = 1000) -> set[str]:
        """Names in use in ``project`` that start with ``prefix`` (to pick a free
        ``prefix-N``: names are unique per project)."""
        name = SessionRow.name
        stmt = (
            select(name)
            .where(SessionRow.project == project, func.substr(name, 1, len(prefix)) == prefix)
            .limit(limit)
        )
        with self.db.read() as conn:
            return {n for n in conn.scalars(stmt) if n is not None}

    def count_turns(self, session_id: str) -> int:
        """The session's finished turns: jobs that started and reached a terminal state."""
        from chaz.store import session_queries as sq

        with self.db.read() as conn:
            return int(conn.scalar(sq.FINISHED_TURNS, {"sid": session_id}) or 0)

    def session_summaries(
        self,
        *,
        tree_id: str | None = None,
        archived: bool = False,
        agent_id: str | None = None,
        limit: int = 20,
        project: str | None = None,
        within: ReadScope | None = None,
    ) -> list[SessionSummary]:
        """Sessions, most recently active first (``active_at``, else ``created_at``),
        each with its finished turns, size, tip and whether it is busy
        (``project``: only that project's; ``within``: only those a viewer may
        read, filtered before the limit).

        Four reads in one transaction whatever the number of sessions: the
        sessions, then the job counts, sizes and tips of all of them at once.
        """
        from chaz.store import session_queries as sq

        c = SessionRow
        activity = func.coalesce(c.active_at, c.created_at)
        stmt = (
            select(SessionRow)
            .where(archived_filter(archived))
            .order_by(activity.desc(), c.id.desc())
            .limit(limit)
        )
        if tree_id is not None:
            stmt = stmt.where(c.tree_id == tree_id)
        if agent_id is not None:
            stmt = stmt.where(c.agent_id == agent_id)
        if project is not None:
            stmt = stmt.where(c.project == project)
        if within is not None:
            stmt = stmt.where(sq.readable(within))
        with self.db.read() as conn:
            sessions = [as_session(r) for r in conn.execute(stmt).mappings()]
            ids = [s.id for s in sessions]
            if not ids:
                return []
            counts = {
                r[0]: (int(r[1] or 0), int(r[2] or 0))
                for r in conn.execute(sq.TURN_COUNTS.where(JobRow.session_id.in_(ids)))
            }
            sizes = {
                r[0]: int(r[1] or 0)
                for r in conn.execute(sq.CONTEXT_SIZES.where(EntryRow.session_id.in_(ids)))
            }
            tips = {r[0]: r[1] for r in conn.execute(sq.tips(ids))}
        return [
            SessionSummary(
                session=s,
                turns=counts.get(s.id, (0, 0))[0],
                busy=counts.get(s.id, (0, 0))[1] > 0,
                size=sizes.get(s.id, 0),
                tip=tips.get(s.id),
            )
            for s in sessions
        ]

    def entry_outline(self, session_id: str) -> list[Outline]:
        """Every entry of the session without its content (its length instead), in seq
        order: enough to number turns and plan a bounded read."""
        from chaz.store import session_queries as sq

        with self.db.read() as conn:
            return [Outline(*r) for r in conn.execute(sq.OUTLINE, {"sid": session_id})]


def archive_auto(conn: Connection, session_id: str, reason: str) -> None:
    """Archive a session by completion policy in the open transaction, unless it
    is archived already (then its first ``archived_at`` and any manual reason
    stand); a change writes the same ``session.archived`` event as a manual
    archive."""
    now = utcnow()
    done = conn.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id, SessionRow.archived_at.is_(None))
        .values(
            archived_at=now,
            archived_by=ArchivedBy.AUTO.value,
            archive_reason=func.coalesce(SessionRow.archive_reason, reason),
        )
    ).rowcount
    if done:
        record(
            conn,
            session_id,
            SESSION_ARCHIVED,
            {
                "archived_at": now.isoformat(),
                "archived_by": ArchivedBy.AUTO.value,
                "reason": reason,
                "requested_by": ArchivedBy.AUTO.value,
            },
        )


def archived_filter(archived: bool) -> ColumnElement[bool]:
    return SessionRow.archived_at.is_not(None) if archived else SessionRow.archived_at.is_(None)


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
