"""The statements of the hot path, built once at import.

Every turn and every admission runs these. Building a SQLAlchemy statement
(coercions, cache keys) costs more CPU than executing it on SQLite: a third
of a round trip's CPU went there when the store built them on every call. A
module-level statement with bind parameters is built once, and the engine
caches its compiled form. Only the store's concept modules run them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Select,
    Text,
    Update,
    and_,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal_column,
    or_,
    select,
    true,
    update,
)

from chaz.domain.entries import EntryType
from chaz.domain.jobs import ACTIVE, JobStatus, sources
from chaz.store.models import AgentRow, EntryRow, JobRow, SessionRow, unfinished

ACTIVE_VALUES = [s.value for s in ACTIVE]

SESSIONS = SessionRow.__table__
ENTRIES = EntryRow.__table__
JOBS = JobRow.__table__
AGENTS = AgentRow.__table__

CONTEXT_TYPES = [t.value for t in (EntryType.MESSAGE, EntryType.DIRECTIVE, EntryType.SUMMARY)]


def _among(column: Any, values: list[str]) -> Any:
    # ``column IN ('a', ...)`` with the values written as literals. A list of
    # values becomes an "expanding" parameter, which SQLAlchemy writes into
    # the statement's text again on every execution: a pass over the whole
    # text (the start's is long) on the turn's way to its Ack.
    return column.in_([literal_column(f"'{v}'") for v in values])


#: An entry that is not hidden: the job it names, if any, was not rolled back
#: (the hidden-entries rule, chaz/domain/multitask.py). A probe of the job's
#: primary key per entry: a scalar subquery, which PostgreSQL does not turn
#: into a join. As ``NOT EXISTS`` it became an anti-join, and a plan made on
#: empty, never-analyzed tables (a worker's prepared generic plan on a fresh
#: database, kept) scanned all of ``jobs`` for every entry a context read
#: (docs/performance.md#postgresql-work-per-turn).
VISIBLE = (
    select(JOBS.c.rolled_back_at).where(JOBS.c.id == ENTRIES.c.job_id).scalar_subquery().is_(None)
)

#: The session's head job: its oldest unfinished one, by admission order
#: (``ix_jobs_session_active`` in order: the first entry is the answer).
HEAD = (
    select(JOBS)
    .where(JOBS.c.session_id == bindparam("sid"), unfinished(JOBS.c.status))
    .order_by(JOBS.c.ordinal)
    .limit(1)
)
#: A session by id, and by its unique name.
SESSION_BY_ID = select(SESSIONS).where(SESSIONS.c.id == bindparam("ref"))
SESSION_BY_NAME = select(SESSIONS).where(SESSIONS.c.name == bindparam("ref"))
#: The same two, limited to one project (docs/security.md).
SESSION_IN_PROJECT = SESSION_BY_ID.where(SESSIONS.c.project == bindparam("project"))
SESSION_IN_PROJECT_BY_NAME = SESSION_BY_NAME.where(SESSIONS.c.project == bindparam("project"))
#: A session row, locked for update (without taking a seq).
LOCK_SESSION = select(SESSIONS).where(SESSIONS.c.id == bindparam("sid")).with_for_update()
#: A saved agent's spec (JSON).
AGENT_SPEC = select(AGENTS.c.spec).where(AGENTS.c.id == bindparam("aid"))
#: A session with its agent's spec, as ``agent_spec``.
SESSION_AND_AGENT = (
    select(SESSIONS, AGENTS.c.spec.label("agent_spec"))
    .join(AGENTS, AGENTS.c.id == SESSIONS.c.agent_id)
    .where(SESSIONS.c.id == bindparam("sid"))
)
#: A turn's setup in one statement: the session with its agent's spec and
#: its head job (HEAD, uncorrelated: it runs once), each of the job's
#: columns as ``head_<name>``, NULL when no job is unfinished. One round trip
#: fewer on the way from a wake-up to the Ack (docs/performance.md#dispatch).
_HEAD = HEAD.subquery("head")
SETUP_HEAD = (
    select(
        SESSIONS, AGENTS.c.spec.label("agent_spec"), *(c.label(f"head_{c.name}") for c in _HEAD.c)
    )
    .join(AGENTS, AGENTS.c.id == SESSIONS.c.agent_id)
    .outerjoin(_HEAD, true())
    .where(SESSIONS.c.id == bindparam("sid"))
)
#: The ``head_`` columns of SETUP_HEAD, by the job column each one is.
SETUP_HEAD_JOB = {f"head_{c.name}": c.name for c in _HEAD.c}
#: What a context needs of an entry (:class:`chaz.domain.entries.Said`).
SAID_COLUMNS = (
    ENTRIES.c.id,
    ENTRIES.c.seq,
    ENTRIES.c.type,
    ENTRIES.c.sender,
    ENTRIES.c.content,
)
#: One entry's Said columns (a trigger that is not a context entry).
SAID_BY_ID = select(*SAID_COLUMNS).where(ENTRIES.c.id == bindparam("tid"))


#: Seqs one read of a context covers. Every context read is a walk back from
#: its upper bound in windows of this many seqs, so that whatever plan the
#: database picks (PostgreSQL may prefer a bitmap scan and a sort when its
#: statistics underestimate a long session), one statement touches at most
#: this many entries (docs/performance.md#compaction).
CONTEXT_WINDOW = 512


def _anchor() -> Any:
    # The window's top: the trigger's seq, or ``upto`` when there is none.
    trigger_seq = select(ENTRIES.c.seq).where(ENTRIES.c.id == bindparam("tid")).scalar_subquery()
    return func.coalesce(trigger_seq, bindparam("upto"))


def context_rows(anchor: Any) -> Select[Any]:
    """:data:`CONTEXT` with its window's top given as the SQL expression ``anchor``."""
    return (
        select(*SAID_COLUMNS)
        .where(
            ENTRIES.c.session_id == bindparam("sid"),
            _among(ENTRIES.c.type, CONTEXT_TYPES),
            ENTRIES.c.seq <= anchor,
            ENTRIES.c.seq > anchor - bindparam("window"),
            VISIBLE,
        )
        .order_by(ENTRIES.c.seq.desc())
        .limit(bindparam("lim"))
    )


