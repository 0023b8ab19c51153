"""The model backend port: what the ReAct loop needs from a model."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

#: A chat message in OpenAI Chat Completions form (role, content, tool_calls, ...).
ChatMessage = dict[str, Any]


class ToolCallRequest(BaseModel):
    """One tool call a model asked for. ``arguments`` is the model's raw JSON text."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"


class TokenCount(BaseModel):
    """The tokens one model step used, as its backend reports them."""

    model_config = ConfigDict(frozen=True)

    input: int = Field(0, ge=0)
    output: int = Field(0, ge=0)


class ModelResponse(BaseModel):
    """One model step: either tool calls to run, or a final text answer."""

    text: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    #: What the step cost, where the backend reports it (None: not reported).
    usage: TokenCount | None = None
    #: The answer stopped at the request's output-token cap (OpenAI's
    #: ``finish_reason`` ``length``): it is incomplete.
    truncated: bool = False


class ToolSpec(BaseModel):
    """A tool as offered to the model: name, description and JSON-schema parameters."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class TurnContext(BaseModel):
    """What a backend may know about the turn it serves."""

    session_id: str
    job_id: str
    trigger_content: str
    step: int = Field(0, description="Model steps already taken in this turn.")
    last_result: str | None = None
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="The most output tokens this step may generate: what the turn's "
        "token budget has left (None: no bound). A backend must not let the model "
        "generate more.",
    )


class ModelBackend(Protocol):
    """A model. ``complete`` raises :class:`chaz.errors.ModelError` on failure."""

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """Return the model's next step for this conversation."""
        ...
