"""Admission: the write path of a session, and the quotas it enforces.

Writing to a session is :func:`write` (the processing rule decides whether
the entry admits a job), :func:`admit` or :func:`append`. Each commits first
and publishes second (a new entry to the session's channel, a new job's
wake-up to the broker): a lost notification delays work, it never loses it.

An admission reserves its quota (docs/contracts.md#quotas) inside its
database transaction, once the session row is locked: a refusal rolls the
whole admission back. The Redis side lives in :mod:`chaz.coord`
(:mod:`chaz.coord.quotas`, :mod:`chaz.coord.claims`); the limits in force are
:func:`chaz.domain.limits.resolve_limits`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from chaz import tracing
from chaz.coord import refusals
from chaz.coord.feed import Feed
from chaz.coord.quotas import Reservation
from chaz.domain.entries import Entry, EntryType, KeyScope, NewEntry
from chaz.domain.jobs import Job
from chaz.domain.limits import resolve_limits
from chaz.domain.sessions import missing_session
from chaz.errors import ChazError, SessionBusy
from chaz.plumbing.dispatch import Wake
from chaz.services import Services
from chaz.store.admitting import Admitting
from chaz.store.core import RoomRoute
from chaz.store.types import Appended, Fence, JobFields, KeyTaken, NewSession
from chaz.usecases import projects, rooms

T = TypeVar("T")

#: How long a retry of an idempotent admission waits for the first caller's entry.
CLAIM_WAIT_SECONDS = 10.0


def write(
    services: Services,
    session_id: str,
    type: EntryType,
    sender: str,
    content: str,
    *,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    key_scope: KeyScope = KeyScope.RUNTIME,
    job_fields: JobFields | None = None,
    project: str | None = None,
    admits: bool | None = None,
) -> Appended:
    """Write an entry under the processing rule: :func:`admit` when it starts a
    turn (docs/contracts.md#processing-rule), :func:`append` otherwise.

    ``project``: the caller's; a session of another project is answered as
    a missing one (docs/security.md). ``admits``: the rule's answer
    (:meth:`Store.admits`) when the caller has asked it already, so that a
    write asks it once; else it is asked here."""
    draft = NewEntry(type, sender, content, metadata, idempotency_key, key_scope)
    if admits is None:
        admits = services.store.admits(type, sender)
    if admits:
        return admit(services, session_id, draft, job_fields=job_fields, project=project)
    return append(services, session_id, draft)


def append(
    services: Services,
    session_id: str,
    draft: NewEntry,
    fence: Fence | None = None,
    *,
    feed: Feed | None = None,
) -> Appended:
    """Commit an entry that admits nothing, then publish it (see :meth:`Store.append`);
    ``feed``: the publisher of the turn that writes it.

    In a room, an agent's Message may wake another member (docs/rooms.md):
    routed in the same transaction, its job announced like any admission's.
    """
    if draft.type is not EntryType.MESSAGE:
        return announce(services, services.store.append(session_id, draft, fence), feed)
    with room_rules(services, session_id) as room:
        done = services.store.append(session_id, draft, fence, room)
    return announce(services, done, feed)


@contextmanager
def room_rules(services: Services, session_id: str) -> Iterator[RoomRoute]:
    """A room's routing (:func:`chaz.usecases.rooms.route`) with what it needs
    from the settings and the quotas (the default burst budget, the woken
    member's reservation), for one transaction; a reservation whose
    transaction does not commit is refunded."""
    reserved: list[Reservation] = []

    def reserve(tx: Admitting) -> None:
        reserved.append(reserve_quota(services, tx))

    def route(
        tx: Admitting, draft: NewEntry, entry_id: str, posted_by: str | None
    ) -> tuple[Job | None, tuple[Entry, ...]]:
        return rooms.route(
            tx,
            draft,
            entry_id,
            posted_by,
            default_budget=services.settings.room_burst_budget,
            reserve=reserve,
        )

    try:
        yield route
    except BaseException:
        for at in reserved:
            services.quotas.refund(at)
        raise


def admit(
    services: Services,
    session_id: str,
    draft: NewEntry,
    *,
    job_fields: JobFields | None = None,
    project: str | None = None,
) -> Appended:
    """Commit an entry and the job it admits, under the session's quotas; then
    publish the entry and wake a worker.

    A refused admission (:class:`~chaz.errors.QueueFull`,
    :class:`~chaz.errors.JobsExhausted`) writes nothing. A repeated
    ``idempotency_key`` returns the first entry and spends no quota:
    concurrent retries of one request wait for the first caller's entry.
    """

    def replay() -> Appended | None:
        return services.store.replay(session_id, draft)

    claimed = False
    if draft.idempotency_key is not None:
        found = replay()
        if found is not None:
            return found
        claim = f"{draft.key_scope.value}:{draft.idempotency_key}"
        claimed = services.claims.take(session_id, claim)
        # Not claimed: another caller is admitting this request; wait for its
        # entry. Claimed: the first caller may have committed and dropped its
        # claim between our read and our claim; look again.
        found = replay() if claimed else _await_first(services, session_id, claim, replay)
        if found is not None:
            if claimed:
                services.claims.release(session_id, claim)
            return found
    try:
        done = _admit_once(services, session_id, draft, job_fields, replay, project)
    finally:
        if claimed:
            services.claims.release(session_id, claim)
    return announce(services, done)


def _admit_once(
    services: Services,
    session_id: str,
    draft: NewEntry,
    job_fields: JobFields | None,
    replay: Callable[[], Appended | None],
    project: str | None = None,
) -> Appended:
    """One admission transaction, with its quota reserved inside it."""

    def insert(tx: Admitting) -> Appended:
        return _insert(services, tx, draft, job_fields)

    # A room's agent Message that woke nobody admitted no job: transact
    # refunds its reservation. ``prepared``: on PostgreSQL the entry and its
    # job are written with the session's update, one statement
    # (docs/performance.md#postgresql-work-per-turn).
    return transact(
        services, session_id, insert, replay, project=project, prepared=(draft, job_fields)
    )


def _insert(
    services: Services, tx: Admitting, draft: NewEntry, job_fields: JobFields | None
) -> Appended:
    if tx.session.members is None:
        return tx.insert(draft, job_fields=job_fields)
    # A room: the entry wakes the member the room's rule picks (docs/rooms.md).
    return rooms.insert(
        tx, draft, job_fields=job_fields, default_budget=services.settings.room_burst_budget
    )


def admit_unless_busy(
    services: Services,
    session_id: str,
    draft: NewEntry,
    *,
    job_fields: JobFields | None = None,
    project: str | None = None,
) -> Appended:
    """:func:`admit`, unless a turn of the session runs or waits: then
    ``session.busy`` and nothing is written. Checked under the session's
    lock, so of two such admissions at once on an idle session exactly one
    is admitted (an HTTP run's ``multitask_strategy: reject``, docs/http.md)."""

    def idle(tx: Admitting) -> None:
        if tx.busy():
            raise SessionBusy(
                f"session {tx.session.id} has a turn in progress", session_id=tx.session.id
            )

    done, _ = admit_checked(
        services, session_id, draft, idle, job_fields=job_fields, project=project
    )
    return done


def admit_checked(
    services: Services,
    session_id: str,
    draft: NewEntry,
    first: Callable[[Admitting], T],
    *,
    job_fields: JobFields | None = None,
    project: str | None = None,
) -> tuple[Appended, T]:
    """:func:`admit`, with ``first`` applied in the admission's transaction,
    under the session's lock, before the entry is inserted: what it raises
    refuses the admission (nothing is written), what it writes commits with
    it, and what it returns comes back beside the admission. Without an
    idempotency key: a retry would apply ``first`` again."""
    if draft.idempotency_key is not None:
        raise ChazError("admit_checked takes no idempotency key")

    def insert(tx: Admitting) -> tuple[Appended, T]:
        found = first(tx)
        return _insert(services, tx, draft, job_fields), found

    done, found = transact(services, session_id, insert, lambda: None, project=project)
    return announce(services, done), found


def transact(
    services: Services,
    session_id: str,
    insert: Callable[[Admitting], T],
    replay: Callable[[], T | None],
    *,
    create: NewSession | None = None,
    entry: bool = True,
    project: str | None = None,
    prepared: tuple[NewEntry, JobFields | None] | None = None,
) -> T:
    """Run ``insert`` in one admission transaction, the session's quota reserved first.

    The shape every admission shares (a post, a spawn, a delivery): the
    session row is locked, the quota is reserved, ``insert`` writes, and
    a refusal or error anywhere rolls it all back and refunds the quota.
    :class:`KeyTaken` (an idempotency key already used) returns ``replay()``,
    the first request's result. ``create`` makes the session in the same
    transaction (then ``session_id`` is ignored). ``entry=False`` admits a
    job with no entry (a schedule fire: ``Admitting.insert_job``).
    ``project``: the caller's; the locked session must belong to it, else
    the admission is answered as if the session did not exist. ``prepared``:
    the one draft ``insert`` inserts, if that is all it does
    (``Store.admitting``: the store may write it with the session's lock).

    Inside a ``chaz.admission`` span when tracing is on (docs/operations.md#tracing).
    """
    if tracing.on():
        with tracing.span("chaz.admission", {"chaz.session_id": session_id}):
            return _transact(services, session_id, insert, replay, create, entry, project, prepared)
    return _transact(services, session_id, insert, replay, create, entry, project, prepared)


def _transact(
    services: Services,
    session_id: str,
    insert: Callable[[Admitting], T],
    replay: Callable[[], T | None],
    create: NewSession | None,
    entry: bool,
    project: str | None,
    prepared: tuple[NewEntry, JobFields | None] | None = None,
) -> T:
    reserved: Reservation | None = None
    if project is not None:
        try:
            # The caller's project is known before any lock: a project past
            # its rate is refused here, holding no write lock
            # (docs/coordination.md#a-projects-rate-the-token-bucket).
            services.quotas.peek_rate(project, projects.limits_for(services, project))
        except ChazError as exc:
            refusals.count(services.redis, exc.code)
            raise
    try:
        with services.store.admitting(
            session_id, create=create, entry=entry, prepared=prepared
        ) as tx:
            # The session row is locked: its limits cannot change under the
            # check, and a refusal rolls the whole admission back.
            if project is not None and tx.session.project != project:
                raise missing_session(session_id)
            reserved = reserve_quota(services, tx)
            done = insert(tx)
    except KeyTaken:
        # A concurrent admission of the same key committed first: theirs
        # stands, and ours was counted for nothing.
        if reserved is not None:
            services.quotas.refund(reserved)
        found = replay()
        if found is None:
            raise
        return found
    except BaseException as exc:
        if reserved is not None:
            # Counted, but the commit did not happen.
            services.quotas.refund(reserved)
        if isinstance(exc, ChazError):
            # Refused: for the fleet's metrics (chaz exporter, docs/operations.md).
            refusals.count(services.redis, exc.code)
        raise
    if not tx.wrote_job and reserved is not None:
        # Committed without a job (a room's entry that woke nobody): the
        # reservation admitted nothing.
        services.quotas.refund(reserved)
    return done


def reserve_quota(services: Services, tx: Admitting) -> Reservation:
    """Reserve one admission's place in its session's and its project's
    quotas, in one script, or raise a :class:`~chaz.errors.QuotaError`
    having counted nothing.

    The project's limits come from this process's short cache; on a miss
    and for a rebuild, the database is read through ``tx`` (its session row
    is locked; a second connection could wait on a pool its fellow admitters
    hold).
    """
    return services.quotas.reserve(
        Reservation(tx.session.id, tx.session.project, tx.job_id),
        resolve_limits(services.settings, tx.session, tx.agent),
        projects.limits_for(services, tx.session.project, tx.stored_limits),
        tx.job_counts,
        tx.project_counts,
    )


def _await_first(
    services: Services, session_id: str, claim: str, replay: Callable[[], Appended | None]
) -> Appended | None:
    """The first caller's entry, once it commits; None if it gave up."""
    deadline = time.monotonic() + CLAIM_WAIT_SECONDS
    while time.monotonic() < deadline:
        found = replay()
        if found is not None:
            return found
        if not services.claims.held(session_id, claim):
            # The first caller gave up (refused or failed): look once more.
            return replay()
        time.sleep(0.01)
    return None


def announce(services: Services, done: Appended, feed: Feed | None = None) -> Appended:
    """After a commit: wake a worker for a new job, then publish the new entry
    and its notices (through ``feed``, the publisher of the turn that wrote
    them, if one did).

    The wake-up goes first: the publish is a Redis round trip that the job's
    dispatch (commit -> Ack) need not wait for (docs/performance.md#dispatch).
    A watcher that hears the job's Ack before the Message reads the skipped
    seqs from the database (:mod:`chaz.usecases.watch`), as for any publish
    that arrives out of commit order."""
    if done.created:
        if done.job is not None:
            services.dispatcher.send_wake(
                done.entry.session_id, done.job.id, Wake.ADMITTED, tree=done.job.tree_id
            )
        (feed or Feed(services.redis)).publish(done.entry, *done.notices)
    return done
