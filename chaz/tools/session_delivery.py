"""The session tools that write (docs/contracts.md#session-tools):
``session_create``, ``session_send``, ``session_deliveries`` and
``session_rename`` (docs/sessions.md#sending-between-sessions).

``session_send`` and ``session_create`` are deliveries
(:mod:`chaz.usecases.deliveries`, reached through the delegation port), one
more kind on the path every hand-off takes: a request owns one FIFO turn in
its target, and with ``reply="completion"`` its frozen result comes back to
the caller's session exactly once. Every tool here runs only in an
interactive turn (one started by a person's Message): anywhere else it is
``session.tool_forbidden``. The sender is the calling turn, injected by the
runtime; no argument names it. Arguments come from a model: each is checked,
and a refused call writes nothing (docs/contracts.md#invariant-7).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.deliveries import (
    REQUESTS,
    Delivered,
    Delivery,
    DeliveryKind,
    NewBranch,
    Reply,
    RequestStatus,
    check_request_target,
    request_view,
    result_key,
    stored_states,
)
from chaz.domain.entries import EntryType
from chaz.domain.sessions import NameSource, Session, missing_session
from chaz.domain.validation import SafeText, check_content, check_session_name
from chaz.errors import DeliveryNotFound, SelfDelivery
from chaz.runtime.registry import Tool, ToolContext
from chaz.services import Services
from chaz.tools.handoff import check_creation, check_messages, sender_of, stage1_names
from chaz.tools.sessions import require_interactive

#: The longest description ``session_create`` stores.
MAX_DESCRIPTION_CHARS = 2000
#: How many rows a status filter reads to find ``limit`` matches (the
#: lifecycle status of an admitted request depends on its job's state).
SCAN_FACTOR = 5


class SessionSendArgs(BaseModel):
    """Arguments of ``session_send``."""

    model_config = ConfigDict(extra="forbid")

    target_session_id: SafeText = Field(
        min_length=1,
        max_length=64,
        description="The immutable sessionId (from session_list/search).",
    )
    message: SafeText = Field(min_length=1, description="The request or update to deliver.")
    reply: Literal["none", "completion"] = Field(
        "none",
        description="'completion': the target's final answer to this request comes back to "
        "you once, as a result entry; 'none': a one-way update.",
    )


class SessionCreateArgs(BaseModel):
    """Arguments of ``session_create``."""

    model_config = ConfigDict(extra="forbid")

    message: SafeText = Field(min_length=1, description="The first request of the new session.")
    name: SafeText | None = Field(None, description="A unique display name (1-255 characters).")
    description: SafeText | None = Field(
        None, max_length=MAX_DESCRIPTION_CHARS, description="What the session is for."
    )
    target_agent_id: SafeText | None = Field(
        None,
        max_length=255,
        description="Create the session for this agent instead, continuing its most recent "
        "session in your project (a fresh one if it has none).",
    )


class SessionDeliveriesArgs(BaseModel):
    """Arguments of ``session_deliveries``."""

    model_config = ConfigDict(extra="forbid")

    direction: Literal["incoming", "outgoing"] = Field(
        "incoming", description="Requests and results into this session, or out of it."
    )
    status: Literal["accepted", "delivering", "consumed", "failed"] | None = None
    request_id: SafeText | None = Field(
        None,
        max_length=64,
        description="One request and its correlated result, whatever the direction.",
    )
    limit: int = Field(20, ge=1, le=100)


class SessionRenameArgs(BaseModel):
    """Arguments of ``session_rename``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The new display name (trimmed; 1-255 characters).")
    target_session_id: SafeText | None = Field(
        None, max_length=64, description="The sessionId to rename (default: this session)."
    )


# -- session_send ---------------------------------------------------------------------


def session_send(args: SessionSendArgs, ctx: ToolContext) -> str:
    """Deliver a request to an existing session of this project: its own FIFO turn there."""
    svc = ctx.need_services()
    require_interactive(ctx, "session_send")
    message = check_content(
        EntryType.DIRECTIVE, args.message, max_bytes=svc.settings.max_content_bytes
    )
    reply = Reply.COMPLETION if args.reply == "completion" else Reply.NONE
    sender = sender_of(svc, ctx, DeliveryKind.SESSION_SEND)
    first = svc.store.deliveries.by_key(sender.key)
    if first is None:
        caller = svc.store.get_session(ctx.session_id)
        target = _target(svc, caller, args.target_session_id)
        check_messages(ctx)
        done = ctx.need_delegation().deliver(
            sender, target, DeliveryKind.SESSION_SEND, message, reply
        )
        first = done.delivery
    return json.dumps(_answer(svc, first))


