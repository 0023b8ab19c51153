"""The repository: ``Store``, through which chaz reads and writes the database.

This module holds the write path of entries and jobs (admission, a turn's
start and end, transitions) and the reads a turn needs. Beside it:
:mod:`chaz.store.directory` (sessions as collaboration lists, archives and
names them; a mixin of ``Store``), :mod:`chaz.store.completion` (what a job's
end does beyond the job), :mod:`chaz.store.rows` (rows as models), and the
tables with stores of their own (``deliveries``, ``events``, ``artifacts``,
``todos``).

Writes run in short transactions. Appending an entry bumps the session's
``last_seq`` first; that UPDATE takes the session row's lock (SQLite: the
database write lock), so per session, commit order is seq order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    Connection,
    and_,
    case,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from chaz.domain import events as ev
from chaz.domain import rooms
from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.deliveries import (
    DUPLICATE_WINDOW,
    Delivery,
    DeliveryState,
)
from chaz.domain.entries import (
    Entry,
    EntryType,
    KeyScope,
    NewEntry,
    Said,
    parse_sender,
    replay_differences,
)
from chaz.domain.jobs import ACTIVE, Job, JobStatus, check_transition, missing_job
from chaz.domain.principals import DEFAULT_PRINCIPAL, DEFAULT_PROJECT
from chaz.domain.processing import admits_turn
from chaz.domain.sessions import NameSource, Origin, Session
from chaz.domain.validation import check_session_name
from chaz.errors import (
    AgentNotFound,
    DuplicateDelivery,
    IdempotencyMismatch,
    LeaseLost,
    NameTaken,
    QuotaError,
    SessionArchived,
    SessionNotFound,
    VersionConflict,
)
from chaz.ids import new_id, utcnow
from chaz.store import artifacts, completion, schedules
from chaz.store import deliveries as dl
from chaz.store import projects as project_store
from chaz.store import rooms as room_store
from chaz.store import statements as st
from chaz.store.artifacts import ArtifactStore
from chaz.store.db import PoolOptions, is_sqlite, make_engine
from chaz.store.directory import SessionDirectory
from chaz.store.events import EventLog, record
from chaz.store.models import AgentRow, CommandRow, EntryRow, JobRow, SessionRow, unfinished
from chaz.store.rows import as_entry, as_job, as_said, as_session, session_row
from chaz.store.schedules import ScheduleStore
from chaz.store.todos import TodoStore

if TYPE_CHECKING:
    from chaz.store.approvals import ApprovalStore
    from chaz.store.keys import KeyStore
    from chaz.store.search import SearchStore

_ACTIVE = [s.value for s in ACTIVE]


@dataclass(frozen=True)
class JobFields:
    """Lineage and topology of a job admitted by an append (spawns, deliveries)."""

    caller_session_id: str | None = None
    caller_entry_id: str | None = None
    parent_job_id: str | None = None
    call_depth: int = 0
    message_count: int = 0
    #: The delivery admitting the job: marked ``admitted`` in the same transaction.
    delivery_id: str | None = None
    #: In a room, the member whose turn it is (docs/rooms.md).
    member_agent_id: str | None = None
    #: Who started the chain of turns, and the grants it carries (sorted
    #: names; None: every grant). Grants only narrow down a chain.
    owner: str = DEFAULT_PRINCIPAL
    grants: list[str] | None = None
    #: Run under the unattended policy (also when the session is unattended).
    unattended: bool = False


@dataclass(frozen=True)
class NewSession:
    """A session to create (see :meth:`Store.create_session` and :meth:`Store.admitting`)."""

    agent_id: str
    name: str | None = None
    limits: Limits | None = None
    tools: list[str] | None = None
    parent_job_id: str | None = None
    tree_id: str | None = None
    call_depth: int = 0
    #: ``(session_id, seq)`` of a fork's source entry.
    fork: tuple[str, int] | None = None
    origin: Origin | None = None
    #: Automatic names to try in turn when ``name`` is None; the first free one wins.
    names: tuple[str, ...] = ()
    #: A room's members (saved agents, checked here) and burst budget (docs/rooms.md).
    members: list[str] | None = None
    burst_budget: int | None = None
    #: The project it belongs to and the principal that made it.
    project: str = DEFAULT_PROJECT
    owner: str = DEFAULT_PRINCIPAL
    #: Its turns run unattended; "bypass" lets ``unless_auto_approved`` tools run.
    unattended: bool = False
    permission_mode: str = "default"
    description: str | None = None


@dataclass(frozen=True)
class Appended:
    """What an append did. ``created`` is False when an idempotency key matched."""

    entry: Entry
    job: Job | None
    created: bool
    #: Notices written with it (a room's spent burst): published after it.
    notices: tuple[Entry, ...] = ()


@dataclass(frozen=True)
class Finish:
    """Make the appended entry a turn's last: its job ends in the same transaction."""

    job_id: str
    status: JobStatus
    result: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class TurnSetup:
    """Everything a turn needs before it starts, read in one transaction."""

    job: Job
    session: Session
    agent: AgentSpec
    history: list[Said]
    trigger: Said | None


class TurnStart:
    """A turn's setup, as read, and its start, still to write (:meth:`Store.turn_start`).

    ``setup`` is None when the session has no unfinished job. The caller
    decides from the setup whether the turn runs (its live slot, an
    approval it waits for) and then calls :meth:`start` at most once, before
    the block ends; what the start wrote is visible to others only after
    the block has ended.
    """

    def __init__(self, store: Store, conn: Connection | None, setup: TurnSetup | None) -> None:
        self._store = store
        self._conn = conn
        #: The head job, its session and agent, and its context.
        self.setup = setup

    def start(
        self, token: str, *, ack_sender: str, ack_metadata: dict[str, Any] | None = None
    ) -> tuple[Job, Entry | None]:
        """Start the setup's job under ``token`` and write its Ack, as
        :meth:`Store.start_turn` does with ``seen`` the job as the setup read it."""
        assert self.setup is not None, "no job to start"
        job = self.setup.job
        if self._conn is None:
            return self._store.start_turn(
                job.id, token, ack_sender=ack_sender, ack_metadata=ack_metadata, seen=job
            )
        # Not durable, as start_turn's own transaction (see Store._write).
        self._conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
        return _start_turn(self._conn, job.id, token, ack_sender, ack_metadata, job)


#: Reserves one admission's quota in a room's routing, or raises a
#: QuotaError: given the routed session's unit of work (its row locked, its
#: counts read in the open transaction, the id its job will take; see
#: :class:`RoomRules`).
Reserve = Callable[["Admitting"], None]


@dataclass(frozen=True)
class RoomRules:
    """What routing an entry of a room needs from above the store (docs/rooms.md).

    ``default_budget`` is the configured burst budget; ``reserve`` counts the
    quota of a job an agent's Message admits (QueueFull / JobsExhausted: the
    Message wakes nobody, and a notice says why).
    """

    default_budget: int | None
    reserve: Reserve


class KeyTaken(Exception):
    """An insert met an earlier entry with the same idempotency key.

    The transaction has rolled back; the caller replays the first entry
    (:meth:`Store.replay`). Internal to the write path: it never reaches a
    producer.
    """


