"""Finding sessions: the paged listing and the lexical search that ``session_list``,
``session_search``, ``client.sessions.page/search`` and ``chaz search`` share
(docs/sessions.md).

Both see only the sessions of the caller's project that are not archived;
a turn (``within``: its :class:`~chaz.domain.read_scope.ReadScope`) sees only
the sessions it may read (docs/contracts.md#visibility), so a session that
``read_conversation`` answers as missing is never listed, counted or quoted.
The store applies that scope, and the agent filter, inside the statement that
ranks and limits, so a session the caller may not see never shapes a result.
"""

from __future__ import annotations

from chaz.domain.principals import DEFAULT_PROJECT
from chaz.domain.read_scope import ReadScope
from chaz.domain.search import (
    Cursor,
    SearchResult,
    SessionPage,
    check_list_limit,
    check_search_limit,
    parse_query,
)
from chaz.domain.validation import check_ref
from chaz.services import Services


def list_sessions(
    services: Services,
    *,
    project: str = DEFAULT_PROJECT,
    agent_id: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
    viewer_session_id: str | None = None,
    within: ReadScope | None = None,
) -> SessionPage:
    """One page of ``project``'s sessions, most recently active first.

    ``limit``: 1 to 100; ``cursor``: the ``next_cursor`` of the page before
    (anything else is ``request.invalid``); ``viewer_session_id``: the calling
    session, marked ``own``; ``within``: only the sessions that scope allows
    (its project replaces ``project``).
    """
    if agent_id is not None:
        check_ref("agent_id", agent_id)
    return services.store.search.page(
        project=within.project if within is not None else project,
        agent_id=agent_id,
        limit=check_list_limit(limit),
        cursor=Cursor.decode(cursor) if cursor is not None else None,
        viewer_session_id=viewer_session_id,
        within=within,
    )


def search_sessions(
    services: Services,
    query: str,
    *,
    project: str = DEFAULT_PROJECT,
    agent_id: str | None = None,
    limit: int = 10,
    viewer_session_id: str | None = None,
    within: ReadScope | None = None,
) -> list[SearchResult]:
    """At most ``limit`` (1 to 50) distinct sessions of ``project`` matching ``query``,
    best first (docs/sessions.md#session_search); ``within``: only the sessions
    that scope allows (its project replaces ``project``)."""
    parsed = parse_query(query)
    if agent_id is not None:
        check_ref("agent_id", agent_id)
    return services.store.search.search(
        parsed,
        project=within.project if within is not None else project,
        agent_id=agent_id,
        limit=check_search_limit(limit),
        viewer_session_id=viewer_session_id,
        within=within,
    )
