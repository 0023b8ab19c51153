"""The tools agents can call. :func:`default_registry` holds all of them."""

from __future__ import annotations

from chaz.runtime.registry import ToolRegistry
from chaz.tools import builtin, collab
from chaz.tools import todos as planning


def default_registry() -> ToolRegistry:
    """A registry of every built-in tool."""
    registry = ToolRegistry()
    for tool in [*builtin.TOOLS, *collab.TOOLS]:
        registry.register(tool)
    # Planning: todo_create, todo_update, todo_list.
    for tool in planning.TOOLS:
        registry.register(tool)
    return registry
