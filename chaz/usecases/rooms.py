"""Room routing: which member an entry of a room wakes (docs/rooms.md).

A person's Message or a Directive wakes its first @mention, else the host,
and resets the burst; an agent's Message wakes only another agent it
mentions, within the burst budget. The decision is
:func:`chaz.domain.rooms.route`; this module applies it inside the
transaction that writes the entry, through the named operations of
:class:`~chaz.store.admitting.Admitting`: :func:`insert` for an admission,
:func:`route` for an entry an append or a turn's end already wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from chaz.domain import rooms
from chaz.domain.entries import Entry, EntryType, NewEntry
from chaz.domain.jobs import Job
from chaz.errors import QuotaError
from chaz.store.admitting import Admitting
from chaz.store.types import Appended, JobFields

#: Reserves one admission's quota for the member a room's entry wakes, or
#: raises a QuotaError (given the room's unit of work: its row locked, the
#: id its job will take).
Reserve = Callable[[Admitting], None]


def insert(
    tx: Admitting, draft: NewEntry, *, job_fields: JobFields | None, default_budget: int | None
) -> Appended:
    """Insert an admission's entry into its room, waking the member the room's rule picks.

    One that wakes nobody is inserted without a job (``Appended.job`` is
    None; its reserved quota is the caller's to refund).
    """
    budget = rooms.budget_of(tx.session.burst_budget, default_budget)
    found = _route(tx, draft, budget)
    if found is not None and found.wake is not None:
        fields = replace(job_fields or JobFields(), member_agent_id=found.wake)
        done = tx.insert(draft, job_fields=fields)
        tx.set_burst(found.burst)
        return done
    if found is None:
        return tx.insert(draft, job_fields=job_fields)
    entry = tx.insert_only(draft)
    return Appended(entry, None, created=True, notices=_keep_burst(tx, found, entry.id, budget))


def route(
    tx: Admitting,
    draft: NewEntry,
    entry_id: str,
    posted_by: str | None,
    *,
    default_budget: int | None,
    reserve: Reserve,
) -> tuple[Job | None, tuple[Entry, ...]]:
    """Route an entry just written into a room: the job it admits (if any) and
    the notices it wrote.

    The woken member's job is counted against the room's quotas first
    (``reserve``): a refusal wakes nobody, and a notice says why. A member
    woken by a turn's entry (``posted_by``: that turn's job) runs with that
    job's owner, grants and unattended flag: grants only narrow
    (docs/security.md#grants-inside-turns).
    """
    budget = rooms.budget_of(tx.session.burst_budget, default_budget)
    found = _route(tx, draft, budget)
    if found is None:
        return None, ()
    if found.wake is None:
        return None, _keep_burst(tx, found, entry_id, budget)
    try:
        reserve(tx)
    except QuotaError as exc:
        note = NewEntry(
            EntryType.NOTICE,
            rooms.ROOM_SENDER,
            f"@{found.wake} was not woken: {exc.message}",
            metadata={"room": "quota", "code": exc.code, "member": found.wake},
            idempotency_key=f"room:{entry_id}:quota",
        )
        return None, (tx.append_to(tx.session.id, note),)
    return tx.wake(entry_id, found.wake, found.burst, inherit=posted_by), ()


def _route(tx: Admitting, draft: NewEntry, budget: int) -> rooms.Route | None:
    session = tx.session
    assert session.members is not None, "routing is for rooms"
    return rooms.route(
        session.agent_id,
        session.members,
        draft.type,
        draft.sender,
        draft.content,
        tx.room_burst,
        budget,
    )


def _keep_burst(tx: Admitting, found: rooms.Route, entry_id: str, budget: int) -> tuple[Entry, ...]:
    """Keep a room's burst counter for an entry that woke nobody; the spent
    notice, the first time a burst runs out (docs/rooms.md#burst)."""
    if found.burst != tx.room_burst:
        tx.set_burst(found.burst)
    if not found.spent:
        return ()
    note = NewEntry(
        EntryType.NOTICE,
        rooms.ROOM_SENDER,
        rooms.spent_notice(budget),
        metadata={"room": "burst_spent", "budget": budget},
        idempotency_key=f"room:{entry_id}:spent",
    )
    return (tx.append_to(tx.session.id, note),)