class Admitting:
    """One admission's unit of work: a write transaction with the session row locked.

    Opened by :meth:`Store.admitting`. The session's next seq and job ordinal
    are taken and its row is locked before the caller sees it, so its limits
    cannot change under a quota check, and a check that raises rolls
    everything back.
    """

    def __init__(self, conn: Connection, row: Any, agent: AgentSpec) -> None:
        self._conn = conn
        self._row = row
        #: The session being written to, as locked.
        self.session = as_session(row)
        #: Its agent.
        self.agent = agent
        #: The id the job this admission writes takes: drawn first, so the
        #: quota reservation can name the job before it is inserted.
        self.job_id = new_id()
        #: Whether a job was written (a room's entry may wake nobody).
        self.wrote_job = False

    def stored_limits(self) -> tuple[int | None, int | None] | None:
        """The session's project's stored limits, read in this transaction
        (None: the project has no row)."""
        return project_store.read_stored(self._conn, self.session.project)

    def project_counts(self) -> tuple[list[str], int]:
        """The ids of the project's unfinished jobs and how many it ever
        admitted, read in this transaction (to rebuild its quota keys)."""
        return project_store.read_counts(self._conn, self.session.project)

    def job_counts(self) -> tuple[int, int]:
        """``(queued, total)`` jobs of the session, read in this transaction.

        For rebuilding missing quota counters without a second connection:
        the session row is locked, and other admitters may hold every pooled
        connection.
        """
        return _counts(self._conn, self.session.id)

    def insert(
        self,
        draft: NewEntry,
        *,
        job_fields: JobFields | None = None,
        delivery: dict[str, Any] | None = None,
    ) -> Appended:
        """Insert the entry and the job it admits; :class:`KeyTaken` if the key is used.

        ``delivery`` is a new delivery row (:func:`chaz.store.deliveries.new_row`)
        that admits this job: it is inserted ``admitted`` with the job's id,
        and its idempotency key is checked like the entry's.
        """
        parse_sender(draft.sender)
        if delivery is not None:
            job_fields = replace(job_fields or JobFields(), delivery_id=delivery["id"])
        try:
            entry_values, job_row = _insert_entry(
                self._conn, self._row, draft, admit=True, job_fields=job_fields, job_id=self.job_id
            )
            assert job_row is not None
            self.wrote_job = True
            if delivery is not None:
                dl.insert_row(
                    self._conn,
                    {**delivery, "state": DeliveryState.ADMITTED.value, "job_id": job_row["id"]},
                )
        except IntegrityError as exc:
            key = delivery["idempotency_key"] if delivery else draft.idempotency_key
            if key is None:
                raise
            raise KeyTaken(key) from exc
        return Appended(as_entry(entry_values), as_job(job_row), created=True)

    # -- rooms (docs/rooms.md) ------------------------------------------------

    def insert_in_room(
        self, draft: NewEntry, *, job_fields: JobFields | None, default_budget: int | None
    ) -> Appended:
        """Insert an entry into this room, waking the member the room's rule picks.

        A person's Message or a Directive wakes its first @mention, else the
        host, and resets the burst; an agent's Message wakes only another
        agent it mentions, within the burst budget. One that wakes nobody is
        inserted without a job (``Appended.job`` is None; its reserved quota
        is the caller's to refund).
        """
        row = self._row
        budget = rooms.budget_of(row["burst_budget"], default_budget)
        found = rooms.route(
            row["agent_id"],
            row["members"],
            draft.type,
            draft.sender,
            draft.content,
            row["room_burst"],
            budget,
        )
        if found is not None and found.wake is not None:
            fields = replace(job_fields or JobFields(), member_agent_id=found.wake)
            done = self.insert(draft, job_fields=fields)
            self._conn.execute(st.ROOM_BURST, {"sid": row["id"], "burst": found.burst})
            return done
        if found is None:
            return self.insert(draft, job_fields=job_fields)
        parse_sender(draft.sender)
        try:
            entry_values, _ = _insert_entry(self._conn, row, draft, admit=False, job_fields=None)
        except IntegrityError as exc:
            if draft.idempotency_key is None:
                raise
            raise KeyTaken(draft.idempotency_key) from exc
        notices = _room_burst(self._conn, row, found, entry_values["id"], budget)
        return Appended(as_entry(entry_values), None, created=True, notices=notices)

    # -- schedule fires (docs/schedules.md) ------------------------------------

    def insert_job(
        self,
        *,
        input: str,
        fire_id: str,
        only_if_idle: bool = False,
        job_fields: JobFields | None = None,
    ) -> Job:
        """Insert a job with no entry: a schedule fire's, its prompt as ``input``.

        Opened with ``Store.admitting(..., entry=False)``: the job takes the
        session's next ordinal and no seq, and no Directive is written; the
        turn reads ``input`` as its trigger. ``only_if_idle`` refuses with
        :class:`SessionBusy` when the session has an unfinished job, checked
        under the session's lock. The fire's ledger row gets the job.
        """
        if only_if_idle:
            busy = self._conn.scalar(
                select(func.count())
                .select_from(st.JOBS)
                .where(st.JOBS.c.session_id == self.session.id, unfinished(st.JOBS.c.status))
            )
            if busy:
                raise SessionBusy(self.session.id)
        row = _new_job(
            self._row, self._row["last_ordinal"], None, job_fields, utcnow(), job_id=self.job_id
        )
        row |= {"input": input, "fire_id": fire_id}
        self._conn.execute(st.INSERT_JOB, row)
        self.wrote_job = True
        record(self._conn, self.session.id, ev.job_event("queued"), {"job_id": row["id"]})
        schedules.fire_admitted(self._conn, fire_id, self.session.id, row["id"])
        return as_job(row)

    def take(
        self, delivery: Delivery, draft: NewEntry, *, job_fields: JobFields | None = None
    ) -> Appended:
        """Admit an ``accepted`` delivery (a queued message, a follow-up) as this job.

        :class:`DeliveryGone` when another caller admitted (or dropped) it
        first: the transaction must then roll back, and nothing is written.
        """
        fields = replace(job_fields or JobFields(), delivery_id=delivery.id)
        done = self.insert(draft, job_fields=fields)
        assert done.job is not None
        moved = dl.move(
            self._conn,
            delivery.id,
            DeliveryState.ADMITTED,
            leaving=[DeliveryState.ACCEPTED],
            job_id=done.job.id,
        )
        if moved is None:
            raise DeliveryGone(delivery.id)
        return done

    def inbox(self) -> list[Delivery]:
        """The messages waiting in this session's inbox, oldest first (locked)."""
        return dl.inbox(self._conn, self.session.id, lock=True)

    def append_to(self, session_id: str, draft: NewEntry) -> Entry:
        """Append an entry that admits nothing to *another* session, in this transaction.

        A spawn's attach pointer goes into the caller's session with the
        child's admission, so neither exists without the other.
        """
        parse_sender(draft.sender)
        entry_values, _ = _insert_entry(
            self._conn,
            _bump(self._conn, session_id, admit=False),
            draft,
            admit=False,
            job_fields=None,
        )
        return as_entry(entry_values)


class _Moved(Exception):
    """A context entry was written after the range a Summary stands for."""


class SessionBusy(Exception):
    """A schedule fire met its pinned session busy (``overlap="skip"``).

    Internal to the fire path: the admission rolls back, and the slot is
    recorded ``skipped``.
    """


class DeliveryGone(Exception):
    """The delivery being admitted was admitted, dropped or refused by someone else.

    Internal to the delivery path: the transaction rolls back and the caller
    moves on to the next one.
    """


@dataclass(frozen=True)
class Fence:
    """A turn's claim on its session: writes are refused once the token changes."""

    job_id: str
    token: str


