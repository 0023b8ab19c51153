"""``client.deliveries`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins

from chaz.client.remote.namespaces import RemoteNamespace, given, segment
from chaz.domain.deliveries import Delivery


class RemoteDeliveries(RemoteNamespace):
    """Hand-offs between sessions, as :class:`chaz.client.deliveries.Deliveries`."""

    _namespace = "deliveries"

    def get(self, delivery_id: str) -> Delivery:
        """``Deliveries.get``."""
        path = f"/deliveries/{segment('delivery_id', delivery_id)}"
        return Delivery.model_validate(self._http.call("GET", path))

    def list(
        self,
        session_id: str,
        *,
        direction: str = "both",
        limit: int = 100,
        status: str | None = None,
    ) -> builtins.list[Delivery]:
        """``Deliveries.list``: newest first."""
        params = {"session_id": session_id, "direction": direction, "limit": limit}
        params.update(given(status=status))
        found = self._http.call("GET", "/deliveries", params=params)
        return [Delivery.model_validate(d) for d in found]

    def send(
        self,
        target_session_id: str,
        message: str,
        *,
        reply: str = "none",
        sender: str | None = None,
        from_session: str | None = None,
    ) -> Delivery:
        """``Deliveries.send``: a person's ``session_send``."""
        body = {
            "target_session_id": target_session_id,
            "message": message,
            "reply": reply,
            **given(sender=sender, from_session=from_session),
        }
        return Delivery.model_validate(self._http.call("POST", "/deliveries", body=body))

    def result(self, request_id: str) -> Delivery | None:
        """``Deliveries.result``: the result delivered back, or None."""
        path = f"/deliveries/{segment('request_id', request_id)}/result"
        found = self._http.call("GET", path)
        return None if found is None else Delivery.model_validate(found)

    def status(self, delivery_id: str) -> str:
        """``Deliveries.status``: the lifecycle's state."""
        path = f"/deliveries/{segment('delivery_id', delivery_id)}/status"
        return str(self._http.call("GET", path)["status"])
