"""Statements over sessions for addresses, lineage and listings (issue 9), built once.

Only :mod:`chaz.store.directory` runs them. The lineage walks are recursive CTEs
(PostgreSQL and SQLite both have ``WITH RECURSIVE``): one round trip however
deep the lineage, and a hop bound that ends the recursion even when corrupt
data makes a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, case, func, literal_column, or_, select

from chaz.domain.entries import CONTEXT_TYPES, EntryType
from chaz.domain.jobs import ACTIVE, TERMINAL
from chaz.domain.read_scope import ReadScope
from chaz.store.statements import ENTRIES, JOBS, SESSIONS

_TERMINAL = sorted(s.value for s in TERMINAL)
_ACTIVE = sorted(s.value for s in ACTIVE)
_CONTEXT = sorted(t.value for t in CONTEXT_TYPES)
#: What a tip is: the latest thing said to or by the session's agent.
TIP_TYPES = sorted(t.value for t in (EntryType.MESSAGE, EntryType.DIRECTIVE))
#: How much of a tip's content is read (a listing shows less; no 1 MiB reads).
TIP_READ_CHARS = 200


def readable(within: ReadScope) -> ColumnElement[bool]:
    """The sessions ``within`` allows, as a WHERE clause: its project, its tree,
    and the sessions of other trees below its viewer (docs/contracts.md#visibility)."""
    tree = SESSIONS.c.tree_id == within.tree_id
    mine = or_(tree, SESSIONS.c.id.in_(sorted(within.below))) if within.below else tree
    return and_(SESSIONS.c.project == within.project, mine)


def _descendants() -> Any:
    # down(sid, depth): the session, then sessions whose parent job ran in one
    # already found. UNION (not ALL) drops repeats of one (sid, depth).
    start = (
        select(SESSIONS.c.id.label("sid"), literal_column("0").label("depth"))
        .where(SESSIONS.c.id == bindparam("sid"))
        .cte("down", recursive=True)
    )
    found = start.alias("found")
    child = SESSIONS.alias("child")
    step = (
        select(child.c.id, found.c.depth + 1)
        .select_from(
            found.join(JOBS, JOBS.c.session_id == found.c.sid).join(
                child, child.c.parent_job_id == JOBS.c.id
            )
        )
        .where(found.c.depth < bindparam("hops"))
    )
    down = start.union(step)
    return (
        select(down.c.sid, SESSIONS.c.tree_id)
        .distinct()
        .join(SESSIONS, SESSIONS.c.id == down.c.sid)
    )


def _job_ancestors() -> Any:
    # up(jid, sid, depth): the job's parent, then each parent's parent.
    # The CTE itself: the statements below select from it.
    me = JOBS.alias("me")
    parent = select(me.c.parent_job_id).where(me.c.id == bindparam("jid")).scalar_subquery()
    start = (
        select(
            JOBS.c.id.label("jid"),
            JOBS.c.session_id.label("sid"),
            literal_column("1").label("depth"),
        )
        .where(JOBS.c.id == parent)
        .cte("up", recursive=True)
    )
    found = start.alias("found")
    below = JOBS.alias("below")
    above = JOBS.alias("above")
    step = (
        select(above.c.id, above.c.session_id, found.c.depth + 1)
        .select_from(
            found.join(below, below.c.id == found.c.jid).join(
                above, above.c.id == below.c.parent_job_id
            )
        )
        .where(found.c.depth < bindparam("hops"))
    )
    return start.union_all(step)


#: Sessions below ``:sid`` through ``parent_job_id`` (at most ``:hops`` generations)
#: and their trees.
DESCENDANTS = _descendants()
_UP = _job_ancestors()
#: Sessions of the jobs above ``:jid`` through ``parent_job_id``, nearest first.
JOB_ANCESTORS = select(_UP.c.sid).order_by(_UP.c.depth)
#: The nearest unfinished job above ``:jid`` that runs in session ``:sid``.
UNFINISHED_ANCESTOR_IN = (
    select(_UP.c.jid)
    .join(JOBS, JOBS.c.id == _UP.c.jid)
    .where(_UP.c.sid == bindparam("sid"), JOBS.c.status.in_(_ACTIVE))
    .order_by(_UP.c.depth)
    .limit(1)
)

_finished = and_(JOBS.c.status.in_(_TERMINAL), JOBS.c.started_at.is_not(None))
#: A session's finished turns: jobs that started and ended (docs/collaboration.md#list-agents).
FINISHED_TURNS = (
    select(func.count()).select_from(JOBS).where(JOBS.c.session_id == bindparam("sid"), _finished)
)
#: Per session: finished turns and active jobs (add a WHERE on the sessions).
TURN_COUNTS = select(
    JOBS.c.session_id,
    func.sum(case((_finished, 1), else_=0)),
    func.sum(case((JOBS.c.status.in_(_ACTIVE), 1), else_=0)),
).group_by(JOBS.c.session_id)
#: Per session: characters of its context entries (add a WHERE on the sessions).
CONTEXT_SIZES = (
    select(ENTRIES.c.session_id, func.sum(func.length(ENTRIES.c.content)))
    .where(ENTRIES.c.type.in_(_CONTEXT))
    .group_by(ENTRIES.c.session_id)
)
#: A session's entries without their content: seq, type, sender, job, length.
OUTLINE = (
    select(
        ENTRIES.c.seq,
        ENTRIES.c.type,
        ENTRIES.c.sender,
        ENTRIES.c.job_id,
        func.length(ENTRIES.c.content),
    )
    .where(ENTRIES.c.session_id == bindparam("sid"))
    .order_by(ENTRIES.c.seq)
)


def tips(session_ids: Sequence[str]) -> Any:
    """The start of each session's latest Message or Directive: ``(session_id, text)``."""
    latest = (
        select(ENTRIES.c.session_id, func.max(ENTRIES.c.seq).label("seq"))
        .where(ENTRIES.c.session_id.in_(list(session_ids)), ENTRIES.c.type.in_(TIP_TYPES))
        .group_by(ENTRIES.c.session_id)
        .subquery()
    )
    return select(ENTRIES.c.session_id, func.substr(ENTRIES.c.content, 1, TIP_READ_CHARS)).join(
        latest, and_(ENTRIES.c.session_id == latest.c.session_id, ENTRIES.c.seq == latest.c.seq)
    )
