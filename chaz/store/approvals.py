"""The ``approvals`` table: tool calls waiting for a person (docs/approvals.md).

A request leaves ``pending`` once, by a compare-and-set on its state; the
writer that wins moves its job from ``waiting_approval`` back to ``queued``
in the same transaction. Every decision, winning or not, is also an
``ApprovalDecision`` entry; approval entries admit nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, insert, select, update

from chaz.domain.approvals import Approval, ApprovalState
from chaz.domain.entries import Entry, NewEntry
from chaz.domain.jobs import Job, JobStatus
from chaz.errors import ApprovalNotFound, IllegalTransition
from chaz.ids import as_utc, utcnow
from chaz.store.models import ApprovalRow, JobRow
from chaz.store.rows import as_entry, as_job
from chaz.store.types import Fence
from chaz.store.writes import append_entry, check_fence

if TYPE_CHECKING:
    from chaz.store.db import Database


@dataclass(frozen=True)
class Closed:
    """What one attempt to close a request did."""

    approval: Approval
    #: True for the one writer whose compare-and-set closed the request.
    won: bool
    #: The job, queued again, when this writer won and it was still waiting.
    job: Job | None
    #: The ApprovalDecision entry written (None when none was).
    entry: Entry | None


def as_approval(row: Any) -> Approval:
    """A row of ``approvals`` as the domain model."""
    data = dict(row)
    for col in ("created_at", "expires_at", "decided_at"):
        if data[col] is not None:
            data[col] = as_utc(data[col])
    return Approval.model_validate(data)


class ApprovalStore:
    """Requests, decisions and timeouts (``Store.approvals``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, request_id: str) -> Approval:
        """One request, or :class:`~chaz.errors.ApprovalNotFound`."""
        with self._db.read() as conn:
            row = (
                conn.execute(select(ApprovalRow).where(ApprovalRow.request_id == request_id))
                .mappings()
                .first()
            )
        if row is None:
            raise ApprovalNotFound(f"no approval request {request_id!r}", request_id=request_id)
        return as_approval(row)

    def find(self, request_id: str) -> Approval | None:
        """One request, or None."""
        try:
            return self.get(request_id)
        except ApprovalNotFound:
            return None

    def pending(
        self, session_id: str | None = None, limit: int = 100, *, project: str | None = None
    ) -> list[Approval]:
        """Requests still waiting for a decision (of one project), oldest first."""
        stmt = (
            select(ApprovalRow)
            .where(ApprovalRow.state == ApprovalState.PENDING.value)
            .order_by(ApprovalRow.created_at)
            .limit(limit)
        )
        if session_id is not None:
            stmt = stmt.where(ApprovalRow.session_id == session_id)
        if project is not None:
            stmt = stmt.where(ApprovalRow.project == project)
        with self._db.read() as conn:
            return [as_approval(r) for r in conn.execute(stmt).mappings()]

    def approved_all(self, job_id: str) -> bool:
        """Whether a request of the job was decided ``approve_all``."""
        stmt = select(ApprovalRow.request_id).where(
            ApprovalRow.job_id == job_id,
            ApprovalRow.state == ApprovalState.APPROVED.value,
            ApprovalRow.decision == "approve_all",
        )
        with self._db.read() as conn:
            return conn.execute(stmt.limit(1)).first() is not None

    def due(self, now: datetime, limit: int = 500) -> list[Approval]:
        """Pending requests whose timeout has passed."""
        stmt = (
            select(ApprovalRow)
            .where(ApprovalRow.state == ApprovalState.PENDING.value, ApprovalRow.expires_at <= now)
            .order_by(ApprovalRow.expires_at)
            .limit(limit)
        )
        with self._db.read() as conn:
            return [as_approval(r) for r in conn.execute(stmt).mappings()]

    def suspend(
        self, fence: Fence, approval: Approval, draft: NewEntry
    ) -> tuple[Job, Entry | None]:
        """Suspend a running turn on ``approval``: record the request (once: a
        resumed turn asking again reuses it) and its ``draft`` ApprovalRequest
        entry, and move the job ``running -> waiting_approval``, dropping its
        lease, in one transaction.

        :class:`~chaz.errors.LeaseLost` if another worker holds the job;
        :class:`~chaz.errors.IllegalTransition` if it is no longer running (a
        cancel was requested): then nothing is written.
        """
        with self._db.write() as conn:
            check_fence(conn, fence)
            entry: Entry | None = None
            exists = conn.scalar(
                select(ApprovalRow.state).where(ApprovalRow.request_id == approval.request_id)
            )
            if exists is None:
                conn.execute(insert(ApprovalRow).values(**approval.model_dump(mode="python")))
                entry = as_entry(append_entry(conn, approval.session_id, draft))
            job_row = conn.execute(select(JobRow).where(JobRow.id == fence.job_id)).mappings().one()
            if job_row["status"] != JobStatus.RUNNING.value:
                raise IllegalTransition(
                    f"a {job_row['status']} job cannot wait for approval",
                    current=job_row["status"],
                    target=JobStatus.WAITING_APPROVAL.value,
                )
            values_job = {
                "status": JobStatus.WAITING_APPROVAL.value,
                "version": job_row["version"] + 1,
                "lease_token": None,
            }
            conn.execute(
                update(JobRow)
                .where(and_(JobRow.id == fence.job_id, JobRow.version == job_row["version"]))
                .values(**values_job)
            )
            return as_job({**job_row, **values_job}), entry

    def close(
        self,
        request_id: str,
        target: ApprovalState,
        by: str,
        draft: NewEntry | None,
        *,
        now: datetime | None = None,
        decision: str | None = None,
    ) -> Closed:
        """Close a pending request in ``target`` if it is still pending: the
        first writer wins and queues its job again (and records ``decision``,
        the person's choice); every caller's ``draft`` (its ApprovalDecision
        entry) is written either way.

        A request past its timeout closes ``expired`` whatever ``target`` asked.
        """
        now = now or utcnow()
        with self._db.write() as conn:
            row = (
                conn.execute(select(ApprovalRow).where(ApprovalRow.request_id == request_id))
                .mappings()
                .first()
            )
            if row is None:
                raise ApprovalNotFound(f"no approval request {request_id!r}", request_id=request_id)
            current = as_approval(row)
            asked = target
            if target is not ApprovalState.CANCELLED and current.expires_at <= now:
                target = ApprovalState.EXPIRED
                by = "system:timeout"
                decision = None
            won = bool(
                conn.execute(
                    update(ApprovalRow)
                    .where(
                        ApprovalRow.request_id == request_id,
                        ApprovalRow.state == ApprovalState.PENDING.value,
                    )
                    .values(state=target.value, decided_by=by, decided_at=now, decision=decision)
                ).rowcount
            )
            job = (
                _requeue(conn, current.job_id)
                if won and target is not ApprovalState.CANCELLED
                else None
            )
            final = as_approval(
                conn.execute(select(ApprovalRow).where(ApprovalRow.request_id == request_id))
                .mappings()
                .one()
            )
            entry: Entry | None = None
            if draft is not None:
                meta = dict(draft.metadata or {})
                # A late decision that closed the request as expired did not
                # take effect itself: its entry says so.
                meta["effective"] = won and target is asked
                meta["state"] = final.state.value
                draft = NewEntry(
                    draft.type, draft.sender, draft.content, meta, job_id=current.job_id
                )
                entry = as_entry(append_entry(conn, current.session_id, draft))
        return Closed(final, won, job, entry)

    def cancel_for_job(self, job_id: str) -> None:
        """Close the job's pending requests ``cancelled`` (its job was cancelled)."""
        with self._db.write() as conn:
            conn.execute(
                update(ApprovalRow)
                .where(
                    ApprovalRow.job_id == job_id,
                    ApprovalRow.state == ApprovalState.PENDING.value,
                )
                .values(
                    state=ApprovalState.CANCELLED.value,
                    decided_by="system:cancel",
                    decided_at=utcnow(),
                )
            )


def _requeue(conn: Connection, job_id: str) -> Job | None:
    """``waiting_approval -> queued``; None if the job is no longer waiting (cancelled)."""
    row = conn.execute(select(JobRow).where(JobRow.id == job_id)).mappings().first()
    if row is None or row["status"] != JobStatus.WAITING_APPROVAL.value:
        return None
    values = {"status": JobStatus.QUEUED.value, "version": row["version"] + 1}
    done = conn.execute(
        update(JobRow)
        .where(and_(JobRow.id == job_id, JobRow.version == row["version"]))
        .values(**values)
    ).rowcount
    return as_job({**row, **values}) if done else None
