"""Runs that interrupt or roll back the runs in progress on their thread
(docs/http.md#runs), and a cancel that rolls a run back.

``interrupt`` and ``rollback`` admit the new run and, in the same
transaction under the session's row lock, read the session's jobs that have
not ended (and for ``rollback`` mark them rolled back: the hidden-entries
rule of :mod:`chaz.domain.multitask`). After the commit each of those jobs
is cancelled through chaz's own cancel (:func:`chaz.usecases.control.cancel`):
its entries stay, it ends ``cancelled``, and the session's lane runs the new
run next. Because the read is under the lock that every admission takes,
each such run cancels exactly the runs admitted before it: of several sent
at once, the last admitted is the one left to run, and each of the others is
cancelled by a later one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaz.coord import rollbacks
from chaz.domain.entries import NewEntry
from chaz.domain.jobs import Job
from chaz.domain.multitask import Strategy, can_roll_back
from chaz.domain.principals import Grant, Principal
from chaz.errors import ChazError, Unsupported
from chaz.plumbing.faults import is_deadlock
from chaz.services import Services
from chaz.store.admitting import Admitting
from chaz.store.types import Appended, JobFields
from chaz.usecases import admission, control

log = logging.getLogger(__name__)

#: A rollback's admission locks its session's row and then its running jobs'
#: rows (to mark them), while a running turn's fenced write locks its job's row
#: and then its session's: the two can deadlock, and PostgreSQL then aborts
#: one. An aborted admission wrote nothing, so it is run again, this many
#: times in all, before its error reaches the caller.
DEADLOCK_TRIES = 3


@dataclass
class Displaced:
    """A run admitted over the runs in progress: the admission, and the
    outcome of each earlier job's cancel (:func:`control.cancel`'s), oldest
    first."""

    done: Appended
    cancelled: list[dict[str, Any]] = field(default_factory=list)


def admit_displacing(
    services: Services,
    session_id: str,
    draft: NewEntry,
    strategy: Strategy,
    *,
    principal: Principal,
    job_fields: JobFields | None = None,
) -> Displaced:
    """Admit ``draft``'s run and cancel (``interrupt``) or roll back
    (``rollback``) every job of the session that had not ended when it was
    admitted: the one running, those queued, one waiting for approval.

    It cancels runs, so ``principal`` needs ``runtime.control`` as well as
    the write's grant (checked before anything is written). On an idle
    session it is a plain admission; on a room it is ``request.unsupported``
    and writes nothing. A cancel that fails after the commit
    (the job moved too often, the database went away) is logged and the
    rest go on: the new run is admitted and is not taken back, and the job
    left uncancelled runs before it, as under ``enqueue``.
    """
    if not strategy.displaces:
        raise ChazError(f"strategy {strategy.value} cancels nothing")
    principal.require(Grant.RUNTIME_CONTROL, f"start runs with multitask_strategy {strategy}")

    def earlier(tx: Admitting) -> list[Job]:
        if tx.session.members is not None:
            # A room's message may wake no agent, or another member than the
            # one running: there is no one run it stands in for.
            raise Unsupported(
                f"multitask_strategy {strategy.value} is not supported on a room "
                f"(session {tx.session.id} has members)",
                field="multitask_strategy",
            )
        jobs = tx.unfinished_jobs()
        if strategy.hides:
            # With the admission: the new run's turn, which runs after them,
            # never reads their entries, even if the cancels below are lost.
            tx.roll_back([j.id for j in jobs])
        return jobs

    # A rollback's marks are counted (chaz.coord.rollbacks): copies of the
    # thread's values then know they may be stale.
    marking = (
        rollbacks.under_way(services.redis, session_id)
        if strategy.hides
        else contextlib.nullcontext()
    )
    with marking:
        done, jobs = _admit(services, session_id, draft, earlier, strategy, principal, job_fields)
    new = done.job.id if done.job is not None else "?"
    reason = f"{strategy.value}: run {new} was sent to the thread"
    # Newest first: the running head is cancelled last, so the lane never
    # starts a queued one of them once the head has stopped.
    outcomes = [_cancel(services, job, principal, reason) for job in reversed(jobs)]
    return Displaced(done, [o for o in reversed(outcomes) if o is not None])


def _admit(
    services: Services,
    session_id: str,
    draft: NewEntry,
    earlier: Callable[[Admitting], list[Job]],
    strategy: Strategy,
    principal: Principal,
    job_fields: JobFields | None,
) -> tuple[Appended, list[Job]]:
    """The displacing admission, run again if PostgreSQL aborted it as a deadlock victim."""
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            return admission.admit_checked(
                services,
                session_id,
                draft,
                earlier,
                job_fields=job_fields,
                project=principal.project,
            )
        except Exception as exc:
            if attempt == DEADLOCK_TRIES or not is_deadlock(exc):
                raise
            log.info("session %s: a %s admission deadlocked; again", session_id, strategy.value)
    raise AssertionError("unreachable")


def roll_back(
    services: Services, job_id: str, *, principal: Principal, reason: str = ""
) -> dict[str, Any]:
    """Cancel a run and roll it back: :func:`control.cancel`'s outcome, with
    ``rolled_back`` (whether the run is rolled back now).

    The mark comes first, a compare-and-set on the job not having ended,
    so a job that ended first is left as it is (``rolled_back`` false unless
    an earlier rollback marked it), and everything the job writes after the
    mark is hidden too. A repeat finds the job marked and ended and changes
    nothing. Checked as a cancel is: ``runtime.control``, and a job of
    another project is ``job.not_found``.
    """
    principal.require(Grant.RUNTIME_CONTROL, "roll back runs")
    job = services.store.get_job(job_id)
    control.check_control(principal, job)
    if can_roll_back(job.status):
        with rollbacks.under_way(services.redis, job.session_id):
            services.store.roll_back(job.id)
    outcome = control.cancel(services, job.id, principal=principal, reason=reason)
    outcome["rolled_back"] = services.store.get_job(job.id).rolled_back_at is not None
    return outcome


def _cancel(
    services: Services, job: Job, principal: Principal, reason: str
) -> dict[str, Any] | None:
    try:
        return control.cancel(services, job.id, principal=principal, reason=reason)
    except ChazError:
        log.warning("job %s: not cancelled by a later run", job.id, exc_info=True)
        return None
