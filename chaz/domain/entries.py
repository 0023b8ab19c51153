"""Entries: the typed records a session's timeline is made of (docs/contracts.md#entries)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

# Re-exported: defined in chaz.domain.kinds (pydantic-free) since 2026-12-07.
from chaz.domain.kinds import (
    CONTEXT_TYPES as CONTEXT_TYPES,
)
from chaz.domain.kinds import (
    NEEDS_CONTENT as NEEDS_CONTENT,
)
from chaz.domain.kinds import (
    RUNTIME_ONLY as RUNTIME_ONLY,
)
from chaz.domain.kinds import (
    EntryType as EntryType,
)
from chaz.domain.kinds import (
    KeyScope as KeyScope,
)
from chaz.errors import ValidationError


@dataclass(frozen=True)
class NewEntry:
    """An entry as its writer states it, before the store numbers and stores it.

    Every write path passes one of these down (the admission use case, the
    store's operations, the delegation port) instead of repeating its six
    fields in each signature.
    """

    type: EntryType
    sender: str
    content: str
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = None
    key_scope: KeyScope = KeyScope.RUNTIME
    #: The turn that writes it (an admission ignores it: its job is new).
    job_id: str | None = None


_SENDER = re.compile(r"^(user|agent|system):[A-Za-z0-9_.@\-]{1,128}$")


def parse_sender(sender: object) -> tuple[str, str]:
    """Split ``kind:name`` and check it; kinds are ``user``, ``agent``, ``system``.

    Anything but such a string (a number from a caller's mistake) is refused alike.
    """
    # fullmatch: `$` would accept a trailing newline, and "agent:me\n" would
    # then pass for a stranger and let an agent re-trigger itself.
    if not isinstance(sender, str) or not _SENDER.fullmatch(sender):
        raise ValidationError(
            f"sender {sender!r} must look like 'user:NAME', 'agent:NAME' or 'system:NAME'",
            sender=sender,
        )
    kind, _, name = sender.partition(":")
    return kind, name


def agent_sender(agent_id: str) -> str:
    """The sender string an agent writes its own entries under."""
    return f"agent:{agent_id}"


def is_agent_sender(sender: str) -> bool:
    """Whether ``sender`` is an agent's (``agent:ID``), whichever agent."""
    return sender.startswith("agent:")


class Entry(BaseModel):
    """One record in a session, as stored and as published."""

    model_config = ConfigDict(frozen=True)

    id: str
    session_id: str
    seq: int = Field(description="Per-session, strictly increasing, in commit order.")
    type: EntryType
    sender: str
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    job_id: str | None = Field(None, description="The turn that wrote it, or that it admitted.")
    idempotency_key: str | None = Field(
        None, description="The producer's idempotency key (the runtime's own keys are internal)."
    )
    created_at: datetime


class Said(NamedTuple):
    """What a turn's context needs of an entry: who said what, and where.

    Reading the full :class:`Entry` (metadata JSON, timestamps) for every
    context entry of every turn cost more than the rest of the turn's setup.
    """

    id: str
    seq: int
    type: EntryType
    sender: str
    content: str


def replay_differences(first: Entry, retry: NewEntry) -> list[str]:
    """What a retried post changed from the ``first`` entry its key made (empty: nothing).

    Metadata is compared in its stored (JSON) form, so a tuple and a list of
    the same items are the same request.
    """
    differs = []
    if first.type is not retry.type:
        differs.append("type")
    if first.sender != retry.sender:
        differs.append("sender")
    if first.content != retry.content:
        differs.append("content")
    if first.metadata != json.loads(json.dumps(retry.metadata or {})):
        differs.append("metadata")
    return differs


class Attachment(BaseModel):
    """An attach pointer followed to its target: what ``sessions.attachment`` returns."""

    model_config = ConfigDict(frozen=True)

    pointer: Entry
    session_id: str
    head_seq: int
    status: str
    entries: list[Entry]
