"""The scripted model: deterministic and programmable, for demos and tests.

A turn takes the first rule whose ``match`` is found in the triggering entry's
content (or that has no ``match``) and plays its steps in order, one model
response per step; ``sleep`` and ``wait`` steps only delay the response after
them (``wait`` until a gate opens, see :mod:`chaz.runtime.gates`). Both end
early, raising :class:`~chaz.errors.Cancelled`, once the turn's cancel token
is set (docs/runtime.md#preemptive-cancel).

A response step's ``usage`` (``{"input": N, "output": M}``) is the token
count it reports, what the turn's ``max_tokens_per_turn`` counts; without
one a step reports none (docs/runtime.md#per-turn-budgets). A step asked for
at most N output tokens (``TurnContext.max_tokens``, the turn's token cap)
reports at most N, and one whose ``output`` is more is cut there (its
response ``truncated``), as a real model stops at ``max_tokens``.

A ``stream`` step publishes its text as partials (``chunk`` characters at a
time, see :mod:`chaz.coord.partials`) before answering it, stopping at a
cancel between chunks (docs/runtime.md#streaming).

The position in the script is derived from how many model steps the turn
has taken, so a resumed turn continues where the dead one stopped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chaz.coord.partials import PartialPublisher
from chaz.domain.compaction import SUMMARY_HEADER
from chaz.domain.script import ScriptRule, ScriptStep, parse_script
from chaz.errors import BudgetExceeded, Cancelled, ChazError, HandedBack, ModelError, TurnNotMatched
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelResponse,
    TokenCount,
    ToolCallRequest,
    ToolSpec,
    TurnContext,
)
from chaz.runtime.cancel import CancelToken
from chaz.runtime.context import SUMMARY_PREFIX
from chaz.runtime.gates import wait_gate

#: How long a ``wait`` step blocks when its rule gives no ``timeout``.
DEFAULT_WAIT_SECONDS = 600.0
#: Characters per partial of a ``stream`` step without ``chunk``.
DEFAULT_CHUNK = 8


class ScriptedBackend:
    """A :class:`~chaz.runtime.backends.base.ModelBackend` that plays a script."""

    def __init__(
        self,
        rules: list[ScriptRule],
        home: Path | None = None,
        cancel: CancelToken | None = None,
        partials: PartialPublisher | None = None,
    ) -> None:
        self.rules = rules
        #: The ``CHAZ_HOME`` whose gates ``wait`` steps watch.
        self.home = home or Path(".chaz")
        #: The turn's cancel token: ``sleep`` and ``wait`` steps wait on it.
        self.cancel = cancel or CancelToken()
        #: Where ``stream`` steps publish their partials (None: nowhere).
        self.partials = partials

    @classmethod
    def from_script(
        cls,
        script: list[dict[str, Any]],
        home: Path | None = None,
        cancel: CancelToken | None = None,
        partials: PartialPublisher | None = None,
    ) -> ScriptedBackend:
        """Build from an AgentSpec's raw ``script`` (validated again here)."""
        return cls(parse_script(script), home, cancel, partials)

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """Play the response step number ``turn.step`` of the matching rule."""
        rule = next((r for r in self.rules if r.matches(turn.trigger_content)), None)
        if rule is None:
            raise TurnNotMatched(f"no script rule matches the input {turn.trigger_content[:80]!r}")
        responses_seen = 0
        for step in rule.steps:
            if not step.is_response:
                if responses_seen == turn.step:
                    self._delay(step, turn)
                continue
            if responses_seen == turn.step:
                # Joined only when asked for: a long session's context is large.
                said = step.say if step.say is not None else step.stream
                wanted = said is not None and "{context}" in said
                return self._respond(step, turn, _context(messages) if wanted else "")
            responses_seen += 1
        # Out of steps without a `say`: the last tool result is the answer.
        return ModelResponse(text=turn.last_result or "")

    def summarize(self, digest: str, turn: TurnContext) -> str:
        """The Summary of a compaction (docs/sessions.md#compaction): ``digest``,
        the deterministic one, unless a rule with a ``match`` that finds
        :data:`~chaz.domain.compaction.SUMMARY_HEADER` says otherwise.

        Such a rule's ``wait`` and ``sleep`` steps hold the compaction (tests
        gate it), its first ``say`` is the summary (``{input}`` is the digest)
        and its ``fail`` is a model error. A rule without a ``match`` is a
        turn's catch-all and is not used here.
        """
        rule = next(
            (r for r in self.rules if r.match is not None and r.matches(SUMMARY_HEADER)), None
        )
        if rule is None:
            return digest
        asked = turn.model_copy(update={"trigger_content": digest, "step": 0})
        for step in rule.steps:
            if not step.is_response:
                self._delay(step, asked)
                continue
            if step.fail is not None:
                raise ModelError(_fill(step.fail, asked))
            text = step.say if step.say is not None else step.stream
            if text is not None:
                return _fill(text, asked)
            break
        return digest

    def _delay(self, step: ScriptStep, turn: TurnContext) -> None:
        if step.wait is None:
            if self.cancel.wait(step.sleep or 0.0):
                raise self.cancel.stopped("the job was cancelled")
            return
        name = _fill(step.wait, turn)
        timeout = step.timeout or DEFAULT_WAIT_SECONDS
        try:
            opened = wait_gate(self.home, name, timeout, self.cancel)
        except (Cancelled, HandedBack, BudgetExceeded):
            raise
        except ChazError as exc:
            raise ModelError(f"wait step: {exc.message}") from exc
        if not opened:
            raise ModelError(f"gate {name!r} was not opened within {timeout:g}s")

    def _stream(self, step: ScriptStep, turn: TurnContext, text: str) -> str:
        """Publish ``text`` a chunk at a time, then hand it back as the answer."""
        size = step.chunk or DEFAULT_CHUNK
        for start in range(0, len(text), size):
            if start:
                if step.hold is not None:
                    self._delay(ScriptStep(wait=step.hold, timeout=step.timeout), turn)
                if self.cancel.wait(step.pace or 0.0):
                    raise self.cancel.stopped("the job was cancelled during a stream")
            self.cancel.raise_if_set()
            if self.partials is not None:
                self.partials.write(turn.step, text[start : start + size])
                # One partial per chunk: the script sets the pace, not the coalescer.
                self.partials.flush()
        return text

    def _respond(self, step: ScriptStep, turn: TurnContext, context: str) -> ModelResponse:
        response = self._response(step, turn, context)
        if step.usage is None:
            return response
        output, cap = step.usage.output, turn.max_tokens
        # Honours the step's token cap as a real model does: it generates no
        # more, and says its answer stopped there.
        truncated = cap is not None and output > cap
        if cap is not None and truncated:
            output = cap
        used = TokenCount(input=step.usage.input, output=output)
        return response.model_copy(update={"usage": used, "truncated": truncated})

    def _response(self, step: ScriptStep, turn: TurnContext, context: str) -> ModelResponse:
        if step.fail is not None:
            raise ModelError(_fill(step.fail, turn))
        if step.say is not None:
            return ModelResponse(text=_fill(step.say, turn, context))
        if step.stream is not None:
            return ModelResponse(text=self._stream(step, turn, _fill(step.stream, turn, context)))
        if step.echo:
            return ModelResponse(text=turn.trigger_content)
        calls: list[ToolCallRequest] = []
        if step.call is not None:
            raw = step.raw_args if step.raw_args is not None else _args(step.args or {}, turn)
            calls.append(ToolCallRequest(id=f"call_{turn.step}_0", name=step.call, arguments=raw))
        for i, c in enumerate(step.calls or []):
            raw = c.raw_args if c.raw_args is not None else _args(c.args, turn)
            calls.append(ToolCallRequest(id=f"call_{turn.step}_{i}", name=c.call, arguments=raw))
        return ModelResponse(tool_calls=calls)


_PLACEHOLDER = re.compile(r"\{(input|last_result|session_id|context)\}")


def _context(messages: list[ChatMessage]) -> str:
    """The conversation the model was given, one ``role: text`` per message, joined by
    `` | `` (the system prompt and notes left out; the Summary a context starts at
    as ``summary: text``): lets a script show what its context held."""
    said = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] != "system":
            said.append(f"{m['role']}: {content}")
        elif content.startswith(SUMMARY_PREFIX):
            said.append(f"summary: {content[len(SUMMARY_PREFIX) :]}")
    return " | ".join(said)


def _fill(text: str, turn: TurnContext, context: str = "") -> str:
    # One pass, not str.format or chained replace: scripts may contain other
    # braces, and a user's input that reads "{session_id}" must stay as written.
    values = {
        "input": turn.trigger_content,
        "last_result": turn.last_result or "",
        "session_id": turn.session_id,
        "context": context,
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def _args(args: dict[str, object], turn: TurnContext) -> str:
    def fill(value: object) -> object:
        if isinstance(value, str):
            return _fill(value, turn)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return json.dumps(fill(args))
