"""The ReAct loop's ports with a span around each model and tool call
(docs/operations.md#tracing).

The loop stays pure: a turn wraps its backend and its registry in these only
when tracing is on (:func:`chaz.tracing.on`), so a turn that does not trace
pays nothing for them. A tool call's span names the tool and, where the
registry says where a tool comes from (an MCP server), that source: an
MCP tool named ``server.tool`` gets ``chaz.tool.server`` either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chaz import tracing
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelBackend,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
    TurnContext,
)
from chaz.runtime.cancel import CancelToken
from chaz.runtime.registry import Tool, ToolContext, ToolOutcome, ToolRegistry


class TracedBackend:
    """A model backend whose every call is a ``chaz.model`` span: the model,
    whether the answer streamed, the step, tokens in and out, tool calls asked."""

    def __init__(self, inner: ModelBackend, model: str) -> None:
        self._inner = inner
        self._model = model

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """The inner backend's answer, inside its span."""
        attributes = {
            "gen_ai.request.model": self._model,
            "chaz.model.streamed": bool(getattr(self._inner, "stream", False)),
            "chaz.model.step": turn.step,
            "chaz.model.messages": len(messages),
        }
        with tracing.span("chaz.model", attributes) as span:
            response = self._inner.complete(messages, tools, turn)
            usage = response.usage
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": usage.input if usage else 0,
                    "gen_ai.usage.output_tokens": usage.output if usage else 0,
                    "chaz.model.tool_calls": len(response.tool_calls),
                }
            )
            return response


class TracedTools(ToolRegistry):
    """A tool registry whose every run is a ``chaz.tool`` span; the rest passes
    through (a refused call runs nothing, and its ToolResult says so)."""

    def __init__(self, inner: ToolRegistry) -> None:
        super().__init__()
        self._inner = inner

    def register(self, tool: Tool) -> None:
        """Register on the inner registry."""
        self._inner.register(tool)

    def names(self) -> list[str]:
        """The inner registry's names."""
        return self._inner.names()

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The inner registry's unknown names."""
        return self._inner.unknown(names)

    def specs(self, names: Iterable[str], cancel: CancelToken | None = None) -> list[ToolSpec]:
        """The inner registry's specs (an MCP source's tools need the turn's cancel)."""
        return self._inner.specs(names, cancel)

    def refusal(self, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome | None:
        """The inner registry's refusal."""
        return self._inner.refusal(call, ctx)

    def invoke(self, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome:
        """The inner registry's outcome, inside the call's span."""
        with tracing.span("chaz.tool", tool_attributes(self._inner, call.name, call.id)) as span:
            outcome = self._inner.invoke(call, ctx)
            span.set_attribute("chaz.tool.is_error", outcome.is_error)
            return outcome


def tool_attributes(registry: Any, name: str, call_id: str) -> dict[str, Any]:
    """A tool call's span attributes: its name and call id, its source when the
    registry tells one (``source(name)``), and the server of a ``server.tool`` name."""
    attributes: dict[str, Any] = {"chaz.tool.name": name, "chaz.tool.call_id": call_id}
    source = getattr(registry, "source", None)
    found = source(name) if callable(source) else None
    if isinstance(found, str) and found:
        attributes["chaz.tool.source"] = found
    if "." in name:
        attributes["chaz.tool.server"] = name.split(".", 1)[0]
    return attributes
