"""``client.events`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Generator, Iterator
from typing import Any

from chaz.client.remote.errors import error_of
from chaz.client.remote.namespaces import RemoteNamespace, opened, segment
from chaz.domain.events import Event


class RemoteEvents(RemoteNamespace):
    """Sessions' event logs, as :class:`chaz.client.events.Events`."""

    _namespace = "events"

    def list(self, session_id: str, after: int = 0, limit: int = 100) -> builtins.list[Event]:
        """``Events.list``: in id order."""
        path = f"/sessions/{segment('session', session_id)}/events"
        found = self._http.call("GET", path, params={"after": after, "limit": limit})
        return [Event.model_validate(e) for e in found]

    def follow(
        self,
        session_id: str,
        after: int = 0,
        timeout: float | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Event]:
        """``Events.follow``: the backlog, then live events, in id order. The
        request is made now, so a bad argument raises here, as in-process.
        ``stop`` is asked at each event and each of the server's pings."""
        path = f"/sessions/{segment('session', session_id)}/events/follow"
        return _followed(opened(self._http, path, {"after": after, "timeout": timeout}), stop)


def _followed(
    events: Generator[tuple[str, Any], None, None], stop: Callable[[], bool] | None
) -> Iterator[Event]:
    try:
        for name, data in events:
            if stop is not None and stop():
                return
            if name == "entry":
                yield Event.model_validate(data)
            elif name == "error":
                raise error_of(500, json.dumps(data).encode())
            elif name == "end":
                return
    finally:
        events.close()
