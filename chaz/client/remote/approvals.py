"""``client.approvals`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins

from chaz.client.remote.namespaces import RemoteNamespace, segment
from chaz.domain.approvals import Approval


class RemoteApprovals(RemoteNamespace):
    """Tool calls waiting for a decision, as :class:`chaz.client.approvals.Approvals`
    (deciding is not carried yet)."""

    _namespace = "approvals"
    _later = ("decide",)

    def pending(self, session_id: str | None = None) -> builtins.list[Approval]:
        """``Approvals.pending``: oldest first."""
        found = self._http.call("GET", "/approvals", params={"session_id": session_id})
        return [Approval.model_validate(a) for a in found]

    def get(self, request_id: str) -> Approval:
        """``Approvals.get``."""
        path = f"/approvals/{segment('request_id', request_id)}"
        return Approval.model_validate(self._http.call("GET", path))
