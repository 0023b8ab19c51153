"""``client.approvals`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins

from pydantic import TypeAdapter

from chaz.client.remote.namespaces import RemoteNamespace, given, segment
from chaz.domain.approvals import Approval, Decided

_DECIDED = TypeAdapter(Decided)


class RemoteApprovals(RemoteNamespace):
    """Tool calls waiting for a decision, as :class:`chaz.client.approvals.Approvals`."""

    _namespace = "approvals"

    def decide(self, request_id: str, decision: str, *, by: str | None = None) -> Decided:
        """``Approvals.decide``: the first decision takes effect (``effective``)."""
        path = f"/approvals/{segment('request_id', request_id)}/decide"
        found = self._http.call("POST", path, body=given(decision=decision, by=by))
        return _DECIDED.validate_python(found)

    def pending(self, session_id: str | None = None) -> builtins.list[Approval]:
        """``Approvals.pending``: oldest first."""
        found = self._http.call("GET", "/approvals", params={"session_id": session_id})
        return [Approval.model_validate(a) for a in found]

    def get(self, request_id: str) -> Approval:
        """``Approvals.get``."""
        path = f"/approvals/{segment('request_id', request_id)}"
        return Approval.model_validate(self._http.call("GET", path))
