"""Small built-in tools with no side effects, for demos and tests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from chaz.ids import utcnow
from chaz.runtime.registry import Tool, ToolContext


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Text(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The text to work on.")


class _Sleep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(ge=0, le=300, description="How long to wait.")


def _clock(_args: _NoArgs, _ctx: ToolContext) -> str:
    return utcnow().isoformat(timespec="seconds")


def _echo(args: _Text, _ctx: ToolContext) -> str:
    return args.text


def _word_count(args: _Text, _ctx: ToolContext) -> str:
    return str(len(args.text.split()))


def _sleep(args: _Sleep, ctx: ToolContext) -> str:
    # A stand-in for a slow side effect (tests kill workers in the middle of
    # it); a cancel ends it early, as any long tool should (ctx.cancel).
    if ctx.cancel.wait(args.seconds):
        ctx.cancel.raise_if_set()
    return f"slept {args.seconds:g}s"


TOOLS = [
    Tool("clock", "The current UTC time in ISO 8601.", _NoArgs, _clock),
    Tool("echo", "Return the given text unchanged.", _Text, _echo),
    Tool("word_count", "Count the words in a text.", _Text, _word_count),
    Tool("sleep", "Wait for a number of seconds, then say so.", _Sleep, _sleep),
]
