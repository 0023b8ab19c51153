"""chaz's own producer routes, under ``/chaz/v1`` (docs/http.md#producer): the
producer API over HTTP, what ``chaz.Client(url=..., api_key=...)`` calls.

Each route calls the very namespace method the in-process client calls
(``client.sessions.post``, ``client.jobs.cancel``, ...), built for the
request's principal, so the grants, the argument checks and the rule that a
denied read looks like a missing one are the same code, not a copy. Bodies
and queries carry the method's keyword arguments by name; a name the method
does not take is ``request.unsupported``. Answers are the method's pydantic
models (and dicts) as JSON; errors are chaz's, with their stable code.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic_core import to_jsonable_python
from sse_starlette import EventSourceResponse

from chaz.client.agents import Agents
from chaz.client.jobs import Jobs
from chaz.client.sessions import Sessions
from chaz.errors import ValidationError
from chaz.server import fields
from chaz.server.errors import as_chaz, body_of
from chaz.server.state import Call, Caller, Payload
from chaz.server.waits import detached, streamed

#: The prefix of every producer route; a new incompatible version gets a new one.
PREFIX = "/chaz/v1"

router = APIRouter(prefix=PREFIX)


def _agents(c: Call) -> Agents:
    def tools() -> Any:
        # Loaded on first use, as the in-process client does: only a save checks names.
        from chaz.tools import default_registry

        return default_registry()

    return Agents(c.services, tools, c.principal)


def kwargs_of(given: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """The keyword arguments a body gives, every one a name the method takes."""
    fields.refuse_unknown(given, known)
    return {k: v for k, v in given.items() if k in known}


def present(**given: Any) -> dict[str, Any]:
    """The query parameters that were given (the method's defaults apply to the others)."""
    return {k: v for k, v in given.items() if v is not None}


def only_query(request: Request, known: tuple[str, ...]) -> None:
    """Refuse a query parameter the route does not take (``request.unsupported``)."""
    fields.refuse_unknown(request.query_params, known)


def as_json(value: object) -> Any:
    """A method's answer (models, lists, dicts, dataclasses) as JSON values."""
    return to_jsonable_python(value)


# -- who ---------------------------------------------------------------------


@router.get("/whoami")
def whoami(c: Caller) -> dict[str, Any]:
    """The principal the key stands for: its name, project, grants, and whether
    it is an operator (only without a key, on the embedded loopback listener)."""
    who = c.principal
    return {
        "name": who.name,
        "project": who.project,
        "grants": sorted(g.value for g in who.grants),
        "operator": who.operator,
    }


# -- agents ------------------------------------------------------------------


@router.get("/agents")
def list_agents(c: Caller) -> Any:
    """``client.agents.list``."""
    return as_json(_agents(c).list())


@router.get("/agents/{agent_id}")
def get_agent(agent_id: str, c: Caller) -> Any:
    """``client.agents.get``."""
    return as_json(_agents(c).get(agent_id))


@router.put("/agents")
def put_agent(c: Caller, payload: Payload = None) -> Any:
    """``client.agents.put``: the body is the AgentSpec."""
    return as_json(_agents(c).put(fields.body(payload)))


@router.post("/agents")
def put_agents(c: Caller, payload: Payload = None) -> Any:
    """``client.agents.put_many``: ``{"specs": [...]}``, all saved or none."""
    given = fields.body(payload)
    fields.refuse_unknown(given, ("specs",))
    # As given: put_many checks that it is a list, as in-process.
    specs: Any = given.get("specs")
    return as_json(_agents(c).put_many(specs))


# -- sessions ----------------------------------------------------------------

_CREATE = ("agent_id", "name", "limits", "members", "burst_budget", "unattended", "permission_mode")
_POST = ("content", "sender", "type", "metadata", "idempotency_key")


@router.post("/sessions")
def create_session(c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.create``."""
    given = kwargs_of(fields.body(payload), _CREATE)
    if "agent_id" not in given:
        raise ValidationError("agent_id is required", field="agent_id")
    return as_json(Sessions(c.services, c.principal).create(**given))


@router.get("/sessions")
def list_sessions(
    c: Caller,
    request: Request,
    agent_id: str | None = Query(None),
    limit: int | None = Query(None),
    tree: str | None = Query(None),
    archived: bool | None = Query(None),
) -> Any:
    """``client.sessions.list``."""
    only_query(request, ("agent_id", "limit", "tree", "archived"))
    given = present(agent_id=agent_id, limit=limit, tree=tree, archived=archived)
    return as_json(Sessions(c.services, c.principal).list(**given))


@router.get("/sessions/{ref}")
def get_session(ref: str, c: Caller) -> Any:
    """``client.sessions.get`` (an id or a name)."""
    return as_json(Sessions(c.services, c.principal).get(ref))


@router.post("/sessions/{ref}/entries")
def post_entry(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.post``: write an entry (a Message admits a turn)."""
    given = kwargs_of(fields.body(payload), _POST)
    if "content" not in given:
        raise ValidationError("content is required", field="content")
    content = given.pop("content")
    return as_json(Sessions(c.services, c.principal).post(ref, content, **given))


@router.get("/sessions/{ref}/entries")
def list_entries(
    ref: str,
    c: Caller,
    request: Request,
    after: int | None = Query(None),
    limit: int | None = Query(None),
) -> Any:
    """``client.sessions.entries``."""
    only_query(request, ("after", "limit"))
    given = present(after=after, limit=limit)
    return as_json(Sessions(c.services, c.principal).entries(ref, **given))


@router.post("/sessions/{ref}/reply")
async def wait_for_reply(ref: str, c: Caller, request: Request, payload: Payload = None) -> Any:
    """``client.sessions.wait_for_reply``: ``{"after", "timeout"}``; answers the
    reply (or the turn's Error entry), or ``timeout`` (504). A client that
    leaves ends the wait (chaz/server/waits.py)."""
    given = kwargs_of(fields.body(payload), ("after", "timeout"))
    sessions = Sessions(c.services, c.principal)
    return as_json(await detached(request, lambda: sessions.wait_for_reply(ref, **given)))


@router.get("/sessions/{ref}/watch")
def watch(
    ref: str,
    c: Caller,
    request: Request,
    after: int | None = Query(None),
    timeout: float | None = Query(None),
    partial: bool = Query(False),
) -> EventSourceResponse:
    """``client.sessions.watch`` as server-sent events: ``open`` at once, then
    ``entry`` and (with ``partial``) ``partial`` events in the watch's order,
    then ``end`` when its ``timeout`` ran out, or ``error`` (a chaz error body)
    if it failed."""
    only_query(request, ("after", "timeout", "partial"))
    gone = threading.Event()
    given = present(after=after, timeout=timeout)
    # Called here, not in the stream: a bad argument or a missing session is
    # an ordinary error answer, before any event.
    items = Sessions(c.services, c.principal).watch(ref, partial=partial, stop=gone.is_set, **given)
    return EventSourceResponse(streamed(watched(items), gone))


def watched(items: Iterator[Any]) -> Iterator[dict[str, str]]:
    """The server-sent events of a watch or a follow: ``open``, one event per
    item (``partial`` for a partial, else ``entry``), then ``end`` or ``error``."""
    # At once: the client learns its watch was accepted without waiting for
    # the first entry (its watch() returns, as the in-process one does).
    yield {"event": "open", "data": "{}"}
    try:
        for item in items:
            name = "partial" if getattr(item, "type", None) == "partial" else "entry"
            yield {"event": name, "data": item.model_dump_json()}
    except Exception as exc:
        # Every failure, a bug's or a backend's too, ends in an ``error``
        # event: the client raises it rather than take the stream's end
        # for the watch's.
        yield {"event": "error", "data": json.dumps(body_of(as_chaz(exc)))}
        return
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # unsubscribes
    yield {"event": "end", "data": "{}"}


@router.post("/sessions/{ref}/stop")
def stop_session(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.stop``: ``{"command_id", "reason"}``."""
    given = kwargs_of(fields.body(payload), ("command_id", "reason"))
    return as_json(Sessions(c.services, c.principal).stop(ref, **given))


@router.get("/sessions/{ref}/queue")
def session_queue(ref: str, c: Caller) -> Any:
    """``client.sessions.queue``: what runs and what waits, in admission order."""
    return as_json(Sessions(c.services, c.principal).queue(ref))


@router.post("/sessions/{ref}/archive")
def archive_session(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.archive``: ``{"reason"}``."""
    given = kwargs_of(fields.body(payload), ("reason",))
    return as_json(Sessions(c.services, c.principal).archive(ref, **given))


@router.post("/sessions/{ref}/rename")
def rename_session(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.rename``: ``{"name"}``."""
    given = kwargs_of(fields.body(payload), ("name",))
    if "name" not in given:
        raise ValidationError("name is required", field="name")
    return as_json(Sessions(c.services, c.principal).rename(ref, given["name"]))


@router.post("/sessions/{ref}/fork")
def fork_session(ref: str, c: Caller, payload: Payload = None) -> Any:
    """``client.sessions.fork``: ``{"at", "agent_id", "name"}``."""
    given = kwargs_of(fields.body(payload), ("at", "agent_id", "name"))
    if "at" not in given:
        raise ValidationError("at is required", field="at")
    at = given.pop("at")
    return as_json(Sessions(c.services, c.principal).fork(ref, at, **given))


# -- jobs --------------------------------------------------------------------


@router.get("/jobs")
def list_jobs(
    c: Caller,
    request: Request,
    session_id: str | None = Query(None),
    status: str | None = Query(None),
    limit: int | None = Query(None),
    newest_first: bool | None = Query(None),
) -> Any:
    """``client.jobs.list``."""
    only_query(request, ("session_id", "status", "limit", "newest_first"))
    given = present(session_id=session_id, status=status, limit=limit, newest_first=newest_first)
    return as_json(Jobs(c.services, c.principal).list(**given))


@router.get("/jobs/totals")
def job_totals(
    c: Caller,
    request: Request,
    session_id: str | None = Query(None),
    tree_id: str | None = Query(None),
) -> Any:
    """``client.jobs.totals``."""
    only_query(request, ("session_id", "tree_id"))
    given = present(session_id=session_id, tree_id=tree_id)
    return asdict(Jobs(c.services, c.principal).totals(**given))


@router.get("/jobs/{execution_id}")
def get_job(execution_id: str, c: Caller) -> Any:
    """``client.jobs.get``."""
    return as_json(Jobs(c.services, c.principal).get(execution_id))


@router.post("/jobs/{execution_id}/wait")
async def wait_job(execution_id: str, c: Caller, request: Request, payload: Payload = None) -> Any:
    """``client.jobs.wait``: ``{"timeout"}``; the job once terminal, or ``timeout`` (504)."""
    given = kwargs_of(fields.body(payload), ("timeout",))
    jobs = Jobs(c.services, c.principal)
    return as_json(await detached(request, lambda: jobs.wait(execution_id, **given)))


@router.post("/jobs/{execution_id}/output")
async def job_output(
    execution_id: str, c: Caller, request: Request, payload: Payload = None
) -> Any:
    """``client.jobs.output``: ``{"block", "timeout", "full"}``."""
    given = kwargs_of(fields.body(payload), ("block", "timeout", "full"))
    jobs = Jobs(c.services, c.principal)
    return as_json(await detached(request, lambda: jobs.output(execution_id, **given)))


@router.post("/jobs/{execution_id}/cancel")
def cancel_job(execution_id: str, c: Caller, payload: Payload = None) -> Any:
    """``client.jobs.cancel``: ``{"expected_version", "command_id", "reason"}``."""
    given = kwargs_of(fields.body(payload), ("expected_version", "command_id", "reason"))
    return as_json(Jobs(c.services, c.principal).cancel(execution_id, **given))
