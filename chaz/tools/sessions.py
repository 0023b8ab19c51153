"""Session tools: ``session_list`` and ``session_search`` (docs/sessions.md).

They find, by immutable id, the sessions of the caller's project that the
calling session may read (docs/contracts.md#visibility: its tree and the
sessions below it), so nothing ``read_conversation`` would answer as
missing is ever named, counted or quoted. Only an
interactive turn may call any session tool (:func:`require_interactive`):
a turn a schedule, a delivery, a follow-up or another agent started gets
``session.tool_forbidden``, which is what keeps A -> B -> A loops impossible
once session tools can send.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from chaz.access import discovery, visibility
from chaz.domain.principals import Grant
from chaz.domain.read_scope import ReadScope
from chaz.domain.search import MAX_LIST_LIMIT, MAX_SEARCH_LIMIT
from chaz.domain.sessions import Session, is_interactive
from chaz.errors import SessionToolForbidden
from chaz.runtime.registry import Tool, ToolContext


def require_interactive(ctx: ToolContext, tool: str = "session tools") -> Session:
    """The calling session, if a person's Message started this turn; else
    :class:`~chaz.errors.SessionToolForbidden`.

    The rule is :func:`chaz.domain.sessions.is_interactive` (a Message from a
    ``user:`` sender, admitted by no delivery and no schedule fire); the
    turn's job and trigger are read from the store, never taken from the
    model. Every session tool calls this first.
    """
    store = ctx.need_services().store
    job = store.get_job(ctx.job_id)
    trigger = store.entry(job.trigger_entry_id) if job.trigger_entry_id else None
    if not is_interactive(job, trigger):
        raise SessionToolForbidden(
            f"{tool} run only in a turn started by a person's message; this turn was "
            "started by a delivery, a schedule, a follow-up or another agent",
            job_id=ctx.job_id,
            tool=tool,
        )
    return store.get_session(ctx.session_id)


def _scope(ctx: ToolContext, me: Session) -> ReadScope:
    """What the calling session may read (it exists: the turn runs in it)."""
    scope = visibility.readable_scope(ctx.need_services(), me.id)
    assert scope is not None, "a running turn's session exists"
    return scope


class SessionListArgs(BaseModel):
    """Arguments of ``session_list``."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str | None = Field(None, description="Only this agent's sessions.")
    limit: int = Field(20, ge=1, le=MAX_LIST_LIMIT, description="Sessions per page.")
    cursor: str | None = Field(
        None, description="The nextCursor of the previous page; omit for the first page."
    )


class SessionSearchArgs(BaseModel):
    """Arguments of ``session_search``."""

    model_config = ConfigDict(extra="forbid")

    # No max_length: an over-long query is the use case's request.too_large.
    query: str = Field(
        description='Words, identifiers or an exact "quoted phrase"; every term must match.',
    )
    agent_id: str | None = Field(None, description="Only this agent's sessions.")
    limit: int = Field(
        10, ge=1, le=MAX_SEARCH_LIMIT, description="At most this many distinct sessions."
    )


def session_list(args: SessionListArgs, ctx: ToolContext) -> str:
    """One page of the sessions the caller may read, most recently active first."""
    me = require_interactive(ctx)
    ctx.require(Grant.HISTORY_READ, "list sessions")
    page = discovery.list_sessions(
        ctx.need_services(),
        agent_id=args.agent_id,
        limit=args.limit,
        cursor=args.cursor,
        viewer_session_id=me.id,
        within=_scope(ctx, me),
    )
    return json.dumps(page.to_dict(), ensure_ascii=False)


def session_search(args: SessionSearchArgs, ctx: ToolContext) -> str:
    """Distinct sessions the caller may read whose messages, name or description
    match, best first."""
    me = require_interactive(ctx)
    ctx.require(Grant.HISTORY_READ, "search sessions")
    found = discovery.search_sessions(
        ctx.need_services(),
        args.query,
        agent_id=args.agent_id,
        limit=args.limit,
        viewer_session_id=me.id,
        within=_scope(ctx, me),
    )
    return json.dumps({"results": [r.to_dict() for r in found]}, ensure_ascii=False)


TOOLS = [
    Tool(
        "session_list",
        "List the sessions you may read (your conversation tree and the sessions made "
        "below it) by immutable sessionId, most recently active first, a page at a time "
        "(pass nextCursor back for the next page). Names are labels: address sessions "
        "by sessionId.",
        SessionListArgs,
        session_list,
    ),
    Tool(
        "session_search",
        "Find the sessions you may read (your conversation tree and the sessions made "
        "below it) by lexical (trigram) search over message text and session "
        "name/description. Returns distinct sessions, best first, with message evidence "
        "(matches) and metadata evidence (metadataMatches); an empty matches list with "
        "metadataMatches is still a real hit.",
        SessionSearchArgs,
        session_search,
    ),
]