#: One window of a context: Message, Directive and Summary entries with
#: ``top - window < seq <= top`` that are not hidden (:data:`VISIBLE`),
#: where ``top`` is the trigger ``tid``'s seq (it is one of them, so it comes
#: back too) or, without one, ``upto``;
#: newest first, at most ``lim`` of them, and only the columns a context
#: needs. The store walks the windows back and stops at the newest Summary,
#: the context's start (chaz.store.context._context).
CONTEXT = context_rows(_anchor())
#: An entry's seq (the top of a context's next window, below its trigger).
SEQ_BY_ID = select(ENTRIES.c.seq).where(ENTRIES.c.id == bindparam("tid"))
#: A context entry with ``covers < seq < below``, if any (compaction's race
#: check: an index range holding only what came in during the compaction).
CONTEXT_AFTER = (
    select(ENTRIES.c.seq)
    .where(
        ENTRIES.c.session_id == bindparam("sid"),
        ENTRIES.c.seq > bindparam("covers"),
        ENTRIES.c.seq < bindparam("below"),
        ENTRIES.c.type.in_(CONTEXT_TYPES),
    )
    .limit(1)
)
#: A fork's source, for reading through it.
FORK_OF = select(SESSIONS.c.fork_session_id, SESSIONS.c.fork_seq).where(
    SESSIONS.c.id == bindparam("sid")
)
#: Take the session's next seq (locks the session row), returning the session.
BUMP = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("sid"))
    .values(last_seq=SESSIONS.c.last_seq + 1)
    .returning(*SESSIONS.c)
)
#: The session's agent's spec, as ``agent_spec``, in an admission's RETURNING:
#: every admission needs it (its quotas), and a statement of its own cost
#: PostgreSQL as much as a pk lookup inside this one (docs/performance.md).
_AGENT_OF_SESSION = (
    select(AGENTS.c.spec)
    .where(AGENTS.c.id == SESSIONS.c.agent_id)
    .scalar_subquery()
    .label("agent_spec")
)
#: How long an admission leaves a session's ``active_at`` as it is: set at
#: most once a second, so that a session's admissions in between change no
#: indexed column and their update is HOT (``ix_sessions_project_active``
#: holds it; docs/performance.md#postgresql-work-per-turn).
ACTIVE_AT_GRAIN = timedelta(seconds=1)
#: ``active_at`` as an admission sets it: ``now``, unless it is later than
#: ``fresh_after`` (``now - ACTIVE_AT_GRAIN``, :func:`active_params`).
_ACTIVE_AT = case(
    (
        SESSIONS.c.active_at > bindparam("fresh_after", type_=SESSIONS.c.active_at.type),
        SESSIONS.c.active_at,
    ),
    else_=bindparam("now", type_=SESSIONS.c.active_at.type),
)


