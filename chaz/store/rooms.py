"""Room membership: adding and removing a room's members (docs/rooms.md).

A room is a session whose ``members`` column is a list (the host is its
``agent_id``). A change locks the session row, checks the new roster with
:func:`chaz.domain.rooms.check_members`, and records a ``room.member_added``
or ``room.member_removed`` event in the same transaction.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select, update

from chaz.domain.events import ROOM_MEMBER_ADDED, ROOM_MEMBER_REMOVED
from chaz.domain.rooms import check_members
from chaz.domain.sessions import Session
from chaz.domain.validation import invalid
from chaz.errors import AgentNotFound, SessionNotFound
from chaz.store import statements as st
from chaz.store.directory import archived_filter
from chaz.store.events import record
from chaz.store.models import SessionRow
from chaz.store.rows import as_session

if TYPE_CHECKING:
    from chaz.store.db import Database


class RoomStore:
    """Change the members of a room (``Store.rooms``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def list(
        self, *, limit: int = 50, archived: bool = False, project: str | None = None
    ) -> builtins.list[Session]:
        """Rooms (sessions with members), newest first; archived ones only with
        ``archived``; ``project``: only that project's."""
        stmt = (
            select(SessionRow)
            .where(SessionRow.members.is_not(None), archived_filter(archived))
            .order_by(SessionRow.created_at.desc())
            .limit(limit)
        )
        if project is not None:
            stmt = stmt.where(SessionRow.project == project)
        with self._db.read() as conn:
            return [as_session(r) for r in conn.execute(stmt).mappings()]

    def add_member(self, session_id: str, agent_id: str) -> Session:
        """Add a saved agent to a room (a session that is not yet a room becomes one).

        Adding a member already there changes nothing and records nothing.
        """
        with self._db.write() as conn:
            row = _locked(conn, session_id)
            members: list[str] = list(row["members"] or [])
            if agent_id in members:
                return as_session(row)
            check_saved(conn, [agent_id])
            try:
                members = check_members(row["agent_id"], [*members, agent_id])
            except ValueError as exc:
                raise invalid("agent_id", str(exc), agent_id=agent_id) from exc
            record(conn, session_id, ROOM_MEMBER_ADDED, {"agent_id": agent_id, "members": members})
            return _set(conn, row, members)

    def remove_member(self, session_id: str, agent_id: str) -> Session:
        """Remove a member from a room; one that is not a member is ``request.invalid``.

        The host cannot be removed (it is the session's agent). The room stays
        a room with its host alone when its last member leaves.
        """
        with self._db.write() as conn:
            row = _locked(conn, session_id)
            members: list[str] = list(row["members"] or [])
            if agent_id not in members:
                raise invalid(
                    "agent_id",
                    f"{agent_id!r} is not a member of session {row['name'] or session_id}",
                    agent_id=agent_id,
                )
            members.remove(agent_id)
            record(
                conn, session_id, ROOM_MEMBER_REMOVED, {"agent_id": agent_id, "members": members}
            )
            return _set(conn, row, members)


def check_saved(conn: Connection, agent_ids: list[str]) -> None:
    """:class:`AgentNotFound` for the first of ``agent_ids`` that is not a saved agent."""
    for aid in agent_ids:
        if conn.scalar(st.AGENT_SPEC, {"aid": aid}) is None:
            raise AgentNotFound(f"no agent {aid!r}", agent_id=aid)


def _locked(conn: Connection, session_id: str) -> Any:
    row = conn.execute(st.LOCK_SESSION, {"sid": session_id}).mappings().first()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}", session=session_id)
    return row


def _set(conn: Connection, row: Any, members: list[str]) -> Session:
    conn.execute(update(SessionRow).where(SessionRow.id == row["id"]).values(members=members))
    return as_session({**row, "members": members})
