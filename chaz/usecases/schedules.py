"""Schedules' use cases: defining them, and the standalone fire path (docs/schedules.md).

A fire claims its slot (one row per ``(schedule_id, slot)``: whoever
inserts it fires, every other beat or redelivery gets nothing), finds its
target session, and admits a job *directly* in it through the same
admission, quotas and lane as any turn, carrying the prompt as the job's
``input``: the turn reads it as its trigger, and no Directive entry is
written (docs/contracts.md#processing-rule). The job's end records the
fire's outcome (chaz.store.ending); a fire that admits nothing
records why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chaz.domain.jobs import Job
from chaz.domain.schedules import (
    FireOutcome,
    Overlap,
    Schedule,
    ScheduleFire,
    Target,
    fresh_session_name,
    plan,
)
from chaz.domain.sessions import Origin
from chaz.errors import ChazError, ScheduleNotFound, SessionNotFound
from chaz.ids import utcnow
from chaz.plumbing.dispatch import Wake
from chaz.services import Services
from chaz.store.schedules import FireTaken
from chaz.store.types import JobFields, NewSession, SessionBusy
from chaz.usecases import admission

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fired:
    """What one ``fire`` did: ``outcome`` is a :class:`FireOutcome` value, or
    ``"unclaimed"`` when the slot was claimed before (or the schedule is off)."""

    outcome: str
    fire: ScheduleFire | None = None
    job: Job | None = None
    session_id: str | None = None


def fire(services: Services, schedule_id: str, slot: datetime) -> Fired:
    """Fire one slot of a schedule, at most once whoever calls (the ``chaz.fire`` task).

    The beat claims the slot before it sends the task (:func:`send_due`), so
    a lost message leaves a claimed fire with no job, which the reconciler
    admits (:func:`resume_stranded`). Here the claim is taken if nobody took
    it (a fire sent by hand, or by an older beat), and a claimed fire that
    has no job yet is admitted: the admission's compare-and-set on the fire
    keeps one job, whoever gets there first.
    """
    slot = slot.astimezone(UTC)
    book = services.store.schedules
    claimed = book.claim(schedule_id, slot)
    if claimed is None:
        claimed = book.fire_at(schedule_id, slot)
        if claimed is None or claimed.job_id is not None:
            return Fired("unclaimed")
        if claimed.outcome is not FireOutcome.ADMITTED:
            return Fired("unclaimed", claimed)  # settled: skipped, refused
    try:
        schedule = book.get(schedule_id)
    except ScheduleNotFound:
        return Fired("unclaimed", claimed)  # removed between the claim and now
    if schedule.target is Target.PINNED:
        return _fire_pinned(services, schedule, claimed)
    return _fire_fresh(services, schedule, claimed, slot)


def _fire_pinned(services: Services, schedule: Schedule, claimed: ScheduleFire) -> Fired:
    book = services.store.schedules
    assert schedule.session_id is not None
    try:
        session = services.store.get_session(schedule.session_id)
    except SessionNotFound:
        session = None
    if session is not None and session.project != schedule.project:
        session = None  # nothing crosses projects: another project's session is gone
    if session is None or session.archived:
        what = "deleted" if session is None else "archived"
        reason = f"its pinned session {schedule.session_id} was {what}"
        error = {"code": "schedule.target_gone", "message": reason, "retryable": False}
        book.disable(schedule.id, reason, error=error)
        book.settle(claimed.id, FireOutcome.REFUSED, error=error)
        return Fired(FireOutcome.REFUSED.value, claimed)
    sid = session.id
    idle_only = schedule.overlap is Overlap.SKIP
    try:
        job = admission.transact(
            services,
            sid,
            lambda tx: tx.insert_job(
                input=schedule.prompt,
                fire_id=claimed.id,
                only_if_idle=idle_only,
                job_fields=_authority(schedule),
            ),
            lambda: None,
            entry=False,
            project=schedule.project,
        )
    except SessionBusy:
        book.settle(claimed.id, FireOutcome.SKIPPED, session_id=sid)
        return Fired(FireOutcome.SKIPPED.value, claimed, session_id=sid)
    except FireTaken:
        return Fired("unclaimed", claimed)
    except ChazError as exc:
        book.settle(claimed.id, FireOutcome.REFUSED, error=exc.to_dict(), session_id=sid)
        return Fired(FireOutcome.REFUSED.value, claimed, session_id=sid)
    services.dispatcher.send_wake(sid, job.id, Wake.FIRED, tree=job.tree_id)
    return Fired(FireOutcome.ADMITTED.value, claimed, job, sid)


def _fire_fresh(
    services: Services, schedule: Schedule, claimed: ScheduleFire, slot: datetime
) -> Fired:
    book = services.store.schedules
    create = NewSession(
        schedule.owner_agent_id,
        origin=Origin.SCHEDULE,
        # An automatic name: a taken one leaves the session unnamed, not refused.
        names=(fresh_session_name(schedule, slot),),
        project=schedule.project,
        owner=schedule.owner,
        unattended=schedule.unattended,
    )
    try:
        job = admission.transact(
            services,
            "",
            lambda tx: tx.insert_job(
                input=schedule.prompt, fire_id=claimed.id, job_fields=_authority(schedule)
            ),
            lambda: None,
            create=create,
            entry=False,
        )
    except FireTaken:
        return Fired("unclaimed", claimed)
    except ChazError as exc:
        book.settle(claimed.id, FireOutcome.REFUSED, error=exc.to_dict())
        return Fired(FireOutcome.REFUSED.value, claimed)
    services.dispatcher.send_wake(job.session_id, job.id, Wake.FIRED, tree=job.tree_id)
    return Fired(FireOutcome.ADMITTED.value, claimed, job, job.session_id)


def _authority(schedule: Schedule) -> JobFields:
    """A fire's turn acts for whoever added the schedule, with the grants it had
    then, unattended if the schedule is (docs/security.md#grants-inside-turns)."""
    return JobFields(owner=schedule.owner, grants=schedule.grants, unattended=schedule.unattended)


def resume_stranded(services: Services, grace: timedelta) -> int:
    """Admit the job of every fire claimed more than ``grace`` ago that never got
    one: its process died, or failed, between the claim and the admission.

    The claim stands, so nothing else would ever fire that slot. Retrying is
    safe: the admission records the job on the fire with a compare-and-set,
    so a slow first attempt and this retry admit one job between them.
    Returns how many were admitted.
    """
    book = services.store.schedules
    admitted = 0
    for stranded in book.stranded(utcnow() - grace):
        try:
            schedule = book.get(stranded.schedule_id)
        except ScheduleNotFound:
            continue
        if schedule.target is Target.PINNED:
            done = _fire_pinned(services, schedule, stranded)
        else:
            done = _fire_fresh(services, schedule, stranded, stranded.slot)
        if done.job is not None:
            admitted += 1
    return admitted


def send_due(
    services: Services, send: Callable[[str, datetime], None], now: datetime | None = None
) -> list[tuple[str, datetime]]:
    """Send a fire for each slot due at ``now``, then move each schedule to its next slot.

    The beat's look at the database (chaz.usecases.beat): for each due schedule, the
    slots its missed-run policy fires (:func:`chaz.domain.schedules.plan`).
    Each slot is claimed, then sent; the schedule is moved last. Of two
    beats looking at once, one claims (and sends) each slot. A beat that
    dies after a claim, or a message the broker loses, leaves a claimed fire
    with no job: the reconciler admits it (:func:`resume_stranded`).
    """
    now = now or utcnow()
    sent: list[tuple[str, datetime]] = []
    book = services.store.schedules
    for schedule in book.due(now):
        p = plan(schedule, now)
        for slot in p.fire:
            # Claimed before it is sent: a message lost in the broker leaves
            # a claimed fire with no job, which the reconciler admits; a slot
            # another beat claimed first is not sent again.
            if book.claim(schedule.id, slot, now=now) is None:
                continue
            send(schedule.id, slot)
            sent.append((schedule.id, slot))
        assert schedule.next_slot is not None
        book.advance(schedule.id, schedule.next_slot, p.next_slot)
    return sent


def describe(schedule: Schedule) -> dict[str, Any]:
    """A schedule as JSON for tools and the CLI."""
    return schedule.model_dump(mode="json")