def active_params(now: datetime) -> dict[str, datetime]:
    """BUMP_ADMIT's ``now`` and ``fresh_after``."""
    return {"now": now, "fresh_after": now - ACTIVE_AT_GRAIN}


#: The same as BUMP, and the next job ordinal: for an entry that admits a
#: job; with the agent's spec. ``active_at`` moves to ``now`` only if it is
#: older than ACTIVE_AT_GRAIN (:func:`active_params`).
BUMP_ADMIT = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("sid"))
    .values(
        last_seq=SESSIONS.c.last_seq + 1,
        last_ordinal=SESSIONS.c.last_ordinal + 1,
        active_at=_ACTIVE_AT,
    )
    .returning(*SESSIONS.c, _AGENT_OF_SESSION)
)
#: A room's entry wakes a member: the next job ordinal, and the burst counter
#: (the row is already locked by the entry's BUMP).
ROOM_WAKE = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("sid"))
    .values(
        last_ordinal=SESSIONS.c.last_ordinal + 1,
        active_at=bindparam("now"),
        room_burst=bindparam("burst"),
    )
    .returning(SESSIONS.c.last_ordinal)
)
#: A room's burst counter alone.
ROOM_BURST = (
    update(SESSIONS).where(SESSIONS.c.id == bindparam("sid")).values(room_burst=bindparam("burst"))
)
#: The next job ordinal alone (no seq): a job admitted with no entry, a
#: schedule fire's (docs/schedules.md), locking the session row like BUMP.
BUMP_JOB = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("sid"))
    .values(last_ordinal=SESSIONS.c.last_ordinal + 1, active_at=bindparam("now"))
    .returning(*SESSIONS.c, _AGENT_OF_SESSION)
)
#: Inserts, executed with a dict of every column.
INSERT_ENTRY = insert(ENTRIES)
INSERT_JOB = insert(JOBS)
#: The columns an admission writes of its entry and of its job
#: (``chaz.store.writes.entry_row`` and ``new_job``).
ENTRY_COLUMNS = (
    "id",
    "session_id",
    "seq",
    "type",
    "sender",
    "content",
    "metadata",
    "job_id",
    "idempotency_key",
    "key_scope",
    "created_at",
)
JOB_COLUMNS = tuple(
    c.name
    for c in JOBS.c
    if c.name not in ("input", "fire_id", "usage", "hidden_at", "rolled_back_at")
)


def _entry_and_job() -> Any:
    entry = insert(ENTRIES).values(
        {n: bindparam(f"e_{n}", type_=ENTRIES.c[n].type) for n in ENTRY_COLUMNS}
    )
    job = insert(JOBS).values({n: bindparam(f"j_{n}", type_=JOBS.c[n].type) for n in JOB_COLUMNS})
    return job.add_cte(entry.cte("entry"))


#: An admission's entry (the ``e_*`` parameters) and its job (``j_*``) in one
#: statement (PostgreSQL: a data-modifying CTE): one round trip, and either
#: both rows or, on a taken idempotency key, neither
#: (docs/performance.md#postgresql-work-per-turn).
INSERT_ENTRY_AND_JOB = _entry_and_job()
#: Job columns an admission in one statement takes from the session row it
#: locks (``ADMIT_IN_ONE``), not from its parameters.
_FROM_SESSION = {"tree_id": "tree_id", "project": "project", "ordinal": "last_ordinal"}


