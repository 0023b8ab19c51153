"""One admission's unit of work: :class:`Admitting`, a write transaction with
the session row locked, and the named operations an admission may apply in
it (an entry and its job, a delivery taken, a schedule fire's job, a room's
burst and wake-up).

Opened by :meth:`chaz.store.core.Writes.admitting`; the use cases decide
what to write (:mod:`chaz.usecases.admission`, :mod:`chaz.usecases.rooms`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError

from chaz.domain import events as ev
from chaz.domain.agents import AgentSpec
from chaz.domain.deliveries import Delivery, DeliveryState
from chaz.domain.entries import Entry, NewEntry, parse_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.ids import new_id, utcnow
from chaz.store import deliveries as dl
from chaz.store import projects as project_store
from chaz.store import statements as st
from chaz.store.events import record
from chaz.store.models import JobRow, unfinished
from chaz.store.rows import as_entry, as_job, as_session
from chaz.store.types import Appended, DeliveryGone, JobFields, KeyTaken, SessionBusy
from chaz.store.writes import append_entry, insert_entry, job_counts, new_job, roll_back


class Admitting:
    """One admission's unit of work: a write transaction with the session row locked.

    Opened by :meth:`chaz.store.core.Writes.admitting`, and for the member a room's entry
    wakes, by the append that wrote it. The session's next seq and job
    ordinal are taken and its row is locked before the caller sees it, so
    its limits cannot change under a quota check, and a check that raises
    rolls everything back.
    """

    def __init__(
        self,
        conn: Connection,
        row: Any,
        agent: Callable[[], AgentSpec],
        *,
        job_id: str | None = None,
        written: tuple[NewEntry, dict[str, Any], dict[str, Any]] | None = None,
    ) -> None:
        self._conn = conn
        self._row = row
        self._load_agent = agent
        #: The session being written to, as locked.
        self.session = as_session(row)
        #: The id the job this admission writes takes: drawn first, so the
        #: quota reservation can name the job before it is inserted.
        self.job_id = job_id or new_id()
        #: An entry and its job already inserted with the session's update
        #: (``Writes.admitting(prepared=...)``): the draft, the entry's and the
        #: job's columns. :meth:`insert` of that draft answers with them.
        self._written = written
        #: Whether a job was written (a room's entry may wake nobody).
        self.wrote_job = written is not None

    @cached_property
    def agent(self) -> AgentSpec:
        """The session's agent (read when first asked for)."""
        return self._load_agent()

    @property
    def room_burst(self) -> int:
        """A room's burst counter as locked: agent Messages since a person spoke."""
        burst: int = self._row["room_burst"]
        return burst

    def busy(self) -> bool:
        """Whether a job of the session has not ended, read under the session's
        lock: no other admission can add one before this transaction ends."""
        stmt = (
            select(JobRow.id)
            .where(JobRow.session_id == self.session.id, unfinished(JobRow.status))
            .limit(1)
        )
        return self._conn.execute(stmt).first() is not None

    def unfinished_jobs(self) -> list[Job]:
        """The session's jobs that have not ended, in admission order, read
        under the session's lock: no admission adds one before this
        transaction ends (a run that interrupts them, docs/http.md#runs)."""
        stmt = (
            select(JobRow)
            .where(JobRow.session_id == self.session.id, unfinished(JobRow.status))
            .order_by(JobRow.ordinal)
        )
        return [as_job(r) for r in self._conn.execute(stmt).mappings()]

    def roll_back(self, job_ids: list[str]) -> int:
        """Mark those of ``job_ids`` that have not ended rolled back, with this
        admission (:func:`chaz.store.writes.roll_back`); how many it marked."""
        return roll_back(self._conn, job_ids)

    def stored_limits(self) -> project_store.Stored:
        """The session's project's stored limits, read in this transaction
        (None: the project has no row)."""
        return project_store.read_stored(self._conn, self.session.project)

    def project_counts(self) -> tuple[list[str], int]:
        """The ids of the project's unfinished jobs and how many it ever
        admitted, read in this transaction (to rebuild its quota keys)."""
        live, total = project_store.read_counts(self._conn, self.session.project)
        if self._written is not None:
            # Not the job this admission already wrote (see job_counts).
            return [j for j in live if j != self.job_id], total - 1
        return live, total

    def job_counts(self) -> tuple[int, int]:
        """``(queued, total)`` jobs of the session, read in this transaction.

        For rebuilding missing quota counters without a second connection:
        the session row is locked, and other admitters may hold every pooled
        connection. A job this admission already wrote is not counted: its
        reservation counts it.
        """
        queued, total = job_counts(self._conn, self.session.id)
        if self._written is not None:
            return queued - 1, total - 1
        return queued, total

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
        if self._written is not None:
            # Written with the session's update: this admission's one insert.
            written, entry, job = self._written
            assert draft is written and delivery is None, "not the admission's prepared draft"
            return Appended(as_entry(entry), as_job(job), created=True)
        if delivery is not None:
            job_fields = replace(job_fields or JobFields(), delivery_id=delivery["id"])
        try:
            entry_values, job_row = insert_entry(
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

    def insert_only(self, draft: NewEntry) -> Entry:
        """Insert the entry at the seq this admission took, admitting no job (a
        room's entry that wakes nobody); :class:`KeyTaken` if the key is used."""
        parse_sender(draft.sender)
        try:
            values, _ = insert_entry(self._conn, self._row, draft, admit=False, job_fields=None)
        except IntegrityError as exc:
            if draft.idempotency_key is None:
                raise
            raise KeyTaken(draft.idempotency_key) from exc
        return as_entry(values)

    # -- rooms (docs/rooms.md) ------------------------------------------------

    def set_burst(self, burst: int) -> None:
        """Set the room's burst counter."""
        self._conn.execute(st.ROOM_BURST, {"sid": self.session.id, "burst": burst})

    def wake(self, entry_id: str, member: str, burst: int, *, inherit: str | None) -> Job:
        """Admit a job for ``member`` triggered by ``entry_id``, an entry already
        written, setting the room's burst counter to ``burst``.

        ``inherit``: the job whose owner, grants and unattended flag the new
        job takes (the turn that wrote the entry); None keeps the defaults.
        """
        now = utcnow()
        sid = self.session.id
        ordinal = self._conn.scalar(st.ROOM_WAKE, {"sid": sid, "now": now, "burst": burst})
        fields = JobFields(member_agent_id=member)
        if inherit is not None:
            poster = self._conn.execute(
                select(JobRow.owner, JobRow.grants, JobRow.unattended).where(JobRow.id == inherit)
            ).first()
            if poster is not None:
                fields = replace(
                    fields, owner=poster[0], grants=poster[1], unattended=bool(poster[2])
                )
        job_row = new_job(self._row, ordinal, entry_id, fields, now, job_id=self.job_id)
        self._conn.execute(st.INSERT_JOB, job_row)
        self.wrote_job = True
        return as_job(job_row)

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
        row = new_job(
            self._row, self._row["last_ordinal"], None, job_fields, utcnow(), job_id=self.job_id
        )
        row |= {"input": input, "fire_id": fire_id}
        self._conn.execute(st.INSERT_JOB, row)
        self.wrote_job = True
        record(self._conn, self.session.id, ev.job_event("queued"), {"job_id": row["id"]})
        # Imported here: only a schedule fire's admission needs the schedules' store.
        from chaz.store import schedules

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

    def job_status(self, job_id: str) -> JobStatus | None:
        """Another job's status, its row share-locked until this admission commits
        (None: no such job).

        A cancel's move of that job waits for the admission, so what the
        admission read stays true until it is visible (the sender of a queued
        message: docs/collaboration.md#withdrawal).
        """
        status = self._conn.scalar(
            select(JobRow.status).where(JobRow.id == job_id).with_for_update(read=True)
        )
        return JobStatus(status) if status is not None else None

    def inbox(self) -> list[Delivery]:
        """The messages waiting in this session's inbox, oldest first (locked)."""
        return dl.inbox(self._conn, self.session.id, lock=True)

    def append_to(self, session_id: str, draft: NewEntry) -> Entry:
        """Append an entry that admits nothing to a session (this one, or another),
        in this transaction.

        A spawn's attach pointer goes into the caller's session with the
        child's admission, so neither exists without the other; a room's
        notices go into the room.
        """
        parse_sender(draft.sender)
        return as_entry(append_entry(self._conn, session_id, draft))
