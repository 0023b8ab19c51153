"""``client.jobs``: observe and control admitted turns."""

from __future__ import annotations

import builtins
from typing import Any

from chaz.client.base import Acting, translating
from chaz.domain.budgets import Totals
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.principals import Grant
from chaz.domain.validation import check_choice, check_limit, check_ref, check_seconds
from chaz.errors import ValidationError
from chaz.usecases.control import cancel, job_output, wait_terminal


def _status(value: object) -> JobStatus:
    return check_choice("status", value, JobStatus, "job status")


@translating
class Jobs(Acting):
    """Executions: observe and control admitted turns (of the principal's project)."""

    def get(self, execution_id: str) -> Job:
        """One job."""
        self._may(Grant.HISTORY_READ, "read jobs")
        return self._job(execution_id)

    def list(
        self,
        session_id: str | None = None,
        status: JobStatus | str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> builtins.list[Job]:
        """Jobs, optionally of one session or in one state, in admission order.

        ``newest_first`` reverses the order, so that ``limit`` keeps the latest
        (``limit``: 1 to 10,000).
        """
        self._may(Grant.HISTORY_READ, "read jobs")
        limit = check_limit("limit", limit)
        statuses = [_status(status)] if status is not None else None
        # An empty id is a bad filter, not no filter: it must not list every job.
        sid = None if session_id is None else self._session(check_ref("session", session_id)).id
        return self._svc.store.list_jobs(
            session_id=sid,
            statuses=statuses,
            limit=limit,
            newest_first=newest_first,
            project=self._project,
        )

    def totals(self, session_id: str | None = None, tree_id: str | None = None) -> Totals:
        """What jobs used, summed (docs/runtime.md#budgets): one session's, one
        tree's (its root session and every session below it), or with neither
        the whole project's. A live job counts what it used so far."""
        self._may(Grant.HISTORY_READ, "read jobs")
        if session_id is not None and tree_id is not None:
            raise ValidationError("give session_id or tree_id, not both", field="tree_id")
        sid = None if session_id is None else self._session(check_ref("session", session_id)).id
        tid = None if tree_id is None else check_ref("tree_id", tree_id)
        if tid == "":
            # An empty id is a bad filter, not no filter (as in ``list``).
            raise ValidationError("tree_id must not be empty", field="tree_id")
        # Filtered by the project too: another project's tree sums to nothing.
        return self._svc.store.usage_totals(self._project, session_id=sid, tree_id=tid)

    def wait(self, execution_id: str, timeout: float = 60.0) -> Job:
        """Block until the job is terminal; :class:`chaz.errors.Timeout` otherwise."""
        self._may(Grant.HISTORY_READ, "read jobs")
        timeout = check_seconds("timeout", timeout)
        return wait_terminal(self._svc, self._job(execution_id).id, timeout)

    def output(
        self, execution_id: str, *, block: bool = True, timeout: float = 30.0, full: bool = False
    ) -> dict[str, Any]:
        """The job's state and bounded result (the API twin of the ``job_output`` tool).

        ``full=True`` returns the whole result instead of its excerpt, or
        :class:`chaz.errors.ArtifactNotFound` once retention cut it
        (docs/contracts.md#result-cap).
        """
        self._may(Grant.HISTORY_READ, "read jobs")
        timeout = check_seconds("timeout", timeout)
        execution_id = self._job(execution_id).id
        return job_output(
            self._svc, execution_id, None, block=bool(block), timeout=timeout, full=bool(full)
        )

    def cancel(
        self,
        execution_id: str,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """The ``execution.cancel`` command (docs/contracts.md#cancel). Returns its outcome.

        Needs ``runtime.control`` (else ``auth.forbidden``); a job of another
        project is answered exactly as a missing one, ``job.not_found``, and
        nothing changes (docs/security.md#execution-control).
        """
        return cancel(
            self._svc,
            execution_id,
            expected_version=expected_version,
            command_id=command_id,
            reason=reason,
            principal=self._principal,
        )