class Store(SessionDirectory):
    """Typed access to the chaz database."""

    def __init__(self, url: str, pool: PoolOptions | None = None) -> None:
        self.url = url
        self.engine = make_engine(url, pool)
        # Parsed agent specs by id, with the stored JSON they came from: every
        # turn and admission needs its agent, and validating the spec again
        # each time cost more than reading it.
        self._agents: dict[str, tuple[Any, AgentSpec]] = {}
        self._agents_lock = threading.Lock()

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    @cached_property
    def approvals(self) -> ApprovalStore:
        """Tool calls waiting for a person's decision (docs/approvals.md)."""
        from chaz.store.approvals import ApprovalStore

        return ApprovalStore(self)

    @cached_property
    def keys(self) -> KeyStore:
        """API keys, stored as their hashes (docs/security.md#api-keys)."""
        from chaz.store.keys import KeyStore

        return KeyStore(self)

    @cached_property
    def deliveries(self) -> dl.DeliveryStore:
        """Reads of deliveries, and their standalone writes."""
        return dl.DeliveryStore(self)

    @cached_property
    def search(self) -> SearchStore:
        """Listing and lexical search of a project's sessions (docs/sessions.md)."""
        from chaz.store.search import SearchStore

        return SearchStore(self)

    @contextmanager
    def _write(self, durable: bool = True) -> Iterator[Connection]:
        """A write transaction. ``durable=False`` lets PostgreSQL acknowledge the
        commit before its WAL reaches disk (``synchronous_commit=off``).

        Used only for writes whose loss in a *database* crash is repaired by
        the next durable commit or by a resumed turn (a turn's start, its Ack,
        its audit entries): the next durable commit flushes the WAL before it,
        so ordering is kept. Admissions, checkpoints and a turn's final entry
        stay durable.
        """
        with self.engine.connect().execution_options(chaz_write=True) as conn, conn.begin():
            if not durable and conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    # -- agents ---------------------------------------------------------------

    def put_agent(self, spec: AgentSpec) -> AgentSpec:
        """Create or replace a saved agent."""
        now = utcnow()
        data = spec.model_dump(mode="json")
        with self._write() as conn:
            done = conn.execute(
                update(AgentRow).where(AgentRow.id == spec.id).values(spec=data, updated_at=now)
            ).rowcount
            if not done:
                conn.execute(
                    insert(AgentRow).values(id=spec.id, spec=data, created_at=now, updated_at=now)
                )
        return spec

    def put_agents(self, specs: Iterable[AgentSpec]) -> list[AgentSpec]:
        """Create or replace several agents in one transaction: all are saved, or none."""
        saved = list(specs)
        now = utcnow()
        with self._write() as conn:
            for spec in saved:
                data = spec.model_dump(mode="json")
                done = conn.execute(
                    update(AgentRow).where(AgentRow.id == spec.id).values(spec=data, updated_at=now)
                ).rowcount
                if not done:
                    conn.execute(
                        insert(AgentRow).values(
                            id=spec.id, spec=data, created_at=now, updated_at=now
                        )
                    )
        return saved

    def get_agent(self, agent_id: str) -> AgentSpec:
        """The saved agent, or :class:`AgentNotFound`."""
        with self._read() as conn:
            data = conn.scalar(select(AgentRow.spec).where(AgentRow.id == agent_id))
        if data is None:
            raise AgentNotFound(f"no agent {agent_id!r}", agent_id=agent_id)
        return AgentSpec.model_validate(data)

    def list_agents(self) -> list[AgentSpec]:
        """Every saved agent, by id."""
        with self._read() as conn:
            rows = conn.scalars(select(AgentRow.spec).order_by(AgentRow.id)).all()
        return [AgentSpec.model_validate(r) for r in rows]

    # -- sessions -------------------------------------------------------------

    def create_session(
        self,
        agent_id: str,
        *,
        name: str | None = None,
        limits: Limits | None = None,
        tools: list[str] | None = None,
        parent_job_id: str | None = None,
        tree_id: str | None = None,
        call_depth: int = 0,
        fork: tuple[str, int] | None = None,
        origin: Origin | None = None,
        names: Iterable[str] = (),
        members: list[str] | None = None,
        burst_budget: int | None = None,
        project: str = DEFAULT_PROJECT,
        owner: str = DEFAULT_PRINCIPAL,
        unattended: bool = False,
        permission_mode: str = "default",
    ) -> Session:
        """A new, empty session for ``agent_id``; a root of its own tree unless given one.

        ``fork`` is ``(session_id, seq)``: the session's context reads through
        that session up to that entry. ``names`` are candidates tried in turn
        when no ``name`` is given (an automatic name: the first one free).
        ``project`` to ``permission_mode``: see :class:`NewSession`.
        """
        new = NewSession(
            agent_id,
            name=check_session_name(name) if name is not None else None,
            limits=limits,
            tools=tools,
            parent_job_id=parent_job_id,
            tree_id=tree_id,
            call_depth=call_depth,
            fork=fork,
            origin=origin,
            names=tuple(names),
            members=members,
            burst_budget=burst_budget,
            project=project,
            owner=owner,
            unattended=unattended,
            permission_mode=permission_mode,
        )
        with self._write() as conn:
            return as_session(_insert_session(conn, new))

    def get_session(self, ref: str, *, project: str | None = None) -> Session:
        """A session by id or, failing that, by its unique name.

        ``project``: only a session of that project is found; one of another
        project is answered exactly as a missing one (docs/security.md).
        """
        with self._read() as conn:
            return as_session(session_row(conn, ref, project=project))

    def turn_setup(self, session_id: str, max_context: int) -> TurnSetup | None:
        """The session's head job, its session and agent, and the job's context.

        One read transaction: a turn's setup was four. Context is Message,
        Directive and Summary entries up to the trigger, starting at the
        latest Summary, and at most the last ``max_context`` of them: a long
        session must not make every turn read its whole history.
        """
        with self._read() as conn:
            return self._turn_setup(conn, session_id, max_context)

    @contextmanager
    def turn_start(self, session_id: str, max_context: int) -> Iterator[TurnStart]:
        """A turn's setup and its start as one unit of work (see :class:`TurnStart`).

        On PostgreSQL the setup's reads and the start's write share one
        transaction, which commits when the block ends: a turn then takes
        three transactions in all (its admission, this, its end) instead of
        four (docs/performance.md). On SQLite the setup is read in a
        transaction of its own and the start writes in another, as
        :meth:`turn_setup` and :meth:`start_turn` do: a write transaction
        there takes the database's one write lock, which the setup's reads
        and the caller's checks between them must not hold.
        """
        if is_sqlite(self.engine):
            yield TurnStart(self, None, self.turn_setup(session_id, max_context))
            return
        with self._write() as conn:
            yield TurnStart(self, conn, self._turn_setup(conn, session_id, max_context))

    def _turn_setup(self, conn: Connection, session_id: str, max_context: int) -> TurnSetup | None:
        head = conn.execute(st.HEAD, {"sid": session_id}).mappings().first()
        if head is None:
            return None
        job = as_job(head)
        row = conn.execute(st.SESSION_AND_AGENT, {"sid": session_id}).mappings().one()
        agent = self._parsed_agent(row["agent_id"], row["agent_spec"])
        if job.member_agent_id not in (None, row["agent_id"]):
            # A room's member: its turn runs with its own spec (docs/rooms.md).
            agent = self._agent(conn, job.member_agent_id)
        tid = job.trigger_entry_id
        history = _context(conn, session_id, tid, row["last_seq"], max_context)
        trigger = history[0] if history and history[0].id == tid else None
        if trigger is None and tid is not None:
            # A trigger that is not context (or is gone): read it alone.
            found = conn.execute(st.SAID_BY_ID, {"tid": tid}).first()
            if found is not None:
                trigger = as_said(found)
        if row["fork_session_id"] is not None:
            _read_through(conn, row, history, max_context)
        history.reverse()
        if job.input is not None and tid is None:
            # A schedule fire (docs/schedules.md): its prompt is this turn's
            # input, in no entry; the model reads it last, as a Directive.
            trigger = Said(
                f"job:{job.id}:input",
                row["last_seq"],
                EntryType.DIRECTIVE,
                "system:schedule",
                job.input,
            )
            history.append(trigger)
        return TurnSetup(job, as_session(row), agent, history, trigger)

    def _agent(self, conn: Connection, agent_id: str) -> AgentSpec:
        data = conn.scalar(st.AGENT_SPEC, {"aid": agent_id})
        if data is None:
            raise AgentNotFound(f"no agent {agent_id!r}", agent_id=agent_id)
        return self._parsed_agent(agent_id, data)

    def _parsed_agent(self, agent_id: str, data: Any) -> AgentSpec:
        cached = self._agents.get(agent_id)
        if cached is not None and cached[0] == data:
            return cached[1]
        spec = AgentSpec.model_validate(data)
        with self._agents_lock:
            self._agents[agent_id] = (data, spec)
        return spec

    # -- entries --------------------------------------------------------------

    @contextmanager
    def admitting(
        self, session_id: str, *, create: NewSession | None = None, entry: bool = True
    ) -> Iterator[Admitting]:
        """The unit of work of one admission (see :class:`Admitting`).

        Commits when the block ends; anything raised inside it rolls the
        whole admission back and leaves the session as it was. With
        ``create``, the session is made in the same transaction (its id
        replaces ``session_id``): a refused spawn leaves no empty session.
        ``entry=False`` takes a job ordinal and no seq: the admission writes a
        job with no entry (:meth:`Admitting.insert_job`).
        """
        with self._write() as conn:
            if create is not None:
                session_id = _insert_session(conn, create)["id"]
            if entry:
                row = _bump(conn, session_id, admit=True)
            else:
                row = conn.execute(st.BUMP_JOB, {"sid": session_id, "now": utcnow()}).mappings()
                row = row.first()
                if row is None:
                    raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            if row["agent_spec"] is None:
                raise AgentNotFound(f"no agent {row['agent_id']!r}", agent_id=row["agent_id"])
            yield Admitting(conn, row, self._parsed_agent(row["agent_id"], row["agent_spec"]))

    def append(
        self,
        session_id: str,
        draft: NewEntry,
        fence: Fence | None = None,
        room: RoomRules | None = None,
    ) -> Appended:
        """Append one entry that admits nothing (an Ack, a tool call, a note, ...).

        A repeated ``idempotency_key`` returns the first append unchanged
        (``created`` is False): the unique key in the database, not a read
        first, is what makes this safe under concurrency (see :meth:`replay`
        for how a producer's reused key is checked). A ``fence`` makes it a
        running turn's entry: refused with :class:`~chaz.errors.LeaseLost` once
        another worker holds the job, and committed without waiting for the
        disk, since a resumed turn repairs its loss in a database crash (see
        :meth:`_write`; the turn's last entry is :meth:`end_turn`, durable).

        With ``room``, a Message into a room session is routed
        (docs/rooms.md): it may admit a member's job, returned as ``job``.
        """
        parse_sender(draft.sender)
        woke: tuple[Job | None, tuple[Entry, ...]] = (None, ())
        try:
            with self._write(durable=fence is None) as conn:
                if fence is not None:
                    _check_fence(conn, fence)
                row = _bump(conn, session_id, admit=False)
                entry_values, _ = _insert_entry(conn, row, draft, admit=False, job_fields=None)
                if room is not None and row["members"] is not None:
                    woke = self._route_room(
                        conn,
                        row,
                        draft,
                        entry_values["id"],
                        room,
                        posted_by=fence.job_id if fence is not None else None,
                    )
        except IntegrityError:
            found = self.replay(session_id, draft)
            if found is None:
                raise
            return found
        return Appended(entry=as_entry(entry_values), job=woke[0], created=True, notices=woke[1])

    def end_turn(
        self,
        fence: Fence,
        finish: Finish,
        session_id: str,
        draft: NewEntry | None,
        room: RoomRules | None = None,
    ) -> Appended | None:
        """A turn's last entry (its reply or its Error) and its job's end, in one transaction.

        Whoever sees a turn's final entry sees its job finished. The job's
        end is also the fence check: a worker that lost the job writes
        nothing (:class:`~chaz.errors.LeaseLost`). With ``room``, a reply in
        a room session is routed in the same transaction (docs/rooms.md):
        the member it wakes is ``job`` of the result. ``draft`` None ends the
        job with no entry (a schedule fire's empty reply, docs/schedules.md);
        then None is returned.
        """
        if draft is not None:
            draft = replace(draft, job_id=finish.job_id)
        woke: tuple[Job | None, tuple[Entry, ...]] = (None, ())
        try:
            with self._write() as conn:
                delivery_id, fire_id = _fenced_finish(conn, fence, finish)
                if finish.result is not None:
                    artifacts.record(conn, finish.job_id, session_id, finish.result)
                entry_values = None
                if draft is not None:
                    row = _bump(conn, session_id, admit=False)
                    entry_values, _ = _insert_entry(conn, row, draft, admit=False, job_fields=None)
                    if room is not None and row["members"] is not None:
                        woke = self._route_room(
                            conn, row, draft, entry_values["id"], room, posted_by=finish.job_id
                        )
                completion.ended(
                    conn,
                    finish.job_id,
                    session_id,
                    finish.status,
                    result=finish.result,
                    error=finish.error,
                    delivery_id=delivery_id,
                    fire_id=fire_id,
                )
        except IntegrityError:
            found = self.replay(session_id, draft) if draft is not None else None
            if found is None:
                raise
            return found
        if entry_values is None:
            return None
        return Appended(entry=as_entry(entry_values), job=woke[0], created=True, notices=woke[1])

    def _route_room(
        self,
        conn: Connection,
        row: Any,
        draft: NewEntry,
        entry_id: str,
        room: RoomRules,
        *,
        posted_by: str | None = None,
    ) -> tuple[Job | None, tuple[Entry, ...]]:
        """Route an entry just inserted into a room (``row``: its session, locked).

        The job it admits (if any), and the notices it wrote. A member woken
        by a turn's entry (``posted_by``: that turn's job) runs with that
        job's owner, grants and unattended flag: grants only narrow
        (docs/security.md#grants-inside-turns).
        """
        budget = rooms.budget_of(row["burst_budget"], room.default_budget)
        found = rooms.route(
            row["agent_id"],
            row["members"],
            draft.type,
            draft.sender,
            draft.content,
            row["room_burst"],
            budget,
        )
        if found is None or found.wake is None:
            if found is None:
                return None, ()
            return None, _room_burst(conn, row, found, entry_id, budget)
        sid = row["id"]
        routed = Admitting(conn, row, self._agent(conn, row["agent_id"]))
        try:
            room.reserve(routed)
        except QuotaError as exc:
            note = NewEntry(
                EntryType.NOTICE,
                rooms.ROOM_SENDER,
                f"@{found.wake} was not woken: {exc.message}",
                metadata={"room": "quota", "code": exc.code, "member": found.wake},
                idempotency_key=f"room:{entry_id}:quota",
            )
            values, _ = _insert_entry(
                conn, _bump(conn, sid, admit=False), note, admit=False, job_fields=None
            )
            return None, (as_entry(values),)
        now = utcnow()
        ordinal = conn.scalar(st.ROOM_WAKE, {"sid": sid, "now": now, "burst": found.burst})
        fields = JobFields(member_agent_id=found.wake)
        if posted_by is not None:
            poster = conn.execute(
                select(JobRow.owner, JobRow.grants, JobRow.unattended).where(JobRow.id == posted_by)
            ).first()
            if poster is not None:
                fields = replace(
                    fields,
                    owner=poster[0],
                    grants=poster[1],
                    unattended=bool(poster[2]),
                )
        job_row = _new_job(row, ordinal, entry_id, fields, now, job_id=routed.job_id)
        conn.execute(st.INSERT_JOB, job_row)
        return as_job(job_row), ()

    def admits(self, type: EntryType, sender: str) -> bool:
        """Whether an entry of this type from this sender admits a turn.

        The rule is docs/contracts.md#processing-rule.
        """
        if type is not EntryType.MESSAGE or parse_sender(sender)[0] != "agent":
            return admits_turn(type, sender, ())
        with self._read() as conn:
            return self._admits(conn, type, sender)

    def _admits(self, conn: Connection, type: EntryType, sender: str) -> bool:
        kind, name = parse_sender(sender)
        known: set[str] = set()
        # Only an agent's Message needs the lookup: is the sender a known agent?
        is_agent_message = type is EntryType.MESSAGE and kind == "agent"
        if is_agent_message and conn.scalar(select(AgentRow.id).where(AgentRow.id == name)):
            known.add(name)
        return admits_turn(type, sender, known)

    def find_idempotent(
        self, session_id: str, key: str, scope: KeyScope = KeyScope.RUNTIME
    ) -> Appended | None:
        """The earlier append made with this idempotency key in ``scope``, if there was one."""
        with self._read() as conn:
            row = (
                conn.execute(
                    select(EntryRow).where(
                        EntryRow.session_id == session_id,
                        EntryRow.key_scope == scope.value,
                        EntryRow.idempotency_key == key,
                    )
                )
                .mappings()
                .first()
            )
            if row is None:
                return None
            job = (
                conn.execute(select(JobRow).where(JobRow.trigger_entry_id == row["id"]))
                .mappings()
                .first()
            )
        return Appended(entry=as_entry(row), job=as_job(job) if job else None, created=False)

    def replay(self, session_id: str, draft: NewEntry) -> Appended | None:
        """The earlier append with this key, if it was the same request.

        A producer's key (``KeyScope.USER``) reused with a different type,
        sender, content or metadata is refused with
        :class:`~chaz.errors.IdempotencyMismatch`, as payment APIs do: the
        caller has a bug, and answering with the first entry would hide it.
        The runtime's keys keep "first wins": a resumed turn may word its
        reply differently, and the first one stands.
        """
        key = draft.idempotency_key
        if key is None:
            return None
        found = self.find_idempotent(session_id, key, draft.key_scope)
        if found is None or draft.key_scope is not KeyScope.USER:
            return found
        differs = replay_differences(found.entry, draft)
        if differs:
            raise IdempotencyMismatch(
                f"idempotency key {key!r} was already used in session {session_id} for a "
                f"different request ({', '.join(differs)} differ)",
                session_id=session_id,
                idempotency_key=key,
                entry_id=found.entry.id,
                differs=differs,
            )
        return found

    def entries(
        self,
        session_id: str,
        *,
        after: int = 0,
        until: int | None = None,
        limit: int | None = None,
        types: Iterable[EntryType] | None = None,
    ) -> list[Entry]:
        """Entries with ``after < seq <= until``, in seq order."""
        stmt = (
            select(EntryRow)
            .where(EntryRow.session_id == session_id, EntryRow.seq > after)
            .order_by(EntryRow.seq)
        )
        if until is not None:
            stmt = stmt.where(EntryRow.seq <= until)
        if types is not None:
            stmt = stmt.where(EntryRow.type.in_([t.value for t in types]))
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read() as conn:
            return [as_entry(r) for r in conn.execute(stmt).mappings()]

    def entry(self, entry_id: str) -> Entry | None:
        """One entry by id, if it exists."""
        with self._read() as conn:
            row = conn.execute(select(EntryRow).where(EntryRow.id == entry_id)).mappings().first()
        return as_entry(row) if row is not None else None

    # -- deliveries -----------------------------------------------------------

    def queue_message(
        self, values: dict[str, Any], *, limit: int, window: timedelta = DUPLICATE_WINDOW
    ) -> tuple[Delivery, list[Delivery]]:
        """Put a message delivery (a new row's ``values``) into its target's inbox.

        With the target's row locked: an archived target refuses it
        (:class:`SessionArchived`); the same text from the same sender while
        a copy still waits and is younger than ``window`` is
        :class:`DuplicateDelivery`; a full inbox (``limit``) drops its oldest
        messages to make room. Returns the queued delivery and the dropped ones.
        """
        target = values["target_session_id"]
        with self._write() as conn:
            row = conn.execute(st.LOCK_SESSION, {"sid": target}).mappings().first()
            if row is None:
                raise SessionNotFound(f"no session {target!r}", session=target)
            if row["archived_at"] is not None:
                raise SessionArchived(
                    f"session {row['name'] or target} is archived and takes no new deliveries",
                    session_id=target,
                )
            waiting = dl.inbox(conn, target, lock=True)
            now = utcnow()
            for d in waiting:
                same = (d.sender, d.sender_session_id, d.body) == (
                    values["sender"],
                    values["sender_session_id"],
                    values["body"],
                )
                if same and now - d.created_at < window:
                    raise DuplicateDelivery(
                        "the same message is still waiting in the target's inbox "
                        f"(queued {int((now - d.created_at).total_seconds())}s ago); "
                        "it will be delivered when the target's turn ends",
                        delivery_id=d.id,
                    )
            dropped = []
            for old in waiting[: max(0, len(waiting) + 1 - limit)]:
                moved = dl.move(
                    conn,
                    old.id,
                    DeliveryState.DROPPED,
                    leaving=[DeliveryState.ACCEPTED],
                    code="inbox.full",
                    reason=f"the inbox holds at most {limit} messages",
                )
                if moved is not None:
                    dropped.append(moved)
            dl.insert_row(conn, values)
        return dl.as_delivery(values), dropped

    def settle_delivery(
        self,
        delivery_id: str,
        state: DeliveryState,
        *,
        leaving: Iterable[DeliveryState],
        code: str | None = None,
        reason: str | None = None,
    ) -> Delivery | None:
        """Move a delivery to ``state`` if it is in one of ``leaving`` (else None)."""
        with self._write() as conn:
            return dl.move(conn, delivery_id, state, leaving=leaving, code=code, reason=reason)

    def finalize_delivery(self, delivery: Delivery) -> bool:
        """Apply the completion policy of a delivery left ``admitted`` after its job
        ended (the reconciler's sweep); whether it moved. Its job's row is
        locked, and every move is a compare-and-set, so a concurrent end and
        this one cannot both apply it."""
        if delivery.job_id is None:
            return False
        with self._write() as conn:
            row = _lock_job(conn, delivery.job_id)
            status = JobStatus(row["status"])
            if not status.terminal:
                return False
            completion.ended(
                conn,
                delivery.job_id,
                row["session_id"],
                status,
                result=row["result"],
                error=row["error"],
                delivery_id=delivery.id,
            )
            after = dl.locked(conn, delivery.id)
            return after is not None and after.state is not DeliveryState.ADMITTED

    def silence_followups(self, job_ids: Iterable[str]) -> None:
        """The jobs' ends will send no follow-up (a caller's cancel cascades to them)."""
        with self._write() as conn:
            dl.silence(conn, job_ids)

    def get_job(self, job_id: str, *, project: str | None = None) -> Job:
        """One job, or :class:`JobNotFound`; with ``project``, a job of another
        project is answered exactly as a missing one."""
        stmt = select(JobRow).where(JobRow.id == job_id)
        if project is not None:
            stmt = stmt.where(JobRow.project == project)
        with self._read() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            raise missing_job(job_id)
        return as_job(row)

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, Job]:
        """Several jobs by id (missing ids are left out)."""
        ids = list(job_ids)
        if not ids:
            return {}
        with self._read() as conn:
            rows = conn.execute(select(JobRow).where(JobRow.id.in_(ids))).mappings()
            return {r["id"]: as_job(r) for r in rows}

    def checkpoint(self, job_id: str) -> dict[str, Any] | None:
        """The turn's last checkpoint (kept off :class:`Job` to keep listings small)."""
        with self._read() as conn:
            value: dict[str, Any] | None = conn.scalar(
                select(JobRow.checkpoint).where(JobRow.id == job_id)
            )
        return value

    def head_job(self, session_id: str) -> Job | None:
        """The session's oldest job that is not finished: the one whose turn is next."""
        with self._read() as conn:
            row = conn.execute(st.HEAD, {"sid": session_id}).mappings().first()
        return as_job(row) if row else None

    def list_jobs(
        self,
        *,
        session_id: str | None = None,
        statuses: Iterable[JobStatus] | None = None,
        parent_job_id: str | None = None,
        related_to_session: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
        project: str | None = None,
    ) -> list[Job]:
        """Jobs in admission order; ``newest_first`` keeps the latest when ``limit`` cuts;
        ``project`` keeps only that project's."""
        if newest_first:
            order = (JobRow.created_at.desc(), JobRow.ordinal.desc())
        else:
            order = (JobRow.created_at.asc(), JobRow.ordinal.asc())
        stmt = select(JobRow).order_by(*order).limit(limit)
        if session_id is not None:
            stmt = stmt.where(JobRow.session_id == session_id)
        if related_to_session is not None:
            stmt = stmt.where(
                or_(
                    JobRow.session_id == related_to_session,
                    JobRow.caller_session_id == related_to_session,
                )
            )
        if statuses is not None:
            stmt = stmt.where(JobRow.status.in_([s.value for s in statuses]))
            if statuses and all(s in ACTIVE for s in statuses):
                # Implied by the line above, but said as the partial index's
                # predicate, so a session's queue reads ix_jobs_session_active.
                stmt = stmt.where(unfinished(JobRow.status))
        if parent_job_id is not None:
            stmt = stmt.where(JobRow.parent_job_id == parent_job_id)
        if project is not None:
            stmt = stmt.where(JobRow.project == project)
        with self._read() as conn:
            return [as_job(r) for r in conn.execute(stmt).mappings()]

    def count_created(self, job_id: str) -> int:
        """How many sessions ``job_id``'s turn created (its fan-out, docs/contracts.md#topology)."""
        stmt = (
            select(func.count()).select_from(SessionRow).where(SessionRow.parent_job_id == job_id)
        )
        with self._read() as conn:
            return int(conn.scalar(stmt) or 0)

    def job_counts(self, session_id: str) -> tuple[int, int]:
        """``(queued, total)``: the session's waiting jobs and all it ever admitted."""
        with self._read() as conn:
            return _counts(conn, session_id)

    def start_turn(
        self,
        job_id: str,
        token: str,
        *,
        ack_sender: str | None = None,
        ack_metadata: dict[str, Any] | None = None,
        seen: Job | None = None,
    ) -> tuple[Job, Entry | None]:
        """Claim a job for a turn under ``token``, and on its first start write its
        Ack, in one transaction: queued becomes running; a running (or stopping)
        job whose worker died is taken over as it is, for a resume.

        A resumed turn writes no second Ack: the first start committed its Ack
        together with the start. ``seen`` is the job as the caller read it:
        the start is then one compare-and-set on its version instead of a
        locking read and a write (a changed job falls back to the latter).
        """
        # Not durable: if a database crash loses this, the job is still queued
        # (or held by the old token) and the reconciler runs it again.
        with self._write(durable=False) as conn:
            return _start_turn(conn, job_id, token, ack_sender, ack_metadata, seen)

    def save_checkpoint(self, fence: Fence, checkpoint: dict[str, Any]) -> None:
        """Record the turn's progress; refused (LeaseLost) if another worker took over."""
        with self._write() as conn:
            _check_fence(conn, fence)
            conn.execute(
                update(JobRow).where(JobRow.id == fence.job_id).values(checkpoint=checkpoint)
            )

    def hand_back(self, fence: Fence, checkpoint: dict[str, Any]) -> None:
        """Give a running turn back (its worker is shutting down): write its last
        ``checkpoint`` and drop its lease token, in one fenced write.

        The status stays as it is (``running``, or ``stopping`` if a cancel
        came): the next start takes the job over like a dead worker's, for a
        resume, and nothing this worker still tries to write passes the fence.
        :class:`~chaz.errors.LeaseLost` if another worker holds the job (then
        nothing is written).
        """
        with self._write() as conn:
            done = conn.execute(
                update(JobRow)
                .where(
                    and_(
                        JobRow.id == fence.job_id,
                        JobRow.lease_token == fence.token,
                        JobRow.status.in_((JobStatus.RUNNING.value, JobStatus.STOPPING.value)),
                    )
                )
                .values(checkpoint=checkpoint, lease_token=None, version=JobRow.version + 1)
            ).rowcount
            if not done:
                _check_fence(conn, fence)
                raise LeaseLost(f"job {fence.job_id} is no longer running", job_id=fence.job_id)

    def transition(
        self,
        job_id: str,
        target: JobStatus,
        *,
        expected_version: int | None = None,
        error: dict[str, Any] | None = None,
    ) -> Job:
        """The one gate for other status changes: checks the move and the version.

        A terminal ``target`` applies the job's end like a turn's end does
        (its event; its delivery's completion policy), with ``error`` as the
        job's error.
        """
        with self._write() as conn:
            row = _lock_job(conn, job_id)
            if expected_version is not None and row["version"] != expected_version:
                raise VersionConflict(
                    f"job {job_id} is at version {row['version']}, not {expected_version}",
                    job_id=job_id,
                    version=row["version"],
                )
            check_transition(JobStatus(row["status"]), target)
            values: dict[str, Any] = {"status": target.value, "version": row["version"] + 1}
            if target.terminal:
                values["finished_at"] = utcnow()
                if error is not None:
                    values["error"] = error
            done = conn.execute(
                update(JobRow)
                .where(and_(JobRow.id == job_id, JobRow.version == row["version"]))
                .values(**values)
            ).rowcount
            if not done:
                raise VersionConflict(f"job {job_id} changed concurrently", job_id=job_id)
            if target.terminal:
                completion.ended(
                    conn,
                    job_id,
                    row["session_id"],
                    target,
                    result=row["result"],
                    error=values.get("error", row["error"]),
                    delivery_id=row["delivery_id"],
                    fire_id=row.get("fire_id"),
                )
            elif row["delivery_id"] or row.get("fire_id"):
                record(conn, row["session_id"], ev.job_event(target.value), {"job_id": job_id})
            return as_job({**row, **values})

    def active_jobs(self, tree_id: str | None = None) -> list[Job]:
        """Every job not yet finished (of one tree), in admission order per session."""
        stmt = (
            select(JobRow)
            .where(unfinished(JobRow.status))
            .order_by(JobRow.session_id, JobRow.ordinal)
        )
        if tree_id is not None:
            stmt = stmt.where(JobRow.tree_id == tree_id)
        with self._read() as conn:
            return [as_job(r) for r in conn.execute(stmt).mappings()]

    # -- commands -------------------------------------------------------------

    def get_command(self, command_id: str) -> dict[str, Any] | None:
        """The recorded outcome of a control command, if it was applied before."""
        with self._read() as conn:
            value: dict[str, Any] | None = conn.scalar(
                select(CommandRow.outcome).where(CommandRow.command_id == command_id)
            )
        return value

    def record_command(
        self, command_id: str, action: str, job_id: str, outcome: dict[str, Any]
    ) -> dict[str, Any]:
        """Store a command's outcome; a concurrent duplicate gets the first outcome."""
        try:
            with self._write() as conn:
                conn.execute(
                    insert(CommandRow).values(
                        command_id=command_id,
                        action=action,
                        job_id=job_id,
                        outcome=outcome,
                        created_at=utcnow(),
                    )
                )
        except IntegrityError:
            first = self.get_command(command_id)
            if first is not None:
                return first
            raise
        return outcome

    # -- artifacts ------------------------------------------------------------

    @cached_property
    def artifacts(self) -> ArtifactStore:
        """Records of results longer than the cap, and their retention."""
        return ArtifactStore(self)

    # -- event log ------------------------------------------------------------

    @cached_property
    def events(self) -> EventLog:
        """Sessions' append-only event logs (chaz/store/events.py)."""
        return EventLog(self)

    # -- rooms ----------------------------------------------------------------

    @cached_property
    def rooms(self) -> room_store.RoomStore:
        """Rooms' members (chaz/store/rooms.py, docs/rooms.md)."""
        return room_store.RoomStore(self)

    # -- todos ----------------------------------------------------------------

    @cached_property
    def todos(self) -> TodoStore:
        """Sessions' checklists, kept by the planning tools (chaz/store/todos.py)."""
        return TodoStore(self)

    # -- schedules ------------------------------------------------------------

    @cached_property
    def schedules(self) -> ScheduleStore:
        """Agent-owned schedules and their fires' ledger (chaz/store/schedules.py)."""
        return ScheduleStore(self)

    # -- compaction (docs/sessions.md#compaction) -----------------------------

    def compaction_range(self, session_id: str, limit: int) -> tuple[Session, list[Said], int]:
        """What a compaction of the session stands for, read in one transaction.

        The session; its context from the latest Summary (included) to its
        head, oldest first, read through a fork's sources as a turn's context
        is, at most ``limit`` entries; and ``covers``, the seq of the
        session's own newest context entry (0: none).
        """
        with self._read() as conn:
            row = conn.execute(st.SESSION_BY_ID, {"ref": session_id}).mappings().first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            history = _context(conn, session_id, None, row["last_seq"], limit)
            covers = history[0].seq if history else 0
            if row["fork_session_id"] is not None:
                _read_through(conn, row, history, limit)
        history.reverse()
        return as_session(row), history, covers

    def write_summary(self, session_id: str, draft: NewEntry, covers: int) -> Appended | None:
        """Append a Summary at the session's head, standing for its context up to ``covers``.

        Under the session row's lock, and only if no context entry was written
        after ``covers`` since the range was read: a Message that came in
        meanwhile would otherwise sit before the new boundary, summarized by
        nobody, and drop out of every later context. None then (the caller
        reads the range again). The Summary's idempotency key (one per
        range) makes a repeated compaction return the first Summary
        (``created`` False). An archived session is refused.
        """
        try:
            with self._write() as conn:
                row = _bump(conn, session_id, admit=False)
                if row["archived_at"] is not None:
                    raise SessionArchived(
                        f"session {session_id} is archived", session_id=session_id
                    )
                # Inserted first: a repeat meets the key (and returns the first
                # Summary) before the check below would take it for news.
                values, _ = _insert_entry(conn, row, draft, admit=False, job_fields=None)
                after = {"sid": session_id, "covers": covers, "below": row["last_seq"]}
                if conn.scalar(st.CONTEXT_AFTER, after):
                    raise _Moved
        except _Moved:
            return None
        except IntegrityError:
            found = self.replay(session_id, draft)
            if found is None:
                raise
            return found
        return Appended(entry=as_entry(values), job=None, created=True)

    def import_entries(self, session_id: str, drafts: Sequence[NewEntry]) -> int:
        """Append many entries in one transaction, admitting nothing: an imported
        history (benchmarks, tests, migrations from elsewhere). The session's
        last seq after it."""
        if not drafts:
            return self.get_session(session_id).last_seq
        with self._write() as conn:
            last = conn.scalar(
                update(st.SESSIONS)
                .where(st.SESSIONS.c.id == session_id)
                .values(last_seq=st.SESSIONS.c.last_seq + len(drafts))
                .returning(st.SESSIONS.c.last_seq)
            )
            if last is None:
                raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            first, now = int(last) - len(drafts) + 1, utcnow()
            conn.execute(
                st.INSERT_ENTRY,
                [
                    {
                        "id": new_id(),
                        "session_id": session_id,
                        "seq": first + i,
                        "type": d.type.value,
                        "sender": d.sender,
                        "content": d.content,
                        "metadata": d.metadata or {},
                        "job_id": d.job_id,
                        "idempotency_key": d.idempotency_key,
                        "key_scope": d.key_scope.value if d.idempotency_key is not None else None,
                        "created_at": now,
                    }
                    for i, d in enumerate(drafts)
                ],
            )
        return int(last)

    # -- projects -------------------------------------------------------------

    @cached_property
    def projects(self) -> project_store.ProjectStore:
        """Projects' limits, cached briefly per process (chaz/store/projects.py)."""
        return project_store.ProjectStore(self)


