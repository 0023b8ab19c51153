"""A turn's start and end as one statement each, on PostgreSQL.

The start (the job's compare-and-set start, the session's next seq, the
Ack) and the end (the job's fenced end, the session's next seq, the reply)
each run as one statement of data-modifying CTEs. The start runs in the
transaction of the turn's setup (``Store.turn_start``: the setup's reads
and the start stay one transaction); the end runs on a connection with no
transaction around it (:meth:`chaz.store.db.Database.autocommit`), so the
statement is its own transaction. A turn's start then takes one statement
instead of four (``SET LOCAL`` included) and its end one round trip instead
of five (docs/performance.md#postgresql-work-per-turn).

They cover a turn's common case only, and say so by writing nothing: a
start whose job changed since the setup read it, or whose job a delivery
or a schedule fire admitted (its event is logged); an end that a stale
fence, a cancel or a state the target may not follow refuses, or whose job
has a delivery, a fire or a webhook to tell, or whose session is a room
(its reply is routed), or that has a result long enough for an artifact.
The caller then runs the general path of :mod:`chaz.store.core`, which
writes the same rows in a transaction and says why it refuses. SQLite
always takes that path.

Both keep the general path's order of row locks (the job, then the
session), its seq order (the session row's lock is taken by the UPDATE
that bumps the seq, as :func:`chaz.store.writes.bump` does) and its
durability: the start does not wait for the disk (``set_config`` of
``synchronous_commit`` for its transaction, as ``SET LOCAL`` does in
:meth:`chaz.store.db.Database.write`), the end does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    CTE,
    Connection,
    Insert,
    ScalarSelect,
    Select,
    Text,
    bindparam,
    cast,
    exists,
    func,
    insert,
    literal,
    literal_column,
    select,
    true,
    update,
)

from chaz.domain.entries import NewEntry, agent_sender
from chaz.domain.jobs import JobStatus
from chaz.domain.results import RESULT_CAP
from chaz.ids import new_id
from chaz.store import statements as st
from chaz.store.models import unfinished
from chaz.store.types import Finish
from chaz.store.writes import entry_row


def _bump_if(name: str, condition: Any) -> CTE:
    # The session's next seq, taken (and its row locked) only if ``condition``.
    s = st.SESSIONS.c
    return (
        update(st.SESSIONS)
        .where(s.id == bindparam("sid"), condition)
        .values(last_seq=s.last_seq + 1)
        .returning(s.id, s.last_seq)
        .cte(name)
    )


def _entry_at(seq: CTE, **given: Any) -> Insert:
    # The entry of the ``e_*`` parameters, at the seq the CTE ``seq`` took;
    # ``given``: columns that are SQL expressions instead.
    c = st.ENTRIES.c
    values = [
        seq.c.last_seq
        if name == "seq"
        else given.get(name, bindparam(f"e_{name}", type_=c[name].type))
        for name in st.ENTRY_COLUMNS
    ]
    return insert(st.ENTRIES).from_select(list(st.ENTRY_COLUMNS), select(*values).select_from(seq))


def _start_with_ack() -> Select[Any]:
    started = st.START.cte("started")
    first = exists(select(literal(1)).select_from(started).where(started.c.starts == 1))
    seq = _bump_if("ack_seq", first)
    ack = _entry_at(seq).returning(st.ENTRIES.c.id).cte("ack")
    return (
        select(
            started.c.starts,
            started.c.attempts,
            seq.c.last_seq,
            # Not durable, as Database.write(durable=False): for this
            # statement's own transaction.
            literal_column("set_config('synchronous_commit', 'off', true)"),
        )
        .select_from(started.outerjoin(seq, true()))
        .add_cte(ack)
    )


#: A turn's start (``st.START``'s compare-and-set) and, on its first start,
#: its Ack at the session's next seq. No row: the job changed since it was read.
START_WITH_ACK = _start_with_ack()


def _context_window(rows: Select[Any] = st.CONTEXT) -> ScalarSelect[Any]:
    # ``rows`` (``st.CONTEXT``'s, its parameters: sid, tid, upto, window, lim) as
    # one JSON array of [id, seq, type, sender, content], newest first; NULL if
    # none. Read from the statement's snapshot, before its own writes
    # (PostgreSQL runs a statement's data-modifying CTEs against one
    # snapshot): the Ack is above the window's top anyway.
    ctx = rows.subquery("context")
    row = func.json_build_array(ctx.c.id, ctx.c.seq, ctx.c.type, ctx.c.sender, ctx.c.content)
    return select(func.json_agg(row).aggregate_order_by(ctx.c.seq.desc())).scalar_subquery()


#: START_WITH_ACK with the first window of the job's context (``st.CONTEXT``)
#: in the same round trip: the context read that followed the start in its
#: transaction cost the Ack one PostgreSQL wait (docs/performance.md#dispatch).
START_WITH_ACK_AND_CONTEXT = START_WITH_ACK.add_columns(_context_window().label("context"))


def _plain_head() -> CTE:
    # The wake-up's job as read (its columns as ``head_*``), with its session
    # (as read) and its agent's spec, if it is the session's head, in the
    # tree the wake-up named, and a plain first start: queued and never
    # started; no delivery, fire, room member or caller, whose starts need
    # rows or decisions of their own; admitted by an entry. ``top``: its
    # context's first window ends at that entry (else at the session's head).
    j, s = st.JOBS.c, st.SESSIONS.c
    earlier = st.JOBS.alias("earlier")
    trigger_seq = select(st.ENTRIES.c.seq).where(st.ENTRIES.c.id == j.trigger_entry_id)
    return (
        select(
            *(c.label(f"head_{c.name}") for c in st.JOBS.c),
            st.SESSIONS,
            st.AGENTS.c.spec.label("agent_spec"),
            func.coalesce(trigger_seq.scalar_subquery(), s.last_seq).label("top"),
        )
        .select_from(
            st.JOBS.join(st.SESSIONS, s.id == j.session_id).join(
                st.AGENTS, st.AGENTS.c.id == s.agent_id
            )
        )
        .where(
            j.id == bindparam("jid"),
            j.session_id == bindparam("sid"),
            j.tree_id == bindparam("tree"),
            j.status == JobStatus.QUEUED.value,
            j.starts == 0,
            j.delivery_id.is_(None),
            j.fire_id.is_(None),
            j.member_agent_id.is_(None),
            j.parent_job_id.is_(None),
            j.trigger_entry_id.is_not(None),
            ~exists(
                select(literal(1)).where(
                    earlier.c.session_id == j.session_id,
                    unfinished(earlier.c.status),
                    earlier.c.ordinal < j.ordinal,
                )
            ),
        )
        .cte("head")
    )


def _start_head() -> Select[Any]:
    j, s = st.JOBS.c, st.SESSIONS.c
    head = _plain_head()
    started = (
        update(st.JOBS)
        # The version as read: a change since (a cancel) is seen again by
        # the UPDATE's own check and starts nothing.
        .where(
            j.id == head.c.head_id,
            j.version == head.c.head_version,
            j.status == JobStatus.QUEUED.value,
        )
        .values(
            status=JobStatus.RUNNING.value,
            version=j.version + 1,
            starts=j.starts + 1,
            attempts=st.COUNTED_ATTEMPTS,
            lease_token=bindparam("token"),
            started_at=bindparam("now"),
        )
        .returning(j.starts, j.attempts)
        .cte("started")
    )
    seq = (
        update(st.SESSIONS)
        .where(s.id == bindparam("sid"), exists(select(literal(1)).select_from(started)))
        .values(last_seq=s.last_seq + 1)
        .returning(s.id, s.last_seq, s.agent_id)
        .cte("ack_seq")
    )
    sender = literal("agent:", type_=Text) + seq.c.agent_id
    ack = _entry_at(seq, sender=sender).returning(st.ENTRIES.c.id).cte("ack")
    top = select(head.c.top).scalar_subquery()
    context = _context_window(st.context_rows(top))
    return (
        select(
            head,
            started.c.starts.label("started_starts"),
            started.c.attempts.label("started_attempts"),
            seq.c.last_seq.label("ack_seq"),
            context.label("context"),
            literal_column("set_config('synchronous_commit', 'off', true)").label("durable"),
        )
        .select_from(head.join(started, true()).join(seq, true()))
        .add_cte(ack)
    )


#: A turn's setup read and its start in one statement, for a wake-up that
#: named its job and took its live slot with the lane: the job (as read, its
#: columns ``head_*``), its session (as read) with its agent's spec, the
#: start's counts, the Ack's seq and the first window of the context. No
#: row: not this statement's case (see :func:`start_head`), nothing written.
START_HEAD = _start_head()


def _end_with_reply(target: JobStatus) -> Select[Any]:
    j, s = st.JOBS.c, st.SESSIONS.c
    # The session exists and is no room (``members`` SQL NULL or JSON null).
    plain = exists(
        select(literal(1)).where(
            s.id == bindparam("sid"), func.coalesce(cast(s.members, Text), "null") == "null"
        )
    )
    ended = (
        st.FENCED_FINISH[target]
        .where(j.delivery_id.is_(None), j.fire_id.is_(None), j.webhook.is_(None), plain)
        .cte("ended")
    )
    seq = _bump_if("reply_seq", exists(select(literal(1)).select_from(ended)))
    reply = _entry_at(seq).returning(st.ENTRIES.c.id).cte("reply")
    return select(seq.c.last_seq).select_from(ended.outerjoin(seq, true())).add_cte(reply)


#: A turn's end by target state (``st.FENCED_FINISH``'s fenced compare-and-set)
#: with its reply at the session's next seq. No row: not this path's case.
#: Built per state on its first use (:func:`end_with_reply`): a worker's
#: turns mostly end ``done``, and each statement is a few CTEs to build.
END_WITH_REPLY: dict[JobStatus, Select[Any]] = {}


def end_with_reply(target: JobStatus) -> Select[Any]:
    """:data:`END_WITH_REPLY`'s statement for ``target``, built on first use.
    Two threads racing to build it build two equal statements, and the first
    stored is kept: the engine's compiled cache keys on the statement's
    structure, not its identity."""
    statement = END_WITH_REPLY.get(target)
    if statement is None:
        if not target.terminal:
            raise KeyError(target)  # as the table of every terminal state did
        statement = END_WITH_REPLY.setdefault(target, _end_with_reply(target))
    return statement


def _entry_params(
    session_id: str, draft: NewEntry, job_id: str, now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    values = entry_row(new_id(), session_id, 0, draft, job_id, now)
    params = {f"e_{k}": v for k, v in values.items() if k != "seq"}
    return values, params | {"sid": session_id}


class Started(NamedTuple):
    """What :func:`start` wrote, and the context window it read."""

    starts: int
    attempts: int
    #: The Ack's columns (None: not a first start, no Ack).
    ack: dict[str, Any] | None
    #: ``st.CONTEXT``'s rows for the ``context`` parameters given (None: none given).
    context: list[Any] | None


def start(
    conn: Connection,
    job_id: str,
    session_id: str,
    seen_version: int,
    start_params: dict[str, Any],
    ack: NewEntry,
    now: datetime,
    context: dict[str, Any] | None = None,
) -> Started | None:
    """Start the job as read at ``seen_version`` (``start_params``: ``st.START``'s
    ``v_*``) and, on its first start, write ``ack``; or None (nothing written)
    if the job changed. ``context``: ``st.CONTEXT``'s parameters (its ``sid``
    the session's) to read that window of the context in the same statement."""
    values, params = _entry_params(session_id, ack, job_id, now)
    statement = START_WITH_ACK if context is None else START_WITH_ACK_AND_CONTEXT
    row = conn.execute(
        statement,
        {"jid": job_id, "seen_version": seen_version, **start_params, **(context or {}), **params},
    ).first()
    if row is None:
        return None
    starts, attempts, seq = int(row[0]), int(row[1]), row[2]
    return Started(
        starts,
        attempts,
        values | {"seq": seq} if seq is not None else None,
        None if context is None else (row[4] or []),
    )


