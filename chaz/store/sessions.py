"""Sessions: creating one (alone, or inside an admission) and reading one.

What collaboration reads and changes about sessions (listings, lineage,
archive, names) is :mod:`chaz.store.directory`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, insert
from sqlalchemy.exc import IntegrityError

from chaz.domain.agents import Limits
from chaz.domain.principals import DEFAULT_PRINCIPAL, DEFAULT_PROJECT
from chaz.domain.sessions import NameSource, Origin, Session
from chaz.domain.validation import check_session_name
from chaz.errors import AgentNotFound, NameTaken
from chaz.ids import new_id, utcnow
from chaz.store import rooms as room_store
from chaz.store import statements as st
from chaz.store.db import Database
from chaz.store.models import SessionRow
from chaz.store.rows import as_session, session_row
from chaz.store.types import NewSession


class Sessions:
    """Create a session and read one (``store.create_session``, ``store.get_session``)."""

    db: Database

    def create_session(
        self,
        agent_id: str,
        *,
        name: str | None = None,
        limits: Limits | None = None,
        tools: list[str] | None = None,
        parent_job_id: str | None = None,
        tree_id: str | None = None,
        call_depth: int = 0,
        fork: tuple[str, int] | None = None,
        origin: Origin | None = None,
        names: Iterable[str] = (),
        members: list[str] | None = None,
        burst_budget: int | None = None,
        project: str = DEFAULT_PROJECT,
        owner: str = DEFAULT_PRINCIPAL,
        unattended: bool = False,
        permission_mode: str = "default",
    ) -> Session:
        """A new, empty session for ``agent_id``; a root of its own tree unless given one.

        ``fork`` is ``(session_id, seq)``: the session's context reads through
        that session up to that entry. ``names`` are candidates tried in turn
        when no ``name`` is given (an automatic name: the first one free).
        ``project`` to ``permission_mode``: see :class:`NewSession`.
        """
        new = NewSession(
            agent_id,
            name=check_session_name(name) if name is not None else None,
            limits=limits,
            tools=tools,
            parent_job_id=parent_job_id,
            tree_id=tree_id,
            call_depth=call_depth,
            fork=fork,
            origin=origin,
            names=tuple(names),
            members=members,
            burst_budget=burst_budget,
            project=project,
            owner=owner,
            unattended=unattended,
            permission_mode=permission_mode,
        )
        with self.db.write() as conn:
            return as_session(insert_session(conn, new))

    def get_session(self, ref: str, *, project: str | None = None) -> Session:
        """A session by id or, failing that, by its unique name.

        ``project``: only a session of that project is found; one of another
        project is answered exactly as a missing one (docs/security.md).
        """
        with self.db.read() as conn:
            return as_session(session_row(conn, ref, project=project))


def insert_session(conn: Connection, new: NewSession) -> dict[str, Any]:
    """Insert a session row in the open transaction; its columns.

    A person's ``name`` that is taken is :class:`NameTaken`; automatic
    ``names`` are tried in turn, each in a savepoint (on PostgreSQL a failed
    INSERT would otherwise abort the whole transaction), and the session is
    left unnamed if every one is taken.
    """
    if conn.scalar(st.AGENT_SPEC, {"aid": new.agent_id}) is None:
        raise AgentNotFound(f"no agent {new.agent_id!r}", agent_id=new.agent_id)
    if new.members is not None:
        room_store.check_saved(conn, new.members)
    values = _columns(new)
    if new.name is not None or not new.names:
        try:
            with conn.begin_nested():
                conn.execute(insert(SessionRow).values(**values))
        except IntegrityError as exc:
            raise NameTaken(f"a session is already named {new.name!r}", name=new.name) from exc
        return values
    for candidate in (*new.names, None):
        named = {
            **values,
            "name": candidate,
            "name_source": NameSource.AUTO.value if candidate is not None else None,
        }
        try:
            with conn.begin_nested():
                conn.execute(insert(SessionRow).values(**named))
        except IntegrityError:
            continue
        return named
    raise AssertionError("an unnamed session cannot collide")  # pragma: no cover


def _columns(new: NewSession) -> dict[str, Any]:
    """The row of a new session, under a fresh id."""
    sid = new_id()
    values: dict[str, Any] = {
        "id": sid,
        "agent_id": new.agent_id,
        "name": new.name,
        "tree_id": new.tree_id or sid,
        "parent_job_id": new.parent_job_id,
        "call_depth": new.call_depth,
        "last_seq": 0,
        "last_ordinal": 0,
        "limits": new.limits.model_dump(mode="json") if new.limits else None,
        "tools": new.tools,
        "created_at": utcnow(),
        "fork_session_id": new.fork[0] if new.fork else None,
        "fork_seq": new.fork[1] if new.fork else None,
        "origin": new.origin.value if new.origin else None,
        "name_source": NameSource.USER.value if new.name is not None else None,
        "room_burst": 0,
        "project": new.project,
        "owner": new.owner,
        "unattended": new.unattended,
        "permission_mode": new.permission_mode,
        "description": new.description,
    }
    if new.members is not None:
        # Only a room sets them: SQL NULL (not JSON null) marks the others.
        values |= {"members": new.members, "burst_budget": new.burst_budget}
    return values
