"""chaz's tables, as SQLAlchemy Core tables. Alembic revisions must match these.

Each class is a table: its ``Column`` attributes, in order, are the table's
columns (``JobRow.status`` is the column itself, ``JobRow.__table__`` the
:class:`~sqlalchemy.Table`), and ``select(JobRow)`` selects the table.
Nothing in chaz uses SQLAlchemy's ORM: every statement is a Core statement,
so the declarative mapping (``sqlalchemy.orm`` and the mappers) is not
loaded, which was about a tenth of a second of every worker's start
(docs/performance.md#worker-start-up).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    literal_column,
    text,
    util,
)
from sqlalchemy.sql.elements import ColumnClause, ColumnElement

from chaz.domain.jobs import ACTIVE

#: The unfinished states (:data:`chaz.domain.jobs.ACTIVE`), sorted: the order
#: the partial indexes' predicate and :func:`unfinished` both write them in.
UNFINISHED_STATUSES = tuple(sorted(s.value for s in ACTIVE))
_UNFINISHED_SQL = "status IN (" + ", ".join(f"'{v}'" for v in UNFINISHED_STATUSES) + ")"


def unfinished(status: ColumnElement[str]) -> ColumnElement[bool]:
    """``status IN ('queued', ...)`` with the states as literals, the partial
    indexes' own predicate.

    A planner uses a partial index only when it can prove the query's WHERE
    implies the index's: PostgreSQL cannot from bind parameters (a prepared
    statement's generic plan), and SQLite only from a term written the same
    way, so the readers of ``ix_jobs_session_active`` say it with this.
    """
    return status.in_([literal_column(f"'{v}'") for v in UNFINISHED_STATUSES])


class Base:
    """Base of every chaz table: a subclass's ``Column`` attributes, in the
    order written, become the columns of ``Table(__tablename__, metadata,
    *columns, *__table_args__)``, kept as ``__table__``. A column written
    without a name takes its attribute's."""

    #: Every chaz table (Alembic's ``target_metadata``).
    metadata: ClassVar[MetaData] = MetaData()
    __tablename__: ClassVar[str]
    __table_args__: ClassVar[tuple[Any, ...]] = ()
    __table__: ClassVar[Table]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        columns: list[Column[Any]] = []
        for attr, value in vars(cls).items():
            if isinstance(value, Column):
                if value.name is None:
                    value.name = value.key = attr
                columns.append(value)
        cls.__table__ = Table(cls.__tablename__, Base.metadata, *columns, *cls.__table_args__)

    @classmethod
    def __clause_element__(cls) -> Table:
        """The table, so that ``select(JobRow)`` and the like select it."""
        return cls.__table__


class _PartialIndex(Index):
    """An index with the same ``WHERE`` on PostgreSQL and SQLite, as
    ``Index(..., postgresql_where=..., sqlite_where=...)`` would be, except
    that each dialect's options are filled in when that dialect first asks
    (its DDL, Alembic's comparison). Given to the constructor, they would be
    checked at once against both dialects' argument lists, which imports
    both dialects' packages: the PostgreSQL one alone was a few hundredths
    of a second of an embedded worker's start (docs/performance.md)."""

    def __init__(self, name: str, *columns: str, where: str) -> None:
        super().__init__(name, *columns)
        self.where = where

    @util.memoized_property
    def dialect_options(self) -> util.PopulateDict[str, Any]:
        """The dialects' options, ``where`` set for PostgreSQL and SQLite."""

        def options(dialect: str) -> Any:
            found = self._kw_reg_for_dialect_cls(dialect)
            if dialect in ("postgresql", "sqlite"):
                found["where"] = text(self.where)
            return found

        return util.PopulateDict(options)

    @property
    def dialect_kwargs(self) -> Any:
        """``postgresql_where`` and ``sqlite_where`` among the others, as given
        to a plain ``Index`` (Alembic renders a new index from these)."""
        for dialect in ("postgresql", "sqlite"):
            self.dialect_options[dialect]  # filled in on first access
        return super().dialect_kwargs


def _partial(name: str, *columns: str, where: str) -> Index:
    """A partial index, the same predicate on PostgreSQL and SQLite."""
    return _PartialIndex(name, *columns, where=where)


