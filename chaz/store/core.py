"""The fenced write core: admission, a turn's start, its appends and its end.

Every entry written here takes the session's next seq under its row lock
(:func:`chaz.store.writes.bump`; SQLite: the database write lock), so per
session, commit order is seq order (docs/store.md). A turn's writes carry
its :class:`~chaz.store.types.Fence` and are refused once another worker
holds its job. The rules that decide what an end or a room's entry does
beyond the rows are handed in by the use cases: a job's end takes a
:data:`~chaz.store.ending.Completion`, a room's entry a :class:`RoomRoute`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import Connection, and_, update
from sqlalchemy.exc import IntegrityError

from chaz.domain import events as ev
from chaz.domain.entries import Entry, EntryType, NewEntry, parse_sender
from chaz.domain.jobs import Job, JobStatus, Usage, check_transition
from chaz.errors import AgentNotFound, LeaseLost, SessionNotFound
from chaz.ids import new_id, utcnow
from chaz.store import artifacts, entries
from chaz.store import statements as st
from chaz.store.admitting import Admitting
from chaz.store.agents import SpecCache
from chaz.store.context import context_window, read_context, read_setup, setup_of
from chaz.store.db import Database
from chaz.store.ending import Completion, job_ended
from chaz.store.events import record
from chaz.store.models import JobRow
from chaz.store.rows import as_entry, as_job
from chaz.store.sessions import insert_session
from chaz.store.types import Appended, Fence, Finish, JobFields, KeyTaken, NewSession, TurnSetup
from chaz.store.writes import (
    admit_in_one,
    append_entry,
    bump,
    check_fence,
    insert_entry,
    lock_job,
)


class RoomRoute(Protocol):
    """Routes an entry just written into a room (:mod:`chaz.usecases.rooms`).

    Called in the entry's transaction with the room as an :class:`Admitting`
    (for the member it wakes), the entry's ``draft`` and ``entry_id``, and
    ``posted_by``, the job of the turn that wrote it (None: a producer's).
    Returns the job it admitted, if any, and the notices it wrote.
    """

    def __call__(
        self, tx: Admitting, draft: NewEntry, entry_id: str, posted_by: str | None
    ) -> tuple[Job | None, tuple[Entry, ...]]:
        """Route the entry; see the class."""
        ...


class TurnStart:
    """A turn's setup, as read, and its start, still to write (:meth:`Writes.turn_start`).

    ``setup`` is None when the session has no unfinished job. The caller
    decides from the setup whether the turn runs (its live slot, an
    approval it waits for) and then calls :meth:`start` at most once, before
    the block ends; what the start wrote is visible to others only after
    the block has ended.
    """

    def __init__(
        self, db: Database, conn: Connection | None, setup: TurnSetup | None, max_context: int
    ) -> None:
        self._db = db
        self._conn = conn
        self._max_context = max_context
        #: The head job, its session and agent; on PostgreSQL, once started,
        #: its context too (see :meth:`start`).
        self.setup = setup

    def start(
        self,
        token: str,
        *,
        ack_sender: str,
        ack_metadata: dict[str, Any] | None = None,
        usage: Usage | None = None,
    ) -> tuple[Job, Entry | None]:
        """Start the setup's job under ``token`` and write its Ack, as
        :meth:`Writes.start_turn` does with ``seen`` the job as the setup read it.
        ``usage``: the job's usage to write with the start (a spawned turn's
        reservation, docs/runtime.md#budgets); None keeps it as it is."""
        assert self.setup is not None, "no job to start"
        job = self.setup.job
        if self._conn is None:
            with self._db.write(durable=False) as conn:
                return _start_turn(conn, job.id, token, ack_sender, ack_metadata, job, usage)
        # The context in the same transaction: a read of its own would be a
        # fourth transaction of the turn (the capacity benchmark counts
        # them, docs/capacity.md). Its first window comes back with the
        # start's statement (no round trip of its own before the Ack); a
        # further window, a fork's source or the other start path read
        # after it. Its rows are turned into the context's entries here
        # too; that work is small next to the turn's.
        window = context_window(self.setup, self._max_context)
        done, first = self._start_here(
            self._conn, job, token, ack_sender, ack_metadata, usage, window
        )
        self.setup = read_context(self._conn, self.setup, self._max_context, first=first)
        return done

    @staticmethod
    def _start_here(
        conn: Connection,
        job: Job,
        token: str,
        ack_sender: str,
        ack_metadata: dict[str, Any] | None,
        usage: Usage | None,
        window: dict[str, Any] | None,
    ) -> tuple[tuple[Job, Entry | None], list[Any] | None]:
        """The start, and the context's first ``window`` if its statement read it."""
        seen: Job | None = job
        if job.delivery_id is None and job.fire_id is None:
            # The start and its Ack as one statement (chaz.store.oneshot).
            done = _start_in_one(conn, job, token, ack_sender, ack_metadata, usage, window)
            if done is not None:
                return done
            seen = None  # it changed since: the locking path
        # Not durable, as start_turn's own transaction (see Database.write).
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
        return _start_turn(conn, job.id, token, ack_sender, ack_metadata, seen, usage), None


class Writes:
    """The fenced write core of ``Store``: ``store.admitting``, ``store.append``,
    ``store.start_turn``, ``store.end_turn``, ..."""

    db: Database
    specs: SpecCache

    @contextmanager
    def admitting(
        self,
        session_id: str,
        *,
        create: NewSession | None = None,
        entry: bool = True,
        prepared: tuple[NewEntry, JobFields | None] | None = None,
    ) -> Iterator[Admitting]:
        """The unit of work of one admission (see :class:`Admitting`).

        Commits when the block ends; anything raised inside it rolls the
        whole admission back and leaves the session as it was. With
        ``create``, the session is made in the same transaction (its id
        replaces ``session_id``): a refused spawn leaves no empty session.
        ``entry=False`` takes a job ordinal and no seq: the admission writes a
        job with no entry (:meth:`Admitting.insert_job`).

        ``prepared``: the draft (and job fields) the block will pass to
        :meth:`Admitting.insert` and nothing else, on PostgreSQL written with
        the session's update as one statement before the block runs
        (``st.ADMIT_IN_ONE``; a room's entry is not: its rule decides). The
        block's checks then see the rows (they commit only with it, and a
        refusal rolls them back with the rest); its quota rebuilds do not
        count them. For a block that reads the session's jobs before it
        inserts (``Admitting.busy``), not this.
        """
        with self.db.write() as conn:
            if create is not None:
                session_id = insert_session(conn, create)["id"]
            job_id: str | None = None
            written: tuple[NewEntry, dict[str, Any], dict[str, Any]] | None = None
            if prepared is not None and entry and create is None and not self.db.sqlite:
                job_id = new_id()
                row, written = _admit_prepared(conn, session_id, prepared, job_id)
            elif entry:
                row = bump(conn, session_id, admit=True)
            else:
                row = conn.execute(st.BUMP_JOB, {"sid": session_id, "now": utcnow()}).mappings()
                row = row.first()
                if row is None:
                    raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            if row["agent_spec"] is None:
                raise AgentNotFound(f"no agent {row['agent_id']!r}", agent_id=row["agent_id"])
            specs, locked = self.specs, row
            yield Admitting(
                conn,
                row,
                lambda: specs.parsed(locked["agent_id"], locked["agent_spec"]),
                job_id=job_id,
                written=written,
            )

    def append(
        self,
        session_id: str,
        draft: NewEntry,
        fence: Fence | None = None,
        room: RoomRoute | None = None,
    ) -> Appended:
        """Append one entry that admits nothing (an Ack, a tool call, a note, ...).

        A repeated ``idempotency_key`` returns the first append unchanged
        (``created`` is False): the unique key in the database, not a read
        first, is what makes this safe under concurrency (see
        ``Store.replay`` for how a producer's reused key is checked). A
        ``fence`` makes it a running turn's entry: refused with
        :class:`~chaz.errors.LeaseLost` once another worker holds the job,
        and committed without waiting for the disk, since a resumed turn
        repairs its loss in a database crash (see :meth:`Database.write`;
        the turn's last entry is :meth:`end_turn`, durable).

        With ``room``, a Message into a room session is routed
        (docs/rooms.md): it may admit a member's job, returned as ``job``.
        """
        parse_sender(draft.sender)
        woke: tuple[Job | None, tuple[Entry, ...]] = (None, ())
        try:
            with self.db.write(durable=fence is None) as conn:
                if fence is not None:
                    check_fence(conn, fence)
                row = bump(conn, session_id, admit=False)
                entry_values, _ = insert_entry(conn, row, draft, admit=False, job_fields=None)
                if room is not None and row["members"] is not None:
                    posted_by = fence.job_id if fence is not None else None
                    woke = room(self._room(conn, row), draft, entry_values["id"], posted_by)
        except IntegrityError:
            found = entries.replay(self.db, session_id, draft)
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
        room: RoomRoute | None = None,
        *,
        completion: Completion,
    ) -> Appended | None:
        """A turn's last entry (its reply or its Error) and its job's end, in one transaction.

        Whoever sees a turn's final entry sees its job finished. The job's
        end is also the fence check: a worker that lost the job writes
        nothing (:class:`~chaz.errors.LeaseLost`). ``completion`` is the
        job's delivery's completion policy, applied in the same transaction.
        With ``room``, a reply in a room session is routed in the same
        transaction (docs/rooms.md): the member it wakes is ``job`` of the
        result. ``draft`` None ends the job with no entry (a schedule fire's
        empty reply, docs/schedules.md); then None is returned.
        """
        if draft is not None:
            draft = replace(draft, job_id=finish.job_id)
        woke: tuple[Job | None, tuple[Entry, ...]] = (None, ())
        try:
            if not self.db.sqlite and draft is not None:
                # PostgreSQL's path only: imported on its first use, so that a
                # worker on SQLite never builds its statements.
                from chaz.store import oneshot

                if oneshot.covers_end(finish, draft):
                    with self.db.autocommit() as conn:
                        now = utcnow()
                        values = oneshot.end(
                            conn,
                            fence.token,
                            finish,
                            session_id,
                            draft,
                            _end_params(finish, now),
                            now,
                        )
                    if values is not None:
                        return Appended(entry=as_entry(values), job=None, created=True)
            with self.db.write() as conn:
                delivery_id, fire_id, webhook, project = _fenced_finish(conn, fence, finish)
                if finish.result is not None:
                    artifacts.record(conn, finish.job_id, session_id, finish.result)
                entry_values = None
                if draft is not None:
                    row = bump(conn, session_id, admit=False)
                    entry_values, _ = insert_entry(conn, row, draft, admit=False, job_fields=None)
                    if room is not None and row["members"] is not None:
                        tx = self._room(conn, row)
                        woke = room(tx, draft, entry_values["id"], finish.job_id)
                job_ended(
                    conn,
                    finish.job_id,
                    session_id,
                    finish.status,
                    result=finish.result,
                    error=finish.error,
                    delivery_id=delivery_id,
                    fire_id=fire_id,
                    completion=completion,
                    webhook=webhook,
                    project=project,
                )
        except IntegrityError:
            found = entries.replay(self.db, session_id, draft) if draft is not None else None
            if found is None:
                raise
            return found
        if entry_values is None:
            return None
        return Appended(entry=as_entry(entry_values), job=woke[0], created=True, notices=woke[1])

    def _room(self, conn: Connection, row: Any) -> Admitting:
        """The room (``row``: its session, locked) as a unit of work for its routing;
        its agent is read only if a member is woken."""
        specs = self.specs
        return Admitting(conn, row, lambda: specs.load(conn, row["agent_id"]))

    @contextmanager
    def turn_start(self, session_id: str, max_context: int) -> Iterator[TurnStart]:
        """A turn's setup and its start as one unit of work (see :class:`TurnStart`).

        On PostgreSQL the setup's reads and the start's write share one
        transaction, which commits when the block ends: a turn then takes
        three transactions in all (its admission, this, its end) instead of
        four (docs/performance.md). On SQLite the setup is read in a
        transaction of its own and the start writes in another, as
        ``turn_setup`` and :meth:`start_turn` do: a write transaction
        there takes the database's one write lock, which the setup's reads
        and the caller's checks between them must not hold.

        The setup comes without its context (``history`` empty, ``trigger``
        None): the start does not need it. On PostgreSQL the start's
        statement reads its first window and the rest is read after it, in
        this transaction (:meth:`TurnStart.start`);
        on SQLite the turn reads it once the start has committed
        (:meth:`Context.turn_context`, the same bounds).
        """
        if self.db.sqlite:
            with self.db.read() as conn:
                setup = read_setup(conn, self.specs, session_id, max_context, context=False)
            yield TurnStart(self.db, None, setup, max_context)
            return
        with self.db.write() as conn:
            setup = read_setup(conn, self.specs, session_id, max_context, context=False)
            yield TurnStart(self.db, conn, setup, max_context)

    def start_head(
        self,
        session_id: str,
        job_id: str,
        tree_id: str,
        token: str,
        *,
        ack_metadata: dict[str, Any] | None,
        max_context: int,
    ) -> tuple[TurnSetup, Job, Entry] | None:
        """:meth:`turn_start` and its start in one statement with no
        transaction around it (:data:`chaz.store.oneshot.START_HEAD`), for a
        wake-up that names its job and whose lane took the job's live slot:
        the setup as read (its context too), the job as started under
        ``token``, and its Ack. None, having written nothing, on SQLite and
        whenever the job is not the session's head in ``tree_id`` or not a
        plain first start; the caller then takes :meth:`turn_start`.

        Still one transaction for the setup and the start, with no ``BEGIN``
        or ``COMMIT`` of its own: three round trips fewer between a wake-up and
        its Ack (docs/performance.md#dispatch). A context longer than the
        first window, a fork's source and a budget are read after it, each
        a statement of its own; a plain turn has none of them.
        """
        if self.db.sqlite:
            return None
        from chaz.store import oneshot  # PostgreSQL's only (see end_turn)

        now = utcnow()
        window = {"window": st.CONTEXT_WINDOW, "lim": max_context}
        # The Ack's sender is the session's agent's, which the statement reads.
        ack = _ack(job_id, "agent:", ack_metadata)
        with self.db.autocommit() as conn:
            done = oneshot.start_head(conn, session_id, job_id, tree_id, token, ack, now, window)
            if done is None:
                return None
            # Reads that only a budget, a long context or a fork needs, each a
            # statement of its own (their bounds are what the statement
            # read, which no later commit moves: the same rows).
            setup = setup_of(conn, self.specs, done.row)
            setup = read_context(conn, setup, max_context, first=done.context)
        row = _row_of(setup.job)
        counted = {"starts": done.row["started_starts"], "attempts": done.row["started_attempts"]}
        started = as_job(row | _start_values(row, token, None, now) | counted)
        return setup, started, as_entry(done.ack)

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
        with self.db.write(durable=False) as conn:
            return _start_turn(conn, job_id, token, ack_sender, ack_metadata, seen)

    def save_checkpoint(
        self, fence: Fence, checkpoint: dict[str, Any], usage: Usage | None = None
    ) -> None:
        """Record the turn's progress and what it used so far (``usage``, in the
        same write); refused (LeaseLost) if another worker took over."""
        values: dict[str, Any] = {"checkpoint": checkpoint}
        if usage is not None:
            values["usage"] = usage.model_dump()
        with self.db.write() as conn:
            check_fence(conn, fence)
            conn.execute(update(JobRow).where(JobRow.id == fence.job_id).values(**values))

    def hand_back(
        self, fence: Fence, checkpoint: dict[str, Any], usage: Usage | None = None
    ) -> None:
        """Give a running turn back (its worker is shutting down): write its last
        ``checkpoint`` and drop its lease token, in one fenced write.

        The status stays as it is (``running``, or ``stopping`` if a cancel
        came): the next start takes the job over like a dead worker's, for a
        resume, and nothing this worker still tries to write passes the fence.
        :class:`~chaz.errors.LeaseLost` if another worker holds the job (then
        nothing is written). ``usage``: what the turn used so far, written too.
        """
        values: dict[str, Any] = {"checkpoint": checkpoint, "lease_token": None}
        if usage is not None:
            values["usage"] = usage.model_dump()
        with self.db.write() as conn:
            done = conn.execute(
                update(JobRow)
                .where(
                    and_(
                        JobRow.id == fence.job_id,
                        JobRow.lease_token == fence.token,
                        JobRow.status.in_((JobStatus.RUNNING.value, JobStatus.STOPPING.value)),
                    )
                )
                .values(**values, version=JobRow.version + 1)
            ).rowcount
            if not done:
                check_fence(conn, fence)
                raise LeaseLost(f"job {fence.job_id} is no longer running", job_id=fence.job_id)


