"""SQLAlchemy 2.0 typed table models. Alembic revisions must match these."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    literal_column,
    text,
)
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from chaz.domain.jobs import ACTIVE

#: The unfinished states (:data:`chaz.domain.jobs.ACTIVE`), sorted: the order
#: the partial indexes' predicate and :func:`unfinished` both write them in.
UNFINISHED_STATUSES = tuple(sorted(s.value for s in ACTIVE))
_UNFINISHED_SQL = "status IN (" + ", ".join(f"'{v}'" for v in UNFINISHED_STATUSES) + ")"


def unfinished(status: ColumnElement[str] | InstrumentedAttribute[str]) -> ColumnElement[bool]:
    """``status IN ('queued', ...)`` with the states as literals, the partial
    indexes' own predicate.

    A planner uses a partial index only when it can prove the query's WHERE
    implies the index's: PostgreSQL cannot from bind parameters (a prepared
    statement's generic plan), and SQLite only from a term written the same
    way, so the readers of ``ix_jobs_session_active`` say it with this.
    """
    return status.in_([literal_column(f"'{v}'") for v in UNFINISHED_STATUSES])


class Base(DeclarativeBase):
    """Declarative base of every chaz table."""

    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class AgentRow(Base):
    """A saved AgentSpec, stored whole as JSON."""

    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    spec: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class SessionRow(Base):
    """A session. ``last_seq`` and ``last_ordinal`` are its counters.

    Bumping ``last_seq`` with an UPDATE takes the row lock, which serializes
    appends per session: commit order equals seq order, which ``watch`` needs.
    """

    __tablename__ = "sessions"
    # Also the only index of ``active_at``: every reader that orders by it names
    # a project (migration 0009 dropped the single-column one).
    __table_args__ = (
        Index("ix_sessions_project_active", "project", "active_at"),
        # Names are unique per project (migration 0010), so a taken name says
        # nothing about another project (docs/contracts.md#names).
        Index("uq_sessions_project_name", "project", "name", unique=True),
        # Only a spawned session has a parent: an admission's session update
        # (never HOT, it sets active_at) adds nothing to it for a root one
        # (docs/performance.md#postgresql-work-per-turn, migration 0021).
        Index(
            "ix_sessions_parent_job_id",
            "parent_job_id",
            postgresql_where=text("parent_job_id IS NOT NULL"),
            sqlite_where=text("parent_job_id IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id"))
    name: Mapped[str | None] = mapped_column(String(255))
    tree_id: Mapped[str] = mapped_column(String(32), index=True)
    #: The job that created it (a spawn or fork); counts toward that turn's fan-out.
    parent_job_id: Mapped[str | None] = mapped_column(String(32))
    call_depth: Mapped[int] = mapped_column(Integer, default=0)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    last_ordinal: Mapped[int] = mapped_column(Integer, default=0)
    limits: Mapped[dict[str, Any] | None]
    #: Tools the session's turns may use, narrowed from a spawning parent; None: the agent's.
    tools: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]
    #: A fork's source: its context reads through ``fork_session_id`` up to ``fork_seq``.
    fork_session_id: Mapped[str | None] = mapped_column(String(32))
    fork_seq: Mapped[int | None] = mapped_column(Integer)
    #: How it was made: None (a producer's), "agent" (the agent tool), "fork" (a producer's fork).
    origin: Mapped[str | None] = mapped_column(String(16))
    #: Who named it: "auto" (stage 1 or 2 naming may rename it) or "user" (never renamed).
    name_source: Mapped[str | None] = mapped_column(String(8))
    archived_at: Mapped[datetime | None]
    archive_reason: Mapped[str | None] = mapped_column(Text)
    #: "manual" (archive_agent, a person) or "auto" (archive_when_done).
    archived_by: Mapped[str | None] = mapped_column(String(8))
    #: When its last job was admitted (list_agents' "most recently active first").
    active_at: Mapped[datetime | None]
    #: A room's other members (agent ids; the host is ``agent_id``); None: not a room.
    members: Mapped[list[str] | None] = mapped_column(JSON)
    #: A room's burst budget: agent messages in a row that may wake a member.
    burst_budget: Mapped[int | None] = mapped_column(Integer)
    #: Agent messages in a row that woke a member since a person's or a Directive.
    room_burst: Mapped[int] = mapped_column(Integer, default=0)
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: Mapped[str] = mapped_column(String(64), default="default")
    #: The principal that made it (``user:NAME``, ``agent:ID``, ``system:NAME``).
    owner: Mapped[str] = mapped_column(String(160), default="user:local")
    #: Its turns run unattended: side effects wait for approval (docs/security.md).
    unattended: Mapped[bool] = mapped_column(Boolean, default=False)
    #: "default" or "bypass" (``unless_auto_approved`` tools run without asking).
    permission_mode: Mapped[str] = mapped_column(String(16), default="default")
    #: What the session is for, in a person's or an agent's words (searched with
    #: its name: docs/sessions.md#session_search).
    description: Mapped[str | None] = mapped_column(Text)


class EntryRow(Base):
    """One entry of a session's timeline."""

    __tablename__ = "entries"
    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_entries_session_seq"),
        # A key is unique per session *and scope*: a producer's key can never
        # take one of the runtime's (chaz.domain.entries.KeyScope).
        UniqueConstraint(
            "session_id", "key_scope", "idempotency_key", name="uq_entries_session_scope_idem"
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(32))
    sender: Mapped[str] = mapped_column(String(160))
    content: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    job_id: Mapped[str | None] = mapped_column(String(32))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    #: Whose key it is: "user" (a producer's) or "runtime" (chaz's own); None without a key.
    key_scope: Mapped[str | None] = mapped_column(String(8))
    created_at: Mapped[datetime]


