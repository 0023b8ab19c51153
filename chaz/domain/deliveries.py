"""Deliveries: every hand-off between sessions, and the rules of their life.

A delivery is a spawn, a fork, an ``agent(to=...)``, a ``send_message`` or a
follow-up; later, ``session_send`` (docs/contracts.md#requests). It is a row
with its own state machine (docs/collaboration.md#deliveries):

``accepted`` -> ``admitted`` -> ``done``; or ``refused`` / ``dropped`` /
``failed`` / ``withdrawn``, each with a code and a reason.

The rules here are pure: the store applies them, the use case
(:mod:`chaz.usecases.deliveries`) drives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.jobs import Job
from chaz.domain.sessions import Session, missing_session
from chaz.errors import SelfDelivery, SessionArchived

#: A busy target's inbox holds at most this many messages; one more drops the oldest.
INBOX_LIMIT = 50
#: The same text from the same sender while a copy still waits this long is a duplicate.
DUPLICATE_WINDOW = timedelta(seconds=60)
#: The code of a delivery withdrawn before it was admitted; its metadata's
#: ``withdrawn_by`` names the command (or the job or session) that withdrew it.
WITHDRAWN_CODE = "delivery.withdrawn"


class DeliveryKind(StrEnum):
    """What the hand-off is."""

    #: ``agent(start_from="clean"|"inherit")`` or ``spawn_agent``: a new session.
    SPAWN = "spawn"
    #: ``agent(start_from="SID:SEQ")``: a new session forked at an entry. (A person's
    #: ``client.sessions.fork`` hands nothing off: it makes a session, no delivery.)
    FORK = "fork"
    #: ``agent(to=...)``: a tracked job in an existing session.
    AGENT = "agent"
    #: ``send_message``: a message to an existing session (queued while it is busy).
    MESSAGE = "message"
    #: A finished job's result, back to the session that started it.
    FOLLOWUP = "followup"
    #: ``session_send`` (docs/contracts.md#requests): one FIFO turn in an
    #: existing session of the caller's project, never merged with another
    #: (docs/sessions.md).
    SESSION_SEND = "session_send"
    #: ``session_create`` (docs/contracts.md#requests): a new session whose
    #: first message is a completion request.
    SESSION_CREATE = "session_create"
    #: The frozen result of a ``session_send``/``session_create`` request, back
    #: to the session that asked (one per request: :func:`result_key`).
    RESULT = "result"


#: Kinds that create the session they deliver to.
CREATING = frozenset({DeliveryKind.SPAWN, DeliveryKind.FORK, DeliveryKind.SESSION_CREATE})
#: Requests (docs/contracts.md#requests): their turn is never replayed,
#: and their end is ``done`` or ``failed`` with a frozen result
#: (docs/sessions.md#sending-between-sessions).
REQUESTS = frozenset({DeliveryKind.SESSION_SEND, DeliveryKind.SESSION_CREATE})
#: Kinds admitted as the receiving session's own turn (nobody called it).
ANSWERS = frozenset({DeliveryKind.FOLLOWUP, DeliveryKind.RESULT})


class DeliveryState(StrEnum):
    """Where a delivery is in its life."""

    #: Recorded, no job yet: a message waiting in a busy target's inbox, or a
    #: follow-up about to be admitted.
    ACCEPTED = "accepted"
    #: Its job is admitted in the target session.
    ADMITTED = "admitted"
    #: Its job reached a terminal state.
    DONE = "done"
    #: Refused before a job existed (archived target, quota, topology).
    REFUSED = "refused"
    #: Pushed out of a full inbox by a newer message.
    DROPPED = "dropped"
    #: Could not be admitted and will not be retried.
    FAILED = "failed"
    #: Taken back before it was admitted: its sender's cancel (or a Stop of its
    #: target) withdrew it (:data:`WITHDRAWN_CODE`).
    WITHDRAWN = "withdrawn"

    @property
    def final(self) -> bool:
        """No further change is possible."""
        return self not in (DeliveryState.ACCEPTED, DeliveryState.ADMITTED)


class Reply(StrEnum):
    """What the end of the delivered job sends back to the sender session."""

    NONE = "none"
    #: One follow-up turn in the sender session, when the job ends with something to say.
    FOLLOWUP = "followup"
    #: ``reply="completion"`` (docs/contracts.md#requests): the job's terminal
    #: result, frozen, is delivered back to the sender session exactly once,
    #: whatever it was.
    COMPLETION = "completion"


class Delivery(BaseModel):
    """A delivery as stored and as ``client.deliveries`` returns it."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: DeliveryKind
    sender: str = Field(description="Who sent it: 'agent:ID', 'user:NAME' or 'system:NAME'.")
    sender_session_id: str | None = None
    sender_entry_id: str | None = None
    sender_job_id: str | None = None
    target_session_id: str
    body: str
    message_count: int = Field(0, description="Message depth the admitted job carries.")
    generation: int = Field(0, description="Spawn generation the admitted job carries.")
    state: DeliveryState
    code: str | None = None
    reason: str | None = None
    job_id: str | None = Field(None, description="The job it admitted (its execution_id).")
    reply: Reply = Reply.NONE
    archive_when_done: bool = False
    answers_job_id: str | None = Field(None, description="A follow-up's finished job.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    #: Its project, who started the chain it belongs to, the grants the
    #: admitted job carries (None: every grant), and whether it runs unattended.
    project: str = "default"
    owner: str = "user:local"
    grants: list[str] | None = None
    unattended: bool = False


@dataclass(frozen=True)
class Sender:
    """Who hands off, and the chain counters the hand-off starts from."""

    #: ``agent:ID`` (a turn), ``user:NAME`` or ``system:NAME``.
    sender: str
    #: The idempotency key of this hand-off: a retried call makes no second one.
    key: str
    session_id: str | None = None
    job_id: str | None = None
    #: The calling entry (the ToolCall that asked for the hand-off).
    entry_id: str | None = None
    tree_id: str | None = None
    #: The sender job's message depth; the delivery carries it plus one.
    message_count: int = 0
    #: The authority the hand-off carries (docs/security.md#grants-inside-turns):
    #: the sender's project, the principal who started the chain, the acting
    #: turn's grants (sorted names; None: every grant) and whether it runs
    #: unattended. Whatever the hand-off admits runs with exactly these.
    project: str = "default"
    owner: str = "user:local"
    grants: list[str] | None = None
    unattended: bool = False


@dataclass(frozen=True)
class NewBranch:
    """A session to create and the prompt its first job runs (a spawn or a fork)."""

    agent_id: str
    prompt: str
    kind: DeliveryKind = DeliveryKind.SPAWN
    #: Its tools, already narrowed to the caller's.
    tools: list[str] | None = None
    #: ``(session_id, seq)`` to fork at; None for a clean session.
    fork: tuple[str, int] | None = None
    #: Automatic names to try, the first free one wins.
    names: tuple[str, ...] = ()
    #: Its generation (spawn depth).
    generation: int = 0
    reply: Reply = Reply.NONE
    archive_when_done: bool = False
    #: A name of the caller's choosing (``conflict.name_taken`` if used), a
    #: description, and the project of the new session (``session_create``:
    #: docs/contracts.md#requests).
    name: str | None = None
    description: str | None = None
    project: str | None = None


@dataclass(frozen=True)
class Delivered:
    """What a hand-off did."""

    delivery: Delivery
    #: The session delivered to (created by a spawn or fork).
    session: Session
    #: The job it admitted; None while a message waits in a busy target's inbox.
    job: Job | None = None
    #: False when the same hand-off was made before (its first result is returned).
    created: bool = True
    #: Messages this one pushed out of a full inbox.
    dropped: list[Delivery] = field(default_factory=list)

    @property
    def queued(self) -> bool:
        """The message waits in the target's inbox (the target is busy)."""
        return self.job is None and self.delivery.state is DeliveryState.ACCEPTED


def followup_key(job_id: str) -> str:
    """The unique key of the one follow-up that answers ``job_id``."""
    return f"followup:{job_id}"


def followup(
    status: str, result: str | None, error: dict[str, Any] | None, *, label: str
) -> tuple[str, bool] | None:
    """The follow-up a finished job sends back: ``(text, is_error)``, or None for none.

    Success with empty output says nothing (an empty reply would start a
    turn about nothing, and two agents could ping-pong empty turns forever).
    A failed, interrupted or cancelled job always answers, as an error, so
    the caller's model can decide what to do (no automatic resubmission).
    ``result`` is the capped text; ``label`` names the session it came from.
    """
    if status == "succeeded":
        if not (result or "").strip():
            return None
        return f"{label} finished:\n{result}", False
    reason = (error or {}).get("message") or status
    if status == "cancelled":
        detail = "" if (error or {}).get("code") in (None, "job.cancelled") else f" ({reason})"
        return f"{label} failed: cancelled{detail}", True
    return f"{label} failed ({status}): {reason}", True


# -- requests and results (docs/contracts.md#requests) --------------------------------

#: The code of a request whose turn was lost mid-flight: it is never replayed.
INTERRUPTED = "delivery.interrupted"


class RequestStatus(StrEnum):
    """A request's or result's lifecycle as ``session_deliveries`` shows it."""

    ACCEPTED = "accepted"
    DELIVERING = "delivering"
    CONSUMED = "consumed"
    FAILED = "failed"


def result_key(request_id: str) -> str:
    """The unique key of the one result that answers the request ``request_id``."""
    return f"result:{request_id}"


def request_status(state: DeliveryState, job_status: str | None) -> RequestStatus:
    """The request lifecycle (docs/contracts.md#requests), from a stored delivery state and its
    job's status.

    ``accepted``: recorded, and its turn has not started (no job yet, or the
    job still queued behind the target's current turn); ``delivering``: its
    turn runs (or waits for an approval); ``consumed``: its turn ended and
    the delivery is ``done``; ``failed``: refused, dropped, failed or withdrawn, with
    the delivery's code and reason.
    """
    if state is DeliveryState.ACCEPTED:
        return RequestStatus.ACCEPTED
    if state is DeliveryState.ADMITTED:
        if job_status in (None, "queued"):
            return RequestStatus.ACCEPTED
        return RequestStatus.DELIVERING
    if state is DeliveryState.DONE:
        return RequestStatus.CONSUMED
    return RequestStatus.FAILED


def stored_states(status: RequestStatus) -> tuple[DeliveryState, ...]:
    """The stored states a lifecycle status may come from (a filter's first cut)."""
    return {
        RequestStatus.ACCEPTED: (DeliveryState.ACCEPTED, DeliveryState.ADMITTED),
        RequestStatus.DELIVERING: (DeliveryState.ADMITTED,),
        RequestStatus.CONSUMED: (DeliveryState.DONE,),
        RequestStatus.FAILED: (
            DeliveryState.REFUSED,
            DeliveryState.DROPPED,
            DeliveryState.FAILED,
            DeliveryState.WITHDRAWN,
        ),
    }[status]


def frozen_result(
    request_id: str,
    *,
    session_id: str,
    execution_id: str,
    status: str,
    text: str | None,
    error: dict[str, Any] | None,
    artifacts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The terminal result of a request, frozen: final text and artifact references.

    Nothing else of the turn goes in (no reasoning, tool calls or approval
    state): the caller gets what the target answered, not how. A turn that
    did not succeed carries its code and message instead of text.
    """
    frozen: dict[str, Any] = {
        "request_id": request_id,
        "session_id": session_id,
        "execution_id": execution_id,
        "status": "succeeded" if status == "succeeded" else "failed",
        "artifacts": artifacts,
    }
    if status == "succeeded":
        frozen["text"] = text or ""
    else:
        frozen["code"] = (error or {}).get("code") or f"job.{status}"
        frozen["message"] = (error or {}).get("message") or status
    return frozen


def result_text(frozen: dict[str, Any], label: str) -> str:
    """What the caller's model reads: who answered which request, and the answer."""
    head = f"[result of request {frozen['request_id']} from {label}]"
    if frozen["status"] == "succeeded":
        return f"{head}\n{frozen.get('text', '')}"
    return f"{head}\nfailed ({frozen['code']}): {frozen['message']}"


#: How much of a request's text a listing shows (the whole text is the delivery's body).
VIEW_TEXT_CHARS = 2000


def request_view(delivery: Delivery, job_status: str | None) -> dict[str, Any]:
    """A request or result as ``session_deliveries`` shows it (camelCase, as the session tools
    answer: docs/contracts.md#session-tools)."""
    status = request_status(delivery.state, job_status)
    is_result = delivery.kind is DeliveryKind.RESULT
    view: dict[str, Any] = {
        "requestId": delivery.metadata.get("request_id") if is_result else delivery.id,
        "deliveryId": delivery.id,
        "kind": "result" if is_result else "request",
        "tool": None if is_result else delivery.kind.value,
        "status": status.value,
        "fromSessionId": delivery.sender_session_id,
        "toSessionId": delivery.target_session_id,
        "sender": delivery.sender,
        "reply": delivery.reply.value,
        "executionId": delivery.job_id,
        "text": delivery.body[:VIEW_TEXT_CHARS],
        "createdAt": delivery.created_at.isoformat(),
        "updatedAt": delivery.updated_at.isoformat(),
    }
    if status is RequestStatus.FAILED:
        view["code"] = delivery.code
        view["message"] = delivery.reason
    frozen = delivery.metadata if is_result else delivery.metadata.get("result")
    if frozen:
        view["result"] = frozen
    return view


def check_request_target(
    target: Session, ref: str, *, project: str, sender_session_id: str | None
) -> Session:
    """``target`` (found for ``ref``) as the target of a request, or why not.

    A request addresses a session by its immutable id, never by a name
    (docs/contracts.md#requests), in the sender's project; anything else is
    answered as a missing session. Sending to oneself is ``topology.self``;
    an archived target is ``session.archived`` (checked again, row locked,
    when the job is admitted).
    """
    if target.id != ref or target.project != project:
        raise missing_session(ref)
    if sender_session_id is not None and target.id == sender_session_id:
        raise SelfDelivery("a session cannot send a request to itself", session_id=target.id)
    if target.archived:
        raise SessionArchived(
            f"session {target.name or target.id} is archived and takes no new deliveries",
            session_id=target.id,
        )
    return target
