"""Jobs (executions): one admitted agent turn, and its state machine.

Every status change goes through :func:`check_transition`; the store applies
it with a compare-and-set on ``version`` so two writers cannot both win.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Re-exported: defined in chaz.domain.kinds (pydantic-free) since 2026-12-07.
from chaz.domain.kinds import (
    ACTIVE as ACTIVE,
)
from chaz.domain.kinds import (
    TERMINAL as TERMINAL,
)
from chaz.domain.kinds import (
    JobStatus as JobStatus,
)
from chaz.errors import IllegalTransition, JobNotFound

_ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED}),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.STOPPING,
            JobStatus.INTERRUPTED,
            JobStatus.WAITING_APPROVAL,
        }
    ),
    # A decision (or its timeout) queues the turn again; a cancel ends it at once.
    JobStatus.WAITING_APPROVAL: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED}),
    # Never ``succeeded``: a reply is written with its job's end, so one that
    # commits after the cancel would be a reply after the cancel. The turn
    # ends ``cancelled`` instead (docs/executions.md#the-state-machine).
    JobStatus.STOPPING: frozenset({JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.INTERRUPTED}),
}


def sources(target: JobStatus) -> frozenset[JobStatus]:
    """The states a job may be in to move to ``target``.

    The store's compare-and-set updates put these in their WHERE clause, so
    a transition applied in one statement still obeys :data:`_ALLOWED`.
    """
    return frozenset(s for s, allowed in _ALLOWED.items() if target in allowed)


def check_transition(current: JobStatus, target: JobStatus) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is allowed."""
    if target not in _ALLOWED.get(current, frozenset()):
        raise IllegalTransition(
            f"a {current.value} job cannot become {target.value}",
            current=current.value,
            target=target.value,
        )


class Usage(BaseModel):
    """What a job's turn used (docs/runtime.md#per-turn-budgets): the tokens its
    model steps reported, summed, and its wall time over its attempts (time
    parked for approval or between attempts not counted)."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    runtime_seconds: float = 0.0
    #: What the tokens cost by ``CHAZ_MODEL_PRICES`` (0: the model has no price).
    cost: float = 0.0
    #: A spawned turn's reservation from its caller's remaining budget, taken
    #: at its first start (None: no reservation, docs/runtime.md#budgets).
    reserved_tokens: int | None = None
    reserved_cost: float | None = None

    @property
    def tokens(self) -> int:
        """Input plus output tokens: what ``max_tokens_per_turn`` counts."""
        return self.input_tokens + self.output_tokens


class Job(BaseModel):
    """One admitted agent turn. ``id`` is the ``execution_id`` everywhere."""

    model_config = ConfigDict(frozen=True)

    id: str
    session_id: str
    tree_id: str
    ordinal: int = Field(description="Admission order within the session.")
    trigger_entry_id: str | None
    status: JobStatus
    version: int
    caller_session_id: str | None = None
    caller_entry_id: str | None = None
    parent_job_id: str | None = None
    call_depth: int = 0
    message_count: int = 0
    #: The delivery that admitted it (a spawn, ``agent(to=)``, a message, a follow-up).
    delivery_id: str | None = None
    #: A schedule fire's prompt: the turn's input, written into no entry.
    input: str | None = None
    #: The schedule fire that admitted it.
    fire_id: str | None = None
    #: In a room, the member the turn runs for (None: the session's agent).
    member_agent_id: str | None = None
    #: The project it runs in (its session's), who started its chain of
    #: turns, and the grants that chain carries (None: every grant).
    project: str = "default"
    owner: str = "user:local"
    grants: list[str] | None = None
    #: Runs under the unattended policy (docs/security.md#unattended).
    unattended: bool = False
    #: Its turn's attempts (docs/executions.md#attempts): the first start and
    #: every restart after a crash, a fault or a redelivery; a resume after an
    #: approval decision or a hand-back is not one. The limit counts these.
    attempts: int = 0
    #: Every start of its turn, those resumes included.
    starts: int = 0
    result: str | None = None
    error: dict[str, Any] | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: What its turn used so far (None: its turn has recorded nothing yet).
    usage: Usage | None = None
    #: The URL its run's end is POSTed to (docs/http.md#webhooks; None: none).
    webhook: str | None = None
    #: When its run was deleted over HTTP (hidden from its thread's runs; None: not).
    hidden_at: datetime | None = None
    #: When its run was rolled back (docs/http.md#runs; None: it was not): the
    #: entries naming it are hidden from its thread's values and later context.
    rolled_back_at: datetime | None = None
    #: The W3C trace context its turn joins (docs/operations.md#tracing); kept
    #: out of every answer: it is the runtime's, not the caller's.
    trace_context: str | None = Field(None, exclude=True)


def missing_job(job_id: str) -> JobNotFound:
    """The one error for a job that does not exist *or* that the caller may not see.

    Both answers are built here so they cannot drift apart (docs/contracts.md#invariant-9).
    """
    return JobNotFound(f"no job {job_id!r}", job_id=job_id)
