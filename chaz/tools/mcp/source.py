"""MCP servers' tools as a :class:`~chaz.runtime.registry.ToolSource` (docs/tools.md).

A tool named ``SERVER.TOOL`` is this source's when ``SERVER`` is configured
in ``CHAZ_MCP_SERVERS``. It becomes a :class:`~chaz.runtime.registry.Tool`
like any other, so the agent's ``tools`` list, narrowing along hand-offs,
approval policies, the unattended policy and the result cap apply to it
unchanged. Its arguments are checked against the server's input schema
before the approval gate (``tool.invalid_arguments``); an error result from
the server is a tool error (``mcp.tool_error``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from chaz.domain.mcp import check_arguments, mcp_tool_name, split_tool_name
from chaz.errors import McpToolError
from chaz.runtime.cancel import CancelToken
from chaz.runtime.registry import Tool, ToolContext
from chaz.settings import McpServer

if TYPE_CHECKING:
    from chaz.tools.mcp.hub import Listed, McpHub

#: The most of an error result's text put in its tool error's message.
MAX_ERROR_CHARS = 8000


class McpArguments(BaseModel):
    """Any JSON object: an MCP tool's arguments are checked against its server's schema."""

    model_config = ConfigDict(extra="allow")

    def values(self) -> dict[str, Any]:
        """The arguments as given."""
        return dict(self.model_extra or {})


class McpTools:
    """The tools of the configured MCP servers, over one process-wide :class:`McpHub`."""

    def __init__(self, servers: Callable[[], Mapping[str, McpServer]]) -> None:
        self._servers = servers
        self._hub: McpHub | None = None
        self._lock = threading.Lock()

    def hub(self) -> McpHub:
        """This process's hub, made on first use (from the settings then in force)."""
        # The SDK is imported here, at the first turn that names an MCP tool:
        # a worker with no MCP server never pays its import (about a quarter
        # of a worker's start, docs/performance.md#worker-start-up).
        from chaz.tools.mcp.hub import McpHub

        with self._lock:
            if self._hub is None:
                self._hub = McpHub(self._servers())
            return self._hub

    def owns(self, name: str) -> bool:
        """Whether ``name`` is ``SERVER.TOOL`` of a configured server."""
        split = split_tool_name(name)
        return split is not None and split[0] in self._servers()

    def tool(self, name: str, cancel: CancelToken | None = None) -> Tool | None:
        """The tool, from its server's listing (starting the server on first use);
        None when the server lists no such tool; the listing's error for a tool
        it refused (``mcp.bad_schema``, ``mcp.name_clash``); an ``mcp.*`` error
        when the server cannot be reached."""
        split = split_tool_name(name)
        if split is None:
            return None
        server, bare = split
        listed = self.hub().tools(server, cancel).get(bare)
        if listed is None:
            return None
        if listed.error is not None:
            raise listed.error
        return _tool(self.hub(), server, bare, listed)

    def close(self) -> None:
        """Stop every server this process started."""
        with self._lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()


def _tool(hub: McpHub, server: str, bare: str, listed: Listed) -> Tool:
    name = mcp_tool_name(server, bare)
    schema = listed.schema or {"type": "object"}

    def precheck(args: McpArguments, _ctx: ToolContext) -> None:
        check_arguments(name, schema, args.values())

    def run(args: McpArguments, ctx: ToolContext) -> str:
        text, is_error = hub.call(server, bare, args.values(), ctx.cancel)
        if is_error:
            raise McpToolError(_error_text(text), server=server)
        return text

    return Tool(name, listed.description, McpArguments, run, precheck=precheck, schema=schema)


def _error_text(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[:MAX_ERROR_CHARS] + f" [... {len(text) - MAX_ERROR_CHARS} characters omitted]"