class AgentRow(Base):
    """A saved AgentSpec, stored whole as JSON."""

    __tablename__ = "agents"

    id: ColumnClause[str] = Column(String(64), primary_key=True)
    spec: ColumnClause[dict[str, Any]] = Column(JSON, nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    updated_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


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
        # (not HOT when it moves active_at) adds nothing to it for a root one
        # (docs/performance.md#postgresql-work-per-turn, migration 0021).
        _partial("ix_sessions_parent_job_id", "parent_job_id", where="parent_job_id IS NOT NULL"),
    )

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    agent_id: ColumnClause[str] = Column(ForeignKey("agents.id"), nullable=False)
    name: ColumnClause[str | None] = Column(String(255))
    tree_id: ColumnClause[str] = Column(String(32), index=True, nullable=False)
    #: The job that created it (a spawn or fork); counts toward that turn's fan-out.
    parent_job_id: ColumnClause[str | None] = Column(String(32))
    call_depth: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    last_seq: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    last_ordinal: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    limits: ColumnClause[dict[str, Any] | None] = Column(JSON)
    #: Tools the session's turns may use, narrowed from a spawning parent; None: the agent's.
    tools: ColumnClause[list[str] | None] = Column(JSON)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    #: A fork's source: its context reads through ``fork_session_id`` up to ``fork_seq``.
    fork_session_id: ColumnClause[str | None] = Column(String(32))
    fork_seq: ColumnClause[int | None] = Column(Integer)
    #: How it was made: None (a producer's), "agent" (the agent tool), "fork" (a producer's fork).
    origin: ColumnClause[str | None] = Column(String(16))
    #: Who named it: "auto" (stage 1 or 2 naming may rename it) or "user" (never renamed).
    name_source: ColumnClause[str | None] = Column(String(8))
    archived_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    archive_reason: ColumnClause[str | None] = Column(Text)
    #: "manual" (archive_agent, a person) or "auto" (archive_when_done).
    archived_by: ColumnClause[str | None] = Column(String(8))
    #: When its last job was admitted (list_agents' "most recently active first"),
    #: to within a second: an admission moves it only when it is older
    #: (``st.ACTIVE_AT_GRAIN``), so that the others' session update is HOT.
    active_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    #: A room's other members (agent ids; the host is ``agent_id``); None: not a room.
    members: ColumnClause[list[str] | None] = Column(JSON)
    #: A room's burst budget: agent messages in a row that may wake a member.
    burst_budget: ColumnClause[int | None] = Column(Integer)
    #: Agent messages in a row that woke a member since a person's or a Directive.
    room_burst: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: ColumnClause[str] = Column(String(64), default="default", nullable=False)
    #: The principal that made it (``user:NAME``, ``agent:ID``, ``system:NAME``).
    owner: ColumnClause[str] = Column(String(160), default="user:local", nullable=False)
    #: Its turns run unattended: side effects wait for approval (docs/security.md).
    unattended: ColumnClause[bool] = Column(Boolean, default=False, nullable=False)
    #: "default" or "bypass" (``unless_auto_approved`` tools run without asking).
    permission_mode: ColumnClause[str] = Column(String(16), default="default", nullable=False)
    #: What the session is for, in a person's or an agent's words (searched with
    #: its name: docs/sessions.md#session_search).
    description: ColumnClause[str | None] = Column(Text)


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

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    session_id: ColumnClause[str] = Column(ForeignKey("sessions.id"), nullable=False)
    seq: ColumnClause[int] = Column(Integer, nullable=False)
    type: ColumnClause[str] = Column(String(32), nullable=False)
    sender: ColumnClause[str] = Column(String(160), nullable=False)
    content: ColumnClause[str] = Column(Text, nullable=False)
    meta: ColumnClause[dict[str, Any]] = Column("metadata", JSON, nullable=False)
    job_id: ColumnClause[str | None] = Column(String(32))
    idempotency_key: ColumnClause[str | None] = Column(String(200))
    #: Whose key it is: "user" (a producer's) or "runtime" (chaz's own); None without a key.
    key_scope: ColumnClause[str | None] = Column(String(8))
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


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
        _partial("ix_jobs_session_active", "session_id", "ordinal", where=_UNFINISHED_SQL),
        Index("ix_jobs_project_status", "project", "status"),
        # Only a spawned turn has a parent; root turns add nothing to it.
        _partial("ix_jobs_parent_job_id", "parent_job_id", where="parent_job_id IS NOT NULL"),
        # Only a rolled-back run is in it: a context read's anti-join with
        # the rolled-back jobs reads this, never the whole table (migration 0017).
        _partial("ix_jobs_rolled_back", "id", where="rolled_back_at IS NOT NULL"),
    )

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    session_id: ColumnClause[str] = Column(ForeignKey("sessions.id"), nullable=False)
    tree_id: ColumnClause[str] = Column(String(32), nullable=False)
    ordinal: ColumnClause[int] = Column(Integer, nullable=False)
    # Unique: a redelivered admission can never make a second job for one entry.
    trigger_entry_id: ColumnClause[str | None] = Column(String(32), unique=True)
    status: ColumnClause[str] = Column(String(16), nullable=False)
    version: ColumnClause[int] = Column(Integer, default=1, nullable=False)
    caller_session_id: ColumnClause[str | None] = Column(String(32))
    caller_entry_id: ColumnClause[str | None] = Column(String(32))
    parent_job_id: ColumnClause[str | None] = Column(String(32))
    call_depth: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    message_count: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    # Attempts count the starts that spend one (docs/executions.md#attempts);
    # starts count every start, resumes after an approval or a hand-back too.
    attempts: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    starts: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    lease_token: ColumnClause[str | None] = Column(String(64))
    checkpoint: ColumnClause[dict[str, Any] | None] = Column(JSON)
    result: ColumnClause[str | None] = Column(Text)
    error: ColumnClause[dict[str, Any] | None] = Column(JSON)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    started_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    finished_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    #: The delivery that admitted it, whose completion policy its end applies.
    delivery_id: ColumnClause[str | None] = Column(String(32))
    #: A schedule fire's prompt: the turn's triggering input, with no entry written.
    input: ColumnClause[str | None] = Column(Text)
    #: The schedule fire that admitted it.
    fire_id: ColumnClause[str | None] = Column(String(32))
    #: In a room, the member the turn runs for (None: the session's agent).
    member_agent_id: ColumnClause[str | None] = Column(String(64))
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: ColumnClause[str] = Column(String(64), default="default", nullable=False)
    #: Whoever started the chain of turns this one belongs to.
    owner: ColumnClause[str] = Column(String(160), default="user:local", nullable=False)
    #: The starter's grants (sorted names); NULL: every grant.
    grants: ColumnClause[list[str] | None] = Column(JSON)
    #: Runs under the unattended policy (docs/security.md#unattended).
    unattended: ColumnClause[bool] = Column(Boolean, default=False, nullable=False)
    #: Tokens and wall time its turn used (:class:`chaz.domain.jobs.Usage`); NULL: none yet.
    usage: ColumnClause[dict[str, Any] | None] = Column(JSON)
    #: The URL its run's end is POSTed to (docs/http.md#webhooks); NULL: none.
    webhook: ColumnClause[str | None] = Column(Text)
    #: When its run was deleted over HTTP: hidden from its thread's runs, kept
    #: (docs/http.md#runs, migration 0016); NULL: not hidden.
    hidden_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    #: When its run was rolled back (docs/http.md#runs): the entries naming it
    #: are hidden from thread values and later context; NULL: not rolled back.
    rolled_back_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    #: The W3C trace context its turn joins (docs/operations.md#tracing,
    #: migration 0019); NULL: tracing was off when it was admitted.
    trace_context: ColumnClause[str | None] = Column(String(512))


