"""A thread's metadata update and its history (docs/http.md#history).

chaz keeps no metadata of a session beyond its agent, so an update may only
name that agent again (``graph_id``, ``assistant_id``): anything else is
refused, not dropped. A thread's history is its state after each entry of
its conversation, newest first, each checkpoint named ``SID:SEQ`` as
``/threads/{id}/state`` names its own.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from chaz.domain.entries import Entry
from chaz.domain.principals import Grant
from chaz.domain.sessions import Session
from chaz.errors import Unsupported, ValidationError
from chaz.server import fields, mapping
from chaz.server.state import Caller, Payload

router = APIRouter()

#: The most states one history answer holds (each holds the thread's values).
MAX_HISTORY = 100


@router.patch("/threads/{thread_id}", response_model=None)
def update_thread(
    thread_id: str, c: Caller, request: Request, payload: Payload = None
) -> Response | dict[str, Any]:
    """Update a thread's metadata: only its agent, unchanged, can be named
    (chaz keeps nothing else); ``Prefer: return=minimal`` answers 204."""
    given = fields.body(payload)
    c.principal.require(Grant.SESSION_WRITE, "update threads")
    fields.refuse_unknown(given, ("metadata",))
    metadata = given.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ValidationError("metadata must be an object", field="metadata")
    fields.refuse_unknown(metadata, mapping.ASSISTANT_KEYS, prefix="metadata.")
    session = c.thread(thread_id)
    for key in mapping.ASSISTANT_KEYS:
        named = metadata.get(key)
        if named is not None and named != session.agent_id:
            raise Unsupported(
                f"thread {session.id} is a session of {session.agent_id!r}: chaz cannot move "
                "it to another agent",
                field=f"metadata.{key}",
            )
    if request.headers.get("prefer", "").strip().lower() == "return=minimal":
        return Response(status_code=204)
    state = mapping.values(c.said(session.id))
    return mapping.thread(session, busy=c.busy(session.id), state=state)


@router.post("/threads/{thread_id}/history")
def thread_history(thread_id: str, c: Caller, payload: Payload = None) -> list[dict[str, Any]]:
    """The thread's states, newest first: one after each entry of its
    conversation; ``before`` (a checkpoint, or its id) keeps the older ones."""
    given = fields.body(payload)
    c.principal.require(Grant.HISTORY_READ, "read threads")
    fields.refuse_unknown(given, ("limit", "before"))
    limit = fields.integer(given, "limit", 10, 1, MAX_HISTORY)
    session = c.thread(thread_id)
    before = _before(session, given.get("before"))
    entries = c.conversation(session.id)
    states: list[dict[str, Any]] = []
    for i in range(len(entries) - 1, -1, -1):
        if len(states) == limit:
            break
        if before is not None and entries[i].seq >= before:
            continue
        states.append(_state(session, entries[: i + 1], entries[i - 1] if i else None))
    return states


def _before(session: Session, raw: object) -> int | None:
    """The seq a ``before`` names (a checkpoint id, or a checkpoint holding one)."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        fields.refuse_unknown(
            raw, ("checkpoint_id", "thread_id", "checkpoint_ns"), prefix="before."
        )
        if raw.get("thread_id") not in (None, session.id) or raw.get("checkpoint_ns") not in (
            None,
            "",
        ):
            raise ValidationError("before names another thread's checkpoint", field="before")
        raw = raw.get("checkpoint_id")
    prefix = f"{session.id}:"
    if isinstance(raw, str) and raw.startswith(prefix) and raw[len(prefix) :].isdigit():
        return int(raw[len(prefix) :])
    raise ValidationError(
        f"before must be a checkpoint of this thread, {prefix}SEQ", field="before"
    )


def _checkpoint(session: Session, seq: int) -> dict[str, Any]:
    return {
        "thread_id": session.id,
        "checkpoint_ns": "",
        "checkpoint_id": f"{session.id}:{seq}",
        "checkpoint_map": None,
    }


def _state(session: Session, upto: list[Entry], previous: Entry | None) -> dict[str, Any]:
    """The thread's state right after the last of ``upto``."""
    last = upto[-1]
    return {
        "values": mapping.values(upto),
        "next": [],
        "checkpoint": _checkpoint(session, last.seq),
        "metadata": {"seq": last.seq},
        "created_at": mapping.iso(last.created_at),
        "parent_checkpoint": None if previous is None else _checkpoint(session, previous.seq),
        "tasks": [],
        "interrupts": [],
    }