def _admit_in_one() -> Any:
    s = BUMP_ADMIT.cte("bumped")
    # A plain session (``members`` SQL NULL or JSON null): a room's entry is
    # routed (docs/rooms.md), so there only the bump is done here.
    plain = func.coalesce(cast(s.c.members, Text), "null") == "null"
    entry = insert(ENTRIES).from_select(
        list(ENTRY_COLUMNS),
        select(
            *(
                s.c.last_seq
                if n == "seq"
                else s.c.id
                if n == "session_id"
                else bindparam(f"e_{n}", type_=ENTRIES.c[n].type)
                for n in ENTRY_COLUMNS
            )
        ).where(plain),
    )

    def job_value(n: str) -> Any:
        if n == "session_id":
            return s.c.id
        if n in _FROM_SESSION:
            return s.c[_FROM_SESSION[n]]
        if n == "unattended":
            return or_(bindparam("j_unattended", type_=JOBS.c.unattended.type), s.c.unattended)
        return bindparam(f"j_{n}", type_=JOBS.c[n].type)

    job = insert(JOBS).from_select(
        list(JOB_COLUMNS), select(*(job_value(n) for n in JOB_COLUMNS)).where(plain)
    )
    return (
        select(*(s.c[c.name] for c in SESSIONS.c), s.c.agent_spec)
        .add_cte(entry.cte("entry"))
        .add_cte(job.cte("job"))
    )


#: An admission's session update (``BUMP_ADMIT``), its entry (the ``e_*``
#: parameters) and its job (``j_*``; the job's session, tree, project and
#: ordinal, and its unattended flag in part, are the session row's) as one
#: statement on PostgreSQL, returning the session row as BUMP_ADMIT does.
#: On a room session it inserts nothing (the room's rule writes its rows).
#: One statement and one round trip fewer per admission
#: (docs/performance.md#postgresql-work-per-turn).
ADMIT_IN_ONE = _admit_in_one()
#: A job row, locked for update; its lease token alone, locked (the fence).
LOCK_JOB = select(JOBS).where(JOBS.c.id == bindparam("jid")).with_for_update()
FENCE = select(JOBS.c.lease_token).where(JOBS.c.id == bindparam("jid")).with_for_update()
#: Whether a start resumes a turn that stopped at a safe point, and so spends
#: no attempt (docs/executions.md#attempts): queued again by an approval
#: decision after its first start, or handed back (running, no lease token).
#: Read from the row being updated, so the count is the database's own.
_RESUMES_SAFELY = or_(
    and_(JOBS.c.status == JobStatus.QUEUED.value, JOBS.c.starts > 0),
    and_(
        _among(JOBS.c.status, [JobStatus.RUNNING.value, JobStatus.STOPPING.value]),
        JOBS.c.lease_token.is_(None),
    ),
)
#: A start's count of attempts, from the row being updated.
COUNTED_ATTEMPTS = JOBS.c.attempts + case((_RESUMES_SAFELY, 0), else_=1)
#: A turn's start, as a compare-and-set on the version the caller read; it
#: returns the attempts it counted.
START = (
    update(JOBS)
    .where(JOBS.c.id == bindparam("jid"), JOBS.c.version == bindparam("seen_version"))
    .values(
        status=bindparam("v_status"),
        version=bindparam("v_version"),
        starts=JOBS.c.starts + 1,
        attempts=COUNTED_ATTEMPTS,
        lease_token=bindparam("v_lease_token"),
        started_at=bindparam("v_started_at"),
        usage=bindparam("v_usage"),
    )
    .returning(JOBS.c.starts, JOBS.c.attempts)
)


def _fenced_finish_stmt(target: JobStatus) -> Update:
    # The fence (the turn's token) and the transition gate (the states that
    # may move to ``target``) in one WHERE: no read before the write.
    return (
        update(JOBS)
        .where(
            JOBS.c.id == bindparam("jid"),
            JOBS.c.lease_token == bindparam("token"),
            JOBS.c.status.in_(sorted(s.value for s in sources(target))),
        )
        .values(
            status=target.value,
            version=JOBS.c.version + 1,
            result=bindparam("v_result"),
            error=bindparam("v_error"),
            finished_at=bindparam("v_finished_at"),
            usage=bindparam("v_usage"),
            lease_token=None,
        )
        # Which delivery admitted the job: its end applies that delivery's policy;
        # which schedule fire: its end is the fire's outcome (docs/schedules.md).
        # And where its end is told (a run's webhook, docs/http.md#webhooks).
        .returning(JOBS.c.delivery_id, JOBS.c.fire_id, JOBS.c.webhook, JOBS.c.project)
    )


#: A turn's end by target state: one UPDATE that is fence, gate and change.
FENCED_FINISH = {s: _fenced_finish_stmt(s) for s in JobStatus if s.terminal}