class CommandRow(Base):
    """An applied control command (``execution.cancel``), kept for idempotency."""

    __tablename__ = "commands"

    command_id: ColumnClause[str] = Column(String(100), primary_key=True)
    action: ColumnClause[str] = Column(String(64), nullable=False)
    job_id: ColumnClause[str] = Column(String(32), nullable=False)
    outcome: ColumnClause[dict[str, Any]] = Column(JSON, nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


class DeliveryRow(Base):
    """A hand-off between sessions (docs/collaboration.md#deliveries)."""

    __tablename__ = "deliveries"
    __table_args__ = (
        Index("ix_deliveries_target_state", "target_session_id", "state", "created_at"),
        Index("ix_deliveries_sender", "sender_session_id", "created_at"),
        # The reconciler's sweep: accepted deliveries, oldest first.
        Index("ix_deliveries_state_created", "state", "created_at"),
    )

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    kind: ColumnClause[str] = Column(String(16), nullable=False)
    sender: ColumnClause[str] = Column(String(160), nullable=False)
    sender_session_id: ColumnClause[str | None] = Column(String(32))
    sender_entry_id: ColumnClause[str | None] = Column(String(32))
    sender_job_id: ColumnClause[str | None] = Column(String(32))
    target_session_id: ColumnClause[str] = Column(ForeignKey("sessions.id"), nullable=False)
    body: ColumnClause[str] = Column(Text, nullable=False)
    #: The chain counters the delivery carries to the job it admits.
    message_count: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    generation: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    state: ColumnClause[str] = Column(String(16), nullable=False)
    code: ColumnClause[str | None] = Column(String(64))
    reason: ColumnClause[str | None] = Column(Text)
    job_id: ColumnClause[str | None] = Column(String(32), index=True)
    #: "followup": the admitted job's end replies to the sender session; "none".
    reply: ColumnClause[str] = Column(String(16), nullable=False)
    archive_when_done: ColumnClause[bool] = Column(Boolean, default=False, nullable=False)
    #: For a follow-up: the finished job it answers.
    answers_job_id: ColumnClause[str | None] = Column(String(32))
    meta: ColumnClause[dict[str, Any]] = Column("metadata", JSON, nullable=False)
    idempotency_key: ColumnClause[str] = Column(String(200), unique=True, nullable=False)
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: ColumnClause[str] = Column(String(64), default="default", nullable=False)
    #: Who started the chain it belongs to.
    owner: ColumnClause[str] = Column(String(160), default="user:local", nullable=False)
    #: The grants the job it admits carries (sorted names; NULL: every grant).
    grants: ColumnClause[list[str] | None] = Column(JSON)
    #: The job it admits runs unattended.
    unattended: ColumnClause[bool] = Column(Boolean, default=False, nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    updated_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


class EventRow(Base):
    """One append-only event of a session's collaboration log."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_session_id", "session_id", "id"),)

    id: ColumnClause[int] = Column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    session_id: ColumnClause[str] = Column(String(32), nullable=False)
    kind: ColumnClause[str] = Column(String(48), nullable=False)
    data: ColumnClause[dict[str, Any]] = Column(JSON, nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


class ArtifactRow(Base):
    """A job result longer than the result cap: its record. The text is the job's ``result``."""

    __tablename__ = "artifacts"

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    job_id: ColumnClause[str] = Column(String(32), unique=True, nullable=False)
    session_id: ColumnClause[str] = Column(String(32), index=True, nullable=False)
    media_type: ColumnClause[str] = Column(String(64), nullable=False)
    byte_length: ColumnClause[int] = Column(Integer, nullable=False)
    sha256: ColumnClause[str] = Column(String(64), nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: ColumnClause[str] = Column(String(64), default="default", nullable=False)


class TodoRow(Base):
    """One checklist item of a session (the planning tools)."""

    __tablename__ = "todos"
    __table_args__ = (UniqueConstraint("session_id", "ordinal", name="uq_todos_session_ordinal"),)

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    session_id: ColumnClause[str] = Column(ForeignKey("sessions.id"), nullable=False)
    ordinal: ColumnClause[int] = Column(Integer, nullable=False)
    title: ColumnClause[str] = Column(Text, nullable=False)
    status: ColumnClause[str] = Column(String(16), nullable=False)
    note: ColumnClause[str | None] = Column(Text)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    updated_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


class ScheduleRow(Base):
    """An agent-owned schedule (docs/schedules.md)."""

    __tablename__ = "schedules"
    __table_args__ = (Index("ix_schedules_enabled_next", "enabled", "next_slot"),)

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    owner_agent_id: ColumnClause[str] = Column(ForeignKey("agents.id"), index=True, nullable=False)
    name: ColumnClause[str | None] = Column(String(255))
    #: "cron" (``cron`` in ``timezone``), "interval" (``interval_seconds``) or "once" (``run_at``).
    kind: ColumnClause[str] = Column(String(16), nullable=False)
    cron: ColumnClause[str | None] = Column(String(255))
    timezone: ColumnClause[str | None] = Column(String(64))
    interval_seconds: ColumnClause[int | None] = Column(Integer)
    run_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    prompt: ColumnClause[str] = Column(Text, nullable=False)
    #: "pinned" (``session_id``) or "fresh" (a new session per fire).
    target: ColumnClause[str] = Column(String(16), nullable=False)
    session_id: ColumnClause[str | None] = Column(String(32))
    enabled: ColumnClause[bool] = Column(Boolean, default=True, nullable=False)
    expires_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    max_fires: ColumnClause[int | None] = Column(Integer)
    fires: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    #: "skip" or "queue": what a slot does when a pinned session is busy.
    overlap: ColumnClause[str] = Column(String(8), nullable=False)
    #: "skip" or "catch_up_once": what missed slots do after downtime.
    missed: ColumnClause[str] = Column(String(16), nullable=False)
    max_failures: ColumnClause[int] = Column(Integer, default=3, nullable=False)
    #: Consecutive failed fires.
    failures: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    last_error: ColumnClause[dict[str, Any] | None] = Column(JSON)
    disabled_reason: ColumnClause[str | None] = Column(Text)
    #: The next slot due, and the last one fired (UTC).
    next_slot: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    last_slot: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    updated_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: ColumnClause[str] = Column(String(64), default="default", nullable=False)
    #: The principal that made it (``user:NAME``, ``agent:ID``, ``system:NAME``).
    owner: ColumnClause[str] = Column(String(160), default="user:local", nullable=False)
    #: The owner's grants when it was added; its fires start turns with them.
    grants: ColumnClause[list[str] | None] = Column(JSON)
    #: Its fires run unattended (docs/security.md#unattended).
    unattended: ColumnClause[bool] = Column(Boolean, default=False, nullable=False)
    #: The job whose turn added it (None: a producer did); cancelling that
    #: job's lineage pauses it (docs/schedules.md#a-cancelled-creator).
    job_id: ColumnClause[str | None] = Column(String(32), index=True)


class ScheduleFireRow(Base):
    """One slot of a schedule: claimed once, whoever fires it (the agent's ledger)."""

    __tablename__ = "schedule_fires"
    __table_args__ = (
        UniqueConstraint("schedule_id", "slot", name="uq_schedule_fires_schedule_slot"),
    )

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    schedule_id: ColumnClause[str] = Column(ForeignKey("schedules.id"), nullable=False)
    slot: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    fired_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    session_id: ColumnClause[str | None] = Column(String(32))
    job_id: ColumnClause[str | None] = Column(String(32))
    #: "admitted", "succeeded", "failed", "skipped" (busy), "refused" (quota, archived).
    outcome: ColumnClause[str] = Column(String(16), nullable=False)
    error: ColumnClause[dict[str, Any] | None] = Column(JSON)
    duration_ms: ColumnClause[int | None] = Column(Integer)
    usage: ColumnClause[dict[str, Any] | None] = Column(JSON)


class ApprovalRow(Base):
    """A tool call waiting for (or closed by) a person's decision (docs/approvals.md)."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_state_expires", "state", "expires_at"),
        Index("ix_approvals_project_state", "project", "state"),
    )

    request_id: ColumnClause[str] = Column(String(64), primary_key=True)
    job_id: ColumnClause[str] = Column(String(32), index=True, nullable=False)
    session_id: ColumnClause[str] = Column(String(32), index=True, nullable=False)
    tool: ColumnClause[str] = Column(String(64), nullable=False)
    call_id: ColumnClause[str] = Column(String(255), nullable=False)
    #: The arguments the policy shows (JSON object).
    arguments: ColumnClause[dict[str, Any]] = Column(JSON, nullable=False)
    #: pending, approved, denied, expired or cancelled: the first decision's
    #: compare-and-set on "pending" is the only way out of pending.
    state: ColumnClause[str] = Column(String(16), nullable=False)
    decided_by: ColumnClause[str | None] = Column(String(255))
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    expires_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    decided_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
    #: The project it belongs to (docs/security.md); nothing crosses projects.
    project: ColumnClause[str] = Column(String(64), default="default", nullable=False)
    #: The winning decision ("approve", "deny", "approve_all"); NULL until decided.
    decision: ColumnClause[str | None] = Column(String(16))


class ProjectRow(Base):
    """A project's limits (docs/security.md#project-quotas); a project without
    a row has the settings' defaults."""

    __tablename__ = "projects"

    id: ColumnClause[str] = Column(String(64), primary_key=True)
    #: Unfinished (queued or running) turns at once; NULL: the default.
    max_live: ColumnClause[int | None] = Column(Integer)
    #: Turns ever admitted; NULL: the default.
    max_jobs: ColumnClause[int | None] = Column(Integer)
    #: Turns admitted per minute (a token bucket in Redis); NULL: the default.
    turns_per_minute: ColumnClause[int | None] = Column(Integer)
    #: Model tokens per minute (a token bucket in Redis, debited as turns
    #: report usage); NULL: the default.
    tokens_per_minute: ColumnClause[int | None] = Column(Integer)
    #: Model tokens and cost its turns may use in all; NULL: the default.
    max_tokens: ColumnClause[int | None] = Column(BigInteger)
    max_cost: ColumnClause[float | None] = Column(Float)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    updated_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)


class ApiKeyRow(Base):
    """An API key: only its SHA-256 is stored (docs/security.md#api-keys)."""

    __tablename__ = "api_keys"

    id: ColumnClause[str] = Column(String(32), primary_key=True)
    key_hash: ColumnClause[str] = Column(String(64), unique=True, nullable=False)
    principal: ColumnClause[str] = Column(String(160), nullable=False)
    project: ColumnClause[str] = Column(String(64), index=True, nullable=False)
    #: Sorted grant names; NULL: every grant.
    grants: ColumnClause[list[str] | None] = Column(JSON)
    label: ColumnClause[str | None] = Column(String(255))
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    revoked_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))


