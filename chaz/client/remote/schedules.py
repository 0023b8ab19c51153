"""``client.schedules`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins
import json
from typing import Any

from chaz.client.remote.namespaces import RemoteNamespace, segment
from chaz.domain.schedules import Schedule, ScheduleFire
from chaz.errors import ValidationError


class RemoteSchedules(RemoteNamespace):
    """Agent-owned schedules, as :class:`chaz.client.schedules.Schedules`."""

    _namespace = "schedules"

    def add(self, agent_id: str, *, unattended: bool = False, **fields: Any) -> Schedule:
        """``Schedules.add``: a new schedule owned by ``agent_id``."""
        body = {**_plain(fields), "agent_id": agent_id, "unattended": unattended}
        return Schedule.model_validate(self._http.call("POST", "/schedules", body=body))

    def update(self, schedule_id: str, **changes: Any) -> Schedule:
        """``Schedules.update``."""
        path = f"/schedules/{segment('schedule', schedule_id)}"
        return Schedule.model_validate(self._http.call("PATCH", path, body=_plain(changes)))

    def pause(self, schedule_id: str) -> Schedule:
        """``Schedules.pause``."""
        return self._act(schedule_id, "pause")

    def resume(self, schedule_id: str) -> Schedule:
        """``Schedules.resume``."""
        return self._act(schedule_id, "resume")

    def remove(self, schedule_id: str) -> Schedule:
        """``Schedules.remove``: the schedule as it was."""
        return self._act(schedule_id, "remove")

    def get(self, schedule_id: str) -> Schedule:
        """``Schedules.get``."""
        path = f"/schedules/{segment('schedule', schedule_id)}"
        return Schedule.model_validate(self._http.call("GET", path))

    def list(self, agent_id: str | None = None) -> builtins.list[Schedule]:
        """``Schedules.list``: oldest first."""
        found = self._http.call("GET", "/schedules", params={"agent_id": agent_id})
        return [Schedule.model_validate(s) for s in found]

    def fires(self, schedule_id: str, limit: int = 100) -> builtins.list[ScheduleFire]:
        """``Schedules.fires``: newest slot first."""
        path = f"/schedules/{segment('schedule', schedule_id)}/fires"
        found = self._http.call("GET", path, params={"limit": limit})
        return [ScheduleFire.model_validate(f) for f in found]

    def _act(self, schedule_id: str, action: str) -> Schedule:
        path = f"/schedules/{segment('schedule', schedule_id)}/{action}"
        return Schedule.model_validate(self._http.call("POST", path))


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields as JSON (a datetime as ISO 8601, which the server parses as the
    in-process client parses one); a value JSON cannot carry is refused."""
    try:
        plain: dict[str, Any] = json.loads(json.dumps(fields, default=_iso))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"a schedule field is not JSON: {exc}", field="fields") from exc
    return plain


def _iso(value: object) -> str:
    isoformat = getattr(value, "isoformat", None)
    if isoformat is None:
        raise TypeError(f"{type(value).__name__} is not JSON")
    return str(isoformat())
