"""What a turn's budget scopes have spent, read from the jobs' rows (docs/runtime.md#budgets).

Nothing here is a counter: each sum is taken over ``jobs.usage`` when it is
asked for, so a dead worker's job or a redelivered attempt (which overwrites
its own job's usage under the fence) is never counted twice. Ended jobs are
summed in SQL; live ones, few by the quotas, are read and charged in Python
the larger of their usage and their reservation
(:func:`chaz.domain.budgets.charge`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Connection, func, select

from chaz.domain import budgets
from chaz.domain.agents import Limits
from chaz.domain.budgets import Allowance, BudgetRead, Spent, Totals
from chaz.domain.jobs import Job, JobStatus, Usage
from chaz.store import statements as st
from chaz.store.agents import SpecCache
from chaz.store.rows import as_job, as_session

JOBS = st.JOBS
_LIVE = sorted(s.value for s in budgets.LIVE)


def in_session(session_id: str) -> ColumnElement[bool]:
    """The jobs of one session."""
    return JOBS.c.session_id == session_id


def in_tree(tree_id: str) -> ColumnElement[bool]:
    """The jobs of every session of a tree (through the sessions' tree index)."""
    ids = select(st.SESSIONS.c.id).where(st.SESSIONS.c.tree_id == tree_id)
    return JOBS.c.session_id.in_(ids.scalar_subquery())


def in_project(project: str) -> ColumnElement[bool]:
    """The jobs of one project."""
    return JOBS.c.project == project


def totals(conn: Connection, where: ColumnElement[bool]) -> Totals:
    """What the jobs ``where`` used, live ones as far as they got."""
    usage = JOBS.c.usage
    row = conn.execute(
        select(
            func.coalesce(func.sum(usage["input_tokens"].as_integer()), 0),
            func.coalesce(func.sum(usage["output_tokens"].as_integer()), 0),
            func.coalesce(func.sum(usage["cost"].as_float()), 0.0),
            func.coalesce(func.sum(usage["runtime_seconds"].as_float()), 0.0),
            func.count(),
        ).where(where)
    ).one()
    return Totals(
        int(row[0]), int(row[1]), round(float(row[2]), 9), round(float(row[3]), 3), int(row[4])
    )


def charged(conn: Connection, where: ColumnElement[bool], but: str) -> tuple[int, float]:
    """The tokens and cost the jobs ``where`` (job ``but`` left out) hold."""
    ended = totals(conn, where & JOBS.c.status.not_in(_LIVE) & (JOBS.c.id != but))
    tokens, cost = ended.tokens, ended.cost
    live = select(JOBS.c.status, JOBS.c.usage).where(
        where & JOBS.c.status.in_(_LIVE) & (JOBS.c.id != but)
    )
    for status, usage in conn.execute(live):
        t, c = budgets.charge(JobStatus(status), _usage(usage))
        tokens, cost = tokens + t, cost + c
    return tokens, round(cost, 9)


def read_budget(conn: Connection, specs: SpecCache, job: Job, limits: Limits) -> BudgetRead | None:
    """The sums a starting ``job`` needs, or None when neither its ``limits``
    nor a caller bound it (the common case: no read at all)."""
    if not budgets.cumulative(limits) and job.parent_job_id is None:
        return None
    session: tuple[int, float] = (0, 0.0)
    if limits.max_tokens_per_session is not None or limits.max_cost_per_session is not None:
        session = charged(conn, in_session(job.session_id), job.id)
    tree = charged(conn, in_tree(job.tree_id), job.id)
    spent = Spent(session=session, tree=tree)
    caller = _caller(conn, specs, job, spent) if job.parent_job_id is not None else None
    return BudgetRead(spent, caller)


def _caller(conn: Connection, specs: SpecCache, job: Job, spent: Spent) -> Allowance | None:
    """The remaining budget of the turn that spawned ``job``, less what its other children hold."""
    found = conn.execute(select(JOBS).where(JOBS.c.id == job.parent_job_id)).mappings().first()
    if found is None:
        return None
    parent = as_job(found)
    row = conn.execute(st.SESSION_AND_AGENT, {"sid": parent.session_id}).mappings().first()
    if row is None:
        return None
    agent = specs.parsed(row["agent_id"], row["agent_spec"])
    if parent.member_agent_id not in (None, row["agent_id"]):
        agent = specs.load(conn, parent.member_agent_id)
    limits = agent.limits.narrowed(as_session(row).limits)
    children = charged(conn, JOBS.c.parent_job_id == parent.id, job.id)
    caller = budgets.caller_remaining(limits, parent.usage, children, spent)
    return caller if caller.bounded else None


def _usage(data: Any) -> Usage | None:
    return Usage.model_validate(data) if isinstance(data, dict) else None
