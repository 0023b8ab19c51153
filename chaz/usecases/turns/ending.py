"""What follows a turn's last write, outside its transaction: the turn-ended
signal, the follow-ups and inbox, and a delivered job refused for its
session's archive.

Each step runs after a commit and only announces, frees or admits: a failure
here delays work that the reconciler's sweep finishes, it never undoes the
turn (docs/collaboration.md#follow-ups).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from chaz.coord.feed import Feed
from chaz.coord.signals import TurnEnd
from chaz.domain.entries import EntryType, NewEntry, agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.errors import ChazError
from chaz.plumbing.dispatch import Wake
from chaz.services import Services
from chaz.usecases import admission, completion, deliveries, naming

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ran:
    """How one job's turn ended."""

    #: The job reached a terminal state (False: another worker took it over).
    finished: bool
    #: The turn suspended for approval (docs/approvals.md): the job is not
    #: finished, but its lane and live slot are given back.
    suspended: bool = False
    #: The turn was handed back (its worker is shutting down): the job is not
    #: finished, keeps its live slot, and another worker resumes it at once.
    handed_back: bool = False


def hand_off(
    services: Services,
    job: Job,
    token: str,
    ran: Ran,
    feed: Feed,
    *,
    lend_slot: bool,
    keep_if_queued: bool,
) -> TurnEnd:
    """After a turn's last write: publish the entry ``feed`` holds, free its live
    slot, and give the lane back unless ``keep_if_queued`` and more jobs wait;
    wake the session of the tree that waited for the freed slot."""
    end = services.signals.ended(
        job,
        token,
        feed.take(),
        finished=ran.finished,
        free_slot=(ran.finished or ran.suspended) and not lend_slot,
        keep_if_queued=keep_if_queued,
    )
    if end.woken and end.woken != job.session_id:
        head = services.store.head_job(end.woken)
        if head is None:
            services.dispatcher.send_wake(end.woken, "", Wake.SLOT_FREED)
        else:
            services.dispatcher.send_wake(end.woken, head.id, Wake.SLOT_FREED, tree=head.tree_id)
    return end


def after_job(services: Services, job: Job, *, inbox: bool, session: Session | None = None) -> None:
    """What follows a job's end outside its transaction: its follow-up is admitted
    in the caller's session, messages that waited in this session's inbox are
    admitted (docs/collaboration.md#follow-ups, #inbox), and the session is
    renamed when it reached a rename point (#names).

    A failure here is logged, not raised: the job's end has committed, and
    the reconciler's sweep finishes what was left (chaz.usecases.deliveries.sweep).
    """
    if job.webhook is not None:
        # Its outbox row committed with the end; a lost send waits for the sweep.
        # Imported here: only a run with a webhook needs it (a worker's start
        # does not load the webhooks' use case, store and domain).
        from chaz.usecases import webhooks

        webhooks.announce(services, job.id)
    try:
        if job.delivery_id is not None:
            deliveries.settle(services, job)
        if inbox:
            deliveries.drain(services, job.session_id)
        if session is not None:
            naming.after_turn(services, session, job)
    except Exception:
        log.warning("after job %s: deliveries left to the sweep", job.id, exc_info=True)


def archived_delivery(job: Job, session: Session) -> bool:
    """Whether ``job`` is a delivery accepted before its session was archived:
    it never starts (:func:`refuse_archived`)."""
    return bool(job.delivery_id and session.archived and job.status is JobStatus.QUEUED)


def refuse_archived(services: Services, job: Job, session: Session) -> None:
    """End a delivered job that has not started because its session was archived.

    It ends ``cancelled`` with the reason (docs/contracts.md#archive:
    accepted deliveries recheck the archive state before they start), and its
    sender hears so through its follow-up.
    """
    reason = f"session {session.name or session.id} was archived before this job started"
    try:
        done = services.store.transition(
            job.id,
            JobStatus.CANCELLED,
            expected_version=job.version,
            error={"code": "session.archived", "message": reason, "retryable": False},
            completion=completion.ended,
        )
    except ChazError:
        return  # it moved under us (a cancel): whoever moved it settles it
    services.quotas.ended(done, dequeued=True)
    note = NewEntry(
        EntryType.ERROR,
        agent_sender(session.agent_id),
        f"session.archived: {reason}",
        metadata={"code": "session.archived", "retryable": False},
        idempotency_key=f"job:{job.id}:error",
        job_id=job.id,
    )
    admission.append(services, job.session_id, note)
    after_job(services, done, inbox=False)