def _start_turn(
    conn: Connection,
    job_id: str,
    token: str,
    ack_sender: str | None,
    ack_metadata: dict[str, Any] | None,
    seen: Job | None,
) -> tuple[Job, Entry | None]:
    """:meth:`Store.start_turn` in the open write transaction ``conn``."""
    row = _started(conn, seen, token) if seen is not None else None
    if row is None:
        row = _lock_job(conn, job_id)
        values = _start_values(row, token)
        conn.execute(
            st.START,
            {"jid": job_id, "seen_version": row["version"], **_start_params(values)},
        )
        row |= values
    if row["attempts"] == 1 and (row.get("delivery_id") or row.get("fire_id")):
        record(conn, row["session_id"], ev.job_event("running"), {"job_id": job_id})
    ack: Entry | None = None
    if ack_sender is not None and row["attempts"] == 1:
        ack_entry = NewEntry(
            EntryType.ACK,
            ack_sender,
            "processing",
            metadata=ack_metadata,
            idempotency_key=f"job:{job_id}:ack",
            job_id=job_id,
        )
        entry_values, _ = _insert_entry(
            conn,
            _bump(conn, row["session_id"], admit=False),
            ack_entry,
            admit=False,
            job_fields=None,
        )
        ack = as_entry(entry_values)
    return as_job(row), ack


