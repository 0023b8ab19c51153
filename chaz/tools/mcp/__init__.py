"""Tools from MCP servers (docs/tools.md): :class:`McpTools` is the registry's
source of them, over one :class:`McpHub` per worker process."""

from chaz.tools.mcp.hub import McpHub
from chaz.tools.mcp.source import McpTools

__all__ = ["McpHub", "McpTools"]
