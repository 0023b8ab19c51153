"""The values the store's write path takes and returns, and its internal refusals.

Shared by the concept modules (:mod:`chaz.store.core`, :mod:`chaz.store.jobs`,
:mod:`chaz.store.sessions`, ...) and by their callers above the store, so that
none of them imports another concept's module for a type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.budgets import BudgetRead
from chaz.domain.entries import Entry, Said
from chaz.domain.jobs import Job, JobStatus, Usage
from chaz.domain.principals import DEFAULT_PRINCIPAL, DEFAULT_PROJECT
from chaz.domain.sessions import Origin, Session


@dataclass(frozen=True)
class JobFields:
    """Lineage and topology of a job admitted by an append (spawns, deliveries)."""

    caller_session_id: str | None = None
    caller_entry_id: str | None = None
    parent_job_id: str | None = None
    call_depth: int = 0
    message_count: int = 0
    #: The delivery admitting the job: marked ``admitted`` in the same transaction.
    delivery_id: str | None = None
    #: In a room, the member whose turn it is (docs/rooms.md).
    member_agent_id: str | None = None
    #: Who started the chain of turns, and the grants it carries (sorted
    #: names; None: every grant). Grants only narrow down a chain.
    owner: str = DEFAULT_PRINCIPAL
    grants: list[str] | None = None
    #: Run under the unattended policy (also when the session is unattended).
    unattended: bool = False
    #: The URL the job's end is POSTed to (a run's ``webhook``, docs/http.md#webhooks).
    webhook: str | None = None


@dataclass(frozen=True)
class NewSession:
    """A session to create (see ``Store.create_session`` and ``Store.admitting``)."""

    agent_id: str
    name: str | None = None
    limits: Limits | None = None
    tools: list[str] | None = None
    parent_job_id: str | None = None
    tree_id: str | None = None
    call_depth: int = 0
    #: ``(session_id, seq)`` of a fork's source entry.
    fork: tuple[str, int] | None = None
    origin: Origin | None = None
    #: Automatic names to try in turn when ``name`` is None; the first free one wins.
    names: tuple[str, ...] = ()
    #: A room's members (saved agents, checked here) and burst budget (docs/rooms.md).
    members: list[str] | None = None
    burst_budget: int | None = None
    #: The project it belongs to and the principal that made it.
    project: str = DEFAULT_PROJECT
    owner: str = DEFAULT_PRINCIPAL
    #: Its turns run unattended; "bypass" lets ``unless_auto_approved`` tools run.
    unattended: bool = False
    permission_mode: str = "default"
    description: str | None = None


@dataclass(frozen=True)
class Appended:
    """What an append did. ``created`` is False when an idempotency key matched."""

    entry: Entry
    job: Job | None
    created: bool
    #: Notices written with it (a room's spent burst): published after it.
    notices: tuple[Entry, ...] = ()


@dataclass(frozen=True)
class Finish:
    """Make the appended entry a turn's last: its job ends in the same transaction."""

    job_id: str
    status: JobStatus
    result: str | None = None
    error: dict[str, Any] | None = None
    #: What the turn used (docs/runtime.md#per-turn-budgets), written with its end.
    usage: Usage | None = None


@dataclass(frozen=True)
class Fence:
    """A turn's claim on its session: writes are refused once the token changes."""

    job_id: str
    token: str


@dataclass(frozen=True)
class TurnSetup:
    """Everything a turn needs before it starts, read in one transaction;
    ``history`` and ``trigger`` empty when read for a start (``Store.turn_start``),
    until ``Store.turn_context`` reads them."""

    job: Job
    session: Session
    agent: AgentSpec
    history: list[Said]
    trigger: Said | None
    #: The sums its cumulative budgets need (None: nothing bounds it,
    #: docs/runtime.md#budgets).
    budget: BudgetRead | None = None
    #: Whether ``history`` and ``trigger`` were read (``Store.turn_context``
    #: reads them only if not).
    context_read: bool = False


class KeyTaken(Exception):
    """An insert met an earlier entry with the same idempotency key.

    The transaction has rolled back; the caller replays the first entry
    (``Store.replay``). Internal to the write path: it never reaches a
    producer.
    """


class SessionBusy(Exception):
    """A schedule fire met its pinned session busy (``overlap="skip"``).

    Internal to the fire path: the admission rolls back, and the slot is
    recorded ``skipped``.
    """


class DeliveryGone(Exception):
    """The delivery being admitted was admitted, dropped or refused by someone else.

    Internal to the delivery path: the transaction rolls back and the caller
    moves on to the next one.
    """


class SenderStopped(Exception):
    """The delivery being admitted was sent by a job being (or already) cancelled.

    Internal to the delivery path: the transaction rolls back, and the
    delivery is withdrawn instead (docs/collaboration.md#withdrawal).
    """