class StartedHead(NamedTuple):
    """What :func:`start_head` read and wrote."""

    #: The statement's row: the session's columns, ``agent_spec``, the job as
    #: read (``head_*``) and ``started_starts``, ``started_attempts``, ``ack_seq``.
    row: Any
    #: The Ack's columns.
    ack: dict[str, Any]
    #: ``st.CONTEXT``'s rows of the first window.
    context: list[Any]


def start_head(
    conn: Connection,
    session_id: str,
    job_id: str,
    tree_id: str,
    token: str,
    ack: NewEntry,
    now: datetime,
    window: dict[str, Any],
) -> StartedHead | None:
    """Read the turn's setup and start job ``job_id`` with its Ack in one
    statement (:data:`START_HEAD`), on ``conn`` with no transaction around it;
    or None, having written nothing, unless the job is the session's head in
    ``tree_id`` and a plain first start. ``ack``'s sender is the session's
    agent's, written by the statement. ``window``: ``st.CONTEXT``'s ``window``
    and ``lim``."""
    values, params = _entry_params(session_id, ack, job_id, now)
    del params["e_sender"]
    row = conn.execute(
        START_HEAD,
        {"jid": job_id, "tree": tree_id, "token": token, "now": now, **window, **params},
    ).first()
    if row is None:
        return None
    found = row._mapping
    values |= {"seq": found["ack_seq"], "sender": agent_sender(found["agent_id"])}
    return StartedHead(found, values, found["context"] or [])


def covers_end(finish: Finish, draft: NewEntry | None) -> bool:
    """Whether :func:`end` may take this end (else only the general path can)."""
    # A result past the cap records an artifact in the same transaction.
    return draft is not None and (finish.result is None or len(finish.result) <= RESULT_CAP)


def end(
    conn: Connection,
    token: str,
    finish: Finish,
    session_id: str,
    draft: NewEntry,
    params: dict[str, Any],
    now: datetime,
) -> dict[str, Any] | None:
    """End the job held under ``token`` and write ``draft``, its reply: the
    reply's columns, or None if nothing was written (see the module).
    ``params``: ``st.FENCED_FINISH``'s ``v_*``."""
    values, entry = _entry_params(session_id, draft, finish.job_id, now)
    row = conn.execute(
        end_with_reply(finish.status), {"jid": finish.job_id, "token": token, **params, **entry}
    ).first()
    if row is None:
        return None
    return values | {"seq": row[0]}
