"""The producer routes of the smaller namespaces (docs/http.md#producer):
deliveries, events (listed and followed), schedules and approvals (read and
decided), each route one call of the in-process namespace's method for the
request's principal, as in :mod:`chaz.server.producer`."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Query, Request
from sse_starlette import EventSourceResponse

from chaz.client.approvals import Approvals
from chaz.client.deliveries import Deliveries
from chaz.client.events import Events
from chaz.client.schedules import Schedules
from chaz.errors import ValidationError
from chaz.server import fields
from chaz.server.producer import (
    PREFIX,
    as_json,
    kwargs_of,
    only_query,
    present,
    watched,
)
from chaz.server.state import Caller, Payload
from chaz.server.waits import streamed

router = APIRouter(prefix=PREFIX)


# -- deliveries --------------------------------------------------------------


@router.post("/deliveries")
def send_delivery(c: Caller, payload: Payload = None) -> Any:
    """``client.deliveries.send``: ``{"target_session_id", "message", "reply",
    "sender", "from_session"}``."""
    given = kwargs_of(
        fields.body(payload), ("target_session_id", "message", "reply", "sender", "from_session")
    )
    for name in ("target_session_id", "message"):
        if name not in given:
            raise ValidationError(f"{name} is required", field=name)
    target, message = given.pop("target_session_id"), given.pop("message")
    return as_json(Deliveries(c.services, c.principal).send(target, message, **given))


@router.get("/deliveries")
def list_deliveries(
    c: Caller,
    request: Request,
    session_id: str = Query(...),
    direction: str | None = Query(None),
    limit: int | None = Query(None),
    status: str | None = Query(None),
) -> Any:
    """``client.deliveries.list`` (``session_id`` is required)."""
    only_query(request, ("session_id", "direction", "limit", "status"))
    given = present(direction=direction, limit=limit, status=status)
    return as_json(Deliveries(c.services, c.principal).list(session_id, **given))


@router.get("/deliveries/{delivery_id}")
def get_delivery(delivery_id: str, c: Caller) -> Any:
    """``client.deliveries.get``."""
    return as_json(Deliveries(c.services, c.principal).get(delivery_id))


@router.get("/deliveries/{delivery_id}/result")
def delivery_result(delivery_id: str, c: Caller) -> Any:
    """``client.deliveries.result``: the result delivered back, or null."""
    return as_json(Deliveries(c.services, c.principal).result(delivery_id))


@router.get("/deliveries/{delivery_id}/status")
def delivery_status(delivery_id: str, c: Caller) -> Any:
    """``client.deliveries.status``: ``{"status": ...}``."""
    return {"status": Deliveries(c.services, c.principal).status(delivery_id)}


# -- events ------------------------------------------------------------------


@router.get("/sessions/{ref}/events")
def list_events(
    ref: str,
    c: Caller,
    request: Request,
    after: int | None = Query(None),
    limit: int | None = Query(None),
) -> Any:
    """``client.events.list``."""
    only_query(request, ("after", "limit"))
    given = present(after=after, limit=limit)
    return as_json(Events(c.services, c.principal).list(ref, **given))


@router.get("/sessions/{ref}/events/follow")
def follow_events(
    ref: str,
    c: Caller,
    request: Request,
    after: int | None = Query(None),
    timeout: float | None = Query(None),
) -> EventSourceResponse:
    """``client.events.follow`` as server-sent events, as the watch is: ``open``
    at once, then an ``entry`` event per event (the model's JSON), then
    ``end`` when its ``timeout`` ran out, or ``error``. A follow whose client
    has gone ends within about a second."""
    only_query(request, ("after", "timeout"))
    gone = threading.Event()
    given = present(after=after, timeout=timeout)
    items = Events(c.services, c.principal).follow(ref, stop=gone.is_set, **given)
    return EventSourceResponse(streamed(watched(items), gone))


# -- schedules ---------------------------------------------------------------


@router.post("/schedules")
def add_schedule(c: Caller, payload: Payload = None) -> Any:
    """``client.schedules.add``: ``{"agent_id", "unattended", ...fields}`` (the
    fields are checked by the namespace, a refused one naming itself)."""
    given = dict(fields.body(payload))
    if "agent_id" not in given:
        raise ValidationError("agent_id is required", field="agent_id")
    agent_id = given.pop("agent_id")
    return as_json(Schedules(c.services, c.principal).add(agent_id, **given))


@router.get("/schedules")
def list_schedules(c: Caller, request: Request, agent_id: str | None = Query(None)) -> Any:
    """``client.schedules.list``."""
    only_query(request, ("agent_id",))
    return as_json(Schedules(c.services, c.principal).list(agent_id))


@router.get("/schedules/{schedule_id}")
def get_schedule(schedule_id: str, c: Caller) -> Any:
    """``client.schedules.get``."""
    return as_json(Schedules(c.services, c.principal).get(schedule_id))


@router.patch("/schedules/{schedule_id}")
def update_schedule(schedule_id: str, c: Caller, payload: Payload = None) -> Any:
    """``client.schedules.update``: the body holds the changes."""
    changes = fields.body(payload)
    if "schedule_id" in changes:
        raise ValidationError("the schedule is the path's", field="schedule_id")
    return as_json(Schedules(c.services, c.principal).update(schedule_id, **changes))


@router.post("/schedules/{schedule_id}/{action}")
def act_on_schedule(schedule_id: str, action: str, c: Caller) -> Any:
    """``client.schedules.pause``, ``resume`` or ``remove``."""
    schedules = Schedules(c.services, c.principal)
    acts = {"pause": schedules.pause, "resume": schedules.resume, "remove": schedules.remove}
    if action not in acts:
        raise ValidationError("action must be pause, resume or remove", field="action")
    return as_json(acts[action](schedule_id))


@router.get("/schedules/{schedule_id}/fires")
def schedule_fires(
    schedule_id: str, c: Caller, request: Request, limit: int | None = Query(None)
) -> Any:
    """``client.schedules.fires``: the ledger, newest slot first."""
    only_query(request, ("limit",))
    return as_json(Schedules(c.services, c.principal).fires(schedule_id, **present(limit=limit)))


# -- approvals ---------------------------------------------------------------


@router.get("/approvals")
def pending_approvals(c: Caller, request: Request, session_id: str | None = Query(None)) -> Any:
    """``client.approvals.pending``."""
    only_query(request, ("session_id",))
    return as_json(Approvals(c.services, c.principal).pending(session_id))


@router.get("/approvals/{request_id}")
def get_approval(request_id: str, c: Caller) -> Any:
    """``client.approvals.get``."""
    return as_json(Approvals(c.services, c.principal).get(request_id))


@router.post("/approvals/{request_id}/decide")
def decide_approval(request_id: str, c: Caller, payload: Payload = None) -> Any:
    """``client.approvals.decide``: ``{"decision", "by"}``; the first decision
    takes effect (``effective``), a later one is recorded and changes nothing."""
    given = kwargs_of(fields.body(payload), ("decision", "by"))
    if "decision" not in given:
        raise ValidationError("decision is required", field="decision")
    decision = given.pop("decision")
    return as_json(Approvals(c.services, c.principal).decide(request_id, decision, **given))