class WebhookRow(Base):
    """The outbox of runs' webhooks: one row per ended job that names one,
    written in the transaction that ends it (docs/http.md#webhooks)."""

    __tablename__ = "webhooks"
    __table_args__ = (
        # What the sweep reads: pending rows by when they are due. Delivered
        # and dead rows are out of it, so it stays as small as the backlog.
        _partial("ix_webhooks_pending_next", "next_at", where="state = 'pending'"),
        Index("ix_webhooks_project_state", "project", "state"),
    )

    #: The delivery's id, sent as ``chaz-webhook-id`` on every attempt.
    id: ColumnClause[str] = Column(String(32), primary_key=True)
    #: Unique: a job's end applied twice records one delivery.
    job_id: ColumnClause[str] = Column(String(32), unique=True, nullable=False)
    session_id: ColumnClause[str] = Column(String(32), nullable=False)
    project: ColumnClause[str] = Column(String(64), nullable=False)
    url: ColumnClause[str] = Column(Text, nullable=False)
    #: pending, delivered or dead (:class:`chaz.domain.webhooks.WebhookState`).
    state: ColumnClause[str] = Column(String(16), nullable=False)
    #: Attempts begun (a claimed attempt counts before it is sent).
    attempts: ColumnClause[int] = Column(Integer, default=0, nullable=False)
    #: When the next attempt is due; while one is in flight, when it is
    #: presumed lost (its worker died) and may be claimed again.
    next_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    last_error: ColumnClause[str | None] = Column(Text)
    #: The HTTP status of the last answer (NULL: none, or no answer).
    last_status: ColumnClause[int | None] = Column(Integer)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    #: When it was delivered or given up.
    settled_at: ColumnClause[datetime | None] = Column(DateTime(timezone=True))


class WebhookSecretRow(Base):
    """A project's webhook signing secret (docs/http.md#webhooks): made on
    first use, replaced by a rotation. Kept in the clear: signing needs it."""

    __tablename__ = "webhook_secrets"

    project: ColumnClause[str] = Column(String(64), primary_key=True)
    secret: ColumnClause[str] = Column(String(128), nullable=False)
    created_at: ColumnClause[datetime] = Column(DateTime(timezone=True), nullable=False)
    #: The secret a rotation replaced, signing beside the new one until ``previous_until``.
    previous_secret: ColumnClause[str | None] = Column(String(128))
    previous_until: ColumnClause[datetime | None] = Column(DateTime(timezone=True))
