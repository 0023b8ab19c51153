"""The write helpers every concept shares, each run in an open write transaction.

A session's next seq (and job ordinal) under its row lock (:func:`bump`),
an entry and the job it admits (:func:`insert_entry`), a job row
(:func:`new_job`), a turn's fence (:func:`check_fence`), a job's row lock
(:func:`lock_job`) and a run's rollback (:func:`roll_back`). They take a
``Connection`` and never open one: whoever holds the transaction decides
what commits together.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, case, func, select, update

from chaz import tracing
from chaz.domain import events as ev
from chaz.domain.entries import NewEntry
from chaz.domain.jobs import JobStatus, missing_job
from chaz.errors import LeaseLost, SessionNotFound
from chaz.ids import new_id, utcnow
from chaz.store import statements as st
from chaz.store.events import record
from chaz.store.models import unfinished
from chaz.store.types import Fence, JobFields


def bump(conn: Connection, session_id: str, admit: bool) -> Any:
    """Take the session's next seq (and, for an admission, its next job ordinal),
    locking the session row; the session row as it now is."""
    if admit:
        params = {"sid": session_id, **st.active_params(utcnow())}
        row = conn.execute(st.BUMP_ADMIT, params).mappings().first()
    else:
        row = conn.execute(st.BUMP, {"sid": session_id}).mappings().first()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}", session=session_id)
    return row


def insert_entry(
    conn: Connection,
    session: Any,
    draft: NewEntry,
    *,
    admit: bool,
    job_fields: JobFields | None,
    job_id: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Insert one entry (and the job it admits, with id ``job_id`` if given)
    into ``session``, a row that :func:`bump` returned in this open write
    transaction."""
    session_id = session["id"]
    now = utcnow()
    entry_id = new_id()
    job_row: dict[str, Any] | None = None
    if admit:
        job_row = new_job(session, session["last_ordinal"], entry_id, job_fields, now, job_id)
        job_id = job_row["id"]
    else:
        job_id = draft.job_id
    entry_values = entry_row(entry_id, session_id, session["last_seq"], draft, job_id, now)
    if job_row is not None and conn.dialect.name == "postgresql":
        # One round trip for both rows (SQLite has no data-modifying CTE).
        params = {f"e_{k}": v for k, v in entry_values.items()}
        conn.execute(st.INSERT_ENTRY_AND_JOB, params | {f"j_{k}": v for k, v in job_row.items()})
    else:
        conn.execute(st.INSERT_ENTRY, entry_values)
        if job_row is not None:
            conn.execute(st.INSERT_JOB, job_row)
    if job_row is not None and job_row["delivery_id"]:
        # Only a delivered job's states are logged: a producer's own turns
        # are in the jobs table, and three more rows per turn cost every
        # turn a quarter more PostgreSQL time (docs/performance.md).
        record(conn, session_id, ev.job_event("queued"), {"job_id": job_row["id"]})
    return entry_values, job_row


def admit_in_one(
    conn: Connection, session_id: str, draft: NewEntry, job_fields: JobFields | None, job_id: str
) -> tuple[Any, dict[str, Any] | None, dict[str, Any] | None]:
    """:func:`bump` and :func:`insert_entry` of an admission as one statement
    (PostgreSQL, ``st.ADMIT_IN_ONE``): the session row as :func:`bump` returns
    it, and the entry's and the job's columns, or None twice when the session
    is a room (only its seq and ordinal were taken: the room's rule writes)."""
    now = utcnow()
    entry_id = new_id()
    # The session's columns (tree, project, ordinal, seq) are the statement's
    # own; the placeholders here are replaced from the row it returns.
    placeholder = {"id": session_id, "tree_id": None, "project": None, "unattended": False}
    job_row = new_job(placeholder, 0, entry_id, job_fields, now, job_id)
    entry_values = entry_row(entry_id, session_id, 0, draft, job_row["id"], now)
    params = {f"e_{k}": v for k, v in entry_values.items() if k not in ("seq", "session_id")}
    params |= {
        f"j_{k}": v
        for k, v in job_row.items()
        if k not in ("session_id", "tree_id", "project", "ordinal")
    }
    params |= {"sid": session_id, **st.active_params(now)}
    row = conn.execute(st.ADMIT_IN_ONE, params).mappings().first()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}", session=session_id)
    if row["members"] is not None:
        return row, None, None
    entry_values["seq"] = row["last_seq"]
    job_row |= {
        "tree_id": row["tree_id"],
        "project": row["project"],
        "ordinal": row["last_ordinal"],
        "unattended": bool(job_row["unattended"] or row["unattended"]),
    }
    return row, entry_values, job_row


