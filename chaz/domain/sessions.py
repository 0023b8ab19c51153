"""Sessions: one linear timeline of entries, the unit of FIFO serialization."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, computed_field

from chaz.domain.agents import Limits
from chaz.domain.entries import EntryType
from chaz.errors import SessionNotFound

if TYPE_CHECKING:
    from chaz.domain.entries import Entry
    from chaz.domain.jobs import Job


class Origin(StrEnum):
    """How a session was made (None on a session a producer created)."""

    #: By the ``agent`` / ``spawn_agent`` tool, inside a turn.
    AGENT = "agent"
    #: By a person's ``client.sessions.fork``.
    FORK = "fork"
    #: By a ``fresh`` schedule's fire (docs/schedules.md).
    SCHEDULE = "schedule"


class NameSource(StrEnum):
    """Who named a session: automatic naming may replace only its own names."""

    AUTO = "auto"
    USER = "user"


class ArchivedBy(StrEnum):
    """Who archived a session: a manual reason outranks an automatic one."""

    MANUAL = "manual"
    AUTO = "auto"


class Session(BaseModel):
    """A session as the producer API returns it."""

    model_config = ConfigDict(frozen=True)

    id: str
    agent_id: str
    name: str | None
    tree_id: str
    parent_job_id: str | None = None
    call_depth: int = 0
    last_seq: int
    limits: Limits | None = None
    tools: list[str] | None = None
    created_at: datetime
    #: A fork's source session and the entry it was forked at (its context
    #: reads through the source up to that entry).
    fork_session_id: str | None = None
    fork_seq: int | None = None
    origin: Origin | None = None
    name_source: NameSource | None = None
    archived_at: datetime | None = None
    archive_reason: str | None = None
    archived_by: ArchivedBy | None = None
    active_at: datetime | None = None
    #: A room's other members (the host is ``agent_id``); None: not a room.
    members: list[str] | None = None
    #: A room's burst budget (None: the default).
    burst_budget: int | None = None
    #: The project it belongs to and the principal that made it (docs/security.md).
    project: str = "default"
    owner: str = "user:local"
    #: Its turns run under the unattended policy.
    unattended: bool = False
    #: "default", or "bypass": tools whose policy is ``unless_auto_approved`` run unasked.
    permission_mode: str = "default"
    #: What it is for (the session listings: docs/contracts.md#session-tools); None: not described.
    description: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def forked_from(self) -> str | None:
        """``"SID:SEQ"`` for a fork, else None."""
        if self.fork_session_id is None or self.fork_seq is None:
            return None
        return f"{self.fork_session_id}:{self.fork_seq}"

    @property
    def archived(self) -> bool:
        """Whether the session is archived (it then takes no new deliveries)."""
        return self.archived_at is not None


def missing_session(ref: str) -> SessionNotFound:
    """The one error for a session that does not exist *or* that the caller may not see.

    Both answers are built here so they cannot drift apart
    (docs/contracts.md#invariant-9): the same class, message and details,
    whatever the reason.
    """
    return SessionNotFound(f"no session {ref!r}", session=ref)


def is_interactive(job: Job, trigger: Entry | None) -> bool:
    """Whether ``job`` is an interactive turn: one started by a person's Message.

    The session tools run only there (docs/contracts.md#session-tools). The
    trigger is a Message whose sender is a person (``user:NAME``), and the
    job came from no delivery (a spawn, message, follow-up, result or
    session request) and no schedule fire. Everything else (a delivered,
    scheduled, bridged or agent-woken turn) is not interactive, which is
    what makes A -> B -> A loops of session tools impossible.
    """
    if job.delivery_id is not None or job.fire_id is not None or trigger is None:
        return False
    return trigger.type is EntryType.MESSAGE and trigger.sender.startswith("user:")
