"""Helpers for tests of projects: sessions of a given project, and its quota keys."""

from __future__ import annotations

import chaz
from chaz.coord import keys
from chaz.domain.agents import Limits
from chaz.domain.sessions import Session
from chaz.store.rows import as_session
from chaz.store.sessions import insert_session
from chaz.store.types import NewSession


def session_in(
    client: chaz.Client, agent_id: str, project: str, limits: Limits | None = None
) -> Session:
    """A new session of ``agent_id`` in ``project`` (the producer API makes
    sessions of its principal's project; this names any)."""
    new = NewSession(agent_id, project=project, limits=limits)
    with client.services.store.db.write() as conn:
        return as_session(insert_session(conn, new))


def live_members(client: chaz.Client, project: str) -> set[str] | None:
    """The job ids in the project's live set (None: the set is missing)."""
    r = client.services.redis
    if not r.exists(keys.project_live(project)):
        return None
    return {str(m) for m in r.zrange(keys.project_live(project), 0, -1)} - {"_"}


def jobs_counter(client: chaz.Client, project: str) -> int | None:
    """The project's cumulative counter (None: missing)."""
    value = client.services.redis.get(keys.project_jobs(project))
    return None if value is None else int(value)
