"""The tools agents can call. :func:`default_registry` holds all of them."""

from __future__ import annotations

from chaz.runtime.registry import ToolRegistry
from chaz.tools import agents, branches, builtin, collab, session_delivery
from chaz.tools import schedules as scheduling
from chaz.tools import sessions as session_tools
from chaz.tools import todos as planning


def default_registry() -> ToolRegistry:
    """A registry of every built-in tool."""
    registry = ToolRegistry()
    for tool in [*builtin.TOOLS, *agents.TOOLS, *collab.TOOLS, *branches.TOOLS, *planning.TOOLS]:
        registry.register(tool)
    for tool in scheduling.TOOLS:
        registry.register(tool)
    for tool in session_tools.TOOLS:
        registry.register(tool)
    for tool in session_delivery.TOOLS:
        registry.register(tool)
    return registry
