"""Agent configuration: the saved, reusable ``AgentSpec``."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Limits(BaseModel):
    """Per-agent (or per-session) limits. ``None`` inherits; a value may only narrow."""

    model_config = ConfigDict(extra="forbid")

    max_queued_per_session: int | None = Field(None, gt=0)
    max_jobs_per_session: int | None = Field(None, gt=0)
    max_live_per_tree: int | None = Field(None, gt=0)
    max_call_depth: int | None = Field(
        None, ge=0, description="Spawn nesting allowed below this agent (unset: 1)."
    )
    max_turn_steps: int | None = Field(None, gt=0)

    def narrowed(self, other: Limits | None) -> Limits:
        """The tighter of two limit sets, field by field; an unset field inherits."""
        if other is None:
            return self
        merged: dict[str, Any] = {}
        for name in type(self).model_fields:
            a, b = getattr(self, name), getattr(other, name)
            merged[name] = b if a is None else a if b is None else min(a, b)
        return Limits(**merged)

    @property
    def call_depth_limit(self) -> int:
        """``max_call_depth`` with its default (one level of sub-agents) filled in."""
        return 1 if self.max_call_depth is None else self.max_call_depth


_AGENT_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class AgentSpec(BaseModel):
    """A saved agent: model backend, system prompt, tools and limits.

    ``model`` is ``"scripted"`` (see :mod:`chaz.runtime.backends.scripted`) or
    ``"openai"`` / ``"openai:MODEL_NAME"`` for any OpenAI-compatible server.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    model: str = "scripted"
    system_prompt: str = "You are a helpful agent."
    tools: list[str] = Field(default_factory=list, description="Tool names the agent may call.")
    script: list[dict[str, Any]] | None = Field(None, description="Rules of a scripted model.")
    limits: Limits = Field(default_factory=Limits)
    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend options (base_url, temperature, ...)."
    )

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not _AGENT_ID.match(value):
            raise ValueError("agent id must be 1-64 characters of letters, digits, _ . -")
        return value

    @field_validator("script")
    @classmethod
    def _check_script(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None:
            from chaz.domain.script import parse_script

            parse_script(value)
        return value

    @model_validator(mode="after")
    def _scripted_has_script(self) -> AgentSpec:
        if self.model == "scripted" and not self.script:
            raise ValueError("a scripted agent needs a script (a list of rules)")
        return self

    @field_validator("model")
    @classmethod
    def _check_model(cls, value: str) -> str:
        kind = value.split(":", 1)[0]
        if kind not in ("scripted", "openai"):
            raise ValueError("model must be 'scripted' or 'openai[:NAME]'")
        return value