def _not_to_itself(args: SessionSendArgs, ctx: ToolContext) -> None:
    """Before the approval gate: a request to the caller's own session never runs."""
    if args.target_session_id == ctx.session_id:
        raise SelfDelivery("a session cannot send a request to itself", session_id=ctx.session_id)


def _target(svc: Services, caller: Session, ref: str) -> Session:
    """The target of a request: a live session of the caller's project, by its id."""
    return check_request_target(
        svc.store.get_session(ref), ref, project=caller.project, sender_session_id=caller.id
    )


def _answer(svc: Services, delivery: Delivery) -> dict[str, Any]:
    job_status = svc.store.get_job(delivery.job_id).status.value if delivery.job_id else None
    view = request_view(delivery, job_status)
    return {
        "requestId": delivery.id,
        "status": view["status"],
        "targetSessionId": delivery.target_session_id,
        "reply": delivery.reply.value,
        "executionId": delivery.job_id,
    }


# -- session_create -------------------------------------------------------------------


def session_create(args: SessionCreateArgs, ctx: ToolContext) -> str:
    """A new session whose first message is a completion request; the ids come
    back at once while the work runs. With ``target_agent_id`` the session is
    that agent's, and continues its most recent session
    (docs/contracts.md#session-tools)."""
    svc = ctx.need_services()
    require_interactive(ctx, "session_create")
    message = check_content(
        EntryType.DIRECTIVE, args.message, max_bytes=svc.settings.max_content_bytes
    )
    name = check_session_name(args.name.strip()) if args.name is not None else None
    description = (args.description.strip() or None) if args.description is not None else None
    # One key for the call whichever path it takes: a redelivered call finds the first.
    sender = replace(
        sender_of(svc, ctx, DeliveryKind.SESSION_CREATE),
        key=f"{DeliveryKind.SESSION_CREATE.value}:{ctx.job_id}:{ctx.call_id}",
    )
    first = svc.store.deliveries.by_key(sender.key)
    if first is not None:
        return json.dumps(_created(svc, first, created=first.kind is DeliveryKind.SESSION_CREATE))
    caller = svc.store.get_session(ctx.session_id)
    agent_id = args.target_agent_id or ctx.agent_id
    spec = svc.store.get_agent(agent_id)  # agent.not_found before anything is written
    generation = check_creation(svc, ctx)
    branch = NewBranch(
        agent_id=agent_id,
        prompt=message,
        kind=DeliveryKind.SESSION_CREATE,
        # Never wider than the caller's own tools, whichever agent runs it.
        tools=sorted(set(spec.tools) & ctx.allowed_tools),
        fork=_continued(svc, caller, args.target_agent_id),
        names=() if name is not None else stage1_names(description or "", message),
        generation=generation,
        reply=Reply.COMPLETION,
        name=name,
        description=description,
        project=caller.project,
    )
    done = ctx.need_delegation().spawn(sender, branch)
    return json.dumps(_created(svc, done.delivery, created=True, done=done))


def _continued(svc: Services, caller: Session, agent_id: str | None) -> tuple[str, int] | None:
    """Where a session created for ``agent_id`` forks: the head of that agent's
    most recent live session of the caller's project (a pointer, nothing is
    copied); None for a fresh session (no target agent, or it has no session)."""
    if not agent_id:
        return None
    latest = svc.store.deliveries.latest_session(agent_id, caller.project, besides=caller.id)
    if latest is None:
        return None
    return latest, svc.store.get_session(latest).last_seq


def _created(
    svc: Services, delivery: Delivery, *, created: bool, done: Delivered | None = None
) -> dict[str, Any]:
    session = (
        done.session if done is not None else svc.store.get_session(delivery.target_session_id)
    )
    return {
        "sessionId": session.id,
        "name": session.name,
        "agentId": session.agent_id,
        "requestId": delivery.id,
        "executionId": delivery.job_id,
        "created": created,
        "status": _answer(svc, delivery)["status"],
    }