def _start_turn(
    conn: Connection,
    job_id: str,
    token: str,
    ack_sender: str | None,
    ack_metadata: dict[str, Any] | None,
    seen: Job | None,
    usage: Usage | None = None,
) -> tuple[Job, Entry | None]:
    """:meth:`Writes.start_turn` in the open write transaction ``conn``."""
    row = _started(conn, seen, token, usage) if seen is not None else None
    if row is None:
        row = lock_job(conn, job_id)
        values = _start_values(row, token, usage)
        counted = conn.execute(
            st.START,
            {"jid": job_id, "seen_version": row["version"], **_start_params(values)},
        ).one()
        row |= values | {"starts": counted[0], "attempts": counted[1]}
    if row["starts"] == 1 and (row.get("delivery_id") or row.get("fire_id")):
        record(conn, row["session_id"], ev.job_event("running"), {"job_id": job_id})
    ack: Entry | None = None
    if ack_sender is not None and row["starts"] == 1:
        ack_entry = _ack(job_id, ack_sender, ack_metadata)
        ack = as_entry(append_entry(conn, row["session_id"], ack_entry))
    return as_job(row), ack


def _row_of(job: Job) -> dict[str, Any]:
    """``job``'s columns as its row holds them (its status as the string)."""
    return job.model_dump() | {"status": job.status.value}


