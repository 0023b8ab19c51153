"""Todos: a session's checklist, kept by the planning tools (docs/contracts.md#planning).

A todo records intended work and starts nothing: no entry, no job, no
delivery. Only its own row changes.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from chaz.domain.validation import check_choice, check_text, invalid, is_blank

#: The longest title, in characters.
MAX_TITLE_CHARS = 500
#: The longest note, in characters.
MAX_NOTE_CHARS = 4000
#: The most todos one session may hold (the next one is ``todo.limit``).
MAX_TODOS = 200


class TodoStatus(StrEnum):
    """Where a checklist item stands. Any status may follow any other."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    CANCELLED = "cancelled"


class Todo(BaseModel):
    """One checklist item of a session."""

    model_config = ConfigDict(frozen=True)

    id: str
    session_id: str
    #: Its place in the session's list: 1, 2, 3... in creation order.
    ordinal: int
    title: str
    status: TodoStatus
    note: str | None = None
    created_at: datetime
    updated_at: datetime


def check_title(value: object) -> str:
    """A todo's title: storable, not blank, at most :data:`MAX_TITLE_CHARS`."""
    title = check_text("title", value, max_chars=MAX_TITLE_CHARS)
    if is_blank(title):
        raise invalid("title", "title may not be empty or blank")
    return title


def check_note(value: object) -> str | None:
    """A todo's note: None or storable text of at most :data:`MAX_NOTE_CHARS`.

    An empty note is no note (None): that is how one is cleared.
    """
    if value is None:
        return None
    note = check_text("note", value, max_chars=MAX_NOTE_CHARS)
    return note or None


def check_status(value: object) -> TodoStatus:
    """A todo status, by value."""
    return check_choice("status", value, TodoStatus, "todo status")
