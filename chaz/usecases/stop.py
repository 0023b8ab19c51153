"""Session-wide Stop: end everything a session has running, queued or waiting
to come in (docs/executions.md#stop).

Broader than ``execution.cancel`` of one job, and no wider than the session:
its inbox (every delivery waiting to be admitted into it) is withdrawn, its
queued jobs are cancelled, then its running turn is stopped, each job with
its descendants and what their lineage left waiting, as a cancel does. The
turns of other sessions are not touched, but for those descendants.
"""

from __future__ import annotations

from typing import Any

from chaz.domain.commands import command_key
from chaz.domain.jobs import ACTIVE, JobStatus
from chaz.domain.principals import Grant, Principal
from chaz.domain.sessions import missing_session
from chaz.domain.validation import check_command_id, check_ref, check_text
from chaz.errors import IdempotencyMismatch
from chaz.services import Services
from chaz.usecases.control import MAX_REASON_CHARS, cancel_lineage

STOP_ACTION = "session.stop"


def stop_session(
    services: Services,
    session_id: str,
    *,
    principal: Principal,
    command_id: str | None = None,
    reason: str = "",
) -> dict[str, Any]:
    """Stop the session ``session_id`` (its id or name); the outcome.

    ``{"action": "session.stop", "session_id", "cancelled": [the session's
    jobs' cancel outcomes], "cascaded": [descendant jobs cancelled elsewhere],
    "withdrawn": [delivery ids], "paused": [schedule ids: what the cancelled
    lineages' turns added], "changed"}``. The inbox is withdrawn first,
    so the running turn's end drains nothing; the queued jobs are cancelled
    before the running one, so its end starts none of them.

    Authorized like a cancel: ``runtime.control`` (checked before the session
    is looked up), and a session of another project is ``session.not_found``,
    as a missing one. With ``command_id`` a repeated stop returns the first
    outcome and changes nothing more (an id first used for another command is
    ``conflict.idempotency_mismatch``). Arguments are checked before anything
    changes.
    """
    principal.require(Grant.RUNTIME_CONTROL, "stop sessions")
    session_id = check_ref("session_id", session_id)
    command_id = check_command_id(command_id)
    reason = check_text("reason", reason, max_chars=MAX_REASON_CHARS)
    store = services.store
    session = store.get_session(session_id)
    if not principal.same_project(session.project):
        raise missing_session(session_id)
    key = None if command_id is None else command_key(session.project, command_id)
    if key is not None:
        first = store.get_command(key)
        if first is not None:
            if (first.get("action"), first.get("session_id")) != (STOP_ACTION, session.id):
                raise IdempotencyMismatch(
                    f"command {command_id!r} was used for another command",
                    command_id=command_id,
                )
            return first
    by = command_id or session.id
    withdrawn = [
        d.id
        for d in store.deliveries.withdraw_inbox(
            session.id,
            by=by,
            reason=f"withdrawn: its target session was stopped{': ' + reason if reason else ''}",
        )
    ]
    active = store.list_jobs(session_id=session.id, statuses=ACTIVE, limit=10_000)
    # Queued (and waiting) jobs first, newest first: the running turn's end
    # must find nothing left to start.
    order = sorted(active, key=lambda j: (j.status is JobStatus.QUEUED, j.ordinal), reverse=True)
    cancelled: dict[int, dict[str, Any]] = {}
    cascaded: list[str] = []
    paused: list[str] = []
    for job in order:
        outcome = cancel_lineage(services, job, reason=reason, by=by)
        cascaded.extend(outcome.pop("cascaded"))
        withdrawn.extend(outcome.pop("withdrawn"))
        paused.extend(outcome.pop("paused"))
        cancelled[job.ordinal] = outcome
    result: dict[str, Any] = {
        "action": STOP_ACTION,
        "session_id": session.id,
        # In admission order, whatever order they were cancelled in.
        "cancelled": [cancelled[ordinal] for ordinal in sorted(cancelled)],
        "cascaded": cascaded,
        "withdrawn": withdrawn,
        "paused": paused,
        "changed": bool(withdrawn or paused) or any(o["changed"] for o in cancelled.values()),
    }
    if key is not None:
        result = store.record_command(key, STOP_ACTION, session.id, result)
    return result