def _start_values(row: dict[str, Any], token: str) -> dict[str, Any]:
    """The columns a turn's start sets: queued becomes running; a running (or
    stopping) job whose worker died is taken over as it is, for a resume."""
    status = JobStatus(row["status"])
    values: dict[str, Any] = {
        "status": row["status"],
        "started_at": row["started_at"],
        "lease_token": token,
        "attempts": row["attempts"] + 1,
        "version": row["version"] + 1,
    }
    if status is JobStatus.QUEUED:
        check_transition(status, JobStatus.RUNNING)
        values |= {"status": JobStatus.RUNNING.value, "started_at": utcnow()}
    elif status not in (JobStatus.RUNNING, JobStatus.STOPPING):
        check_transition(status, JobStatus.RUNNING)
    return values


def _start_params(values: dict[str, Any]) -> dict[str, Any]:
    return {f"v_{k}": v for k, v in values.items()}


def _started(conn: Connection, seen: Job, token: str) -> dict[str, Any] | None:
    """Start the job as ``seen``, if it has not changed since; None if it has."""
    row = seen.model_dump()
    row["status"] = seen.status.value
    values = _start_values(row, token)
    done = conn.execute(
        st.START, {"jid": seen.id, "seen_version": seen.version, **_start_params(values)}
    ).rowcount
    return row | values if done else None


