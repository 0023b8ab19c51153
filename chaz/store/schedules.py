"""The ``schedules`` and ``schedule_fires`` tables (docs/schedules.md).

A schedule's row holds its definition and its progress (``next_slot``, the
count of fires, consecutive failures). A fire's row is the *claim* of one
slot: unique on ``(schedule_id, slot)``, so whoever inserts it first fires
the slot and every other beat, restart or redelivered task gets nothing.
The rows are the agent's ledger: slot, when fired, session, job, outcome,
duration, usage.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, select, update

from chaz.domain.jobs import JobStatus
from chaz.domain.principals import DEFAULT_PRINCIPAL, DEFAULT_PROJECT
from chaz.domain.schedules import (
    EDITABLE,
    FireOutcome,
    Schedule,
    ScheduleFire,
    check_fields,
    check_owner,
    first_slot,
)
from chaz.domain.sessions import missing_session
from chaz.errors import AgentNotFound, Cancelled, ScheduleNotFound, SessionArchived
from chaz.ids import as_utc, new_id, utcnow
from chaz.store import upsert
from chaz.store.models import AgentRow, JobRow, ScheduleFireRow, ScheduleRow, SessionRow

if TYPE_CHECKING:
    from chaz.store.db import Database

SCHEDULES = ScheduleRow.__table__
FIRES = ScheduleFireRow.__table__

#: The fields whose change moves a schedule's next slot.
TIMING = frozenset({"kind", "cron", "timezone", "interval_seconds", "run_at", "expires_at"})
#: Outcomes that count toward the consecutive-failure limit.
FAILING = frozenset({FireOutcome.FAILED, FireOutcome.REFUSED})


def as_schedule(row: Any) -> Schedule:
    """A ``schedules`` row as a :class:`Schedule`."""
    r = dict(row)
    for key in ("run_at", "expires_at", "next_slot", "last_slot", "created_at", "updated_at"):
        if r.get(key) is not None:
            r[key] = as_utc(r[key])
    return Schedule.model_validate(r)


def as_fire(row: Any) -> ScheduleFire:
    """A ``schedule_fires`` row as a :class:`ScheduleFire`."""
    r = dict(row)
    r["slot"], r["fired_at"] = as_utc(r["slot"]), as_utc(r["fired_at"])
    return ScheduleFire.model_validate(r)


class ScheduleStore:
    """Schedules and their fires (``Store.schedules``).

    Calls that take ``owner`` act for that agent: another agent's schedule
    is :class:`~chaz.errors.ScheduleNotFound`, exactly like a missing one.
    ``now`` is injectable everywhere a slot is computed.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- definitions ----------------------------------------------------------

    def add(
        self,
        owner: str,
        fields: dict[str, Any],
        *,
        now: datetime | None = None,
        schedule_id: str | None = None,
        project: str = DEFAULT_PROJECT,
        principal: str = DEFAULT_PRINCIPAL,
        grants: list[str] | None = None,
        unattended: bool = False,
        job_id: str | None = None,
    ) -> Schedule:
        """Create a schedule owned by ``owner``; its first slot is computed from ``now``.

        ``schedule_id`` makes the call repeatable (a resumed turn's tool
        call): a schedule of that id and owner is returned as it is.
        ``project``, ``principal``, ``grants`` (sorted names, None: every
        grant) and ``unattended`` are whose it is and the authority its fires
        run with (docs/security.md#grants-inside-turns); a pinned session must
        be of ``project``.

        ``job_id`` is the job whose turn adds it. That job must not be
        stopping or ended, its row share-locked until this commits: a cancel
        that moved it first refuses the schedule (``job.cancelled``), and one
        that moves it after finds the schedule to pause
        (docs/schedules.md#a-cancelled-creator).
        """
        owner = check_owner(owner)
        values = check_fields(fields)
        now = now or utcnow()
        with self._db.write() as conn:
            if schedule_id is not None:
                found = (
                    conn.execute(select(SCHEDULES).where(SCHEDULES.c.id == schedule_id))
                    .mappings()
                    .first()
                )
                if (
                    found is not None
                    and found["owner_agent_id"] == owner
                    and found["project"] == project
                ):
                    return as_schedule(found)
            if job_id is not None:
                _check_not_stopped(conn, job_id)
            if conn.scalar(select(AgentRow.id).where(AgentRow.id == owner)) is None:
                raise AgentNotFound(f"no agent {owner!r}", agent_id=owner)
            if values["session_id"] is not None:
                values["session_id"] = _session_id(conn, values["session_id"], project)
            row = {
                **values,
                "id": schedule_id or new_id(),
                "owner_agent_id": owner,
                "project": project,
                "owner": principal,
                "grants": grants,
                "unattended": unattended,
                "job_id": job_id,
                "fires": 0,
                "failures": 0,
                "last_error": None,
                "disabled_reason": None,
                "last_slot": None,
                "created_at": now,
                "updated_at": now,
            }
            row["next_slot"] = first_slot(as_schedule({**row, "next_slot": None}), now)
            conn.execute(SCHEDULES.insert().values(**row))
        return as_schedule(row)

    def update(
        self,
        schedule_id: str,
        changes: dict[str, Any],
        *,
        owner: str | None = None,
        now: datetime | None = None,
        project: str | None = None,
    ) -> Schedule:
        """Change fields of a schedule; the whole result is checked again.

        A change of its timing, or enabling it, computes its next slot from
        ``now`` and clears its failures and disabled reason (a resume starts
        afresh). ``project``: only a schedule of that project is found, and a
        newly pinned session must be of it.
        """
        now = now or utcnow()
        with self._db.write() as conn:
            old = _locked(conn, schedule_id, owner, project)
            merged = {k: getattr(old, k) for k in EDITABLE}
            merged = {k: v.value if hasattr(v, "value") else v for k, v in merged.items()}
            merged.update(changes)
            values = check_fields(merged)
            if values["session_id"] is not None and values["session_id"] != old.session_id:
                values["session_id"] = _session_id(conn, values["session_id"], project)
            retime = bool(TIMING & set(changes)) or (values["enabled"] and not old.enabled)
            if values["enabled"] and not old.enabled:
                values |= {"failures": 0, "disabled_reason": None}
            values["updated_at"] = now
            if retime:
                probe = as_schedule({**old.model_dump(), **values, "next_slot": None})
                values["next_slot"] = first_slot(probe, now)
            conn.execute(update(SCHEDULES).where(SCHEDULES.c.id == old.id).values(**values))
            row = conn.execute(select(SCHEDULES).where(SCHEDULES.c.id == old.id)).mappings().one()
        return as_schedule(row)

    def remove(
        self, schedule_id: str, *, owner: str | None = None, project: str | None = None
    ) -> Schedule:
        """Delete a schedule and its ledger; the schedule as it was."""
        with self._db.write() as conn:
            old = _locked(conn, schedule_id, owner, project)
            conn.execute(delete(FIRES).where(FIRES.c.schedule_id == old.id))
            conn.execute(delete(SCHEDULES).where(SCHEDULES.c.id == old.id))
        return old

    def get(
        self, schedule_id: str, *, owner: str | None = None, project: str | None = None
    ) -> Schedule:
        """One schedule (of ``owner``, of ``project``, when given), or
        :class:`ScheduleNotFound`, the same for one that exists elsewhere."""
        with self._db.read() as conn:
            row = conn.execute(select(SCHEDULES).where(SCHEDULES.c.id == schedule_id)).mappings()
            found = row.first()
        if found is None or _elsewhere(found, owner, project):
            raise ScheduleNotFound(f"no schedule {schedule_id!r}", schedule_id=schedule_id)
        return as_schedule(found)

    def list(
        self, owner: str | None = None, *, project: str | None = None
    ) -> builtins.list[Schedule]:
        """Schedules (of one owner, of one project), oldest first."""
        stmt = select(SCHEDULES).order_by(SCHEDULES.c.created_at, SCHEDULES.c.id)
        if owner is not None:
            stmt = stmt.where(SCHEDULES.c.owner_agent_id == owner)
        if project is not None:
            stmt = stmt.where(SCHEDULES.c.project == project)
        with self._db.read() as conn:
            return [as_schedule(r) for r in conn.execute(stmt).mappings()]

    def fires(self, schedule_id: str, *, limit: int = 100) -> builtins.list[ScheduleFire]:
        """A schedule's ledger, newest slot first."""
        stmt = (
            select(FIRES)
            .where(FIRES.c.schedule_id == schedule_id)
            .order_by(FIRES.c.slot.desc())
            .limit(limit)
        )
        with self._db.read() as conn:
            return [as_fire(r) for r in conn.execute(stmt).mappings()]

    def fire_at(self, schedule_id: str, slot: datetime) -> ScheduleFire | None:
        """The ledger row of one slot, if it was claimed."""
        stmt = select(FIRES).where(FIRES.c.schedule_id == schedule_id, FIRES.c.slot == slot)
        with self._db.read() as conn:
            row = conn.execute(stmt).mappings().first()
        return as_fire(row) if row is not None else None

    # -- the beat's side -------------------------------------------------------

    def due(self, now: datetime) -> builtins.list[Schedule]:
        """Enabled schedules whose next slot has come by ``now``."""
        stmt = (
            select(SCHEDULES)
            .where(
                SCHEDULES.c.enabled.is_(True),
                SCHEDULES.c.next_slot.is_not(None),
                SCHEDULES.c.next_slot <= now,
            )
            .order_by(SCHEDULES.c.next_slot)
        )
        with self._db.read() as conn:
            return [as_schedule(r) for r in conn.execute(stmt).mappings()]

    def soonest(self) -> datetime | None:
        """The earliest next slot of any enabled schedule (for the beat's sleep)."""
        stmt = select(func.min(SCHEDULES.c.next_slot)).where(SCHEDULES.c.enabled.is_(True))
        with self._db.read() as conn:
            value = conn.scalar(stmt)
        return as_utc(value) if value is not None else None

    def changed_since(self) -> tuple[Any, int]:
        """A cheap change marker: the latest ``updated_at`` and the count of schedules.

        The beat compares it between looks: an addition, a change or a
        removal moves it.
        """
        stmt = select(func.max(SCHEDULES.c.updated_at), func.count())
        with self._db.read() as conn:
            row = conn.execute(stmt).one()
        return (row[0], int(row[1]))

    def advance(self, schedule_id: str, seen: datetime, nxt: datetime | None) -> bool:
        """Move the next slot from ``seen`` to ``nxt``; False if someone moved it first."""
        with self._db.write() as conn:
            done = conn.execute(
                update(SCHEDULES)
                .where(SCHEDULES.c.id == schedule_id, SCHEDULES.c.next_slot == seen)
                .values(next_slot=nxt)
            ).rowcount
        return bool(done)

    # -- fires ------------------------------------------------------------------

    def stranded(self, older_than: datetime, limit: int = 100) -> builtins.list[ScheduleFire]:
        """Claimed fires that never got their job: their process died (or failed)
        between the claim and the admission. The reconciler admits them."""
        stmt = (
            select(FIRES)
            .where(
                FIRES.c.outcome == FireOutcome.ADMITTED.value,
                FIRES.c.job_id.is_(None),
                FIRES.c.fired_at < older_than,
            )
            .order_by(FIRES.c.fired_at)
            .limit(limit)
        )
        with self._db.read() as conn:
            return [as_fire(r) for r in conn.execute(stmt).mappings()]

    def claim(
        self, schedule_id: str, slot: datetime, *, now: datetime | None = None
    ) -> ScheduleFire | None:
        """Claim one slot: its fire row, or None when the slot was claimed already.

        ``INSERT ... ON CONFLICT DO NOTHING`` on the unique ``(schedule_id,
        slot)``: of any number of concurrent claims, one inserts and the
        others see nothing inserted. A schedule that is disabled, removed or
        at its ``max_fires`` claims nothing either. The winner counts the
        fire on the schedule in the same transaction.
        """
        now = now or utcnow()
        values = {
            "id": new_id(),
            "schedule_id": schedule_id,
            "slot": slot,
            "fired_at": now,
            "session_id": None,
            "job_id": None,
            "outcome": FireOutcome.ADMITTED.value,
            "error": None,
            "duration_ms": None,
            "usage": None,
        }
        with self._db.write() as conn:
            row = (
                conn.execute(
                    select(SCHEDULES).where(SCHEDULES.c.id == schedule_id).with_for_update()
                )
                .mappings()
                .first()
            )
            if row is None or not row["enabled"]:
                return None
            if row["max_fires"] is not None and row["fires"] >= row["max_fires"]:
                return None
            inserted = conn.execute(
                upsert.insert(conn, FIRES)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["schedule_id", "slot"])
                .returning(FIRES.c.id)
            ).first()
            if inserted is None:
                return None
            fires = row["fires"] + 1
            last = row["last_slot"]
            changes: dict[str, Any] = {
                "fires": fires,
                "last_slot": slot if last is None or as_utc(last) < slot else last,
            }
            if row["max_fires"] is not None and fires >= row["max_fires"]:
                changes["next_slot"] = None
            conn.execute(update(SCHEDULES).where(SCHEDULES.c.id == schedule_id).values(**changes))
        return as_fire(values)

    def admitted(self, fire_id: str, session_id: str, job_id: str) -> None:
        """Record the session and job a claimed fire admitted."""
        with self._db.write() as conn:
            conn.execute(
                update(FIRES)
                .where(FIRES.c.id == fire_id)
                .values(session_id=session_id, job_id=job_id)
            )

    def settle(
        self,
        fire_id: str,
        outcome: FireOutcome,
        *,
        error: dict[str, Any] | None = None,
        session_id: str | None = None,
        now: datetime | None = None,
    ) -> None:
        """End a fire that admitted no job (``skipped``, ``refused``, ``failed``).

        Only while it is still ``admitted`` with no job: a retry of a fire
        (the reconciler's) that lost the race to its first attempt must not
        overwrite the outcome of the job that attempt admitted.
        """
        jobless = update(FIRES).where(
            FIRES.c.id == fire_id,
            FIRES.c.job_id.is_(None),
            FIRES.c.outcome == FireOutcome.ADMITTED.value,
        )
        # The session, if any, in the same compare-and-set that checks the fire.
        claim = jobless.values(session_id=session_id or FIRES.c.session_id)
        with self._db.write() as conn:
            if conn.execute(claim).rowcount:
                fire_ended(conn, fire_id, outcome, error=error, now=now)

    def pause_made_by(
        self, job_ids: Iterable[str], reason: str, *, now: datetime | None = None
    ) -> builtins.list[str]:
        """Turn off, with ``reason``, the enabled schedules the turns of
        ``job_ids`` added (a cancelled lineage's); their ids, sorted."""
        ids = sorted(set(job_ids))
        if not ids:
            return []
        made = SCHEDULES.c.job_id.in_(ids) & SCHEDULES.c.enabled.is_(True)
        with self._db.write() as conn:
            found = sorted(conn.scalars(select(SCHEDULES.c.id).where(made)))
            if found:
                conn.execute(
                    update(SCHEDULES)
                    .where(SCHEDULES.c.id.in_(found))
                    .values(enabled=False, disabled_reason=reason, updated_at=now or utcnow())
                )
        return found

    def disable(
        self, schedule_id: str, reason: str, *, error: dict[str, Any] | None = None
    ) -> None:
        """Turn a schedule off with a reason (its pinned session is gone, say)."""
        with self._db.write() as conn:
            _disable(conn, schedule_id, reason, error)


