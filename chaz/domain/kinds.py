"""The domain's kinds and states as plain enums: entry types, key scopes, job states.

They live apart from the pydantic models that use them (:mod:`chaz.domain.entries`,
:mod:`chaz.domain.jobs`, which re-export them) so that code which only needs a
state or a type, such as the read commands' fast path (:mod:`chaz.cli.direct`),
imports no pydantic (docs/performance.md#cli-read-commands-on-postgresql).
"""

from __future__ import annotations

from enum import StrEnum


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


#: Entry types whose content may not be empty or whitespace only: they are
#: conversation, and an empty one would admit (or summarize) nothing.
NEEDS_CONTENT = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY})

#: Entry types that the model sees as conversation (Summary only as a boundary).
CONTEXT_TYPES = frozenset({EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY})


class JobStatus(StrEnum):
    """Where a job is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    #: Suspended on a tool call that waits for a person's decision
    #: (docs/approvals.md): it holds no worker, lane or live slot.
    WAITING_APPROVAL = "waiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        """No further transition is possible."""
        return self in TERMINAL


TERMINAL = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.INTERRUPTED}
)
ACTIVE = frozenset(
    {JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.STOPPING, JobStatus.WAITING_APPROVAL}
)