class JobRow(Base):
    """One admitted agent turn (an execution). ``id`` is the execution_id."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("session_id", "ordinal", name="uq_jobs_session_ordinal"),
        # Every update of a job changes ``status``, so none is HOT and each
        # writes an entry into every index: fewer indexes, fewer writes. The
        # unfinished jobs (a session's head, the reconciler's and exporter's
        # scans) are a partial index, which a job's end adds nothing to;
        # ``project`` keeps a full index for the quotas' totals
        # (docs/performance.md#postgresql-work-per-turn, migration 0009).
        Index(
            "ix_jobs_session_active",
            "session_id",
            "ordinal",
            postgresql_where=text(_UNFINISHED_SQL),
            sqlite_where=text(_UNFINISHED_SQL),
        ),
        Index("ix_jobs_project_status", "project", "status"),
        # Only a spawned turn has a parent; root turns add nothing to it.
        Index(
            "ix_jobs_parent_job_id",
            "parent_job_id",
            postgresql_where=text("parent_job_id IS NOT NULL"),
            sqlite_where=text("parent_job_id IS NOT NULL"),
        ),
        # Only a rolled-back run is in it: a context read's anti-join with
        # the rolled-back jobs reads this, never the whole table (migration 0017).
        Index(
            "ix_jobs_rolled_back",
            "id",
            postgresql_where=text("rolled_back_at IS NOT NULL"),
            sqlite_where=text("rolled_back_at IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    tree_id: Mapped[str] = mapped_column(String(32))
    ordinal: Mapped[int] = mapped_column(Integer)
    # Unique: a redelivered admission can never make a second job for one entry.
    trigger_entry_id: Mapped[str | None] = mapped_column(String(32), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=1)
    caller_session_id: Mapped[str | None] = mapped_column(String(32))
    caller_entry_id: Mapped[str | None] = mapped_column(String(32))
    parent_job_id: Mapped[str | None] = mapped_column(String(32))
    call_depth: Mapped[int] = mapped_column(Integer, default=0)
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    # Attempts count the starts that spend one (docs/executions.md#attempts);
    # starts count every start, resumes after an approval or a hand-back too.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    starts: Mapped[int] = mapped_column(Integer, default=0)
    lease_token: Mapped[str | None] = mapped_column(String(64))
    checkpoint: Mapped[dict[str, Any] | None]
    result: Mapped[str | None] = mapped_column(Text)
    error: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    #: The delivery that admitted it, whose completion policy its end applies.
    delivery_id: Mapped[str | None] = mapped_column(String(32))
    #: A schedule fire's prompt: the turn's triggering input, with no entry written.
    input: Mapped[str | None] = mapped_column(Text)
    #: The schedule fire that admitted it.
    fire_id: Mapped[str | None] = mapped_column(String(32))
    #: In a room, the member the turn runs for (None: the session's agent).
    member_agent_id: Mapped[str | None] = mapped_column(String(64))
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: Mapped[str] = mapped_column(String(64), default="default")
    #: Whoever started the chain of turns this one belongs to.
    owner: Mapped[str] = mapped_column(String(160), default="user:local")
    #: The starter's grants (sorted names); NULL: every grant.
    grants: Mapped[list[str] | None] = mapped_column(JSON)
    #: Runs under the unattended policy (docs/security.md#unattended).
    unattended: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Tokens and wall time its turn used (:class:`chaz.domain.jobs.Usage`); NULL: none yet.
    usage: Mapped[dict[str, Any] | None]
    #: The URL its run's end is POSTed to (docs/http.md#webhooks); NULL: none.
    webhook: Mapped[str | None] = mapped_column(Text)
    #: When its run was deleted over HTTP: hidden from its thread's runs, kept
    #: (docs/http.md#runs, migration 0016); NULL: not hidden.
    hidden_at: Mapped[datetime | None]
    #: When its run was rolled back (docs/http.md#runs): the entries naming it
    #: are hidden from thread values and later context; NULL: not rolled back.
    rolled_back_at: Mapped[datetime | None]
    #: The W3C trace context its turn joins (docs/operations.md#tracing,
    #: migration 0019); NULL: tracing was off when it was admitted.
    trace_context: Mapped[str | None] = mapped_column(String(512))


class CommandRow(Base):
    """An applied control command (``execution.cancel``), kept for idempotency."""

    __tablename__ = "commands"

    command_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    action: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class DeliveryRow(Base):
    """A hand-off between sessions (docs/collaboration.md#deliveries)."""

    __tablename__ = "deliveries"
    __table_args__ = (
        Index("ix_deliveries_target_state", "target_session_id", "state", "created_at"),
        Index("ix_deliveries_sender", "sender_session_id", "created_at"),
        # The reconciler's sweep: accepted deliveries, oldest first.
        Index("ix_deliveries_state_created", "state", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    sender: Mapped[str] = mapped_column(String(160))
    sender_session_id: Mapped[str | None] = mapped_column(String(32))
    sender_entry_id: Mapped[str | None] = mapped_column(String(32))
    sender_job_id: Mapped[str | None] = mapped_column(String(32))
    target_session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    body: Mapped[str] = mapped_column(Text)
    #: The chain counters the delivery carries to the job it admits.
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    generation: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16))
    code: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    job_id: Mapped[str | None] = mapped_column(String(32), index=True)
    #: "followup": the admitted job's end replies to the sender session; "none".
    reply: Mapped[str] = mapped_column(String(16))
    archive_when_done: Mapped[bool] = mapped_column(Boolean, default=False)
    #: For a follow-up: the finished job it answers.
    answers_job_id: Mapped[str | None] = mapped_column(String(32))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: Mapped[str] = mapped_column(String(64), default="default")
    #: Who started the chain it belongs to.
    owner: Mapped[str] = mapped_column(String(160), default="user:local")
    #: The grants the job it admits carries (sorted names; NULL: every grant).
    grants: Mapped[list[str] | None] = mapped_column(JSON)
    #: The job it admits runs unattended.
    unattended: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class EventRow(Base):
    """One append-only event of a session's collaboration log."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_session_id", "session_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    session_id: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(48))
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class ArtifactRow(Base):
    """A job result longer than the result cap: its record. The text is the job's ``result``."""

    __tablename__ = "artifacts"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), unique=True)
    session_id: Mapped[str] = mapped_column(String(32), index=True)
    media_type: Mapped[str] = mapped_column(String(64))
    byte_length: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: Mapped[str] = mapped_column(String(64), default="default")


