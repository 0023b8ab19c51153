"""The ``deliveries`` table: every hand-off between sessions, and its state changes.

The functions taking a ``conn`` run inside a transaction the caller holds
(an admission, a job's end), so a delivery's change commits with the change
it belongs to; :class:`DeliveryStore` has the reads and the standalone writes.
A state change is a compare-and-set on the state it leaves: two drivers of
one delivery cannot both move it.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Connection, func, insert, or_, select, update

from chaz.domain import events
from chaz.domain.deliveries import (
    ANSWERS,
    WITHDRAWN_CODE,
    Delivery,
    DeliveryKind,
    DeliveryState,
    Reply,
)
from chaz.domain.jobs import TERMINAL, JobStatus
from chaz.errors import DeliveryNotFound
from chaz.ids import as_utc, new_id, utcnow
from chaz.store import upsert
from chaz.store.events import record
from chaz.store.models import DeliveryRow, JobRow, SessionRow

if TYPE_CHECKING:
    from chaz.store.db import Database

DELIVERIES = DeliveryRow.__table__


def new_row(
    *,
    kind: DeliveryKind,
    sender: str,
    target_session_id: str,
    body: str,
    idempotency_key: str,
    state: DeliveryState,
    sender_session_id: str | None = None,
    sender_entry_id: str | None = None,
    sender_job_id: str | None = None,
    message_count: int = 0,
    generation: int = 0,
    reply: Reply = Reply.NONE,
    archive_when_done: bool = False,
    answers_job_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    job_id: str | None = None,
    project: str = "default",
    owner: str = "user:local",
    grants: list[str] | None = None,
    unattended: bool = False,
) -> dict[str, Any]:
    """Every column of a new delivery row (``project`` to ``unattended``: the
    authority the job it admits runs with)."""
    now = utcnow()
    return {
        "project": project,
        "owner": owner,
        "grants": grants,
        "unattended": unattended,
        "id": new_id(),
        "kind": kind.value,
        "sender": sender,
        "sender_session_id": sender_session_id,
        "sender_entry_id": sender_entry_id,
        "sender_job_id": sender_job_id,
        "target_session_id": target_session_id,
        "body": body,
        "message_count": message_count,
        "generation": generation,
        "state": state.value,
        "code": None,
        "reason": None,
        "job_id": job_id,
        "reply": reply.value,
        "archive_when_done": archive_when_done,
        "answers_job_id": answers_job_id,
        "metadata": metadata or {},
        "idempotency_key": idempotency_key,
        "created_at": now,
        "updated_at": now,
    }


def insert_row(conn: Connection, values: dict[str, Any]) -> None:
    """Insert a delivery (an IntegrityError if its key is taken: the caller replays)."""
    conn.execute(insert(DELIVERIES), values)
    note(conn, as_delivery(values), _state_event(DeliveryState(values["state"])))


def insert_once(conn: Connection, values: dict[str, Any]) -> bool:
    """Insert a delivery unless one with its key exists; whether it was inserted.

    ``ON CONFLICT DO NOTHING`` rather than catching the error: on PostgreSQL
    a failed statement would abort the caller's whole transaction (the end
    of a job, which must commit whatever happens to its follow-up).
    """
    stmt = (
        upsert.insert(conn, DELIVERIES)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["idempotency_key"])
    )
    done = bool(conn.execute(stmt).rowcount)
    if done:
        note(conn, as_delivery(values), _state_event(DeliveryState(values["state"])))
    return done


def move(
    conn: Connection,
    delivery_id: str,
    target: DeliveryState,
    *,
    leaving: Iterable[DeliveryState],
    job_id: str | None = None,
    code: str | None = None,
    reason: str | None = None,
    metadata: dict[str, Any] | None = None,
    unless_kinds: Iterable[DeliveryKind] = (),
) -> Delivery | None:
    """Move a delivery to ``target`` if it is in one of the ``leaving`` states.

    The delivery as it now is, or None when it was not in those states
    (someone else moved it first), or is of one of ``unless_kinds``.
    ``metadata`` replaces its metadata. Records the change as an event in
    its target session (and its sender's, for the sender's log).
    """
    values: dict[str, Any] = {"state": target.value, "updated_at": utcnow()}
    if job_id is not None:
        values["job_id"] = job_id
    if code is not None:
        values["code"] = code
        values["reason"] = reason
    if metadata is not None:
        values["metadata"] = metadata
    where = [DELIVERIES.c.id == delivery_id, DELIVERIES.c.state.in_([s.value for s in leaving])]
    skipped = [k.value for k in unless_kinds]
    if skipped:
        where.append(DELIVERIES.c.kind.not_in(skipped))
    row = (
        conn.execute(update(DELIVERIES).where(*where).values(**values).returning(*DELIVERIES.c))
        .mappings()
        .first()
    )
    if row is None:
        return None
    delivery = as_delivery(row)
    note(conn, delivery, _state_event(target))
    return delivery


def silence(conn: Connection, job_ids: Iterable[str]) -> None:
    """Let the jobs' ends send no follow-up (their caller's cancel cascades to them)."""
    ids = list(job_ids)
    if ids:
        conn.execute(
            update(DELIVERIES)
            .where(DELIVERIES.c.job_id.in_(ids))
            .values(reply=Reply.NONE.value, updated_at=utcnow())
        )


def withdraw(
    conn: Connection, where: ColumnElement[bool], *, by: str, reason: str
) -> builtins.list[Delivery]:
    """Withdraw the ``accepted`` deliveries ``where`` selects; the ones withdrawn.

    Each is a compare-and-set against its admission (``accepted`` ->
    ``withdrawn`` here, ``accepted`` -> ``admitted`` there), so a delivery
    admitted at the same instant is either admitted or withdrawn, never both:
    one admitted first is left out, and its job is the caller's to cancel.
    ``by`` (a command id, else the cancelled job's or stopped session's id)
    goes into each one's metadata as ``withdrawn_by``.
    """
    waiting = [
        as_delivery(r)
        for r in conn.execute(
            select(DELIVERIES)
            .where(where, DELIVERIES.c.state == DeliveryState.ACCEPTED.value)
            .order_by(DELIVERIES.c.created_at, DELIVERIES.c.id)
        ).mappings()
    ]
    withdrawn = []
    for d in waiting:
        moved = move(
            conn,
            d.id,
            DeliveryState.WITHDRAWN,
            leaving=[DeliveryState.ACCEPTED],
            code=WITHDRAWN_CODE,
            reason=reason,
            metadata={**d.metadata, "withdrawn_by": by},
        )
        if moved is not None:
            withdrawn.append(moved)
    return withdrawn


def locked(conn: Connection, delivery_id: str) -> Delivery | None:
    """One delivery, its row locked until the transaction ends."""
    row = (
        conn.execute(select(DELIVERIES).where(DELIVERIES.c.id == delivery_id).with_for_update())
        .mappings()
        .first()
    )
    return as_delivery(row) if row is not None else None


def by_key(conn: Connection, key: str) -> Delivery | None:
    """The delivery made with this idempotency key, if any."""
    row = (
        conn.execute(select(DELIVERIES).where(DELIVERIES.c.idempotency_key == key))
        .mappings()
        .first()
    )
    return as_delivery(row) if row is not None else None


def inbox(conn: Connection, target_session_id: str, *, lock: bool = False) -> list[Delivery]:
    """The messages waiting in a session's inbox, oldest first."""
    stmt = (
        select(DELIVERIES)
        .where(
            DELIVERIES.c.target_session_id == target_session_id,
            DELIVERIES.c.state == DeliveryState.ACCEPTED.value,
            DELIVERIES.c.kind == DeliveryKind.MESSAGE.value,
        )
        .order_by(DELIVERIES.c.created_at, DELIVERIES.c.id)
    )
    if lock:
        stmt = stmt.with_for_update()
    return [as_delivery(r) for r in conn.execute(stmt).mappings()]


