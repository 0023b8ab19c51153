"""Deliveries: every hand-off between sessions, and the rules of their life.

A delivery is a spawn, a fork, an ``agent(to=...)``, a ``send_message`` or a
follow-up; later, seed 002's ``session_send``. It is a row with its own
state machine (docs/collaboration.md#deliveries):

``accepted`` -> ``admitted`` -> ``done``; or ``refused`` / ``dropped`` /
``failed``, each with a code and a reason.

The rules here are pure: the store applies them, the use case
(:mod:`chaz.deliveries`) drives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.jobs import Job
from chaz.domain.sessions import Session

#: A busy target's inbox holds at most this many messages; one more drops the oldest.
INBOX_LIMIT = 50
#: The same text from the same sender while a copy still waits this long is a duplicate.
DUPLICATE_WINDOW = timedelta(seconds=60)


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


#: Kinds that create the session they deliver to.
CREATING = frozenset({DeliveryKind.SPAWN, DeliveryKind.FORK})


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

    @property
    def final(self) -> bool:
        """No further change is possible."""
        return self not in (DeliveryState.ACCEPTED, DeliveryState.ADMITTED)


class Reply(StrEnum):
    """What the end of the delivered job sends back to the sender session."""

    NONE = "none"
    #: One follow-up turn in the sender session, when the job ends with something to say.
    FOLLOWUP = "followup"


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
