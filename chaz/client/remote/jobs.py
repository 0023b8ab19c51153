"""``client.jobs`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins
from typing import Any

from chaz.client.remote.namespaces import RemoteNamespace, given, segment, waited
from chaz.domain.budgets import Totals
from chaz.domain.jobs import Job, JobStatus


class RemoteJobs(RemoteNamespace):
    """Executions, as :class:`chaz.client.jobs.Jobs`, over HTTP."""

    _namespace = "jobs"

    def get(self, execution_id: str) -> Job:
        """``Jobs.get``."""
        path = f"/jobs/{segment('execution_id', execution_id)}"
        return Job.model_validate(self._http.call("GET", path))

    def list(
        self,
        session_id: str | None = None,
        status: JobStatus | str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> builtins.list[Job]:
        """``Jobs.list``: in admission order (``newest_first`` reverses it)."""
        params = {
            "session_id": session_id,
            "status": status.value if isinstance(status, JobStatus) else status,
            "limit": limit,
            "newest_first": newest_first,
        }
        return [Job.model_validate(j) for j in self._http.call("GET", "/jobs", params=params)]

    def totals(self, session_id: str | None = None, tree_id: str | None = None) -> Totals:
        """``Jobs.totals``: what jobs used, summed."""
        params = {"session_id": session_id, "tree_id": tree_id}
        return Totals(**self._http.call("GET", "/jobs/totals", params=params))

    def wait(self, execution_id: str, timeout: float = 60.0) -> Job:
        """``Jobs.wait``: the job once terminal; :class:`chaz.errors.Timeout` otherwise."""
        path = f"/jobs/{segment('execution_id', execution_id)}/wait"
        answer = self._http.call("POST", path, body={"timeout": timeout}, wait=waited(timeout))
        return Job.model_validate(answer)

    def output(
        self, execution_id: str, *, block: bool = True, timeout: float = 30.0, full: bool = False
    ) -> dict[str, Any]:
        """``Jobs.output``: the job's state and bounded result."""
        path = f"/jobs/{segment('execution_id', execution_id)}/output"
        body = {"block": block, "timeout": timeout, "full": full}
        answer: dict[str, Any] = self._http.call(
            "POST", path, body=body, wait=waited(timeout) if block else None
        )
        return answer

    def cancel(
        self,
        execution_id: str,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """``Jobs.cancel``: the ``execution.cancel`` command's outcome."""
        path = f"/jobs/{segment('execution_id', execution_id)}/cancel"
        body = {
            **given(expected_version=expected_version, command_id=command_id),
            "reason": reason,
        }
        outcome: dict[str, Any] = self._http.call("POST", path, body=body)
        return outcome
