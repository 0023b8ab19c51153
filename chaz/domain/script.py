"""The scripted model's program: rules of steps, validated before they are saved."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ScriptCall(BaseModel):
    """One tool call a scripted step makes."""

    model_config = ConfigDict(extra="forbid")

    call: str
    args: dict[str, Any] = Field(default_factory=dict)
    raw_args: str | None = Field(
        None, description="Send this text as the arguments verbatim (to test malformed calls)."
    )


#: A gate's name, after its placeholders are filled: a plain file name.
GATE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class ScriptStep(BaseModel):
    """One step: exactly one of say, call, calls, echo, sleep, wait, fail."""

    model_config = ConfigDict(extra="forbid")

    say: str | None = None
    call: str | None = None
    args: dict[str, Any] | None = None
    raw_args: str | None = None
    calls: list[ScriptCall] | None = None
    echo: bool | None = None
    sleep: float | None = Field(None, ge=0, le=3600)
    wait: str | None = Field(
        None,
        description="Block until the gate of this name is opened (see chaz.runtime.gates); "
        "{session_id} and {input} are filled in.",
    )
    timeout: float | None = Field(
        None, gt=0, le=3600, description="Seconds a wait may last (default 600)."
    )
    fail: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptStep:
        kinds = [
            k for k in ("say", "call", "calls", "echo", "sleep", "wait", "fail") if getattr(self, k)
        ]
        if self.sleep == 0 and "sleep" not in kinds:
            kinds.append("sleep")
        if len(kinds) != 1:
            raise ValueError(
                "a step has exactly one of say, call, calls, echo, sleep, wait, fail; "
                f"got {kinds or 'none'}"
            )
        if (self.args is not None or self.raw_args is not None) and self.call is None:
            raise ValueError("args and raw_args go with call")
        if self.timeout is not None and self.wait is None:
            raise ValueError("timeout goes with wait")
        return self

    @property
    def is_response(self) -> bool:
        """Whether the step is a model response (sleep and wait only delay the next one)."""
        return self.sleep is None and self.wait is None


class ScriptRule(BaseModel):
    """A rule: when ``match`` (a regex) is found in the input, play ``steps``."""

    model_config = ConfigDict(extra="forbid")

    match: str | None = None
    steps: list[ScriptStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _regex_compiles(self) -> ScriptRule:
        if self.match is not None:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise ValueError(f"match is not a valid regular expression: {exc}") from exc
        return self

    def matches(self, content: str) -> bool:
        """True when the rule applies to this input."""
        return self.match is None or re.search(self.match, content) is not None


def parse_script(script: list[dict[str, Any]]) -> list[ScriptRule]:
    """Validate a script (raises pydantic's ValidationError with the details)."""
    return [ScriptRule.model_validate(rule) for rule in script]
