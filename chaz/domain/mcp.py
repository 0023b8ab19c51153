"""Pure rules for tools from MCP servers (docs/tools.md): their names, their
input schemas, and the check of a model's arguments against them.

An MCP tool is offered to the model as ``SERVER.TOOL``: the server's name
(from ``CHAZ_MCP_SERVERS``, no dot) then the tool's own name. Built-in tools
have no dot, so the two kinds can never take each other's name.
"""

from __future__ import annotations

import json
import re
from typing import Any

from chaz.errors import McpBadSchema, McpNameClash, ToolArgumentsInvalid

#: What an MCP tool's own name may be here: 1-64 letters, digits, ``_ . -``
#: (the MCP specification's recommended characters, at most as long as a chaz tool name).
MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: The largest input schema offered to a model, as JSON (a schema is sent with every step).
MAX_SCHEMA_BYTES = 64 * 1024
#: How many refusals a schema check names (the first ones, in document order).
MAX_PROBLEMS = 5


def mcp_tool_name(server: str, tool: str) -> str:
    """The name a model calls ``tool`` of ``server`` by: ``server.tool``.

    :class:`~chaz.errors.McpBadSchema` when the server's name for it is not
    1-64 letters, digits, ``_ . -``: such a tool is not offered."""
    if not MCP_TOOL_NAME.fullmatch(tool):
        raise McpBadSchema(
            f"MCP server {server!r} lists a tool named {tool[:80]!r}: a tool name here has "
            "1-64 letters, digits, _ . -",
            server=server,
        )
    return f"{server}.{tool}"


def split_tool_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an MCP tool's name, or None for a built-in's (no dot)."""
    server, dot, tool = name.partition(".")
    if not dot or not server or not tool:
        return None
    return server, tool


def tools_by_name(server: str, listed: list[tuple[str, Any]]) -> dict[str, Any]:
    """The server's ``(name, item)`` list as a table by name; a name listed twice
    is :class:`~chaz.errors.McpNameClash` (neither could be told apart)."""
    table: dict[str, Any] = {}
    for name, item in listed:
        if name in table:
            raise McpNameClash(
                f"MCP server {server!r} lists the tool {name!r} twice", server=server, tool=name
            )
        table[name] = item
    return table


def checked_input_schema(server: str, tool: str, schema: object) -> dict[str, Any]:
    """The tool's input schema, fit to offer to a model: a JSON object that is a
    valid JSON schema (of its declared draft, else 2020-12) of an object, no
    larger than :data:`MAX_SCHEMA_BYTES`. :class:`~chaz.errors.McpBadSchema` otherwise."""

    def bad(why: str) -> McpBadSchema:
        return McpBadSchema(
            f"MCP tool {server}.{tool} has an input schema that {why}: it is not offered",
            server=server,
            tool=tool,
        )

    if not isinstance(schema, dict):
        raise bad("is not a JSON object")
    try:
        size = len(json.dumps(schema, allow_nan=False).encode())
    except (TypeError, ValueError, RecursionError):
        raise bad("is not JSON") from None
    if size > MAX_SCHEMA_BYTES:
        raise bad(f"is {size} bytes (at most {MAX_SCHEMA_BYTES})")
    if schema.get("type", "object") != "object":
        raise bad("does not describe an object")
    # jsonschema here, not at the top: a worker imports these rules at start
    # and checks a schema only when a turn names an MCP tool.
    import jsonschema
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise bad(f"is not a valid JSON schema ({exc.message[:200]})") from None
    except RecursionError:
        raise bad("is nested too deeply") from None
    return schema


def check_arguments(name: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Refuse ``arguments`` that ``schema`` (a checked input schema) does not
    accept: :class:`~chaz.errors.ToolArgumentsInvalid` naming where and why, as
    a built-in tool's pydantic model would."""
    import jsonschema
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        errors = sorted(cls(schema).iter_errors(arguments), key=lambda e: list(e.path))
    except RecursionError:
        raise ToolArgumentsInvalid(f"invalid arguments for {name}: nested too deeply") from None
    if not errors:
        return
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.path) or '(root)'}: {e.message[:200]}"
        for e in errors[:MAX_PROBLEMS]
    )
    raise ToolArgumentsInvalid(f"invalid arguments for {name}: {problems}")
