"""``client.keys`` and ``client.projects``: what an operator administers
(docs/security.md#api-keys, docs/security.md#project-quotas)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from chaz.client.base import Acting, translating
from chaz.domain.keys import ApiKey
from chaz.domain.projects import Project
from chaz.usecases import projects as project_cases


@translating
class Keys(Acting):
    """API keys (docs/security.md#api-keys): only an operator's client manages them."""

    def create(
        self,
        principal: str,
        project: str,
        grants: Iterable[str] | str | None,
        label: str | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key acting as ``principal`` in ``project`` with ``grants`` (names,
        or a comma-separated string; None: every grant). Returns the key and
        its plaintext ``chz_<id>_<secret>``, which is shown only here: only
        its SHA-256 is stored."""
        self._principal.require_operator("create API keys")
        return self._svc.store.keys.create(principal, project, grants, label)

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); it authenticates nobody from now on."""
        self._principal.require_operator("revoke API keys")
        return self._svc.store.keys.revoke(key_id)

    def list(self, project: str | None = None) -> builtins.list[ApiKey]:
        """Keys (of one project), oldest first, without their hashes."""
        self._principal.require_operator("list API keys")
        return self._svc.store.keys.list(project)


@translating
class Projects(Acting):
    """Projects' quotas: live turns and turns ever admitted (docs/security.md#project-quotas).

    An operator's client reads and sets any project's; an API-key client reads
    only its own.
    """

    def get(self, project: str) -> Project:
        """One project's limits (as stored and in force) and its use of them."""
        return project_cases.get(self._svc, project, principal=self._principal)

    def set_limits(
        self,
        project: str,
        max_live: int | None = None,
        max_jobs: int | None = None,
        turns_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
    ) -> Project:
        """Set every limit of ``project``: a number, ``-1`` for no limit, None for
        the default (``CHAZ_PROJECT_MAX_LIVE`` / ``CHAZ_PROJECT_MAX_JOBS`` /
        ``CHAZ_PROJECT_TURNS_PER_MINUTE``); a limit left out is set to its
        default. ``turns_per_minute`` is a token bucket with a one-minute burst:
        past it an admission is ``quota.project_rate`` with ``retry_after``.
        ``tokens_per_minute`` (default ``CHAZ_PROJECT_TOKENS_PER_MINUTE``) is a
        bucket of model tokens debited as turns report usage: while it is in
        debt, admissions are ``quota.project_rate`` too. ``max_tokens`` and
        ``max_cost`` (defaults ``CHAZ_PROJECT_MAX_TOKENS`` / ``_MAX_COST``) bound
        what the project's turns use in all: past them a turn ends
        ``budget.tokens`` / ``budget.cost``. Needs an operator's client."""
        return project_cases.set_limits(
            self._svc,
            project,
            max_live,
            max_jobs,
            turns_per_minute,
            tokens_per_minute,
            max_tokens,
            max_cost,
            principal=self._principal,
        )

    def list(self) -> builtins.list[Project]:
        """Every project with limits or sessions (an operator's client), by id."""
        return project_cases.list_projects(self._svc, principal=self._principal)
