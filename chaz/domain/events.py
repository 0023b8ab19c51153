"""Events: the append-only collaboration log of a session (docs/collaboration.md#events)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: The kinds chaz records. ``job.<status>`` is written for every job state change.
DELIVERY_ACCEPTED = "delivery.accepted"
DELIVERY_ADMITTED = "delivery.admitted"
DELIVERY_DONE = "delivery.done"
DELIVERY_REFUSED = "delivery.refused"
DELIVERY_DROPPED = "delivery.dropped"
DELIVERY_FAILED = "delivery.failed"
DELIVERY_WITHDRAWN = "delivery.withdrawn"
SESSION_ARCHIVED = "session.archived"
SESSION_RENAMED = "session.renamed"
#: A room's roster changed (docs/rooms.md).
ROOM_MEMBER_ADDED = "room.member_added"
ROOM_MEMBER_REMOVED = "room.member_removed"


def job_event(status: str) -> str:
    """The kind of a job's state change to ``status`` (``job.running``, ``job.succeeded``...)."""
    return f"job.{status}"


class Event(BaseModel):
    """One row of a session's event log, as stored and as published."""

    model_config = ConfigDict(frozen=True)

    id: int = Field(description="Increasing across the log: resume a listing after it.")
    session_id: str
    kind: str
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
