"""Deliveries: the one path of every hand-off between sessions.

A spawn or fork (a new session and its first job), ``agent(to=...)`` (a
tracked job in an existing session), ``send_message`` (a job now, or an
inbox entry while the target is busy) and a follow-up (a finished job's
result, back to the session that started it) are all deliveries: a row with
its own life (:mod:`chaz.domain.deliveries`), written in the same
transaction as the job it admits, under the target session's quotas
(docs/collaboration.md#deliveries).

Each function here commits first and publishes second, like
:mod:`chaz.usecases.admission`: a lost wake-up or a crash between a commit and the
next step delays a delivery, and the reconciler's :func:`sweep` finishes
it; nothing is lost, and unique keys in the database keep anything from
happening twice.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from chaz.domain.deliveries import (
    ANSWERS,
    INBOX_LIMIT,
    REQUESTS,
    Delivered,
    Delivery,
    DeliveryKind,
    DeliveryState,
    NewBranch,
    Reply,
    Sender,
    check_request_target,
    result_key,
)
from chaz.domain.entries import Entry, EntryType, NewEntry
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.principals import LOCAL, Principal, grant_names
from chaz.domain.sessions import Origin, Session, missing_session
from chaz.errors import (
    Cancelled,
    ChazError,
    ProjectLiveExceeded,
    ProjectRateExceeded,
    QueueFull,
    QuotaError,
    SelfDelivery,
    SessionArchived,
)
from chaz.ids import new_id, utcnow
from chaz.services import Services
from chaz.store import deliveries as dl
from chaz.store.admitting import Admitting
from chaz.store.types import Appended, DeliveryGone, JobFields, NewSession, SenderStopped
from chaz.usecases import admission, completion

log = logging.getLogger(__name__)


# -- creating a session -----------------------------------------------------------


def spawn(services: Services, sender: Sender, branch: NewBranch) -> Delivered:
    """Create a session in the sender's tree and admit its first job, in one transaction.

    The new session, its first entry (the prompt, as a Directive), its job,
    the delivery, and an attach pointer in the sender's session beside the
    calling entry commit together: a refused admission (quota) leaves no
    session, no job and no pointer behind (docs/collaboration.md#attach).
    """
    first = _replay(services, sender.key)
    if first is not None:
        return first
    created: list[Entry] = []

    def insert(tx: Admitting) -> Appended:
        child = tx.session
        values = _spawn_row(sender, branch, child.id)
        if sender.session_id is not None:
            pointer = tx.append_to(
                sender.session_id, _attach_pointer(sender, branch, child, str(values["id"]))
            )
            created.append(pointer)
            values["metadata"] = {"attach_entry_id": pointer.id}
        draft = NewEntry(
            EntryType.DIRECTIVE,
            sender.sender,
            branch.prompt,
            metadata={
                "delivery_id": values["id"],
                "spawned_from_session": sender.session_id,
                "caller_entry_id": sender.entry_id,
                "parent_job_id": sender.job_id,
            },
            idempotency_key=f"delivery:{values['id']}",
        )
        check_sender(tx, sender.job_id, str(values["id"]))
        return tx.insert(draft, job_fields=_fields(sender, branch.generation), delivery=values)

    try:
        done = admission.transact(
            services,
            "",
            insert,
            lambda: _replayed_entry(services, sender.key),
            create=_child_session(sender, branch),
        )
    except SenderStopped:
        # Nothing was created: no session, no job, no pointer.
        raise Cancelled("the job that spawns it is being cancelled") from None
    admission.announce(services, done)
    for entry in created:
        admission.announce(services, Appended(entry, None, True))
    found = _replay(services, sender.key)
    assert found is not None, "a committed spawn has its delivery"
    return Delivered(found.delivery, found.session, found.job, created=done.created)


def _spawn_row(sender: Sender, branch: NewBranch, child_id: str) -> dict[str, Any]:
    """The delivery row of a spawn or fork into the new session ``child_id``."""
    return dl.new_row(
        kind=branch.kind,
        sender=sender.sender,
        sender_session_id=sender.session_id,
        sender_entry_id=sender.entry_id,
        sender_job_id=sender.job_id,
        target_session_id=child_id,
        body=branch.prompt,
        message_count=sender.message_count + 1,
        generation=branch.generation,
        state=DeliveryState.ADMITTED,
        reply=branch.reply,
        archive_when_done=branch.archive_when_done,
        idempotency_key=sender.key,
        **_authority(sender),
    )


def _attach_pointer(
    sender: Sender, branch: NewBranch, child: Session, delivery_id: str
) -> NewEntry:
    """The Attach entry that points the sender's session at the new one."""
    return NewEntry(
        EntryType.ATTACH,
        sender.sender,
        f"{branch.kind.value}: {child.name or child.id}",
        metadata={
            "attach": {
                "session_id": child.id,
                "head_seq": 1,
                "status": "queued",
                "delivery_id": delivery_id,
            },
            "source_session_id": sender.session_id,
            "caller_entry_id": sender.entry_id,
            "spawn_out": True,
        },
        idempotency_key=f"attach:{sender.key}",
    )


def _child_session(sender: Sender, branch: NewBranch) -> NewSession:
    """The session a spawn or fork creates, in the sender's tree."""
    return NewSession(
        branch.agent_id,
        name=branch.name,
        description=branch.description,
        tools=branch.tools,
        parent_job_id=sender.job_id,
        tree_id=sender.tree_id,
        call_depth=branch.generation,
        fork=branch.fork,
        origin=Origin.AGENT if sender.job_id else Origin.FORK,
        names=branch.names,
        # The child lives in its parent's project, belongs to whoever started
        # the chain, and stays unattended if the chain is.
        project=sender.project,
        owner=sender.owner,
        unattended=sender.unattended,
    )


# -- delivering to an existing session -------------------------------------------


def deliver(
    services: Services,
    sender: Sender,
    target: Session,
    kind: DeliveryKind,
    body: str,
    *,
    reply: Reply = Reply.FOLLOWUP,
) -> Delivered:
    """Deliver ``body`` to an existing session as ``kind`` (``agent`` or ``message``).

    ``agent(to=...)`` admits a tracked job at once, queued behind whatever
    runs there. A message to an idle target does the same; to a busy one it
    waits in the target's inbox until the running turn ends. An archived
    target refuses (``session.archived``), checked with the target's row
    locked; delivering to oneself is ``topology.self``.
    """
    if sender.session_id is not None and sender.session_id == target.id:
        raise SelfDelivery("a session cannot deliver to itself", session_id=target.id)
    if target.project != sender.project:
        # Nothing crosses projects; answered as a missing target (docs/contracts.md#visibility).
        raise missing_session(target.id)
    first = _replay(services, sender.key)
    if first is not None:
        return first
    values = dl.new_row(
        kind=kind,
        sender=sender.sender,
        sender_session_id=sender.session_id,
        sender_entry_id=sender.entry_id,
        sender_job_id=sender.job_id,
        target_session_id=target.id,
        body=body,
        message_count=sender.message_count + 1,
        generation=target.call_depth,
        state=DeliveryState.ACCEPTED,
        reply=reply,
        idempotency_key=sender.key,
        **_authority(sender),
    )
    if kind is DeliveryKind.MESSAGE and services.store.head_job(target.id) is not None:
        return _enqueue(services, values, target)
    draft = _delivered_entry(dl.as_delivery(values))

    def insert(tx: Admitting) -> Appended:
        if tx.session.archived:
            raise _archived(tx.session)
        check_sender(tx, sender.job_id, str(values["id"]))
        return tx.insert(draft, job_fields=_fields(sender, target.call_depth), delivery=values)

    try:
        done = admission.transact(
            services,
            target.id,
            insert,
            lambda: _replayed_entry(services, sender.key),
            project=sender.project,
        )
    except SenderStopped:
        withdrawn = services.store.deliveries.insert_withdrawn(
            values, by=str(sender.job_id), reason=SENDER_CANCELLED
        )
        return Delivered(withdrawn, target, None, created=True)
    admission.announce(services, done)
    found = _replay(services, sender.key)
    assert found is not None, "a committed delivery can be read back"
    return Delivered(found.delivery, found.session, found.job, created=done.created)


def _enqueue(services: Services, values: dict[str, object], target: Session) -> Delivered:
    """Put a message in a busy target's inbox; drain it at once if the target went idle."""
    delivery, dropped = services.store.queue_message(values, limit=INBOX_LIMIT)
    try:
        services.inbox.mark(target.id, target.project)
    except Exception:
        # Queued in the database: the reconciler drains an idle target's
        # inbox even without its flag, so the message only waits longer.
        log.warning("could not flag the inbox of session %s", target.id, exc_info=True)
    for old in dropped:
        _notify(
            services,
            old,
            f"your message to {target.name or target.id} was dropped: its inbox holds "
            f"at most {INBOX_LIMIT} messages and a newer one arrived",
            "inbox.full",
        )
    # Looked after queueing, as a turn's end looks after releasing: one of
    # us always sees the other, so the message cannot be stranded.
    if services.store.head_job(target.id) is None:
        drain(services, target.id)
        delivery = services.store.deliveries.get(delivery.id)
    job = services.store.get_job(delivery.job_id) if delivery.job_id else None
    return Delivered(delivery, target, job, created=True, dropped=dropped)


# -- after a job ends, and the inbox -------------------------------------------------


#: Refusals that pass later (the session's queue and the project's live turns
#: once a job finishes, the project's rate once its bucket refills): a
#: delivery they refuse stays ``accepted`` for a later try (a drain, the sweep).
RETRY_LATER = (QueueFull, ProjectLiveExceeded, ProjectRateExceeded)


def settle(services: Services, job: Job) -> None:
    """After a delivered job ended: admit the follow-up its end recorded, if any.

    Called by whoever ended the job (a worker, a cancel). If this process
    dies first, the follow-up stays ``accepted`` and :func:`sweep` admits it.
    """
    if job.delivery_id is None:
        return
    for key in (f"followup:{job.id}", result_key(job.delivery_id)):
        found = services.store.deliveries.by_key(key)
        if found is not None and found.state is DeliveryState.ACCEPTED:
            with contextlib.suppress(*RETRY_LATER):
                # The caller's queue is full for now: the sweep admits it later.
                admit_accepted(services, found)


def drain(services: Services, session_id: str) -> int:
    """Admit the messages waiting in a session's inbox, oldest first, each as its own job.

    Called when the session's turn ends (on success and on error) and after
    a message was queued to a target that has just gone idle. An entry
    leaves the inbox only in the transaction that admits its job: a crash
    leaves it queued, to be admitted by the next drain; it is never lost and
    never admitted twice. Returns how many were admitted.
    """
    admitted = 0
    while True:
        waiting = services.store.deliveries.inbox(session_id)
        if not waiting:
            services.inbox.clear(session_id, services.coord_project(session_id))
            # A message queued between the read and the clear set the flag
            # after this read: look once more, so its flag is not lost.
            if services.store.deliveries.has_inbox(session_id):
                continue
            return admitted
        try:
            job = admit_accepted(services, waiting[0])
        except RETRY_LATER:
            # The target's queue is full for now: the rest wait, flag and
            # all, for the next turn's end (or the reconciler's sweep).
            return admitted
        if job is not None:
            admitted += 1


#: A sender job in these states is being or was cancelled: what it left
#: queued is withdrawn, not admitted (docs/collaboration.md#withdrawal).
SENDER_STOPPED = frozenset({JobStatus.STOPPING, JobStatus.CANCELLED})
SENDER_CANCELLED = "withdrawn: the job that sent it was cancelled"


def check_sender(tx: Admitting, sender_job_id: str | None, delivery_id: str) -> None:
    """:class:`SenderStopped` if the sending job is being or was cancelled.

    Read with the sender's row share-locked inside the admission: a cancel
    cascade's move of that job waits for this admission to commit (and
    then finds the job it admitted), or this admission sees the move and
    admits nothing. So a cancelled lineage admits no new work afterwards,
    whenever its tool call was in flight (docs/collaboration.md#withdrawal).
    """
    if sender_job_id is not None and tx.job_status(sender_job_id) in SENDER_STOPPED:
        raise SenderStopped(delivery_id)


def admit_accepted(services: Services, delivery: Delivery) -> Job | None:
    """Admit an ``accepted`` delivery (a queued message, a follow-up) as a job.

    The target's archive state is checked again with its row locked: an
    archived target refuses the delivery (``refused``, and its sender is
    told); a spent cumulative allowance fails it the same way (``failed``).
    A full queue or a project at its live limit or its rate
    (:data:`RETRY_LATER`) is raised and leaves the delivery ``accepted``, to be admitted when there
    is room.
    A message (or request) whose sender job is being or was cancelled is
    withdrawn instead (the cancel's own withdrawal missed it: it was queued
    after).
    None when it was not admitted (refused, failed, withdrawn, or admitted by
    someone else first).
    """
    draft = _delivered_entry(delivery)
    if delivery.kind in ANSWERS:
        # A follow-up is the caller's own turn: the child that answered is not
        # its caller (a caller may read its callee's job, and a child in
        # another tree must not read this one); the entry's metadata names it.
        fields = JobFields(
            call_depth=delivery.generation,
            message_count=delivery.message_count,
            owner=delivery.owner,
            grants=delivery.grants,
            unattended=delivery.unattended,
        )
    else:
        fields = JobFields(
            caller_session_id=delivery.sender_session_id,
            caller_entry_id=delivery.sender_entry_id,
            parent_job_id=delivery.sender_job_id,
            call_depth=delivery.generation,
            message_count=delivery.message_count,
            # Admitted now or later (inbox drain, sweep): the job runs with the
            # authority its delivery carried, never the target's own.
            owner=delivery.owner,
            grants=delivery.grants,
            unattended=delivery.unattended,
        )

    def insert(tx: Admitting) -> Appended:
        if tx.session.archived:
            raise _archived(tx.session)
        # An answer is its sender's result going back: a cancelled job still
        # sends its own (docs/collaboration.md#follow-ups).
        check_sender(
            tx, delivery.sender_job_id if delivery.kind not in ANSWERS else None, delivery.id
        )
        return tx.take(delivery, draft, job_fields=fields)

    def replay() -> Appended | None:
        return services.store.find_idempotent(delivery.target_session_id, f"delivery:{delivery.id}")

    try:
        done = admission.transact(
            services, delivery.target_session_id, insert, replay, project=delivery.project
        )
    except DeliveryGone:
        return None
    except SenderStopped:
        services.store.deliveries.withdraw_one(
            delivery.id, by=str(delivery.sender_job_id), reason=SENDER_CANCELLED
        )
        return None
    except RETRY_LATER:
        raise
    except (SessionArchived, QuotaError) as exc:
        _close(services, delivery, exc)
        return None
    admission.announce(services, done)
    return done.job


def _close(services: Services, delivery: Delivery, exc: ChazError) -> None:
    """End an accepted delivery that cannot be admitted, and tell its sender why."""
    state = DeliveryState.REFUSED if isinstance(exc, SessionArchived) else DeliveryState.FAILED
    moved = services.store.settle_delivery(
        delivery.id, state, leaving=[DeliveryState.ACCEPTED], code=exc.code, reason=exc.message
    )
    if moved is not None and delivery.kind not in ANSWERS:
        _notify(services, delivery, f"your message was not delivered: {exc.message}", exc.code)


def _notify(services: Services, delivery: Delivery, text: str, code: str) -> None:
    """A notice in the sender's session about its delivery (it admits nothing)."""
    if delivery.sender_session_id is None:
        return
    note = NewEntry(
        EntryType.NOTICE,
        "system:deliveries",
        text,
        metadata={"code": code, "delivery_id": delivery.id},
        idempotency_key=f"notice:{delivery.id}:{code}",
    )
    try:
        admission.append(services, delivery.sender_session_id, note)
    except ChazError:
        # The sender session is gone; the delivery row keeps the outcome.
        log.warning("could not notify the sender of delivery %s", delivery.id, exc_info=True)


# -- the sweep --------------------------------------------------------------------


@dataclass
class SweepReport:
    """What one :func:`sweep` did."""

    followups: int = 0
    drained: int = 0
    #: Deliveries left ``admitted`` after their job ended, finalized now.
    finalized: int = 0


def sweep(services: Services, grace: timedelta) -> SweepReport:
    """Finish what a crash or a lost Redis flag left: follow-ups and results
    recorded but not admitted, inboxes whose target went idle without
    draining them, and deliveries still ``admitted`` whose job has ended
    (their completion policy is applied now, once)."""
    report = SweepReport()
    idle_targets: set[str] = set()
    for stuck in services.store.deliveries.stuck(utcnow() - grace):
        if services.store.finalize_delivery(stuck, completion=completion.ended):
            report.finalized += 1
            if stuck.job_id is not None:
                settle(services, services.store.get_job(stuck.job_id))
    for delivery in services.store.deliveries.stranded(utcnow() - grace):
        if delivery.kind in ANSWERS:
            with contextlib.suppress(*RETRY_LATER):
                if admit_accepted(services, delivery) is not None:
                    report.followups += 1
        elif services.store.head_job(delivery.target_session_id) is None:
            idle_targets.add(delivery.target_session_id)
    for session_id in idle_targets:
        report.drained += drain(services, session_id)
    return report


# -- requests (docs/contracts.md#requests) ------------------------------------------


def send_request(
    services: Services,
    target_ref: str,
    message: str,
    *,
    reply: Reply,
    sender: str,
    from_session_id: str | None = None,
    principal: Principal = LOCAL,
) -> Delivered:
    """A person's ``session_send`` (``client.deliveries.send``): one FIFO turn in
    ``target_ref`` (an id of the principal's project), as a ``session_send``
    delivery whose turn carries the principal's grants.

    ``from_session_id`` (a session of the same project) is where a
    ``completion`` result comes back, as a result entry and turn;
    without it the frozen result is kept on the request only. A person
    has no idempotency key here (docs/contracts.md#requests): each call
    is a new request.
    """
    project = principal.project
    origin: Session | None = None
    if from_session_id is not None:
        origin = services.store.get_session(from_session_id)
        if origin.id != from_session_id or origin.project != project:
            raise missing_session(from_session_id)
    target = check_request_target(
        services.store.get_session(target_ref),
        target_ref,
        project=project,
        sender_session_id=from_session_id,
    )
    who = Sender(
        sender=sender,
        key=f"{DeliveryKind.SESSION_SEND.value}:{sender}:{new_id()}",
        session_id=from_session_id,
        tree_id=origin.tree_id if origin is not None else None,
        project=project,
        owner=principal.name,
        grants=grant_names(principal.grants),
    )
    return deliver(services, who, target, DeliveryKind.SESSION_SEND, message, reply=reply)


def lost_request(services: Services, job: Job) -> bool:
    """Whether ``job`` is a ``session_send``/``session_create`` request's turn that
    was lost mid-flight: it spent an attempt before (its worker died, or a
    fault stopped it); a resume after an approval decision or a hand-back
    spends none (docs/executions.md#attempts).

    Such a turn is not resumed like an ordinary one: it ends ``interrupted``
    with ``delivery.interrupted`` and its one result goes back, so a request
    is never replayed (docs/sessions.md#sending-between-sessions). Reads the
    delivery only for a job that is both delivered and restarted.
    """
    if job.delivery_id is None or job.attempts <= 1:
        return False
    try:
        delivery = services.store.deliveries.get(job.delivery_id)
    except ChazError:
        return False
    return delivery.kind in REQUESTS


# -- helpers -----------------------------------------------------------------------


def _fields(sender: Sender, generation: int) -> JobFields:
    return JobFields(
        caller_session_id=sender.session_id,
        caller_entry_id=sender.entry_id,
        parent_job_id=sender.job_id,
        call_depth=generation,
        message_count=sender.message_count + 1,
        owner=sender.owner,
        grants=sender.grants,
        unattended=sender.unattended,
    )


def _authority(sender: Sender) -> dict[str, Any]:
    """The columns of a delivery row that carry the sender's (narrowed) authority."""
    return {
        "project": sender.project,
        "owner": sender.owner,
        "grants": sender.grants,
        "unattended": sender.unattended,
    }


def _delivered_entry(delivery: Delivery) -> NewEntry:
    """The Directive a delivery writes into its target (docs/collaboration.md#deliveries).

    A Directive, so the target's model reads it as input whoever sent it
    (a Message from an agent with the target's own id would read as the
    target's own words). A message says who sent it and that replying is
    optional: the sender hears the result anyway, as a follow-up.
    """
    text = delivery.body
    if delivery.kind is DeliveryKind.SESSION_SEND:
        where = delivery.sender_session_id or "-"
        if delivery.reply is Reply.COMPLETION:
            note = "your final answer of this turn goes back to it as the request's result"
        else:
            note = "one-way: no reply is expected"
        text = f"[request {delivery.id} from {delivery.sender} (session {where}); {note}]\n{text}"
    elif delivery.kind is DeliveryKind.MESSAGE:
        where = f"{delivery.sender_session_id}:HEAD" if delivery.sender_session_id else "-"
        text = (
            f"[message from {delivery.sender} (session {where}); your answer goes back to "
            f"it when this turn ends, so replying with send_message is optional]\n{text}"
        )
    meta: dict[str, object] = {"delivery_id": delivery.id, "kind": delivery.kind.value}
    if delivery.kind is DeliveryKind.FOLLOWUP:
        meta["followup"] = dict(delivery.metadata)
    elif delivery.kind is DeliveryKind.RESULT:
        meta["result"] = dict(delivery.metadata)
    if delivery.sender_session_id is not None:
        meta["from_session"] = delivery.sender_session_id
    return NewEntry(
        EntryType.DIRECTIVE,
        delivery.sender,
        text,
        metadata=meta,
        idempotency_key=f"delivery:{delivery.id}",
    )


def _archived(session: Session) -> SessionArchived:
    return SessionArchived(
        f"session {session.name or session.id} is archived and takes no new deliveries",
        session_id=session.id,
    )


def _replay(services: Services, key: str) -> Delivered | None:
    """The first result of a hand-off made before with this key."""
    delivery = services.store.deliveries.by_key(key)
    if delivery is None:
        return None
    session = services.store.get_session(delivery.target_session_id)
    job = services.store.get_job(delivery.job_id) if delivery.job_id else None
    return Delivered(delivery, session, job, created=False)


def _replayed_entry(services: Services, key: str) -> Appended | None:
    found = _replay(services, key)
    if found is None or found.job is None or found.job.trigger_entry_id is None:
        return None
    entry = services.store.entry(found.job.trigger_entry_id)
    return Appended(entry, found.job, created=False) if entry is not None else None
