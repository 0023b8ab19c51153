"""Threads (chaz sessions) and assistants (chaz agents), as LangGraph's clients
call them (docs/http.md#routes)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response

from chaz.access import branches
from chaz.domain.principals import Grant
from chaz.domain.sessions import ArchivedBy
from chaz.domain.validation import check_ref
from chaz.errors import ValidationError
from chaz.server import fields, mapping
from chaz.server.state import Caller, Payload

router = APIRouter()

#: The most threads or assistants one search returns.
MAX_PAGE = 1000


@router.post("/threads")
def create_thread(c: Caller, payload: Payload = None) -> dict[str, Any]:
    """A new thread: a session of the agent its metadata's ``graph_id`` (or
    ``assistant_id``) names, in the key's project, owned by its principal."""
    given = fields.body(payload)
    c.principal.require(Grant.SESSION_WRITE, "create threads")
    fields.refuse_unknown(given, ("metadata",))
    metadata = given.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValidationError("metadata must be an object", field="metadata")
    fields.refuse_unknown(metadata, mapping.ASSISTANT_KEYS, prefix="metadata.")
    named = mapping.named_agents(metadata)
    if len(named) != 1:
        raise ValidationError(
            "a chaz thread is a session of one agent: name it in graph_id (or "
            "metadata.assistant_id)",
            field="metadata.graph_id",
        )
    agent = c.services.store.get_agent(check_ref("metadata.graph_id", named.pop()))
    session = c.services.store.create_session(
        agent.id, project=c.principal.project, owner=c.principal.name
    )
    return mapping.thread(session, busy=False, state=mapping.values([]))


@router.get("/threads/{thread_id}")
def get_thread(thread_id: str, c: Caller) -> dict[str, Any]:
    """A thread, with its values."""
    c.principal.require(Grant.HISTORY_READ, "read threads")
    session = c.thread(thread_id)
    state = mapping.values(c.said(session.id))
    return mapping.thread(session, busy=c.busy(session.id), state=state)


@router.delete("/threads/{thread_id}", status_code=204)
def delete_thread(thread_id: str, c: Caller) -> Response:
    """Delete a thread: its session is archived (chaz keeps every session's
    history), and the thread is missing from then on."""
    c.principal.require(Grant.SESSION_ARCHIVE, "delete threads")
    session = c.thread(thread_id)
    branches.archive(c.services, session.id, reason="thread deleted", by=ArchivedBy.MANUAL)
    return Response(status_code=204)


@router.post("/threads/search")
def search_threads(c: Caller, payload: Payload = None) -> list[dict[str, Any]]:
    """The project's threads, newest first; ``metadata.graph_id`` filters by agent."""
    given = fields.body(payload)
    c.principal.require(Grant.HISTORY_READ, "list threads")
    fields.refuse_unknown(given, ("limit", "offset", "metadata"))
    limit = fields.integer(given, "limit", 10, 1, MAX_PAGE)
    offset = fields.integer(given, "offset", 0, 0, 100_000)
    metadata = given.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValidationError("metadata must be an object", field="metadata")
    fields.refuse_unknown(metadata, mapping.ASSISTANT_KEYS, prefix="metadata.")
    named = mapping.named_agents(metadata)
    if len(named) > 1:
        raise ValidationError("graph_id and assistant_id differ", field="metadata.graph_id")
    agent_id = check_ref("metadata.graph_id", named.pop()) if named else None
    sessions = c.services.store.list_sessions(
        agent_id=agent_id, limit=offset + limit, archived=False, project=c.principal.project
    )[offset:]
    return [mapping.thread(s, busy=c.busy(s.id)) for s in sessions]


@router.get("/threads/{thread_id}/state")
def thread_state(
    thread_id: str,
    c: Caller,
    request: Request,
    subgraphs: bool = Query(False),
) -> dict[str, Any]:
    """A thread's state: its conversation as ``values.messages``, at its last entry."""
    c.principal.require(Grant.HISTORY_READ, "read threads")
    fields.refuse_unknown(request.query_params, ("subgraphs",))
    if subgraphs:
        fields.refuse_unknown({"subgraphs": True}, ())
    session = c.thread(thread_id)
    entries = c.conversation(session.id)
    checkpoint = {
        "thread_id": session.id,
        "checkpoint_ns": "",
        "checkpoint_id": f"{session.id}:{session.last_seq}",
        "checkpoint_map": None,
    }
    return {
        "values": mapping.values(entries),
        "next": [],
        "checkpoint": checkpoint,
        "metadata": {},
        "created_at": mapping.iso(entries[-1].created_at if entries else session.created_at),
        "parent_checkpoint": None,
        "tasks": [],
        "interrupts": [],
    }


@router.post("/assistants/search")
def search_assistants(c: Caller, payload: Payload = None) -> list[dict[str, Any]]:
    """The saved agents as assistants, by id; ``graph_id`` keeps one."""
    given = fields.body(payload)
    fields.refuse_unknown(given, ("limit", "offset", "graph_id"))
    limit = fields.integer(given, "limit", 10, 1, MAX_PAGE)
    offset = fields.integer(given, "offset", 0, 0, 100_000)
    agents = sorted(c.services.store.list_agents(), key=lambda a: a.id)
    graph_id = given.get("graph_id")
    if graph_id is not None:
        agents = [a for a in agents if a.id == check_ref("graph_id", graph_id)]
    return [mapping.assistant(a) for a in agents[offset : offset + limit]]


@router.get("/assistants/{assistant_id}")
def get_assistant(assistant_id: str, c: Caller) -> dict[str, Any]:
    """One agent as an assistant (``agent.not_found`` as 404 if none)."""
    return mapping.assistant(c.services.store.get_agent(check_ref("assistant_id", assistant_id)))
