"""``client.schedules``: agent-owned schedules and their ledgers (docs/schedules.md)."""

from __future__ import annotations

import builtins
from typing import Any

from chaz.client.base import Acting, translating
from chaz.domain.principals import Grant, grant_names
from chaz.domain.schedules import Schedule, ScheduleFire
from chaz.domain.validation import check_agent_id, check_flag, check_limit, check_ref


@translating
class Schedules(Acting):
    """Agent-owned schedules and their ledgers (docs/schedules.md).

    A person manages any agent's schedules here; an agent manages its own
    with the ``schedule_*`` tools. Fields are those of
    :class:`chaz.domain.schedules.Schedule` that a caller sets (``kind``,
    ``prompt``, ``target``, ``cron``/``timezone``, ``interval_seconds``,
    ``run_at``, ``session_id``, ``name``, ``enabled``, ``expires_at``,
    ``max_fires``, ``overlap``, ``missed``, ``max_failures``); each is
    checked, and a refused one is ``request.invalid`` naming it.

    Changes need ``schedule.manage``, reads ``history.read``; only schedules
    of the principal's project are found (docs/security.md).
    """

    def add(self, agent_id: str, *, unattended: bool = False, **fields: Any) -> Schedule:
        """A new schedule owned by ``agent_id``; it waits for its first slot.

        It belongs to the principal's project, and its fires start turns with
        the principal's grants; ``unattended``: under the unattended policy.
        """
        self._may(Grant.SCHEDULE_MANAGE, "add schedules")
        return self._svc.store.schedules.add(
            agent_id,
            fields,
            project=self._project,
            principal=self._principal.name,
            grants=grant_names(self._principal.grants),
            unattended=check_flag("unattended", unattended),
        )

    def update(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change fields of a schedule (``enabled=True`` resumes a disabled one afresh)."""
        self._may(Grant.SCHEDULE_MANAGE, "change schedules")
        return self._svc.store.schedules.update(
            check_ref("schedule", schedule_id), changes, project=self._project
        )

    def pause(self, schedule_id: str) -> Schedule:
        """Stop a schedule firing (``enabled=False``)."""
        return self.update(schedule_id, enabled=False)

    def resume(self, schedule_id: str) -> Schedule:
        """Fire again from the next slot, with its failure count cleared."""
        return self.update(schedule_id, enabled=True)

    def remove(self, schedule_id: str) -> Schedule:
        """Delete a schedule and its ledger; the schedule as it was."""
        self._may(Grant.SCHEDULE_MANAGE, "remove schedules")
        return self._svc.store.schedules.remove(
            check_ref("schedule", schedule_id), project=self._project
        )

    def get(self, schedule_id: str) -> Schedule:
        """One schedule, or ``schedule.not_found``."""
        self._may(Grant.HISTORY_READ, "read schedules")
        return self._svc.store.schedules.get(
            check_ref("schedule", schedule_id), project=self._project
        )

    def list(self, agent_id: str | None = None) -> builtins.list[Schedule]:
        """Every schedule (of one agent), oldest first."""
        self._may(Grant.HISTORY_READ, "read schedules")
        if agent_id is not None:
            agent_id = check_agent_id(agent_id)
        return self._svc.store.schedules.list(agent_id, project=self._project)

    def fires(self, schedule_id: str, limit: int = 100) -> builtins.list[ScheduleFire]:
        """A schedule's ledger, newest slot first: slot, fired at, session, job, outcome."""
        self._may(Grant.HISTORY_READ, "read schedules")
        sid = check_ref("schedule", schedule_id)
        self._svc.store.schedules.get(sid, project=self._project)
        return self._svc.store.schedules.fires(sid, limit=check_limit("limit", limit))
