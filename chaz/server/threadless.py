"""Threadless runs: ``POST /runs``, ``/runs/wait`` and ``/runs/stream``
(docs/http.md#threadless).

LangGraph runs a threadless run on a thread of its own; so does chaz: each
run makes a new session of its assistant, in the key's project and owned by
its principal, and is then exactly the thread's run (``chaz.server.runs``).
The session stays afterwards, as every chaz session does (``on_completion``
``keep``): the run's answer names its thread, where it can be read again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse

from chaz.access import branches
from chaz.domain.entries import EntryType
from chaz.domain.principals import DEFAULT_PERSON, Grant
from chaz.domain.sessions import ArchivedBy, Session
from chaz.domain.validation import check_content, check_ref
from chaz.errors import ChazError, Unsupported, ValidationError
from chaz.server import fields, runs, streams
from chaz.server.state import Call, Caller, Payload
from chaz.server.waits import detached
from chaz.usecases import webhooks

router = APIRouter()

T = TypeVar("T")

#: What the thread's session does after a threadless run: chaz keeps it.
ON_COMPLETION = ("keep",)


def _checked(c: Call, given: dict[str, Any]) -> dict[str, Any]:
    """The body checked as far as it can be without a thread, so that a bad
    request writes nothing (not even an empty session); the body without
    ``on_completion``, for the thread's run."""
    c.principal.require(Grant.SESSION_WRITE, "start runs")
    body = dict(given)
    done = body.pop("on_completion", None)
    if done is not None and done not in ON_COMPLETION:
        raise Unsupported(
            f"on_completion {done!r} is not supported by chaz: a threadless run's "
            "thread is kept (on_completion keep)",
            field="on_completion",
        )
    fields.refuse_unknown(body, runs.RUN_FIELDS, defaults=runs.RUN_DEFAULTS)
    fields.stream_modes(body.get("stream_mode"))
    cap = c.services.settings.max_content_bytes
    check_content(EntryType.MESSAGE, fields.input_text(body.get("input")), max_bytes=cap)
    if body.get("webhook") is not None:
        webhooks.check(c.services.settings, body["webhook"])
    sender = DEFAULT_PERSON if c.principal.operator else c.principal.name
    if not c.services.store.admits(EntryType.MESSAGE, sender):
        raise ValidationError(
            f"{sender} is a saved agent: its message admits no run", field="x-api-key"
        )
    return body


def _threadless(c: Call, payload: Payload, run: Callable[[str, dict[str, Any]], T]) -> T:
    """Make the run's thread and start the run on it with ``run`` (a thread's
    route). A run refused once its session exists archives the session: no
    live thread is left for a run that never began."""
    body = _checked(c, fields.body(payload))
    agent = c.services.store.get_agent(check_ref("assistant_id", body.get("assistant_id")))
    session: Session = c.services.store.create_session(
        agent.id, project=c.principal.project, owner=c.principal.name
    )
    try:
        return run(session.id, body)
    except ChazError:
        if not c.services.store.list_jobs(session_id=session.id, limit=1):
            branches.archive(
                c.services, session.id, reason="threadless run refused", by=ArchivedBy.MANUAL
            )
        raise


@router.post("/runs")
def create_run(c: Caller, payload: Payload = None) -> JSONResponse:
    """A threadless run in the background: the run, on its new thread."""
    return _threadless(c, payload, lambda tid, body: runs.create_run(tid, c, body))


@router.post("/runs/wait")
async def wait_run(c: Caller, request: Request, payload: Payload = None) -> JSONResponse:
    """A threadless run, answered when it ends: its thread's values, or ``__error__``."""

    def waited() -> JSONResponse:
        return _threadless(c, payload, lambda tid, body: runs.run_and_wait(c, tid, body))

    return await detached(request, waited)


@router.post("/runs/stream")
def stream_run(c: Caller, request: Request, payload: Payload = None) -> EventSourceResponse:
    """A threadless run, streamed as a thread's run is."""
    return _threadless(c, payload, lambda tid, body: streams.stream_run(tid, c, request, body))
