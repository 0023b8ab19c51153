"""Entries: the typed records a session's timeline is made of (docs/contracts.md#entries)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from chaz.errors import ValidationError


class EntryType(StrEnum):
    """The entry types (docs/contracts.md#entries): nine for conversations and
    turns, and two that collaboration writes (``attach``, ``notice``), which
    admit nothing and are not context."""

    MESSAGE = "message"
    DIRECTIVE = "directive"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    ACK = "ack"
    ERROR = "error"
    SUMMARY = "summary"
    APPROVAL_REQUEST = "approval_request"
    APPROVAL_DECISION = "approval_decision"
    #: A pointer to a session this one spawned or forked: ``metadata["attach"]``
    #: holds its ``(session_id, head_seq)`` and status (docs/collaboration.md#attach).
    ATTACH = "attach"
    #: A note from chaz to a session's readers (a dropped or refused delivery).
    NOTICE = "notice"


#: Types only chaz writes: a producer posting one could forge a pointer or a notice.
RUNTIME_ONLY = frozenset({EntryType.ATTACH, EntryType.NOTICE})


class KeyScope(StrEnum):
    """Whose idempotency key it is. A key is unique per session and scope.

    Producers' keys (the ``idempotency_key`` of ``client.sessions.post``) are
    ``user``; every key chaz derives itself (a job's Ack, reply, Error, tool
    calls and results, spawns, and whatever later work adds) is ``runtime``,
    the default of every internal write. So no producer key, whatever it
    spells, can take a key the runtime will need.
    """

    USER = "user"
    RUNTIME = "runtime"


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


#: Entry types whose content may not be empty or whitespace only: they are
#: conversation, and an empty one would admit (or summarize) nothing.
NEEDS_CONTENT = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY})

#: Entry types that the model sees as conversation (Summary only as a boundary).
CONTEXT_TYPES = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY})

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