def entry_row(
    entry_id: str, session_id: str, seq: int, draft: NewEntry, job_id: str | None, now: datetime
) -> dict[str, Any]:
    """Every column of ``draft``'s row as entry ``entry_id`` at ``seq``."""
    return {
        "id": entry_id,
        "session_id": session_id,
        "seq": seq,
        "type": draft.type.value,
        "sender": draft.sender,
        "content": draft.content,
        "metadata": draft.metadata or {},
        "job_id": job_id,
        "idempotency_key": draft.idempotency_key,
        "key_scope": draft.key_scope.value if draft.idempotency_key is not None else None,
        "created_at": now,
    }


def append_entry(conn: Connection, session_id: str, draft: NewEntry) -> dict[str, Any]:
    """Append an entry that admits nothing at the session's head (:func:`bump`
    and :func:`insert_entry`); its columns."""
    values, _ = insert_entry(
        conn, bump(conn, session_id, admit=False), draft, admit=False, job_fields=None
    )
    return values


def new_job(
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
        "starts": 0,
        "lease_token": None,
        "checkpoint": None,
        "result": None,
        "error": None,
        "created_at": now,
        "started_at": None,
        "finished_at": None,
        "webhook": f.webhook,
        # One test of a flag when tracing is off (docs/operations.md#tracing).
        "trace_context": tracing.job_carrier(session["id"]),
    }


def check_fence(conn: Connection, fence: Fence) -> None:
    """:class:`~chaz.errors.LeaseLost` unless ``fence`` still holds its job (row locked)."""
    token = conn.scalar(st.FENCE, {"jid": fence.job_id})
    if token != fence.token:
        raise LeaseLost(f"job {fence.job_id} is no longer held by this worker", job_id=fence.job_id)


def lock_job(conn: Connection, job_id: str) -> dict[str, Any]:
    """The job's row, locked for this transaction, or :class:`~chaz.errors.JobNotFound`."""
    row = conn.execute(st.LOCK_JOB, {"jid": job_id}).mappings().first()
    if row is None:
        raise missing_job(job_id)
    return dict(row)


def roll_back(conn: Connection, job_ids: list[str]) -> int:
    """Mark those of ``job_ids`` rolled back that have not ended and are not
    marked yet (chaz/domain/multitask.py); how many it marked.

    A compare-and-set on the job's status: a job whose end committed first
    is left as it is, and a mark committed first hides what the job writes
    after it, its end included.
    """
    if not job_ids:
        return 0
    done = conn.execute(
        update(st.JOBS)
        .where(
            st.JOBS.c.id.in_(job_ids),
            unfinished(st.JOBS.c.status),
            st.JOBS.c.rolled_back_at.is_(None),
        )
        .values(rolled_back_at=utcnow())
    )
    return int(done.rowcount or 0)


def job_counts(conn: Connection, session_id: str) -> tuple[int, int]:
    """``(queued, total)``: the session's waiting jobs and all it ever admitted."""
    # A job queued again after an approval decision left the queue on its
    # first start (starts > 0): it is not counted against the queue again.
    queued = func.sum(
        case(
            (and_(st.JOBS.c.status == JobStatus.QUEUED.value, st.JOBS.c.starts == 0), 1),
            else_=0,
        )
    )
    row = conn.execute(select(queued, func.count()).where(st.JOBS.c.session_id == session_id)).one()
    return int(row[0] or 0), int(row[1])
