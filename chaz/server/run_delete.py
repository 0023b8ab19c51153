"""``DELETE /threads/{id}/runs/{run}``: a run deleted (docs/http.md#runs).

A run is a job, and chaz keeps every job's history: its entries are the
thread's conversation, and its events and usage stay. So deleting a run
that has ended hides it from the thread's runs (``runs.list``, ``runs.get``,
``runs.join`` answer as for a missing run), and its messages stay in the
thread's values; a run that has not ended is refused with 409 (cancel it
first): hiding it would leave a turn running that no thread route shows.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from chaz.domain.principals import Grant
from chaz.server.runs import thread_run
from chaz.server.state import Caller

router = APIRouter()


@router.delete("/threads/{thread_id}/runs/{run_id}", status_code=204)
def delete_run(thread_id: str, run_id: str, c: Caller) -> Response:
    """Hide an ended run of the thread (409 ``conflict`` for one not ended)."""
    c.principal.require(Grant.RUNTIME_CONTROL, "delete runs")
    _, job = thread_run(c, thread_id, run_id)
    c.services.store.hide_job(job.id)
    return Response(status_code=204)