def _counts(conn: Connection, session_id: str) -> tuple[int, int]:
    # A job queued again after an approval decision left the queue on its
    # first start (attempts > 0): it is not counted against the queue again.
    queued = func.sum(
        case(
            (and_(st.JOBS.c.status == JobStatus.QUEUED.value, st.JOBS.c.attempts == 0), 1),
            else_=0,
        )
    )
    row = conn.execute(select(queued, func.count()).where(st.JOBS.c.session_id == session_id)).one()
    return int(row[0] or 0), int(row[1])


def _context(
    conn: Connection, session_id: str, tid: str | None, upto: int, limit: int
) -> list[Said]:
    """A session's context entries up to the trigger ``tid`` (or, without one,
    up to ``upto``), newest first: from the newest Summary on (seed 000: where
    a context starts), at most ``limit`` of them.

    Read in windows of :data:`~chaz.store.statements.CONTEXT_WINDOW` seqs back
    from the trigger, each an index range, until the Summary, the limit or the
    session's first entry: the cost is the entries since the last Summary
    (at most the limit's worth), never the session's length. A compacted
    session takes one statement.
    """
    kept: list[Said] = []
    window = st.CONTEXT_WINDOW
    while len(kept) < limit and upto > 0:
        params = {"sid": session_id, "tid": tid, "upto": upto, "window": window}
        rows = conn.execute(st.CONTEXT, {**params, "lim": limit - len(kept)}).all()
        for r in rows:
            said = as_said(r)
            kept.append(said)
            if said.type is EntryType.SUMMARY:
                return kept
        if tid is not None:
            # Further back: below the trigger's own window (a long session
            # that no Summary bounds yet). A trigger that is a context entry
            # came back first, with its seq: no statement to read it.
            first = kept[0] if kept else None
            top = first.seq if first is not None and first.id == tid else None
            if top is None:
                top = conn.scalar(st.SEQ_BY_ID, {"tid": tid})
            upto, tid = (top if top is not None else upto), None
        upto -= window
    return kept


