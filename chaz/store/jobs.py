"""Jobs: reads of admitted turns, and the one gate for status changes outside
a turn (:meth:`Jobs.transition`).

A turn's own start, checkpoints and end are the fenced write core's
(:mod:`chaz.store.core`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, func, or_, select, update

from chaz.domain import events as ev
from chaz.domain.budgets import Totals
from chaz.domain.jobs import ACTIVE, TERMINAL, Job, JobStatus, check_transition, missing_job
from chaz.errors import Conflict, VersionConflict
from chaz.ids import utcnow
from chaz.store import budgets as budget_rows
from chaz.store import statements as st
from chaz.store.db import Database
from chaz.store.ending import Completion, job_ended
from chaz.store.events import record
from chaz.store.models import JobRow, SessionRow, unfinished
from chaz.store.rows import as_job
from chaz.store.writes import job_counts, lock_job, roll_back


class Jobs:
    """Read jobs and move one outside a turn (``store.get_job``, ``store.transition``, ...)."""

    db: Database

    def get_job(self, job_id: str, *, project: str | None = None) -> Job:
        """One job, or :class:`JobNotFound`; with ``project``, a job of another
        project is answered exactly as a missing one."""
        stmt = select(JobRow).where(JobRow.id == job_id)
        if project is not None:
            stmt = stmt.where(JobRow.project == project)
        with self.db.read() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None:
            raise missing_job(job_id)
        return as_job(row)

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, Job]:
        """Several jobs by id (missing ids are left out)."""
        ids = list(job_ids)
        if not ids:
            return {}
        with self.db.read() as conn:
            rows = conn.execute(select(JobRow).where(JobRow.id.in_(ids))).mappings()
            return {r["id"]: as_job(r) for r in rows}

    def checkpoint(self, job_id: str) -> dict[str, Any] | None:
        """The turn's last checkpoint (kept off :class:`Job` to keep listings small)."""
        with self.db.read() as conn:
            value: dict[str, Any] | None = conn.scalar(
                select(JobRow.checkpoint).where(JobRow.id == job_id)
            )
        return value

    def head_job(self, session_id: str) -> Job | None:
        """The session's oldest job that is not finished: the one whose turn is next."""
        with self.db.read() as conn:
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
        hidden: bool | None = None,
    ) -> list[Job]:
        """Jobs in admission order; ``newest_first`` keeps the latest when ``limit`` cuts;
        ``project`` keeps only that project's; ``hidden=False`` leaves out the
        runs deleted over HTTP (:meth:`hide_job`)."""
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
        if hidden is not None:
            shown = JobRow.hidden_at.is_(None)
            stmt = stmt.where(~shown if hidden else shown)
        with self.db.read() as conn:
            return [as_job(r) for r in conn.execute(stmt).mappings()]

    def hide_job(self, job_id: str) -> Job:
        """Hide an ended job from its thread's runs (``DELETE .../runs/{run}``):
        the job, its entries and its events stay. A job not ended is
        :class:`Conflict` (it would go on running unseen); one hidden before
        is :class:`JobNotFound`, as it is to every thread route."""
        ended = [s.value for s in TERMINAL]
        stmt = (
            update(JobRow)
            .where(JobRow.id == job_id, JobRow.status.in_(ended), JobRow.hidden_at.is_(None))
            .values(hidden_at=utcnow())
        )
        with self.db.write() as conn:
            done = conn.execute(stmt).rowcount
            row = conn.execute(select(JobRow).where(JobRow.id == job_id)).mappings().first()
        if row is None:
            raise missing_job(job_id)
        job = as_job(row)
        if done:
            return job
        if job.hidden_at is not None:
            raise missing_job(job_id)
        raise Conflict(
            f"run {job_id} has not ended ({job.status.value}): cancel it first",
            field="run_id",
            run_id=job_id,
            status=job.status.value,
        )

    def usage_totals(
        self, project: str, *, session_id: str | None = None, tree_id: str | None = None
    ) -> Totals:
        """What the project's jobs used (docs/runtime.md#budgets): of one
        session, of one tree, or (neither given) of the whole project."""
        where = budget_rows.in_project(project)
        if session_id is not None:
            where = where & budget_rows.in_session(session_id)
        if tree_id is not None:
            where = where & budget_rows.in_tree(tree_id)
        with self.db.read() as conn:
            return budget_rows.totals(conn, where)

    def project_charged(self, project: str, but: str) -> tuple[int, float]:
        """What the project's jobs (job ``but`` left out) hold against its
        cumulative budgets (tokens, cost), as :meth:`children_charged` counts."""
        with self.db.read() as conn:
            return budget_rows.charged(conn, budget_rows.in_project(project), but=but)

    def children_charged(self, job_id: str) -> tuple[int, float]:
        """What the jobs spawned by ``job_id`` hold against its budget (tokens,
        cost): a live one its reservation or more, an ended one what it used."""
        with self.db.read() as conn:
            return budget_rows.charged(conn, st.JOBS.c.parent_job_id == job_id, but="")

    def count_created(self, job_id: str) -> int:
        """How many sessions ``job_id``'s turn created (its fan-out, docs/contracts.md#topology)."""
        stmt = (
            select(func.count()).select_from(SessionRow).where(SessionRow.parent_job_id == job_id)
        )
        with self.db.read() as conn:
            return int(conn.scalar(stmt) or 0)

    def job_counts(self, session_id: str) -> tuple[int, int]:
        """``(queued, total)``: the session's waiting jobs and all it ever admitted."""
        with self.db.read() as conn:
            return job_counts(conn, session_id)

    def active_jobs(self, tree_id: str | None = None) -> list[Job]:
        """Every job not yet finished (of one tree), in admission order per session."""
        stmt = (
            select(JobRow)
            .where(unfinished(JobRow.status))
            .order_by(JobRow.session_id, JobRow.ordinal)
        )
        if tree_id is not None:
            stmt = stmt.where(JobRow.tree_id == tree_id)
        with self.db.read() as conn:
            return [as_job(r) for r in conn.execute(stmt).mappings()]

    def roll_back(self, job_id: str) -> bool:
        """Mark the job rolled back unless it has ended or is marked already
        (:func:`chaz.store.writes.roll_back`); whether this call marked it."""
        with self.db.write() as conn:
            return roll_back(conn, [job_id]) == 1

    def transition(
        self,
        job_id: str,
        target: JobStatus,
        *,
        completion: Completion,
        expected_version: int | None = None,
        error: dict[str, Any] | None = None,
    ) -> Job:
        """The one gate for other status changes: checks the move and the version.

        A terminal ``target`` applies the job's end like a turn's end does
        (its event; its delivery's ``completion`` policy), with ``error`` as
        the job's error.
        """
        with self.db.write() as conn:
            row = lock_job(conn, job_id)
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
                job_ended(
                    conn,
                    job_id,
                    row["session_id"],
                    target,
                    result=row["result"],
                    error=values.get("error", row["error"]),
                    delivery_id=row["delivery_id"],
                    fire_id=row.get("fire_id"),
                    completion=completion,
                    webhook=row.get("webhook"),
                    project=row.get("project") or "default",
                )
            elif row["delivery_id"] or row.get("fire_id"):
                record(conn, row["session_id"], ev.job_event(target.value), {"job_id": job_id})
            return as_job({**row, **values})
