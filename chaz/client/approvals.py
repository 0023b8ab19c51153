"""``client.approvals``: tool calls waiting for a person's decision (docs/approvals.md)."""

from __future__ import annotations

import builtins

from chaz.client.base import Acting, translating
from chaz.domain.approvals import Approval, Decided
from chaz.domain.principals import Grant
from chaz.usecases import approvals as approval_cases


@translating
class Approvals(Acting):
    """Tool calls waiting for a person's decision (docs/approvals.md), of the
    principal's project."""

    def decide(self, request_id: str, decision: str, *, by: str | None = None) -> Decided:
        """``approve`` or ``deny`` a request: the first decision takes effect and
        resumes the turn; a later one (or one after the timeout) is recorded
        and changes nothing (``effective`` False).

        Needs ``approval.decide``. ``by`` (default: the principal) is whom the
        decision is recorded under; an API-key client decides only as itself.
        """
        return approval_cases.decide(
            self._svc, request_id, decision, by=by, principal=self._principal
        )

    def pending(self, session_id: str | None = None) -> builtins.list[Approval]:
        """Requests waiting for a decision (of one session), oldest first."""
        self._may(Grant.HISTORY_READ, "read approvals")
        if session_id is not None:
            session_id = self._session(session_id, "session_id").id
        return approval_cases.pending(self._svc, session_id, principal=self._principal)

    def get(self, request_id: str) -> Approval:
        """One request of the project, or ``approval.not_found`` (also for
        another project's)."""
        self._may(Grant.HISTORY_READ, "read approvals")
        return approval_cases.get(self._svc, request_id, principal=self._principal)