def note(conn: Connection, delivery: Delivery, kind: str) -> None:
    """Record a delivery's change in the event log of both sessions it joins."""
    data = {
        "delivery_id": delivery.id,
        "kind": delivery.kind.value,
        "state": delivery.state.value,
        "sender_session_id": delivery.sender_session_id,
        "target_session_id": delivery.target_session_id,
        "job_id": delivery.job_id,
        **({"code": delivery.code, "reason": delivery.reason} if delivery.code else {}),
    }
    record(conn, delivery.target_session_id, kind, data)
    if delivery.sender_session_id and delivery.sender_session_id != delivery.target_session_id:
        record(conn, delivery.sender_session_id, kind, data)


def _state_event(state: DeliveryState) -> str:
    return {
        DeliveryState.ACCEPTED: events.DELIVERY_ACCEPTED,
        DeliveryState.ADMITTED: events.DELIVERY_ADMITTED,
        DeliveryState.DONE: events.DELIVERY_DONE,
        DeliveryState.REFUSED: events.DELIVERY_REFUSED,
        DeliveryState.DROPPED: events.DELIVERY_DROPPED,
        DeliveryState.FAILED: events.DELIVERY_FAILED,
        DeliveryState.WITHDRAWN: events.DELIVERY_WITHDRAWN,
    }[state]


