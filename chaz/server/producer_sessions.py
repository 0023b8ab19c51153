"""The producer routes of the session methods beyond reading and writing
(docs/http.md#producer): rooms and their members, attach pointers, the
session listing's pages, search and compaction. Each route is one call of
:class:`chaz.client.sessions.Sessions` for the request's principal, as in
:mod:`chaz.server.producer`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from chaz.client.sessions import Sessions
from chaz.errors import ValidationError
from chaz.server import fields
from chaz.server.producer import PREFIX, as_json, kwargs_of, only_query, present
from chaz.server.state import Caller, Payload

router = APIRouter(prefix=PREFIX)


@router.get("/rooms")
def list_rooms(
    c: Caller, request: Request, limit: int | None = Query(None), archived: bool = Query(False)
) -> Any:
    """``client.sessions.rooms``: the project's rooms, newest first."""
    only_query(request, ("limit", "archived"))
    return as_json(
        Sessions(c.services, c.principal).rooms(archived=archived, **present(limit=limit))
    )


@router.post("/sessions/{ref}/members")
def add_member(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.add_member``: ``{"agent_id"}``."""
    given = kwargs_of(fields.body(payload), ("agent_id",))
    if "agent_id" not in given:
        raise ValidationError("agent_id is required", field="agent_id")
    return as_json(Sessions(c.services, c.principal).add_member(ref, given["agent_id"]))


@router.delete("/sessions/{ref}/members/{agent_id}")
def remove_member(ref: str, agent_id: str, c: Caller) -> Any:
    """``client.sessions.remove_member``."""
    return as_json(Sessions(c.services, c.principal).remove_member(ref, agent_id))


@router.get("/sessions/{ref}/attachments/{seq}")
def attachment(ref: str, seq: int, c: Caller) -> Any:
    """``client.sessions.attachment``: the attach pointer at ``seq`` followed."""
    return as_json(Sessions(c.services, c.principal).attachment(ref, seq))


@router.post("/sessions/{ref}/compact")
def compact(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.compact``: ``{"timeout"}``; the Summary written, or
    null when there was nothing to compact."""
    given = kwargs_of(fields.body(payload), ("timeout",))
    return as_json(Sessions(c.services, c.principal).compact(ref, **given))


@router.get("/search")
def search(
    c: Caller,
    request: Request,
    query: str = Query(...),
    agent_id: str | None = Query(None),
    limit: int | None = Query(None),
) -> Any:
    """``client.sessions.search``: the best-matching sessions of the project."""
    only_query(request, ("query", "agent_id", "limit"))
    given = present(agent_id=agent_id, limit=limit)
    return as_json(Sessions(c.services, c.principal).search(query, **given))


@router.get("/page")
def page(
    c: Caller,
    request: Request,
    agent_id: str | None = Query(None),
    limit: int | None = Query(None),
    cursor: str | None = Query(None),
) -> Any:
    """``client.sessions.page``: one page of the project's sessions, most
    recently active first, with the cursor of the next."""
    only_query(request, ("agent_id", "limit", "cursor"))
    given = present(agent_id=agent_id, limit=limit, cursor=cursor)
    return as_json(Sessions(c.services, c.principal).page(**given))
