"""The scripted model's program: rules of steps, validated before they are saved."""

from __future__ import annotations

import functools
import re
from typing import Any

import re2
from pydantic import BaseModel, ConfigDict, Field, model_validator

from chaz.domain.validation import sanitized

#: Longest ``match`` pattern a rule may have.
MAX_PATTERN_CHARS = 1000


def _options() -> Any:
    options = re2.Options()
    # A refused pattern is reported to the caller; RE2 would also log it to stderr.
    options.log_errors = False
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=1024)
def compile_rule(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching); ``re2.error`` if it cannot be.

    RE2 has no backreferences and no lookaround, the constructs that make a
    backtracking engine take exponential time (``^(a+)+$``): such a pattern
    is refused when the script is validated rather than run slowly later.
    """
    return re2.compile(pattern, _OPTIONS)


class ScriptCall(BaseModel):
    """One tool call a scripted step makes."""

    model_config = ConfigDict(extra="forbid")

    call: str
    args: dict[str, Any] = Field(default_factory=dict)
    raw_args: str | None = Field(
        None, description="Send this text as the arguments verbatim (to test malformed calls)."
    )


class StepUsage(BaseModel):
    """The tokens a scripted response step reports using (docs/runtime.md#the-scripted-model)."""

    model_config = ConfigDict(extra="forbid")

    input: int = Field(0, ge=0, le=1_000_000_000)
    output: int = Field(0, ge=0, le=1_000_000_000)


#: A gate's name, after its placeholders are filled: a plain file name (not
#: "." or "..", which name a folder).
GATE_NAME = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.\-]{1,128}")
#: The placeholders a gate name may hold, filled in when the step runs.
_GATE_PLACEHOLDERS = re.compile(r"\{(?:session_id|input)\}")


#: Kinds of step; a step has exactly one.
STEP_KINDS = ("say", "stream", "call", "calls", "echo", "sleep", "wait", "fail")


class ScriptStep(BaseModel):
    """One step: exactly one of say, stream, call, calls, echo, sleep, wait, fail.

    ``stream`` answers like ``say`` but first publishes the text as partials,
    ``chunk`` characters at a time (docs/runtime.md#streaming): ``pace``
    seconds apart, and after the first chunk only once the gate ``hold`` is
    open (a test holds a stream half-way with it).
    """

    model_config = ConfigDict(extra="forbid")

    say: str | None = None
    stream: str | None = Field(
        None, description="Answer this text, streamed first as partials (placeholders filled in)."
    )
    chunk: int | None = Field(
        None, ge=1, le=1_000_000, description="Characters per partial of a stream (default 8)."
    )
    pace: float | None = Field(
        None, ge=0, le=3600, description="Seconds between a stream's partials (default 0)."
    )
    hold: str | None = Field(
        None,
        description="A stream's chunks after the first wait until this gate is open "
        "({session_id} and {input} are filled in).",
    )
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
        None, gt=0, le=3600, description="Seconds a wait or hold may last (default 600)."
    )
    fail: str | None = None
    usage: StepUsage | None = Field(
        None, description="Tokens this response reports using (default: none reported)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptStep:
        kinds = [k for k in STEP_KINDS if getattr(self, k)]
        if self.sleep == 0 and "sleep" not in kinds:
            kinds.append("sleep")
        if self.stream == "" and "stream" not in kinds:
            kinds.append("stream")
        if len(kinds) != 1:
            raise ValueError(
                f"a step has exactly one of {', '.join(STEP_KINDS)}; got {kinds or 'none'}"
            )
        if (self.args is not None or self.raw_args is not None) and self.call is None:
            raise ValueError("args and raw_args go with call")
        if self.stream is None and (
            self.chunk is not None or self.pace is not None or self.hold is not None
        ):
            raise ValueError("chunk, pace and hold go with stream")
        if self.usage is not None and not self.is_response:
            raise ValueError("usage goes with a response step, not sleep or wait")
        if self.timeout is not None and self.wait is None and self.hold is None:
            raise ValueError("timeout goes with wait or hold")
        for gate in (self.wait, self.hold):
            # Checked when the agent is saved, not first when a turn waits:
            # a name like "../x" would otherwise be accepted and fail later.
            if gate is not None and not GATE_NAME.fullmatch(_GATE_PLACEHOLDERS.sub("x", gate)):
                raise ValueError(
                    f"gate name {gate[:80]!r} must be 1-128 letters, digits, _ . - "
                    "(and {session_id} or {input})"
                )
        return self

    @property
    def is_response(self) -> bool:
        """Whether the step is a model response (sleep and wait only delay the next one)."""
        return self.sleep is None and self.wait is None


class ScriptRule(BaseModel):
    """A rule: when ``match`` (an RE2 regular expression) is found in the input, play ``steps``."""

    model_config = ConfigDict(extra="forbid")

    match: str | None = Field(None, max_length=MAX_PATTERN_CHARS)
    steps: list[ScriptStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _regex_compiles(self) -> ScriptRule:
        if self.match is not None:
            try:
                compile_rule(self.match)
            except re2.error as exc:
                reason = exc.args[0] if exc.args else exc
                if isinstance(reason, bytes):
                    reason = reason.decode("utf-8", "replace")
                raise ValueError(
                    f"match is not a regular expression RE2 accepts "
                    f"(no backreferences or lookaround): {reason}"
                ) from None
            except UnicodeEncodeError:
                raise ValueError("match contains a lone surrogate") from None
        return self

    def matches(self, content: str) -> bool:
        """True when the rule applies to this input (searched, in linear time)."""
        if self.match is None:
            return True
        pattern = compile_rule(self.match)
        try:
            return pattern.search(content) is not None
        except UnicodeEncodeError:
            # Content stored before inputs were checked: match what can be read.
            return pattern.search(sanitized(content)) is not None


def parse_script(script: list[dict[str, Any]]) -> list[ScriptRule]:
    """Validate a script (raises pydantic's ValidationError with the details)."""
    return [ScriptRule.model_validate(rule) for rule in script]