def _start_values(
    row: dict[str, Any], token: str, usage: Usage | None, now: datetime | None = None
) -> dict[str, Any]:
    """The columns a turn's start sets: queued becomes running (at ``now``,
    default the clock's); a running (or stopping) job whose worker died is
    taken over as it is, for a resume. Its usage is kept unless ``usage``
    replaces it. (``starts`` and ``attempts`` the statement counts from the
    row itself.)"""
    status = JobStatus(row["status"])
    values: dict[str, Any] = {
        "status": row["status"],
        "started_at": row["started_at"],
        "lease_token": token,
        "version": row["version"] + 1,
        "usage": usage.model_dump() if usage is not None else row.get("usage"),
    }
    if status is JobStatus.QUEUED:
        check_transition(status, JobStatus.RUNNING)
        values |= {"status": JobStatus.RUNNING.value, "started_at": now or utcnow()}
    elif status not in (JobStatus.RUNNING, JobStatus.STOPPING):
        check_transition(status, JobStatus.RUNNING)
    return values


def _start_params(values: dict[str, Any]) -> dict[str, Any]:
    return {f"v_{k}": v for k, v in values.items()}


def _started(conn: Connection, seen: Job, token: str, usage: Usage | None) -> dict[str, Any] | None:
    """Start the job as ``seen``, if it has not changed since; None if it has."""
    row = _row_of(seen)
    values = _start_values(row, token, usage)
    counted = conn.execute(
        st.START, {"jid": seen.id, "seen_version": seen.version, **_start_params(values)}
    ).first()
    if counted is None:
        return None
    return row | values | {"starts": counted[0], "attempts": counted[1]}


