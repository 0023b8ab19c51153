"""The seam between chaz and a chat platform (docs/bridges.md#the-seam).

A platform implements :class:`Bridge`: poll for people's messages from a
position token, and send a text to a room under a transaction id the platform
deduplicates. Everything else (which room is which session, who may act as
whom, the cursors, the transaction ids, the order, retries with back-off) is
:class:`chaz.bridges.relay.Relay`'s, the same for every platform.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from chaz.domain.entries import Entry, EntryType
from chaz.domain.validation import IDEMPOTENCY_KEY_CHARS
from chaz.errors import ChazError

__all__ = [
    "Batch",
    "Bridge",
    "Incoming",
    "PlatformRefused",
    "PlatformUnavailable",
    "decision_of",
    "idempotency_key",
    "reaction_decision",
    "render",
    "stream_txn_id",
    "txn_id",
    "visible",
]


class PlatformUnavailable(ChazError):
    """The platform did not take a request now (down, rate-limited, a 5xx):
    the same request may succeed later. ``retry_after`` (seconds) is the
    platform's own hint, when it gave one."""

    code = "bridge.platform_unavailable"
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **details: object):
        super().__init__(message, **details)
        self.retry_after = retry_after


class PlatformRefused(ChazError):
    """The platform refused a request for good (a 4xx other than a rate limit:
    the bot is not in the room, the credentials are wrong)."""

    code = "bridge.platform_refused"


@dataclass(frozen=True)
class Incoming:
    """A person's text message on the platform."""

    room: str
    user: str
    #: The platform's id of the message: the idempotency key of its post.
    event_id: str
    text: str
    #: For a reaction: the id of the message reacted to (``text`` is the reaction).
    reaction_to: str | None = None


@dataclass(frozen=True)
class Batch:
    """What one poll found: people's messages in order, and where the next poll starts."""

    messages: Sequence[Incoming]
    token: str
    #: Rooms the bot was invited to in this batch.
    invites: Sequence[str] = field(default_factory=tuple)


class Bridge(ABC):
    """One platform account, as the relay drives it. Implementations retry
    nothing themselves: a transient failure is :class:`PlatformUnavailable`
    and the relay backs off; a permanent one is :class:`PlatformRefused`."""

    #: The platform's name, in entries' metadata and the state's token names.
    platform: ClassVar[str]

    @abstractmethod
    def start(self) -> str:
        """Log in (or check the credentials); the bot's own user id."""

    @abstractmethod
    def poll(self, token: str | None, timeout: float) -> Batch:
        """The messages after ``token`` (None: the first poll, whose messages
        the relay does not admit: they came before the bridge), waiting up to
        ``timeout`` seconds for one. Messages are people's text messages only,
        never the bot's own, in the platform's order within each room."""

    @abstractmethod
    def send(
        self,
        room: str,
        txn_id: str,
        text: str,
        *,
        notice: bool = False,
        replaces: str | None = None,
    ) -> str:
        """Send ``text`` to ``room``; the platform's id of the message. A second
        send with the same ``txn_id`` must not show a second message (the
        platform deduplicates it, and answers with the first one's id). With
        ``replaces`` (a message id this bridge sent), the send edits that
        message in place to ``text`` instead (a streamed answer growing)."""

    @abstractmethod
    def join(self, room: str) -> None:
        """Join ``room`` (the bot was invited, or is bound to it)."""

    @abstractmethod
    def close(self) -> None:
        """Release the platform connection."""


def txn_id(room: str, session_id: str, seq: int) -> str:
    """The transaction id of entry ``seq`` of ``session_id`` in ``room``: the same
    on every resend, so a send repeated after a crash is deduplicated."""
    where = hashlib.sha256(room.encode()).hexdigest()[:12]
    return f"chaz.{session_id}.{seq}.{where}"


def stream_txn_id(room: str, job_id: str) -> str:
    """The transaction id of the message a job's streamed answer grows in: one
    per job and room, so a first send repeated after a crash (or on a retried
    attempt of the job) finds the same message."""
    where = hashlib.sha256(room.encode()).hexdigest()[:12]
    return f"chaz.stream.{job_id}.{where}"


def idempotency_key(platform: str, event_id: str) -> str:
    """The idempotency key of a platform message's post: its event id, hashed
    only where it would be longer than chaz keeps."""
    key = f"{platform}:{event_id}"
    if len(key) <= IDEMPOTENCY_KEY_CHARS:
        return key
    return f"{platform}:sha256:{hashlib.sha256(event_id.encode()).hexdigest()}"


#: A person's answer to an approval request: ``approve``, ``deny`` or
#: ``approve all``, optionally followed by the request's id.
DECISION = re.compile(r"\s*(approve\s+all|approve|deny)(?:\s+(\S+))?\s*", re.IGNORECASE)


def visible(entry: Entry) -> bool:
    """Whether a person in the room should see ``entry``: an agent's Message,
    an Error, or an approval request.

    People's own messages are there already; tool calls, Acks and the rest are
    the turn's workings, not conversation."""
    if entry.type in (EntryType.ERROR, EntryType.APPROVAL_REQUEST):
        return True
    return entry.type is EntryType.MESSAGE and entry.sender.startswith("agent:")


def render(entry: Entry) -> tuple[str, bool]:
    """The text to send for ``entry`` and whether it is a notice (not a person's words)."""
    if entry.type is EntryType.ERROR:
        return f"⚠ {entry.content}", True
    if entry.type is EntryType.APPROVAL_REQUEST:
        try:
            shown = json.loads(entry.content)
            tool, arguments = shown["tool"], json.dumps(shown["arguments"], ensure_ascii=False)
        except (ValueError, KeyError, TypeError):
            tool, arguments = entry.metadata.get("tool", "?"), entry.content
        request = entry.metadata.get("request_id", "?")
        return (
            f"Approval needed: {tool} {arguments} (request {request}). "
            f"Answer approve, deny or approve all (optionally with the request id).",
            True,
        )
    return entry.content, False


def decision_of(text: str) -> tuple[str, str | None] | None:
    """``(decision, request_id or None)`` if ``text`` answers an approval request, else None."""
    found = DECISION.fullmatch(text)
    if found is None:
        return None
    word = found.group(1).lower()
    return ("approve_all" if word not in ("approve", "deny") else word), found.group(2)


#: Reactions that decide an approval request they are put on.
REACTIONS = {
    "👍": "approve",
    "👍️": "approve",
    "✅": "approve",
    "✔️": "approve",
    "👎": "deny",
    "👎️": "deny",
    "❌": "deny",
}


def reaction_decision(key: str) -> str | None:
    """The decision a reaction stands for (``approve``, ``deny``), or None."""
    return REACTIONS.get(key.strip())
