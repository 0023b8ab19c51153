"""Durable approvals: decide, list and expire the requests of suspended turns.

A turn whose tool call needs a person's decision suspends (see
:meth:`chaz.usecases.turns.turn.Turn.suspend`): its job waits in
``waiting_approval`` holding no worker, lane or live slot
(docs/contracts.md#invariant-10). A decision here closes the request (the
first wins, by a compare-and-set on its state), queues the job again and
wakes its session: the turn resumes from its checkpoint on any worker. The
reconciler closes requests past their timeout as ``expired``. See
docs/approvals.md.
"""

from __future__ import annotations

import json
import logging

from chaz.coord.pubsub import publish
from chaz.domain.approvals import DECIDED, Approval, ApprovalState, Decided, Decision
from chaz.domain.entries import EntryType, NewEntry, parse_sender
from chaz.domain.principals import LOCAL, Grant, Principal
from chaz.domain.validation import check_ref, invalid
from chaz.errors import ApprovalNotFound
from chaz.ids import utcnow
from chaz.plumbing.dispatch import Wake
from chaz.services import Services
from chaz.store.approvals import Closed

log = logging.getLogger(__name__)

#: Who a decision is recorded under when the caller names nobody.
DEFAULT_DECIDER = "user:operator"


def decide(
    services: Services,
    request_id: str,
    decision: str,
    *,
    by: str | None = None,
    principal: Principal = LOCAL,
) -> Decided:
    """Decide a request: ``approve``, ``deny`` or ``approve_all`` (this call and
    every later policy-gated call of the same turn, except those the unattended
    policy holds).

    Needs ``approval.decide``; a request of another project than the
    principal's is ``approval.not_found``, exactly like a missing one. The
    decision is recorded under ``by`` (an operator's client may name anyone),
    else the principal's name.

    Every decision is recorded as an ApprovalDecision entry; only the first
    (while the request is pending and not past its timeout) takes effect. A
    later one changes nothing and says so (``effective`` False, the request's
    final state). A decision after the timeout closes the request ``expired``
    (the turn resumes as denied), if the reconciler has not yet.
    """
    principal.require(Grant.APPROVAL_DECIDE, "decide approval requests")
    request_id = check_ref("request_id", request_id)
    try:
        choice = Decision(decision)
    except ValueError:
        raise invalid("decision", "decision must be 'approve', 'deny' or 'approve_all'") from None
    if by is None:
        by = principal.name
    elif by != principal.name:
        principal.require_operator("decide in another principal's name")
    parse_sender(by)
    # A request of another project is not found: the same error, no content.
    get(services, request_id, principal=principal)
    draft = NewEntry(
        EntryType.APPROVAL_DECISION,
        by,
        choice.value,
        metadata={"request_id": request_id, "decision": choice.value},
    )
    closed = services.store.approvals.close(
        request_id, DECIDED[choice], by, draft, decision=choice.value
    )
    _after(services, closed)
    effective = closed.won and closed.approval.state is DECIDED[choice]
    return Decided(closed.approval, effective)


def expire_due(services: Services) -> list[str]:
    """Close every pending request past its timeout ``expired`` and resume its
    turn (the model reads the denial); the request ids closed here."""
    closed_ids: list[str] = []
    for found in services.store.approvals.due(utcnow()):
        draft = NewEntry(
            EntryType.APPROVAL_DECISION,
            "system:timeout",
            "expired",
            metadata={"request_id": found.request_id, "decision": "expired"},
        )
        try:
            closed = services.store.approvals.close(
                found.request_id, ApprovalState.EXPIRED, "system:timeout", draft
            )
        except Exception:
            log.warning("could not expire approval %s", found.request_id, exc_info=True)
            continue
        _after(services, closed)
        if closed.won:
            closed_ids.append(found.request_id)
    return closed_ids


def _after(services: Services, closed: Closed) -> None:
    """Publish the decision entry; wake the session whose job was queued again."""
    if closed.entry is not None:
        publish(services.redis, closed.entry)
    if closed.job is not None:
        services.dispatcher.send_wake(
            closed.job.session_id, closed.job.id, Wake.DECIDED, tree=closed.job.tree_id
        )


def pending(
    services: Services, session_id: str | None = None, *, principal: Principal = LOCAL
) -> list[Approval]:
    """Requests waiting for a decision (of one session) in the principal's
    project, oldest first."""
    if session_id is not None:
        session_id = check_ref("session_id", session_id)
    return services.store.approvals.pending(session_id, project=principal.project)


def get(services: Services, request_id: str, *, principal: Principal = LOCAL) -> Approval:
    """One request of the principal's project, or ``approval.not_found`` (also
    for another project's: the same error as a missing one)."""
    request_id = check_ref("request_id", request_id)
    return _visible(services.store.approvals.get(request_id), principal)


def _visible(approval: Approval, principal: Principal) -> Approval:
    if approval.project != principal.project:
        raise ApprovalNotFound(
            f"no approval request {approval.request_id!r}", request_id=approval.request_id
        )
    return approval


def shown(approval: Approval) -> str:
    """The request's shown arguments as compact JSON (for listings)."""
    return json.dumps(approval.arguments, separators=(",", ":"), sort_keys=True)
