"""Agent configuration: the saved, reusable ``AgentSpec``."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from chaz.domain.approvals import ToolPolicy
from chaz.domain.principals import Grant
from chaz.domain.script import parse_script
from chaz.domain.validation import (
    AGENT_ID,
    CheckedModel,
    SafeJson,
    SafeText,
    ToolName,
    check_json,
)
from chaz.errors import ValidationError

#: A system prompt is sent with every model step of every turn: one past this
#: is a mistake (a file pasted whole), not a prompt.
MAX_SYSTEM_PROMPT_CHARS = 256 * 1024

#: Topology limits (docs/contracts.md#topology): 0 disables the check; unset takes the default.
TOPOLOGY_DEFAULTS = {"max_call_depth": 1, "max_spawn_fanout": 8, "max_messages": 8}


class Limits(CheckedModel):
    """Per-agent (or per-session) limits. ``None`` inherits; a value may only narrow.

    Resource limits (``max_queued_per_session``, ``max_jobs_per_session``,
    ``max_live_per_tree``, ``max_turn_steps``) and the per-turn budgets
    (``max_tokens_per_turn``, ``max_runtime_seconds``, ``max_idle_seconds``,
    docs/runtime.md#per-turn-budgets) and the cumulative ones
    (``max_tokens_per_session``, ``max_cost_per_session``,
    ``max_tokens_per_tree``, ``max_cost_per_tree``, docs/runtime.md#budgets)
    are positive when set. Topology
    limits (``max_call_depth``, ``max_spawn_fanout``, ``max_messages``) follow
    docs/contracts.md#topology: ``0`` disables that check. ``Limits(...)`` and :meth:`parse` raise
    :class:`chaz.errors.ValidationError` (``request.invalid``) naming the field.
    """

    model_config = ConfigDict(extra="forbid")

    max_queued_per_session: int | None = Field(None, gt=0)
    max_jobs_per_session: int | None = Field(None, gt=0)
    max_live_per_tree: int | None = Field(None, gt=0)
    max_turn_steps: int | None = Field(None, gt=0)
    max_call_depth: int | None = Field(
        None, ge=0, description="Spawn generations below a root turn (default 1; 0: no limit)."
    )
    max_spawn_fanout: int | None = Field(
        None, ge=0, description="Sub-agents one turn may create (default 8; 0: no limit)."
    )
    max_messages: int | None = Field(
        None, ge=0, description="Message depth along a lineage (default 8; 0: no limit)."
    )
    max_tokens_per_turn: int | None = Field(
        None, gt=0, description="Input plus output tokens one turn may spend (budget.tokens)."
    )
    max_runtime_seconds: int | None = Field(
        None, gt=0, description="Seconds one turn may run (budget.runtime)."
    )
    max_idle_seconds: int | None = Field(
        None,
        gt=0,
        description="Seconds a turn may go without model output or a tool result (budget.idle).",
    )
    max_tokens_per_session: int | None = Field(
        None,
        gt=0,
        description="Tokens the session's turns may spend in all (budget.tokens).",
    )
    max_cost_per_session: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Cost (CHAZ_MODEL_PRICES) the session's turns may spend in all (budget.cost).",
    )
    max_tokens_per_tree: int | None = Field(
        None,
        gt=0,
        description="Tokens the turns of the session's tree (its root and every session "
        "below) may spend in all (budget.tokens).",
    )
    max_cost_per_tree: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Cost the turns of the session's tree may spend in all (budget.cost).",
    )
    max_context_chars: int | None = Field(
        None,
        gt=0,
        description="Characters of context past which a turn's session is compacted after "
        "the turn (docs/sessions.md#compaction; unset: CHAZ_MAX_CONTEXT_CHARS, else off).",
    )

    def narrowed(self, other: Limits | None) -> Limits:
        """The tighter of two limit sets, field by field; an unset field inherits."""
        if other is None:
            return self
        merged: dict[str, Any] = {}
        for name in type(self).model_fields:
            merged[name] = _tighter(name, getattr(self, name), getattr(other, name))
        return Limits(**merged)

    def topology(self, name: str) -> int:
        """A topology limit with its default filled in (0: unlimited)."""
        value: int | None = getattr(self, name)
        return TOPOLOGY_DEFAULTS[name] if value is None else value


def _tighter(name: str, a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    if name in TOPOLOGY_DEFAULTS:
        # 0 means "no limit" here, so it is the loosest value, not the tightest.
        if a == 0:
            return b
        if b == 0:
            return a
    return min(a, b)


class AgentSpec(CheckedModel):
    """A saved agent: model backend, system prompt, tools, limits and tool policies.

    ``model`` is ``"scripted"`` (see :mod:`chaz.runtime.backends.scripted`) or
    ``"openai"`` / ``"openai:MODEL_NAME"`` for any OpenAI-compatible server.
    ``AgentSpec(...)`` and :meth:`parse` raise :class:`chaz.errors.ValidationError`
    (``request.invalid``) naming the field; ``model_validate`` keeps pydantic's error.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    model: SafeText = "scripted"
    system_prompt: SafeText = Field(
        "You are a helpful agent.",
        max_length=MAX_SYSTEM_PROMPT_CHARS,
        description="What every turn of the agent starts with (at most 256 Ki characters).",
    )
    tools: list[ToolName] = Field(
        default_factory=list, description="Tool names the agent may call."
    )
    script: list[dict[str, Any]] | None = Field(None, description="Rules of a scripted model.")
    limits: Limits = Field(default_factory=Limits)
    options: SafeJson = Field(
        default_factory=dict, description="Backend options (base_url, temperature, ...)."
    )
    tool_policies: dict[ToolName, ToolPolicy] = Field(
        default_factory=dict,
        description="Per tool: whether its calls wait for approval (docs/approvals.md).",
    )
    grants: list[Grant] | None = Field(
        None,
        description="What the agent may do in a turn (docs/security.md#grants-inside-turns); "
        "None: every grant. A turn holds these and its starter's, intersected.",
    )

    def grant_set(self) -> frozenset[Grant] | None:
        """The agent's grants as a set (None: every grant)."""
        return None if self.grants is None else frozenset(self.grants)

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        # fullmatch: `$` lets "nl\n" through, and its replies then fail the sender check.
        if not AGENT_ID.fullmatch(value):
            raise ValueError("agent id must be 1-64 characters of letters, digits, _ . -")
        return value

    @field_validator("script")
    @classmethod
    def _check_script(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None:
            try:
                check_json("script", {"script": value})
            except ValidationError as exc:
                raise ValueError(exc.message) from None
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
