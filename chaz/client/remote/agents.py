"""``client.agents`` over HTTP (docs/http.md#producer)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping, Sequence
from typing import Any

from chaz.client.remote.namespaces import RemoteNamespace, segment
from chaz.domain.agents import AgentSpec
from chaz.errors import ValidationError


class RemoteAgents(RemoteNamespace):
    """Saved agent configurations, as :class:`chaz.client.agents.Agents`, over
    HTTP. Saving needs an operator: a key holder's ``put`` is ``auth.forbidden``."""

    _namespace = "agents"

    def put(self, spec: AgentSpec | Mapping[str, Any]) -> AgentSpec:
        """``Agents.put``: create or replace an agent (checked by the server, in
        the in-process order: the grant first, then the spec)."""
        answer = self._http.call("PUT", "/agents", body=_body(spec, "spec"))
        return AgentSpec.model_validate(answer)

    def put_many(self, specs: Sequence[AgentSpec | Mapping[str, Any]]) -> builtins.list[AgentSpec]:
        """``Agents.put_many``: all checked, then all saved, or none."""
        if isinstance(specs, str | bytes | Mapping) or not isinstance(specs, Sequence):
            raise ValidationError("specs must be a list of agents", field="specs")
        body = {"specs": [_body(s, f"specs[{i}]") for i, s in enumerate(specs)]}
        return [AgentSpec.model_validate(a) for a in self._http.call("POST", "/agents", body=body)]

    def get(self, agent_id: str) -> AgentSpec:
        """``Agents.get``."""
        path = f"/agents/{segment('agent_id', agent_id)}"
        return AgentSpec.model_validate(self._http.call("GET", path))

    def list(self) -> builtins.list[AgentSpec]:
        """``Agents.list``: every agent."""
        return [AgentSpec.model_validate(a) for a in self._http.call("GET", "/agents")]


def _body(spec: object, field: str) -> Any:
    """A spec as JSON: an AgentSpec's fields, or a mapping as given (the server
    parses it, as the in-process ``put`` does)."""
    if isinstance(spec, AgentSpec):
        return spec.model_dump(mode="json")
    try:
        return json.loads(json.dumps(spec))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{field} is not JSON: {exc}", field=field) from exc