class TodoRow(Base):
    """One checklist item of a session (the planning tools)."""

    __tablename__ = "todos"
    __table_args__ = (UniqueConstraint("session_id", "ordinal", name="uq_todos_session_ordinal"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    ordinal: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ScheduleRow(Base):
    """An agent-owned schedule (docs/schedules.md)."""

    __tablename__ = "schedules"
    __table_args__ = (Index("ix_schedules_enabled_next", "enabled", "next_slot"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id"), index=True)
    name: Mapped[str | None] = mapped_column(String(255))
    #: "cron" (``cron`` in ``timezone``), "interval" (``interval_seconds``) or "once" (``run_at``).
    kind: Mapped[str] = mapped_column(String(16))
    cron: Mapped[str | None] = mapped_column(String(255))
    timezone: Mapped[str | None] = mapped_column(String(64))
    interval_seconds: Mapped[int | None] = mapped_column(Integer)
    run_at: Mapped[datetime | None]
    prompt: Mapped[str] = mapped_column(Text)
    #: "pinned" (``session_id``) or "fresh" (a new session per fire).
    target: Mapped[str] = mapped_column(String(16))
    session_id: Mapped[str | None] = mapped_column(String(32))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    expires_at: Mapped[datetime | None]
    max_fires: Mapped[int | None] = mapped_column(Integer)
    fires: Mapped[int] = mapped_column(Integer, default=0)
    #: "skip" or "queue": what a slot does when a pinned session is busy.
    overlap: Mapped[str] = mapped_column(String(8))
    #: "skip" or "catch_up_once": what missed slots do after downtime.
    missed: Mapped[str] = mapped_column(String(16))
    max_failures: Mapped[int] = mapped_column(Integer, default=3)
    #: Consecutive failed fires.
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[dict[str, Any] | None]
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    #: The next slot due, and the last one fired (UTC).
    next_slot: Mapped[datetime | None]
    last_slot: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: Mapped[str] = mapped_column(String(64), default="default")
    #: The principal that made it (``user:NAME``, ``agent:ID``, ``system:NAME``).
    owner: Mapped[str] = mapped_column(String(160), default="user:local")
    #: The owner's grants when it was added; its fires start turns with them.
    grants: Mapped[list[str] | None] = mapped_column(JSON)
    #: Its fires run unattended (docs/security.md#unattended).
    unattended: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The job whose turn added it (None: a producer did); cancelling that
    #: job's lineage pauses it (docs/schedules.md#a-cancelled-creator).
    job_id: Mapped[str | None] = mapped_column(String(32), index=True)


class ScheduleFireRow(Base):
    """One slot of a schedule: claimed once, whoever fires it (the agent's ledger)."""

    __tablename__ = "schedule_fires"
    __table_args__ = (
        UniqueConstraint("schedule_id", "slot", name="uq_schedule_fires_schedule_slot"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    schedule_id: Mapped[str] = mapped_column(ForeignKey("schedules.id"))
    slot: Mapped[datetime]
    fired_at: Mapped[datetime]
    session_id: Mapped[str | None] = mapped_column(String(32))
    job_id: Mapped[str | None] = mapped_column(String(32))
    #: "admitted", "succeeded", "failed", "skipped" (busy), "refused" (quota, archived).
    outcome: Mapped[str] = mapped_column(String(16))
    error: Mapped[dict[str, Any] | None]
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    usage: Mapped[dict[str, Any] | None]


class ApprovalRow(Base):
    """A tool call waiting for (or closed by) a person's decision (docs/approvals.md)."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_state_expires", "state", "expires_at"),
        Index("ix_approvals_project_state", "project", "state"),
    )

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    session_id: Mapped[str] = mapped_column(String(32), index=True)
    tool: Mapped[str] = mapped_column(String(64))
    call_id: Mapped[str] = mapped_column(String(255))
    #: The arguments the policy shows (JSON object).
    arguments: Mapped[dict[str, Any]]
    #: pending, approved, denied, expired or cancelled: the first decision's
    #: compare-and-set on "pending" is the only way out of pending.
    state: Mapped[str] = mapped_column(String(16))
    decided_by: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: Mapped[str] = mapped_column(String(64), default="default")
    #: The winning decision ("approve", "deny", "approve_all"); NULL until decided.
    decision: Mapped[str | None] = mapped_column(String(16))


class ProjectRow(Base):
    """A project's limits (docs/security.md#project-quotas); a project without
    a row has the settings' defaults."""

    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: Unfinished (queued or running) turns at once; NULL: the default.
    max_live: Mapped[int | None] = mapped_column(Integer)
    #: Turns ever admitted; NULL: the default.
    max_jobs: Mapped[int | None] = mapped_column(Integer)
    #: Turns admitted per minute (a token bucket in Redis); NULL: the default.
    turns_per_minute: Mapped[int | None] = mapped_column(Integer)
    #: Model tokens per minute (a token bucket in Redis, debited as turns
    #: report usage); NULL: the default.
    tokens_per_minute: Mapped[int | None] = mapped_column(Integer)
    #: Model tokens and cost its turns may use in all; NULL: the default.
    max_tokens: Mapped[int | None] = mapped_column(BigInteger)
    max_cost: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ApiKeyRow(Base):
    """An API key: only its SHA-256 is stored (docs/security.md#api-keys)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    principal: Mapped[str] = mapped_column(String(160))
    project: Mapped[str] = mapped_column(String(64), index=True)
    #: Sorted grant names; NULL: every grant.
    grants: Mapped[list[str] | None] = mapped_column(JSON)
    label: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class WebhookRow(Base):
    """The outbox of runs' webhooks: one row per ended job that names one,
    written in the transaction that ends it (docs/http.md#webhooks)."""

    __tablename__ = "webhooks"
    __table_args__ = (
        # What the sweep reads: pending rows by when they are due. Delivered
        # and dead rows are out of it, so it stays as small as the backlog.
        Index(
            "ix_webhooks_pending_next",
            "next_at",
            postgresql_where=text("state = 'pending'"),
            sqlite_where=text("state = 'pending'"),
        ),
        Index("ix_webhooks_project_state", "project", "state"),
    )

    #: The delivery's id, sent as ``chaz-webhook-id`` on every attempt.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    #: Unique: a job's end applied twice records one delivery.
    job_id: Mapped[str] = mapped_column(String(32), unique=True)
    session_id: Mapped[str] = mapped_column(String(32))
    project: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(Text)
    #: pending, delivered or dead (:class:`chaz.domain.webhooks.WebhookState`).
    state: Mapped[str] = mapped_column(String(16))
    #: Attempts begun (a claimed attempt counts before it is sent).
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: When the next attempt is due; while one is in flight, when it is
    #: presumed lost (its worker died) and may be claimed again.
    next_at: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(Text)
    #: The HTTP status of the last answer (NULL: none, or no answer).
    last_status: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime]
    #: When it was delivered or given up.
    settled_at: Mapped[datetime | None]


class WebhookSecretRow(Base):
    """A project's webhook signing secret (docs/http.md#webhooks): made on
    first use, replaced by a rotation. Kept in the clear: signing needs it."""

    __tablename__ = "webhook_secrets"

    project: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime]
    #: The secret a rotation replaced, signing beside the new one until ``previous_until``.
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_until: Mapped[datetime | None]
