"""Cumulative budgets: prices, what a scope has spent, and what a turn may still spend.

A turn's usage (:class:`chaz.domain.jobs.Usage`) is charged to three
scopes beside the turn itself: its session, its tree (the root session and
every session spawned below it) and, for a spawned turn, its caller. What a
scope has spent is derived from the jobs' rows, never kept as a counter: an
ended job counts what it used; a live one counts the larger of what it used
and what it reserved. A worker that dies therefore leaks nothing, and a
redelivered attempt, which overwrites its job's usage under the job's
fence, is never counted twice (docs/runtime.md#budgets).

This module is rules only: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chaz.domain.agents import Limits
from chaz.domain.jobs import JobStatus, Usage
from chaz.settings import ModelPrice

#: Job states whose usage may still grow: they are charged their reservation.
LIVE = frozenset(
    {JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.STOPPING, JobStatus.WAITING_APPROVAL}
)


def price_of(prices: Mapping[str, ModelPrice], model: str) -> ModelPrice | None:
    """The price of an agent's ``model``: listed as written, else by the name
    after ``openai:``; None (it costs nothing) when neither is listed."""
    found = prices.get(model)
    if found is None and ":" in model:
        found = prices.get(model.split(":", 1)[1])
    return found


def cost_of(price: ModelPrice | None, input_tokens: int, output_tokens: int) -> float:
    """What the tokens cost at ``price`` (0 without one), rounded to 1e-9."""
    if price is None:
        return 0.0
    raw = input_tokens * price.input_per_million + output_tokens * price.output_per_million
    return round(raw / 1_000_000, 9)


@dataclass(frozen=True)
class Totals:
    """What a set of jobs used: summed tokens, cost and wall time."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    runtime_seconds: float = 0.0
    jobs: int = 0

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def plus(self, other: Totals) -> Totals:
        """Both sums together."""
        return Totals(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            round(self.cost + other.cost, 9),
            round(self.runtime_seconds + other.runtime_seconds, 3),
            self.jobs + other.jobs,
        )


def charge(status: JobStatus, usage: Usage | None) -> tuple[int, float]:
    """The tokens and cost one job holds against its scopes: what it used,
    or while it is live the larger of that and its reservation."""
    used = usage or Usage()
    tokens, cost = used.tokens, used.cost
    if status in LIVE:
        tokens = max(tokens, used.reserved_tokens or 0)
        cost = max(cost, used.reserved_cost or 0.0)
    return tokens, cost


@dataclass(frozen=True)
class Spent:
    """What a turn's scopes hold, apart from the turn's own job (tokens, cost)."""

    session: tuple[int, float] = (0, 0.0)
    tree: tuple[int, float] = (0, 0.0)


@dataclass(frozen=True)
class Allowance:
    """The most a job's usage may total (tokens, cost), and the scope that sets
    each bound; None: no bound."""

    tokens: int | None = None
    cost: float | None = None
    tokens_scope: str = ""
    cost_scope: str = ""

    def narrowed(self, tokens: int | None, cost: float | None, scope: str) -> Allowance:
        """This bound and ``scope``'s together, the tighter of each."""
        t, ts = self.tokens, self.tokens_scope
        c, cs = self.cost, self.cost_scope
        if tokens is not None and (t is None or tokens < t):
            t, ts = max(tokens, 0), scope
        if cost is not None and (c is None or cost < c):
            c, cs = max(cost, 0.0), scope
        return Allowance(t, c, ts, cs)

    @property
    def bounded(self) -> bool:
        """Whether it bounds anything."""
        return self.tokens is not None or self.cost is not None


@dataclass(frozen=True)
class BudgetRead:
    """What a starting turn's cumulative budgets need: its scopes' sums (its
    own job left out) and, for a spawned turn, its caller's remaining budget."""

    spent: Spent
    caller: Allowance | None = None

    def allowance(self, limits: Limits) -> Allowance:
        """The job's allowance under its own effective ``limits``."""
        return allowance(limits, self.spent, self.caller)


def reserve(read: BudgetRead | None, limits: Limits, used: Usage | None) -> Usage | None:
    """The usage a spawned turn's first start writes: its allowance reserved
    from its caller's budget; None when there is no caller bound or the job
    reserved already (a resume keeps its first reservation)."""
    if read is None or read.caller is None:
        return None
    if used is not None and (used.reserved_tokens is not None or used.reserved_cost is not None):
        return None
    allowed = read.allowance(limits)
    return (used or Usage()).model_copy(
        update={"reserved_tokens": allowed.tokens, "reserved_cost": allowed.cost}
    )


def cumulative(limits: Limits) -> bool:
    """Whether ``limits`` sets any cumulative budget (a read of rows is then needed)."""
    return any(
        v is not None
        for v in (
            limits.max_tokens_per_session,
            limits.max_cost_per_session,
            limits.max_tokens_per_tree,
            limits.max_cost_per_tree,
        )
    )


def allowance(limits: Limits, spent: Spent, caller: Allowance | None = None) -> Allowance:
    """What a job may use in all, by its own cumulative limits less what its
    scopes' other jobs hold, and by its caller's remaining budget."""
    found = caller or Allowance()
    s_tokens, s_cost = spent.session
    t_tokens, t_cost = spent.tree
    found = found.narrowed(
        _fewer(limits.max_tokens_per_session, s_tokens),
        _less(limits.max_cost_per_session, s_cost),
        "session",
    )
    return found.narrowed(
        _fewer(limits.max_tokens_per_tree, t_tokens),
        _less(limits.max_cost_per_tree, t_cost),
        "tree",
    )


def project_bound(
    found: Allowance | None,
    max_tokens: int | None,
    max_cost: float | None,
    spent: tuple[int, float],
) -> Allowance:
    """``found`` narrowed by the project's cumulative limits less what its
    other jobs hold (``spent``)."""
    return (found or Allowance()).narrowed(
        _fewer(max_tokens, spent[0]), _less(max_cost, spent[1]), "project"
    )


def caller_remaining(
    limits: Limits, used: Usage | None, children: tuple[int, float], spent: Spent
) -> Allowance:
    """What a caller can still hand a new child: its per-turn and reserved
    bounds less what it used and what its other children hold, and its own
    cumulative bounds less what their scopes hold (``spent``: excluding the
    new child)."""
    own = used or Usage()
    tokens_bound = _least(limits.max_tokens_per_turn, own.reserved_tokens)
    cost_bound = own.reserved_cost
    tokens = None if tokens_bound is None else tokens_bound - own.tokens - children[0]
    cost = None if cost_bound is None else round(cost_bound - own.cost - children[1], 9)
    found = Allowance().narrowed(tokens, cost, "caller")
    # The caller's cumulative limits bind its children as they bind it; its
    # scopes' sums already hold the caller and the other children.
    t_tokens, t_cost = spent.tree
    return found.narrowed(
        _fewer(limits.max_tokens_per_tree, t_tokens),
        _less(limits.max_cost_per_tree, t_cost),
        "caller",
    )


def _fewer(limit: int | None, spent: int) -> int | None:
    return None if limit is None else limit - spent


def _less(limit: float | None, spent: float) -> float | None:
    return None if limit is None else round(limit - spent, 9)


def _least(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
