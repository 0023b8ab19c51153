"""Tools from MCP servers (docs/tools.md): :class:`McpTools` is the registry's
source of them, over one :class:`McpHub` per worker process.

``McpHub`` (and with it the ``mcp`` SDK) is imported on first use, not with
this package: every worker imports the package, few name an MCP server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chaz.tools.mcp.source import McpTools

if TYPE_CHECKING:
    from chaz.tools.mcp.hub import McpHub

__all__ = ["McpHub", "McpTools"]


def __getattr__(name: str) -> Any:
    if name == "McpHub":
        from chaz.tools.mcp.hub import McpHub

        return McpHub
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
