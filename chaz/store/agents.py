"""Saved agents: their specs, and the parsed-spec cache the write path reads through."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from chaz.domain.agents import AgentSpec
from chaz.domain.entries import EntryType, parse_sender
from chaz.domain.processing import admits_turn
from chaz.errors import AgentNotFound, Conflict
from chaz.ids import utcnow
from chaz.store import statements as st
from chaz.store.db import Database
from chaz.store.models import AgentRow, ApiKeyRow, JobRow, ScheduleRow, SessionRow


class SpecCache:
    """Parsed agent specs by id, with the stored JSON they came from.

    Every turn and admission needs its agent, and validating the spec again
    each time cost more than reading it; a spec whose JSON changed is parsed
    again.
    """

    def __init__(self) -> None:
        self._specs: dict[str, tuple[Any, AgentSpec]] = {}
        self._lock = threading.Lock()

    def parsed(self, agent_id: str, data: Any) -> AgentSpec:
        """The spec stored as ``data`` for ``agent_id``, parsed once per change."""
        cached = self._specs.get(agent_id)
        if cached is not None and cached[0] == data:
            return cached[1]
        spec = AgentSpec.model_validate(data)
        with self._lock:
            self._specs[agent_id] = (data, spec)
        return spec

    def load(self, conn: Connection, agent_id: str) -> AgentSpec:
        """The agent's spec, read in the open transaction, or :class:`AgentNotFound`."""
        data = conn.scalar(st.AGENT_SPEC, {"aid": agent_id})
        if data is None:
            raise AgentNotFound(f"no agent {agent_id!r}", agent_id=agent_id)
        return self.parsed(agent_id, data)


class Agents:
    """Create, replace and read saved agents (``store.put_agent``, ...)."""

    db: Database

    def put_agent(self, spec: AgentSpec) -> AgentSpec:
        """Create or replace a saved agent."""
        with self.db.write() as conn:
            _put(conn, spec, utcnow())
        return spec

    def put_agents(self, specs: Iterable[AgentSpec]) -> list[AgentSpec]:
        """Create or replace several agents in one transaction: all are saved, or none."""
        saved = list(specs)
        now = utcnow()
        with self.db.write() as conn:
            for spec in saved:
                _put(conn, spec, now)
        return saved

    def get_agent(self, agent_id: str) -> AgentSpec:
        """The saved agent, or :class:`AgentNotFound`."""
        with self.db.read() as conn:
            data = conn.scalar(select(AgentRow.spec).where(AgentRow.id == agent_id))
        if data is None:
            raise AgentNotFound(f"no agent {agent_id!r}", agent_id=agent_id)
        return AgentSpec.model_validate(data)

    def delete_agent(self, agent_id: str) -> AgentSpec:
        """Delete a saved agent that nothing uses, in any project: no session
        of it (archived ones too: chaz keeps their history), no room it is a
        member of, no job run for it, no schedule it owns and no unrevoked key
        that acts as it; otherwise :class:`Conflict` naming what uses it."""
        with self.db.write() as conn:
            data = conn.scalar(select(AgentRow.spec).where(AgentRow.id == agent_id))
            if data is None:
                raise AgentNotFound(f"no agent {agent_id!r}", agent_id=agent_id)
            uses = {
                "sessions": select(func.count()).where(SessionRow.agent_id == agent_id),
                "jobs": select(func.count()).where(JobRow.member_agent_id == agent_id),
                "schedules": select(func.count()).where(ScheduleRow.owner_agent_id == agent_id),
                "keys": select(func.count()).where(
                    ApiKeyRow.principal == f"agent:{agent_id}", ApiKeyRow.revoked_at.is_(None)
                ),
            }
            counts = {name: int(conn.scalar(q) or 0) for name, q in uses.items()}
            rooms = conn.scalars(select(SessionRow.members).where(SessionRow.members.is_not(None)))
            counts["rooms"] = sum(1 for members in rooms if agent_id in (members or ()))
            used = {name: n for name, n in counts.items() if n}
            if used:
                said = ", ".join(f"{n} {name}" for name, n in used.items())
                raise Conflict(
                    f"agent {agent_id!r} is in use ({said}): chaz keeps what it did",
                    agent_id=agent_id,
                    **used,
                )
            conn.execute(delete(AgentRow).where(AgentRow.id == agent_id))
        return AgentSpec.model_validate(data)

    def list_agents(self) -> list[AgentSpec]:
        """Every saved agent, by id."""
        with self.db.read() as conn:
            rows = conn.scalars(select(AgentRow.spec).order_by(AgentRow.id)).all()
        return [AgentSpec.model_validate(r) for r in rows]

    def admits(self, type: EntryType, sender: str) -> bool:
        """Whether an entry of this type from this sender admits a turn.

        The rule is docs/contracts.md#processing-rule; only an agent's
        Message needs a read (is the sender a known agent?).
        """
        if type is not EntryType.MESSAGE or parse_sender(sender)[0] != "agent":
            return admits_turn(type, sender, ())
        name = parse_sender(sender)[1]
        with self.db.read() as conn:
            known = conn.scalar(select(AgentRow.id).where(AgentRow.id == name))
        return admits_turn(type, sender, {name} if known else set())


def _put(conn: Connection, spec: AgentSpec, now: Any) -> None:
    data = spec.model_dump(mode="json")
    done = conn.execute(
        update(AgentRow).where(AgentRow.id == spec.id).values(spec=data, updated_at=now)
    ).rowcount
    if not done:
        conn.execute(insert(AgentRow).values(id=spec.id, spec=data, created_at=now, updated_at=now))
