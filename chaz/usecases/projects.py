"""Projects' quotas: read and set each project's limits (docs/security.md#project-quotas).

A project bounds its live turns (admitted and not finished), its
cumulative turns (ever admitted) and its rate (turns admitted per minute).
The limits are enforced by the admission
script together with the session quotas (:mod:`chaz.coord.quotas`); this
module reads and sets them. Setting a limit is install-wide configuration:
it needs an operator (a client built from the database credentials, not an
API key). Reading is allowed to an operator for any project and to anyone
for their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaz.domain.principals import LOCAL, Principal, check_project
from chaz.domain.projects import (
    Project,
    ProjectLimits,
    check_cost_budget,
    check_limit,
    check_rate,
    check_token_budget,
    check_token_rate,
    resolve_project_limits,
)
from chaz.errors import Forbidden
from chaz.services import Services
from chaz.store.projects import Stored

SET_ACTION = "set project limits"


def limits_for(
    services: Services, project: str, read: Callable[[], Stored] | None = None
) -> ProjectLimits:
    """The limits in force for ``project``, from this process's short cache
    (``read`` reads the stored row on a miss; see :meth:`ProjectStore.stored`)."""
    return resolve_project_limits(services.settings, services.store.projects.stored(project, read))


def get(services: Services, project: str, *, principal: Principal = LOCAL) -> Project:
    """One project's limits (stored and in force) and its use of them."""
    project = check_project(project)
    _check_read(principal, project)
    return _project(services, services.store.projects.get(project))


def set_limits(
    services: Services,
    project: str,
    max_live: int | None = None,
    max_jobs: int | None = None,
    turns_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    *,
    principal: Principal = LOCAL,
) -> Project:
    """Set every limit of ``project``: a number, ``-1`` for no limit, or None
    for the install's default (a limit left out is set to its default).
    Needs an operator.

    ``turns_per_minute`` is a token bucket whose burst is one minute's worth
    (at least 1; docs/security.md#project-quotas); ``tokens_per_minute`` a
    bucket of model tokens, debited as turns report usage; ``max_tokens`` and
    ``max_cost`` what the project's turns may use in all (docs/runtime.md#budgets).

    Admissions in this process see the change at once, other processes
    within :data:`chaz.store.projects.CACHE_SECONDS`. Lowering a limit below
    the current use refuses new admissions until the use falls under it;
    nothing admitted is withdrawn.
    """
    principal.require_operator(SET_ACTION)
    project = check_project(project)
    max_live = check_limit("max_live", max_live)
    max_jobs = check_limit("max_jobs", max_jobs)
    turns_per_minute = check_rate("turns_per_minute", turns_per_minute)
    tokens_per_minute = check_token_rate("tokens_per_minute", tokens_per_minute)
    max_tokens = check_token_budget("max_tokens", max_tokens)
    max_cost = check_cost_budget("max_cost", max_cost)
    stored = services.store.projects.put(
        project, max_live, max_jobs, turns_per_minute, tokens_per_minute, max_tokens, max_cost
    )
    return _project(services, stored)


def list_projects(services: Services, *, principal: Principal = LOCAL) -> list[Project]:
    """Every project with a row or a session (an operator), or the
    principal's own project (anyone else), by id."""
    views = services.store.projects.list()
    if not principal.operator:
        views = [v for v in views if v["id"] == principal.project]
        if not views:
            views = [services.store.projects.get(principal.project)]
    return [_project(services, v) for v in views]


def _check_read(principal: Principal, project: str) -> None:
    if not principal.operator and project != principal.project:
        raise Forbidden(
            f"{principal.name} may not read the limits of project {project}",
            project=principal.project,
        )


def _project(services: Services, view: dict[str, Any]) -> Project:
    limits = resolve_project_limits(
        services.settings,
        (
            view["max_live"],
            view["max_jobs"],
            view["turns_per_minute"],
            view["tokens_per_minute"],
            view["max_tokens"],
            view["max_cost"],
        ),
    )
    return Project(
        **view,
        effective_max_live=limits.max_live,
        effective_max_jobs=limits.max_jobs,
        effective_turns_per_minute=limits.turns_per_minute,
        effective_tokens_per_minute=limits.tokens_per_minute,
        effective_max_tokens=limits.max_tokens,
        effective_max_cost=limits.max_cost,
    )
