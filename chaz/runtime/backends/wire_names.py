"""Tool names as an OpenAI-compatible API takes them (docs/tools.md#names).

Chat Completions accepts a function name of 1-64 letters, digits, ``_ -``.
An MCP tool's chaz name, ``SERVER.TOOL``, has a dot and may be longer, so
the openai backend sends each offered tool under a wire name (dots as
``__``; a name still too long cut, with a hash of the whole to keep it
apart) and maps the model's calls back through the table of the same
request. A built-in tool's name is its own wire name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from chaz.runtime.backends.base import ChatMessage

#: What Chat Completions accepts as a function name.
WIRE_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")


def wire_name(name: str) -> str:
    """``name`` as sent to the model: itself when the API accepts it."""
    if WIRE_NAME.fullmatch(name):
        return name
    wire = re.sub(r"[^A-Za-z0-9_\-]", lambda m: "__" if m.group() == "." else "_", name)
    if len(wire) > 64:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        wire = f"{wire[:55]}_{digest}"
    return wire


class WireNames:
    """The wire names of one request's tools, both ways."""

    def __init__(self, names: Iterable[str]) -> None:
        self._to_wire: dict[str, str] = {}
        self._from_wire: dict[str, str] = {}
        for name in names:
            wire = wire_name(name)
            if wire in self._from_wire and self._from_wire[wire] != name:
                # Two names one wire name: the second keeps its own, which
                # the API refuses as a clear model error rather than a mix-up.
                continue
            self._to_wire[name] = wire
            self._from_wire[wire] = name

    @property
    def identity(self) -> bool:
        """Whether every name is its own wire name (nothing to map)."""
        return all(k == v for k, v in self._to_wire.items())

    def wire(self, name: str) -> str:
        """The wire name of ``name`` (a name not offered in this request: mapped the same way)."""
        return self._to_wire.get(name) or wire_name(name)

    def local(self, wire: str) -> str:
        """The chaz name the model meant by ``wire`` (unknown: as the model wrote it)."""
        return self._from_wire.get(wire, wire)

    def outgoing(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` with the names of earlier tool calls in wire form."""
        out: list[ChatMessage] = []
        for message in messages:
            calls = message.get("tool_calls")
            if calls:
                message = {**message, "tool_calls": [self._wired(c) for c in calls]}
            out.append(message)
        return out

    def _wired(self, call: dict[str, Any]) -> dict[str, Any]:
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return call
        return {**call, "function": {**function, "name": self.wire(function["name"])}}