def as_delivery(row: Any) -> Delivery:
    """A row (or a dict of its columns) as a :class:`Delivery`."""
    return Delivery(
        id=row["id"],
        kind=DeliveryKind(row["kind"]),
        sender=row["sender"],
        sender_session_id=row["sender_session_id"],
        sender_entry_id=row["sender_entry_id"],
        sender_job_id=row["sender_job_id"],
        target_session_id=row["target_session_id"],
        body=row["body"],
        message_count=row["message_count"],
        generation=row["generation"],
        state=DeliveryState(row["state"]),
        code=row["code"],
        reason=row["reason"],
        job_id=row["job_id"],
        reply=Reply(row["reply"]),
        archive_when_done=bool(row["archive_when_done"]),
        answers_job_id=row["answers_job_id"],
        metadata=row["metadata"] or {},
        created_at=as_utc(row["created_at"]),
        updated_at=as_utc(row["updated_at"]),
        project=row.get("project") or "default",
        owner=row.get("owner") or "user:local",
        grants=row.get("grants"),
        unattended=bool(row.get("unattended")),
    )


def _in_project(project: str) -> ColumnElement[bool]:
    """Deliveries of ``project``: those into or out of a session of it.

    Decided by the sessions, whose project is set when they are made, so a
    delivery row whose own ``project`` column was left at its default still
    belongs where its sessions do.
    """
    sessions = select(SessionRow.id).where(SessionRow.project == project)
    return or_(
        DELIVERIES.c.target_session_id.in_(sessions),
        DELIVERIES.c.sender_session_id.in_(sessions),
    )


def _sent_by(job_ids: Iterable[str], keep_answers_of: str) -> ColumnElement[bool]:
    """Deliveries the jobs ``job_ids`` sent, but for the answers (follow-up,
    result) of ``keep_answers_of``."""
    own_answer = (DELIVERIES.c.sender_job_id == keep_answers_of) & DELIVERIES.c.kind.in_(
        sorted(k.value for k in ANSWERS)
    )
    return DELIVERIES.c.sender_job_id.in_(sorted(set(job_ids))) & ~own_answer