#: A fork of a fork of ... is read through at most this many sources.
MAX_FORK_HOPS = 16


def _read_through(conn: Connection, session: Any, history: list[Said], limit: int) -> None:
    """Extend a fork's context (``history``, newest first) with its source's.

    A fork is a pointer, not a copy: its context continues with the source
    session's context up to the entry it was forked at, and so on through
    the source's own source, until a Summary starts the context or
    ``limit`` entries are read (the same bound as any context). A source of
    another project is never read through (docs/security.md#visibility): the
    context stops there as if the source were gone.
    """
    source, upto = session["fork_session_id"], session["fork_seq"]
    project = session["project"]
    for _ in range(MAX_FORK_HOPS):
        if source is None or len(history) >= limit:
            return
        if history and history[-1].type is EntryType.SUMMARY:
            return  # the context starts at this Summary
        if conn.scalar(select(SessionRow.project).where(SessionRow.id == source)) != project:
            return
        history.extend(_context(conn, source, None, upto, limit - len(history)))
        found = conn.execute(st.FORK_OF, {"sid": source}).first()
        source, upto = (found[0], found[1]) if found is not None else (None, None)


def _insert_session(conn: Connection, new: NewSession) -> dict[str, Any]:
    """Insert a session row in the open transaction; its columns.

    A person's ``name`` that is taken is :class:`NameTaken`; automatic
    ``names`` are tried in turn, each in a savepoint (on PostgreSQL a failed
    INSERT would otherwise abort the whole transaction), and the session is
    left unnamed if every one is taken.
    """
    if conn.scalar(st.AGENT_SPEC, {"aid": new.agent_id}) is None:
        raise AgentNotFound(f"no agent {new.agent_id!r}", agent_id=new.agent_id)
    if new.members is not None:
        room_store.check_saved(conn, new.members)
    sid = new_id()
    values: dict[str, Any] = {
        "id": sid,
        "agent_id": new.agent_id,
        "name": new.name,
        "tree_id": new.tree_id or sid,
        "parent_job_id": new.parent_job_id,
        "call_depth": new.call_depth,
        "last_seq": 0,
        "last_ordinal": 0,
        "limits": new.limits.model_dump(mode="json") if new.limits else None,
        "tools": new.tools,
        "created_at": utcnow(),
        "fork_session_id": new.fork[0] if new.fork else None,
        "fork_seq": new.fork[1] if new.fork else None,
        "origin": new.origin.value if new.origin else None,
        "name_source": NameSource.USER.value if new.name is not None else None,
        "room_burst": 0,
        "project": new.project,
        "owner": new.owner,
        "unattended": new.unattended,
        "permission_mode": new.permission_mode,
        "description": new.description,
    }
    if new.members is not None:
        # Only a room sets them: SQL NULL (not JSON null) marks the others.
        values |= {"members": new.members, "burst_budget": new.burst_budget}
    if new.name is not None or not new.names:
        try:
            with conn.begin_nested():
                conn.execute(insert(SessionRow).values(**values))
        except IntegrityError as exc:
            raise NameTaken(f"a session is already named {new.name!r}", name=new.name) from exc
        return values
    for candidate in (*new.names, None):
        named = {
            **values,
            "name": candidate,
            "name_source": NameSource.AUTO.value if candidate is not None else None,
        }
        try:
            with conn.begin_nested():
                conn.execute(insert(SessionRow).values(**named))
        except IntegrityError:
            continue
        return named
    raise AssertionError("an unnamed session cannot collide")  # pragma: no cover