def fire_ended(
    conn: Connection,
    fire_id: str,
    outcome: FireOutcome,
    *,
    error: dict[str, Any] | None = None,
    usage: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> None:
    """Record a fire's outcome and its schedule's failure count, in the open transaction.

    Called where a fire's job ends (:func:`chaz.store.ending.job_ended`) and
    where a fire admits nothing. A failure (``failed``, ``refused``) counts
    one more consecutive failure, and the schedule disables itself at its
    ``max_failures``, keeping the error; a success clears the count; a
    skipped slot leaves it.
    """
    now = now or utcnow()
    fire = conn.execute(select(FIRES).where(FIRES.c.id == fire_id).with_for_update()).mappings()
    row = fire.first()
    if row is None:
        return  # the schedule and its ledger were removed meanwhile
    duration = max(0, int((now - as_utc(row["fired_at"])).total_seconds() * 1000))
    conn.execute(
        update(FIRES)
        .where(FIRES.c.id == fire_id)
        .values(outcome=outcome.value, error=error, duration_ms=duration, usage=usage)
    )
    sid = row["schedule_id"]
    if outcome in FAILING:
        sched = (
            conn.execute(
                select(SCHEDULES.c.failures, SCHEDULES.c.max_failures, SCHEDULES.c.enabled)
                .where(SCHEDULES.c.id == sid)
                .with_for_update()
            )
            .mappings()
            .first()
        )
        if sched is None:
            return
        failures = sched["failures"] + 1
        values: dict[str, Any] = {"failures": failures, "last_error": error, "updated_at": now}
        if failures >= sched["max_failures"] and sched["enabled"]:
            values |= {
                "enabled": False,
                "disabled_reason": f"{failures} consecutive fires failed; the last error is kept",
            }
        conn.execute(update(SCHEDULES).where(SCHEDULES.c.id == sid).values(**values))
    elif outcome is FireOutcome.SUCCEEDED:
        conn.execute(update(SCHEDULES).where(SCHEDULES.c.id == sid).values(failures=0))


def _check_not_stopped(conn: Connection, job_id: str) -> None:
    """Raise :class:`~chaz.errors.Cancelled` if ``job_id`` is stopping or has
    ended (a cancel moved it); its row stays share-locked until the caller's
    transaction ends, so a cancel moving it waits for the schedule."""
    status = conn.scalar(
        select(JobRow.status).where(JobRow.id == job_id).with_for_update(read=True)
    )
    if status is not None and (status == JobStatus.STOPPING or JobStatus(status).terminal):
        raise Cancelled(
            f"job {job_id} is {status}: it adds no schedule",
            job_id=job_id,
            status=status,
        )


def _disable(conn: Connection, schedule_id: str, reason: str, error: dict[str, Any] | None) -> None:
    values: dict[str, Any] = {"enabled": False, "disabled_reason": reason, "updated_at": utcnow()}
    if error is not None:
        values["last_error"] = error
    conn.execute(update(SCHEDULES).where(SCHEDULES.c.id == schedule_id).values(**values))


def _elsewhere(row: Any, owner: str | None, project: str | None) -> bool:
    """Whether a schedule row is another owner's or another project's than asked."""
    return (owner is not None and row["owner_agent_id"] != owner) or (
        project is not None and row["project"] != project
    )


def _locked(
    conn: Connection, schedule_id: str, owner: str | None, project: str | None = None
) -> Schedule:
    row = (
        conn.execute(select(SCHEDULES).where(SCHEDULES.c.id == schedule_id).with_for_update())
        .mappings()
        .first()
    )
    if row is None or _elsewhere(row, owner, project):
        raise ScheduleNotFound(f"no schedule {schedule_id!r}", schedule_id=schedule_id)
    return as_schedule(row)


def _session_id(conn: Connection, ref: str, project: str | None = None) -> str:
    """A pinned session's id, by id or name; it must exist (in ``project``, when
    given: another project's is answered as a missing one) and not be archived."""
    stmt = select(SessionRow.id, SessionRow.archived_at)
    if project is not None:
        stmt = stmt.where(SessionRow.project == project)
    row = conn.execute(stmt.where(SessionRow.id == ref)).first()
    if row is None:
        row = conn.execute(stmt.where(SessionRow.name == ref)).first()
    if row is None:
        raise missing_session(ref)
    if row[1] is not None:
        raise SessionArchived(f"session {ref!r} is archived", session_id=row[0])
    return str(row[0])


class FireTaken(Exception):
    """The fire already has its job (a slow first attempt and the sweep's retry
    raced). Internal: the admission rolls back, and the second job never exists."""


def fire_admitted(conn: Connection, fire_id: str, session_id: str, job_id: str) -> None:
    """Record, in the admission's transaction, the session and job a fire admitted.

    A compare-and-set on a fire that has no job yet: of two admissions of one
    fire (its first attempt, and the reconciler's retry of a fire whose
    process died after its claim), one commits; the other raises
    :class:`FireTaken` and rolls back.
    """
    done = conn.execute(
        update(FIRES)
        .where(
            FIRES.c.id == fire_id,
            FIRES.c.job_id.is_(None),
            FIRES.c.outcome == FireOutcome.ADMITTED.value,
        )
        .values(session_id=session_id, job_id=job_id)
    ).rowcount
    if not done:
        raise FireTaken(fire_id)


def job_ended(
    conn: Connection, fire_id: str, status: JobStatus, error: dict[str, Any] | None
) -> None:
    """A fire's job ended (in the transaction that ends it): the fire's outcome.

    ``succeeded`` is a success; any other end (failed, cancelled,
    interrupted) is a failure of the fire, with the job's error.
    """
    if status is JobStatus.SUCCEEDED:
        fire_ended(conn, fire_id, FireOutcome.SUCCEEDED)
    else:
        fire_ended(
            conn,
            fire_id,
            FireOutcome.FAILED,
            error=error or {"code": f"job.{status.value}", "message": f"the job {status.value}"},
        )
