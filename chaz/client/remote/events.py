"""``client.events`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins

from chaz.client.remote.namespaces import RemoteNamespace, segment
from chaz.domain.events import Event


class RemoteEvents(RemoteNamespace):
    """Sessions' event logs, as :class:`chaz.client.events.Events`."""

    _namespace = "events"
    _later = ("follow",)

    def list(self, session_id: str, after: int = 0, limit: int = 100) -> builtins.list[Event]:
        """``Events.list``: in id order."""
        path = f"/sessions/{segment('session', session_id)}/events"
        found = self._http.call("GET", path, params={"after": after, "limit": limit})
        return [Event.model_validate(e) for e in found]
