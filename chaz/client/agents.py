"""``client.agents``: saved agent configurations."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chaz.client.base import Acting, translating
from chaz.domain.agents import AgentSpec
from chaz.domain.principals import Principal
from chaz.domain.validation import check_ref
from chaz.errors import ValidationError
from chaz.services import Services

if TYPE_CHECKING:
    from chaz.runtime.registry import ToolRegistry


@translating
class Agents(Acting):
    """Saved agent configurations (install-wide: only an operator changes them)."""

    def __init__(
        self, services: Services, tools: Callable[[], ToolRegistry], principal: Principal
    ) -> None:
        """``tools``: the registry to check names against, asked for when an agent is saved."""
        super().__init__(services, principal)
        self._tools = tools

    def put(self, spec: AgentSpec | Mapping[str, Any]) -> AgentSpec:
        """Create or replace an agent (an AgentSpec, or its fields as a mapping); its
        tools must exist. An API-key client may not (``auth.forbidden``)."""
        self._principal.require_operator("save agents")
        spec = AgentSpec.parse(spec)
        unknown = self._tools().unknown(spec.tools)
        if unknown:
            raise ValidationError(
                f"unknown tools {sorted(unknown)}; known: {self._tools().names()}",
                field="tools",
            )
        return self._svc.store.put_agent(spec)

    def put_many(self, specs: Sequence[AgentSpec | Mapping[str, Any]]) -> builtins.list[AgentSpec]:
        """Create or replace several agents at once (each an AgentSpec, or its fields
        as a mapping, as :meth:`put` takes): all are checked first, then all are
        saved in one transaction, so a bad one leaves every agent as it was. Ids
        are unique within the call. An API-key client may not (``auth.forbidden``)."""
        self._principal.require_operator("save agents")
        if isinstance(specs, str | bytes | Mapping) or not isinstance(specs, Sequence):
            raise ValidationError("specs must be a list of agents", field="specs")
        parsed = [AgentSpec.parse(spec, f"specs[{i}]") for i, spec in enumerate(specs)]
        seen: set[str] = set()
        for i, spec in enumerate(parsed):
            if spec.id in seen:
                raise ValidationError(
                    f"agent [{i}] {spec.id!r} appears twice", field="specs", index=i
                )
            seen.add(spec.id)
        registry = self._tools()
        for i, spec in enumerate(parsed):
            unknown = registry.unknown(spec.tools)
            if unknown:
                raise ValidationError(
                    f"agent [{i}] {spec.id!r}: unknown tools {sorted(unknown)}; "
                    f"known: {self._tools().names()}",
                    index=i,
                    agent_id=spec.id,
                )
        return self._svc.store.put_agents(parsed)

    def get(self, agent_id: str) -> AgentSpec:
        """One agent."""
        return self._svc.store.get_agent(check_ref("agent_id", agent_id))

    def list(self) -> builtins.list[AgentSpec]:
        """Every agent."""
        return self._svc.store.list_agents()