# -- session_deliveries ---------------------------------------------------------------


def session_deliveries(args: SessionDeliveriesArgs, ctx: ToolContext) -> str:
    """Requests and results into or out of this session, newest first."""
    svc = ctx.need_services()
    require_interactive(ctx, "session_deliveries")
    if args.request_id is not None:
        return json.dumps({"deliveries": _correlated(svc, ctx, args.request_id)})
    kinds = {*REQUESTS, DeliveryKind.RESULT}
    status = RequestStatus(args.status) if args.status is not None else None
    found = svc.store.deliveries.requests(
        ctx.session_id,
        direction="in" if args.direction == "incoming" else "out",
        kinds=kinds,
        states=stored_states(status) if status is not None else None,
        limit=args.limit * SCAN_FACTOR if status is not None else args.limit,
    )
    views = [request_view(d, js) for d, js in found]
    if status is not None:
        views = [v for v in views if v["status"] == status.value]
    return json.dumps({"deliveries": views[: args.limit]})


def _correlated(svc: Services, ctx: ToolContext, request_id: str) -> list[dict[str, Any]]:
    """A request and its result (given either id), if this session sent or received it."""
    found = svc.store.deliveries.with_job_status(request_id)
    if found is not None and found[0].kind is DeliveryKind.RESULT:
        origin = found[0].metadata.get("request_id")
        found = svc.store.deliveries.with_job_status(origin) if origin else None
    if found is None or found[0].kind not in REQUESTS:
        raise DeliveryNotFound(f"no request {request_id!r}", delivery_id=request_id)
    request, job_status = found
    if ctx.session_id not in (request.sender_session_id, request.target_session_id):
        # Another session's request is answered as a missing one.
        raise DeliveryNotFound(f"no request {request_id!r}", delivery_id=request_id)
    views = [request_view(request, job_status)]
    result = svc.store.deliveries.by_key(result_key(request.id))
    if result is not None:
        answered = svc.store.deliveries.with_job_status(result.id)
        views.append(request_view(result, answered[1] if answered else None))
    return views


# -- session_rename -------------------------------------------------------------------


def session_rename(args: SessionRenameArgs, ctx: ToolContext) -> str:
    """Rename a session (this one by default): an explicit edit automatic naming keeps."""
    svc = ctx.need_services()
    require_interactive(ctx, "session_rename")
    name = check_session_name(args.name.strip())
    caller = svc.store.get_session(ctx.session_id)
    ref = args.target_session_id or caller.id
    target = svc.store.get_session(ref) if ref != caller.id else caller
    if target.id != ref or target.project != caller.project:
        raise missing_session(ref)
    done = svc.store.rename_session(target.id, name, source=NameSource.USER, live_only=True)
    assert done is not None, "a rename that is not only_if_auto writes or raises"
    return json.dumps({"sessionId": done.id, "name": done.name})


TOOLS = [
    Tool(
        "session_send",
        "Send a request or update to an existing session of your project, addressed by its "
        "immutable sessionId. It runs as its own turn there, after whatever runs now. "
        "Returns a requestId at once; with reply='completion' the target's final answer "
        "comes back to you later, once, as a result. Interactive turns only; needs approval.",
        SessionSendArgs,
        session_send,
        precheck=_not_to_itself,
    ),
    Tool(
        "session_create",
        "Create a new session for your agent (or for target_agent_id, continuing its latest "
        "session) and submit its first request; returns the new ids at once while it runs, and "
        "the final answer comes back to you as a result. Interactive turns only; needs approval.",
        SessionCreateArgs,
        session_create,
    ),
    Tool(
        "session_deliveries",
        "Audit requests and results: incoming or outgoing, by status (accepted, delivering, "
        "consumed, failed), or one requestId with its correlated result. Not a polling loop.",
        SessionDeliveriesArgs,
        session_deliveries,
    ),
    Tool(
        "session_rename",
        "Rename a session (default: this one) by its immutable sessionId; the name is trimmed "
        "and has 1-255 characters. Starts no turn.",
        SessionRenameArgs,
        session_rename,
    ),
]