class DeliveryStore:
    """Reads of deliveries, and the writes that stand alone."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, delivery_id: str, *, project: str | None = None) -> Delivery:
        """One delivery, or :class:`DeliveryNotFound`; with ``project``, one of
        another project is answered exactly as a missing one."""
        stmt = select(DELIVERIES).where(DELIVERIES.c.id == delivery_id)
        if project is not None:
            stmt = stmt.where(_in_project(project))
        with self._db.engine.connect() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            raise DeliveryNotFound(f"no delivery {delivery_id!r}", delivery_id=delivery_id)
        return as_delivery(row)

    def by_key(self, key: str) -> Delivery | None:
        """The delivery made with this idempotency key, if any."""
        with self._db.engine.connect() as conn:
            return by_key(conn, key)

    def list(
        self,
        session_id: str,
        *,
        direction: str = "both",
        limit: int = 100,
        project: str | None = None,
    ) -> builtins.list[Delivery]:
        """Deliveries into (``in``), out of (``out``) or both ways of a session, newest
        first; ``project``: only that project's."""
        stmt = select(DELIVERIES).order_by(DELIVERIES.c.created_at.desc()).limit(limit)
        if project is not None:
            stmt = stmt.where(_in_project(project))
        into = DELIVERIES.c.target_session_id == session_id
        out = DELIVERIES.c.sender_session_id == session_id
        stmt = stmt.where(
            into if direction == "in" else out if direction == "out" else or_(into, out)
        )
        with self._db.engine.connect() as conn:
            return [as_delivery(r) for r in conn.execute(stmt).mappings()]

    def inbox(self, target_session_id: str) -> builtins.list[Delivery]:
        """The messages waiting in a session's inbox, oldest first."""
        with self._db.engine.connect() as conn:
            return inbox(conn, target_session_id)

    def has_inbox(self, target_session_id: str) -> bool:
        """Whether any message waits in the session's inbox (one indexed probe)."""
        stmt = (
            select(DELIVERIES.c.id)
            .where(
                DELIVERIES.c.target_session_id == target_session_id,
                DELIVERIES.c.state == DeliveryState.ACCEPTED.value,
                DELIVERIES.c.kind == DeliveryKind.MESSAGE.value,
            )
            .limit(1)
        )
        with self._db.engine.connect() as conn:
            return conn.scalar(stmt) is not None

    def withdraw_sent(
        self, job_ids: Iterable[str], *, keep_answers_of: str, by: str, reason: str
    ) -> builtins.list[Delivery]:
        """Withdraw what the jobs ``job_ids`` (a cancelled lineage) left waiting:
        their messages in busy inboxes, and their follow-ups and results not yet
        admitted, except those answering ``keep_answers_of`` (the cancelled job
        itself still answers its caller: docs/collaboration.md#follow-ups).
        The ones withdrawn (:func:`withdraw`)."""
        with self._db.write() as conn:
            return withdraw(conn, _sent_by(job_ids, keep_answers_of), by=by, reason=reason)

    def admitted_jobs(self, job_ids: Iterable[str], *, keep_answers_of: str) -> builtins.list[str]:
        """The jobs admitted by what the jobs ``job_ids`` sent (the deliveries
        :meth:`withdraw_sent` selects, admitted before it could take them),
        oldest first: unfinished ones, and of a follow-up or result only one
        still queued (a turn already reading its answer is not queued work)."""
        jobs = JobRow.__table__
        answer = DELIVERIES.c.kind.in_(sorted(k.value for k in ANSWERS))
        stmt = (
            select(jobs.c.id)
            .join(DELIVERIES, DELIVERIES.c.job_id == jobs.c.id)
            .where(
                _sent_by(job_ids, keep_answers_of),
                DELIVERIES.c.state == DeliveryState.ADMITTED.value,
                or_(
                    ~answer & jobs.c.status.not_in(sorted(s.value for s in TERMINAL)),
                    answer & (jobs.c.status == JobStatus.QUEUED.value),
                ),
            )
            .order_by(jobs.c.created_at, jobs.c.id)
        )
        with self._db.engine.connect() as conn:
            return [str(j) for j in conn.scalars(stmt)]

    def withdraw_one(self, delivery_id: str, *, by: str, reason: str) -> Delivery | None:
        """Withdraw one delivery if it is still ``accepted``; it as withdrawn, else None."""
        with self._db.write() as conn:
            found = withdraw(conn, DELIVERIES.c.id == delivery_id, by=by, reason=reason)
        return found[0] if found else None

    def insert_withdrawn(self, values: dict[str, Any], *, by: str, reason: str) -> Delivery:
        """Record a new delivery (a row's ``values``) withdrawn at once: its sender
        job was cancelled before its admission could commit
        (docs/collaboration.md#withdrawal). Once per key: a replay returns the
        delivery its key first recorded."""
        row = {
            **values,
            "state": DeliveryState.WITHDRAWN.value,
            "code": WITHDRAWN_CODE,
            "reason": reason,
            "metadata": {**(values.get("metadata") or {}), "withdrawn_by": by},
        }
        with self._db.write() as conn:
            insert_once(conn, row)
            found = by_key(conn, str(values["idempotency_key"]))
        assert found is not None, "a delivery just inserted can be read back"
        return found

    def withdraw_inbox(self, session_id: str, *, by: str, reason: str) -> builtins.list[Delivery]:
        """Withdraw every delivery waiting to be admitted into ``session_id``
        (queued messages, follow-ups, results); the ones withdrawn (:func:`withdraw`)."""
        with self._db.write() as conn:
            return withdraw(
                conn, DELIVERIES.c.target_session_id == session_id, by=by, reason=reason
            )

    def stranded(self, older_than: datetime, limit: int = 500) -> builtins.list[Delivery]:
        """Accepted deliveries older than ``older_than``: follow-ups a crash left
        unadmitted, and messages whose target went idle without draining them."""
        stmt = (
            select(DELIVERIES)
            .where(
                DELIVERIES.c.state == DeliveryState.ACCEPTED.value,
                DELIVERIES.c.created_at < older_than,
            )
            .order_by(DELIVERIES.c.created_at)
            .limit(limit)
        )
        with self._db.engine.connect() as conn:
            return [as_delivery(r) for r in conn.execute(stmt).mappings()]

    def requests(
        self,
        session_id: str,
        *,
        direction: str,
        kinds: Iterable[DeliveryKind] | None = None,
        states: Iterable[DeliveryState] | None = None,
        limit: int = 20,
    ) -> builtins.list[tuple[Delivery, str | None]]:
        """Deliveries (of ``kinds``: None, every kind) into (``in``) or out of
        (``out``) a session, or both ways (``both``), newest first, each with
        its job's status (None: no job)."""
        jobs = JobRow.__table__
        into = DELIVERIES.c.target_session_id == session_id
        out = DELIVERIES.c.sender_session_id == session_id
        stmt = (
            select(DELIVERIES, jobs.c.status.label("job_status"))
            .outerjoin(jobs, jobs.c.id == DELIVERIES.c.job_id)
            .where(into if direction == "in" else out if direction == "out" else or_(into, out))
            .order_by(DELIVERIES.c.created_at.desc(), DELIVERIES.c.id.desc())
            .limit(limit)
        )
        if kinds is not None:
            stmt = stmt.where(DELIVERIES.c.kind.in_([k.value for k in kinds]))
        if states is not None:
            stmt = stmt.where(DELIVERIES.c.state.in_([s.value for s in states]))
        with self._db.engine.connect() as conn:
            return [(as_delivery(r), r["job_status"]) for r in conn.execute(stmt).mappings()]

    def with_job_status(self, delivery_id: str) -> tuple[Delivery, str | None] | None:
        """One delivery and its job's status, or None."""
        jobs = JobRow.__table__
        stmt = (
            select(DELIVERIES, jobs.c.status.label("job_status"))
            .outerjoin(jobs, jobs.c.id == DELIVERIES.c.job_id)
            .where(DELIVERIES.c.id == delivery_id)
        )
        with self._db.engine.connect() as conn:
            row = conn.execute(stmt).mappings().first()
        return (as_delivery(row), row["job_status"]) if row is not None else None

    def stuck(self, older_than: datetime, limit: int = 500) -> builtins.list[Delivery]:
        """Deliveries still ``admitted`` whose job is terminal, last changed before
        ``older_than``: a job's end that did not apply its delivery's policy."""
        jobs = JobRow.__table__
        stmt = (
            select(DELIVERIES)
            .join(jobs, jobs.c.id == DELIVERIES.c.job_id)
            .where(
                DELIVERIES.c.state == DeliveryState.ADMITTED.value,
                DELIVERIES.c.updated_at < older_than,
                jobs.c.status.in_(sorted(s.value for s in TERMINAL)),
            )
            .order_by(DELIVERIES.c.updated_at)
            .limit(limit)
        )
        with self._db.engine.connect() as conn:
            return [as_delivery(r) for r in conn.execute(stmt).mappings()]

    def latest_session(self, agent_id: str, project: str, *, besides: str) -> str | None:
        """The id of ``agent_id``'s most recently active live session in ``project``
        (``besides`` left out), or None."""
        sessions = SessionRow.__table__
        stmt = (
            select(sessions.c.id)
            .where(
                sessions.c.agent_id == agent_id,
                sessions.c.project == project,
                sessions.c.archived_at.is_(None),
                sessions.c.id != besides,
            )
            .order_by(
                func.coalesce(sessions.c.active_at, sessions.c.created_at).desc(),
                sessions.c.id.desc(),
            )
            .limit(1)
        )
        with self._db.engine.connect() as conn:
            found = conn.scalar(stmt)
        return str(found) if found is not None else None

    def count(self, session_id: str, state: DeliveryState) -> int:
        """How many deliveries into ``session_id`` are in ``state``."""
        stmt = select(func.count()).where(
            DELIVERIES.c.target_session_id == session_id, DELIVERIES.c.state == state.value
        )
        with self._db.engine.connect() as conn:
            return int(conn.scalar(stmt) or 0)
