"""A run's status, from its job's state (docs/http.md#mapping).

Here, below the server, because more than the HTTP routes report runs: a
worker delivering a run's webhook (:mod:`chaz.usecases.webhooks`) says the
same status the routes do.
"""

from __future__ import annotations

from chaz.domain.jobs import JobStatus

#: A job's state -> a run's status. A cancelled job is ``interrupted``:
#: LangGraph's word for a run stopped before it ended by itself.
RUN_STATUS: dict[JobStatus, str] = {
    JobStatus.QUEUED: "pending",
    JobStatus.RUNNING: "running",
    JobStatus.STOPPING: "running",
    JobStatus.WAITING_APPROVAL: "running",
    JobStatus.SUCCEEDED: "success",
    JobStatus.FAILED: "error",
    JobStatus.CANCELLED: "interrupted",
    JobStatus.INTERRUPTED: "interrupted",
}