def _fenced_finish(
    conn: Connection, fence: Fence, finish: Finish
) -> tuple[str | None, str | None, str | None, str]:
    """End a job held under ``fence``: one compare-and-set when all is as expected.

    Returns the ids of the delivery and of the schedule fire that admitted
    the job, where one did, its run's webhook (None: none) and its project.
    """
    done = conn.execute(
        st.FENCED_FINISH[finish.status],
        {"jid": finish.job_id, "token": fence.token, **_end_params(finish, utcnow())},
    ).first()
    if done is not None:
        return (
            cast("str | None", done[0]),
            cast("str | None", done[1]),
            cast("str | None", done[2]),
            str(done[3]),
        )
    # Not applied: say why (the fence first), as the locking path would.
    check_fence(conn, fence)
    job = _finish(conn, finish)
    return job.delivery_id, job.fire_id, job.webhook, job.project


def _end_params(finish: Finish, now: datetime) -> dict[str, Any]:
    """``st.FENCED_FINISH``'s values of ``finish``, ended at ``now``."""
    return {
        "v_result": finish.result,
        "v_error": finish.error,
        "v_finished_at": now,
        "v_usage": _usage(finish.usage),
    }


def _start_in_one(
    conn: Connection,
    job: Job,
    token: str,
    ack_sender: str | None,
    ack_metadata: dict[str, Any] | None,
    usage: Usage | None,
    window: dict[str, Any] | None = None,
) -> tuple[tuple[Job, Entry | None], list[Any] | None] | None:
    """:func:`_start_turn` of ``job`` as read, in one statement in the setup's
    transaction (:func:`chaz.store.oneshot.start`), with the context ``window``
    read by it (``st.CONTEXT``'s parameters; its rows come back, None without
    it); None (nothing written) if the job changed since or there is no Ack
    to write."""
    if ack_sender is None:
        return None
    row = _row_of(job)
    values = _start_values(row, token, usage)
    from chaz.store import oneshot  # PostgreSQL's only (see end_turn)

    done = oneshot.start(
        conn,
        job.id,
        job.session_id,
        job.version,
        _start_params(values),
        _ack(job.id, ack_sender, ack_metadata),
        utcnow(),
        context=window,
    )
    if done is None:
        return None
    started = as_job(row | values | {"starts": done.starts, "attempts": done.attempts})
    return (started, as_entry(done.ack) if done.ack is not None else None), done.context


