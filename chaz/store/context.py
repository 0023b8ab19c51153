"""A session's context: what a turn reads before it starts, what a compaction
stands for, and the Summary that bounds both (docs/sessions.md#compaction).

Context is Message, Directive and Summary entries, from the latest Summary
on, read through a fork's sources, at most a limit of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from chaz.domain.entries import EntryType, NewEntry, Said
from chaz.domain.sessions import Session
from chaz.errors import SessionArchived, SessionNotFound
from chaz.store import entries
from chaz.store import statements as st
from chaz.store.agents import SpecCache
from chaz.store.budgets import read_budget
from chaz.store.db import Database
from chaz.store.models import SessionRow
from chaz.store.rows import as_entry, as_job, as_said, as_session
from chaz.store.types import Appended, TurnSetup
from chaz.store.writes import bump, insert_entry

#: A fork of a fork of ... is read through at most this many sources.
MAX_FORK_HOPS = 16


class _Moved(Exception):
    """A context entry was written after the range a Summary stands for."""


class Context:
    """A turn's setup, a compaction's range and its Summary (``store.turn_setup``, ...)."""

    db: Database
    specs: SpecCache

    def turn_setup(self, session_id: str, max_context: int) -> TurnSetup | None:
        """The session's head job, its session and agent, and the job's context.

        One read transaction: a turn's setup was four. Context is Message,
        Directive and Summary entries up to the trigger, starting at the
        latest Summary, and at most the last ``max_context`` of them: a long
        session must not make every turn read its whole history.
        """
        with self.db.read() as conn:
            return read_setup(conn, self.specs, session_id, max_context)

    def turn_context(self, setup: TurnSetup, max_context: int) -> TurnSetup:
        """``setup`` (read without its context, :meth:`Writes.turn_start`) with
        its job's context (:func:`read_context`), after the start has committed.

        ``setup`` itself if its context was read already: on PostgreSQL the
        start's transaction reads it (:meth:`TurnStart.start`), so that a
        turn is three transactions. Otherwise (SQLite; a start that wrote
        nothing) a read of its own: its bounds are seqs the setup read,
        which no later commit moves, so it needs no snapshot in common with
        the setup.
        """
        if setup.context_read:
            return setup
        if self.db.sqlite:
            with self.db.read() as conn:
                return read_context(conn, setup, max_context)
        with self.db.autocommit() as conn:
            return read_context(conn, setup, max_context)

    def compaction_range(self, session_id: str, limit: int) -> tuple[Session, list[Said], int]:
        """What a compaction of the session stands for, read in one transaction.

        The session; its context from the latest Summary (included) to its
        head, oldest first, read through a fork's sources as a turn's context
        is, at most ``limit`` entries; and ``covers``, the seq of the
        session's own newest context entry (0: none).
        """
        with self.db.read() as conn:
            row = conn.execute(st.SESSION_BY_ID, {"ref": session_id}).mappings().first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}", session=session_id)
            session = as_session(row)
            history = _context(conn, session_id, None, session.last_seq, limit)
            covers = history[0].seq if history else 0
            if session.fork_session_id is not None:
                _read_through(conn, session, history, limit)
        history.reverse()
        return session, history, covers

    def write_summary(self, session_id: str, draft: NewEntry, covers: int) -> Appended | None:
        """Append a Summary at the session's head, standing for its context up to ``covers``.

        Under the session row's lock, and only if no context entry was written
        after ``covers`` since the range was read: a Message that came in
        meanwhile would otherwise sit before the new boundary, summarized by
        nobody, and drop out of every later context. None then (the caller
        reads the range again). The Summary's idempotency key (one per
        range) makes a repeated compaction return the first Summary
        (``created`` False). An archived session is refused.
        """
        try:
            with self.db.write() as conn:
                row = bump(conn, session_id, admit=False)
                if row["archived_at"] is not None:
                    raise SessionArchived(
                        f"session {session_id} is archived", session_id=session_id
                    )
                # Inserted first: a repeat meets the key (and returns the first
                # Summary) before the check below would take it for news.
                values, _ = insert_entry(conn, row, draft, admit=False, job_fields=None)
                after = {"sid": session_id, "covers": covers, "below": row["last_seq"]}
                if conn.scalar(st.CONTEXT_AFTER, after):
                    raise _Moved
        except _Moved:
            return None
        except IntegrityError:
            found = entries.replay(self.db, session_id, draft)
            if found is None:
                raise
            return found
        return Appended(entry=as_entry(values), job=None, created=True)


def read_setup(
    conn: Connection, specs: SpecCache, session_id: str, max_context: int, *, context: bool = True
) -> TurnSetup | None:
    """:meth:`Context.turn_setup` in the open transaction ``conn``.

    ``context=False`` reads everything but the context (``history`` empty,
    ``trigger`` None): a turn's start needs none of it, and
    :func:`read_context` reads it after the start has committed.
    """
    row = conn.execute(st.SETUP_HEAD, {"sid": session_id}).mappings().first()
    if row is None or row["head_id"] is None:
        return None
    setup = setup_of(conn, specs, row)
    return read_context(conn, setup, max_context) if context else setup


def setup_of(conn: Connection, specs: SpecCache, row: Any) -> TurnSetup:
    """The setup (without its context) of a row shaped as ``st.SETUP_HEAD``'s:
    the session's columns, ``agent_spec`` and the head job's as ``head_*``;
    a room member's spec and a budget's sums are read in ``conn``."""
    job = as_job({name: row[label] for label, name in st.SETUP_HEAD_JOB.items()})
    agent = specs.parsed(row["agent_id"], row["agent_spec"])
    if job.member_agent_id not in (None, row["agent_id"]):
        # A room's member: its turn runs with its own spec (docs/rooms.md).
        agent = specs.load(conn, job.member_agent_id)
    session = as_session(row)
    budget = read_budget(conn, specs, job, agent.limits.narrowed(session.limits))
    return TurnSetup(job, session, agent, [], None, budget)


def context_window(setup: TurnSetup, max_context: int) -> dict[str, Any] | None:
    """The parameters of the first ``st.CONTEXT`` statement :func:`read_context`
    runs for ``setup``, or None if it runs none: a statement that reads them
    too (the start's, :data:`chaz.store.oneshot.START_WITH_ACK_AND_CONTEXT`)
    hands its rows to :func:`read_context` as ``first``."""
    upto = setup.session.last_seq
    if max_context <= 0 or upto <= 0:
        return None
    return {
        "sid": setup.session.id,
        "tid": setup.job.trigger_entry_id,
        "upto": upto,
        "window": st.CONTEXT_WINDOW,
        "lim": max_context,
    }


def read_context(
    conn: Connection, setup: TurnSetup, max_context: int, *, first: list[Any] | None = None
) -> TurnSetup:
    """``setup`` with its job's context read in ``conn`` (see :meth:`Context.turn_setup`).

    ``first``: the rows of the first window, read already with the
    parameters :func:`context_window` gave (None: read here).

    Bounded by what the setup read, never by what came since: the entries
    up to the job's trigger, or without one up to the session's ``last_seq``
    as the setup read it (an Ack or a reply written since is not context),
    and a fork's source up to its ``fork_seq``. Seqs are taken in commit
    order (docs/store.md), so a later read of those bounds sees the same
    entries, except any a rollback has hidden since (their job's turn is
    cancelled by that rollback and writes no reply).
    """
    job, session = setup.job, setup.session
    tid = job.trigger_entry_id
    history = _context(conn, session.id, tid, session.last_seq, max_context, first)
    trigger = history[0] if history and history[0].id == tid else None
    if trigger is None and tid is not None:
        # A trigger that is not context (or is gone): read it alone.
        found = conn.execute(st.SAID_BY_ID, {"tid": tid}).first()
        if found is not None:
            trigger = as_said(found)
    if session.fork_session_id is not None:
        _read_through(conn, session, history, max_context)
    history.reverse()
    if job.input is not None and tid is None:
        # A schedule fire (docs/schedules.md): its prompt is this turn's
        # input, in no entry; the model reads it last, as a Directive.
        trigger = Said(
            f"job:{job.id}:input",
            session.last_seq,
            EntryType.DIRECTIVE,
            "system:schedule",
            job.input,
        )
        history.append(trigger)
    return replace(setup, history=history, trigger=trigger, context_read=True)


def _context(
    conn: Connection,
    session_id: str,
    tid: str | None,
    upto: int,
    limit: int,
    first: list[Any] | None = None,
) -> list[Said]:
    """A session's context entries up to the trigger ``tid`` (or, without one,
    up to ``upto``), newest first: from the newest Summary on (where a
    context starts, docs/sessions.md#compaction), at most ``limit`` of them.

    Read in windows of :data:`~chaz.store.statements.CONTEXT_WINDOW` seqs back
    from the trigger, each an index range, until the Summary, the limit or the
    session's first entry: the cost is the entries since the last Summary
    (at most the limit's worth), never the session's length. A compacted
    session takes one statement.
    """
    kept: list[Said] = []
    window = st.CONTEXT_WINDOW
    while len(kept) < limit and upto > 0:
        rows: Sequence[Any]
        if first is not None:
            # The first window, as the caller read it (context_window's bounds).
            rows, first = first, None
        else:
            params = {"sid": session_id, "tid": tid, "upto": upto, "window": window}
            rows = conn.execute(st.CONTEXT, {**params, "lim": limit - len(kept)}).all()
        for r in rows:
            said = as_said(r)
            kept.append(said)
            if said.type is EntryType.SUMMARY:
                return kept
        if tid is not None:
            # Further back: below the trigger's own window (a long session
            # that no Summary bounds yet). A trigger that is a context entry
            # came back first, with its seq: no statement to read it.
            newest = kept[0] if kept else None
            top = newest.seq if newest is not None and newest.id == tid else None
            if top is None:
                top = conn.scalar(st.SEQ_BY_ID, {"tid": tid})
            upto, tid = (top if top is not None else upto), None
        upto -= window
    return kept


def _read_through(conn: Connection, session: Session, history: list[Said], limit: int) -> None:
    """Extend a fork's context (``history``, newest first) with its source's.

    A fork is a pointer, not a copy: its context continues with the source
    session's context up to the entry it was forked at, and so on through
    the source's own source, until a Summary starts the context or
    ``limit`` entries are read (the same bound as any context). A source of
    another project is never read through (docs/security.md#visibility): the
    context stops there as if the source were gone.
    """
    source, upto, project = session.fork_session_id, session.fork_seq, session.project
    for _ in range(MAX_FORK_HOPS):
        if source is None or upto is None or len(history) >= limit:
            return
        if history and history[-1].type is EntryType.SUMMARY:
            return  # the context starts at this Summary
        if conn.scalar(select(SessionRow.project).where(SessionRow.id == source)) != project:
            return
        history.extend(_context(conn, source, None, upto, limit - len(history)))
        found = conn.execute(st.FORK_OF, {"sid": source}).first()
        source, upto = (found[0], found[1]) if found is not None else (None, None)
