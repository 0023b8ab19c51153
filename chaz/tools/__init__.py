"""The tools agents can call. :func:`default_registry` holds all of them."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from chaz.runtime.registry import Tool, ToolRegistry

#: Each module of built-in tools and the names of its ``TOOLS``, in the order
#: registered. A module is imported when one of its tools is first looked up:
#: a worker's start imports none of them (most turns call few, many none),
#: docs/performance.md#worker-start-up. tests/unit/test_runtime.py holds the
#: names equal to the modules' own.
MODULES: dict[str, tuple[str, ...]] = {
    "chaz.tools.builtin": ("clock", "echo", "word_count", "sleep"),
    "chaz.tools.agents": ("agent", "spawn_agent", "send_message"),
    "chaz.tools.collab": ("list_jobs", "job_output"),
    "chaz.tools.branches": ("list_agents", "archive_agent", "read_conversation"),
    "chaz.tools.todos": ("todo_create", "todo_update", "todo_list"),
    "chaz.tools.schedules": (
        "schedule_add",
        "schedule_once",
        "schedule_update",
        "schedule_remove",
        "schedule_list",
    ),
    "chaz.tools.sessions": ("session_list", "session_search"),
    "chaz.tools.session_delivery": (
        "session_send",
        "session_create",
        "session_deliveries",
        "session_rename",
    ),
}


def _loader(module: str) -> Callable[[], list[Tool]]:
    def load() -> list[Tool]:
        tools: list[Tool] = import_module(module).TOOLS
        return tools

    return load


def default_registry() -> ToolRegistry:
    """A registry of every built-in tool."""
    registry = ToolRegistry()
    for module, names in MODULES.items():
        registry.register_lazily(names, _loader(module))
    return registry