def _admit_prepared(
    conn: Connection, session_id: str, prepared: tuple[NewEntry, JobFields | None], job_id: str
) -> tuple[Any, tuple[NewEntry, dict[str, Any], dict[str, Any]] | None]:
    """The session's update with the admission's entry and job (``st.ADMIT_IN_ONE``):
    the session row, and the draft with the entry's and the job's columns
    (None for a room, whose rule writes them)."""
    draft, fields = prepared
    parse_sender(draft.sender)
    try:
        row, values, job_row = admit_in_one(conn, session_id, draft, fields, job_id)
    except IntegrityError as exc:
        if draft.idempotency_key is None:
            raise
        raise KeyTaken(draft.idempotency_key) from exc
    return row, (None if values is None or job_row is None else (draft, values, job_row))


def _ack(job_id: str, sender: str, metadata: dict[str, Any] | None) -> NewEntry:
    """The Ack of a job's first start."""
    return NewEntry(
        EntryType.ACK,
        sender,
        "processing",
        metadata=metadata,
        idempotency_key=f"job:{job_id}:ack",
        job_id=job_id,
    )


def _usage(usage: Usage | None) -> dict[str, Any] | None:
    return usage.model_dump() if usage is not None else None


def _finish(conn: Connection, finish: Finish) -> Job:
    row = lock_job(conn, finish.job_id)
    check_transition(JobStatus(row["status"]), finish.status)
    values = {
        "status": finish.status.value,
        "version": row["version"] + 1,
        "result": finish.result,
        "error": finish.error,
        "finished_at": utcnow(),
        "lease_token": None,
        "usage": _usage(finish.usage),
    }
    conn.execute(update(JobRow).where(JobRow.id == finish.job_id).values(**values))
    return as_job({**row, **values})