def _check_fence(conn: Connection, fence: Fence) -> None:
    token = conn.scalar(st.FENCE, {"jid": fence.job_id})
    if token != fence.token:
        raise LeaseLost(f"job {fence.job_id} is no longer held by this worker", job_id=fence.job_id)


def _fenced_finish(conn: Connection, fence: Fence, finish: Finish) -> tuple[str | None, str | None]:
    """End a job held under ``fence``: one compare-and-set when all is as expected.

    Returns the ids of the delivery and of the schedule fire that admitted
    the job, where one did.
    """
    done = conn.execute(
        st.FENCED_FINISH[finish.status],
        {
            "jid": finish.job_id,
            "token": fence.token,
            "v_result": finish.result,
            "v_error": finish.error,
            "v_finished_at": utcnow(),
        },
    ).first()
    if done is not None:
        return cast("str | None", done[0]), cast("str | None", done[1])
    # Not applied: say why (the fence first), as the locking path would.
    _check_fence(conn, fence)
    job = _finish(conn, finish)
    return job.delivery_id, job.fire_id


def _bump(conn: Connection, session_id: str, admit: bool) -> Any:
    """Take the session's next seq (and, for an admission, its next job ordinal),
    locking the session row; the session row as it now is."""
    if admit:
        row = conn.execute(st.BUMP_ADMIT, {"sid": session_id, "now": utcnow()}).mappings().first()
    else:
        row = conn.execute(st.BUMP, {"sid": session_id}).mappings().first()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}", session=session_id)
    return row


def _insert_entry(
    conn: Connection,
    session: Any,
    draft: NewEntry,
    *,
    admit: bool,
    job_fields: JobFields | None,
    job_id: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Insert one entry (and the job it admits, with id ``job_id`` if given)
    into ``session``, a row that :func:`_bump` returned in this open write
    transaction."""
    session_id = session["id"]
    now = utcnow()
    entry_id = new_id()
    job_row: dict[str, Any] | None = None
    if admit:
        job_row = _new_job(session, session["last_ordinal"], entry_id, job_fields, now, job_id)
        job_id = job_row["id"]
    else:
        job_id = draft.job_id
    entry_values = {
        "id": entry_id,
        "session_id": session_id,
        "seq": session["last_seq"],
        "type": draft.type.value,
        "sender": draft.sender,
        "content": draft.content,
        "metadata": draft.metadata or {},
        "job_id": job_id,
        "idempotency_key": draft.idempotency_key,
        "key_scope": draft.key_scope.value if draft.idempotency_key is not None else None,
        "created_at": now,
    }
    conn.execute(st.INSERT_ENTRY, entry_values)
    if job_row is not None:
        conn.execute(st.INSERT_JOB, job_row)
        if job_row["delivery_id"]:
            # Only a delivered job's states are logged: a producer's own turns
            # are in the jobs table, and three more rows per turn cost every
            # turn a quarter more PostgreSQL time (docs/performance.md).
            record(conn, session_id, ev.job_event("queued"), {"job_id": job_row["id"]})
    return entry_values, job_row


def _room_burst(
    conn: Connection, row: Any, found: rooms.Route, entry_id: str, budget: int
) -> tuple[Entry, ...]:
    """Keep a room's burst counter for an entry that woke nobody; the spent
    notice, the first time a burst runs out (docs/rooms.md#burst)."""
    if found.burst != row["room_burst"]:
        conn.execute(st.ROOM_BURST, {"sid": row["id"], "burst": found.burst})
    if not found.spent:
        return ()
    note = NewEntry(
        EntryType.NOTICE,
        rooms.ROOM_SENDER,
        rooms.spent_notice(budget),
        metadata={"room": "burst_spent", "budget": budget},
        idempotency_key=f"room:{entry_id}:spent",
    )
    values, _ = _insert_entry(
        conn, _bump(conn, row["id"], admit=False), note, admit=False, job_fields=None
    )
    return (as_entry(values),)


def _finish(conn: Connection, finish: Finish) -> Job:
    row = _lock_job(conn, finish.job_id)
    check_transition(JobStatus(row["status"]), finish.status)
    values = {
        "status": finish.status.value,
        "version": row["version"] + 1,
        "result": finish.result,
        "error": finish.error,
        "finished_at": utcnow(),
        "lease_token": None,
    }
    conn.execute(update(JobRow).where(JobRow.id == finish.job_id).values(**values))
    return as_job({**row, **values})


def _lock_job(conn: Connection, job_id: str) -> dict[str, Any]:
    row = conn.execute(st.LOCK_JOB, {"jid": job_id}).mappings().first()
    if row is None:
        raise missing_job(job_id)
    return dict(row)


def _new_job(
    session: Any,
    ordinal: int,
    entry_id: str | None,
    fields: JobFields | None,
    now: datetime,
    job_id: str | None = None,
) -> dict[str, Any]:
    """A job row for ``session`` (its row): the job takes the session's project,
    and runs unattended when either the fields or the session say so."""
    f = fields or JobFields()
    return {
        "id": job_id or new_id(),
        "session_id": session["id"],
        "tree_id": session["tree_id"],
        "project": session["project"],
        "owner": f.owner,
        "grants": f.grants,
        "unattended": bool(f.unattended or session["unattended"]),
        "ordinal": ordinal,
        "trigger_entry_id": entry_id,
        "status": JobStatus.QUEUED.value,
        "version": 1,
        "caller_session_id": f.caller_session_id,
        "caller_entry_id": f.caller_entry_id,
        "parent_job_id": f.parent_job_id,
        "call_depth": f.call_depth,
        "message_count": f.message_count,
        "delivery_id": f.delivery_id,
        "member_agent_id": f.member_agent_id,
        "attempts": 0,
        "lease_token": None,
        "checkpoint": None,
        "result": None,
        "error": None,
        "created_at": now,
        "started_at": None,
        "finished_at": None,
    }


__all__ = [
    "Appended",
    "Fence",
    "Finish",
    "JobFields",
    "RoomRules",
    "Store",
]
