"""The ReAct loop: ask the model, run the tools it asks for, repeat until it answers.

The loop is pure orchestration over three ports: a model backend, a tool
registry and a set of callbacks (event sink, checkpoint, stop check, approval
gate). It checkpoints its transcript after every model step and every tool
result, so a turn whose worker died resumes without repeating a finished tool
call; a call that was in flight is reported to the model as interrupted.

A call that waits for a person's decision (docs/approvals.md) suspends the
turn: the gate raises :class:`Suspend`, the loop checkpoints the call as
``awaiting`` and lets it propagate; the turn resumed after the decision
finds the call still pending and asks the gate again, which now answers.

A turn handed back by a worker that is shutting down (docs/operations.md#termination)
stops at its next step boundary, or inside a model call or a tool that waits
on the cancel token. A model step cut so is asked again by the worker that
resumes the turn (its answer was never acted on); calls that had not started
are run then (``unstarted``); a tool call cut mid-run is reported interrupted,
as after a crash.

Each model step's reported tokens and each tool result are counted on the
turn's :class:`~chaz.runtime.budget.Budget` (docs/runtime.md#per-turn-budgets).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaz.domain.validation import sanitized
from chaz.errors import ChazError, HandedBack
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelBackend,
    ToolCallRequest,
    TurnContext,
)
from chaz.runtime.budget import Budget
from chaz.runtime.cancel import CancelToken
from chaz.runtime.events import EventSink, ToolCallEvent, ToolResultEvent
from chaz.runtime.registry import ToolContext, ToolOutcome, ToolRegistry, capped, content_cap

INTERRUPTED = (
    "interrupted: the worker running this tool call stopped before it finished; "
    "its effects are unknown"
)


class StepLimitExceeded(ChazError):
    """The model kept calling tools past the turn's step limit."""

    code = "turn.step_limit"


class Suspend(Exception):
    """Raised by the approval gate: this call waits for a person's decision.

    Not a :class:`ChazError`: it ends the wake-up, not the turn.
    """

    def __init__(self, call: ToolCallRequest) -> None:
        super().__init__(f"tool call {call.id} waits for approval")
        self.call = call


@dataclass(frozen=True)
class Verdict:
    """The approval gate's answer for one call: run it, or answer ``output`` (an
    error result) without running it."""

    run: bool = True
    output: str = ""


RUN = Verdict()


@dataclass
class Checkpoint:
    """A turn's progress: what the turn added to the conversation so far."""

    transcript: list[ChatMessage] = field(default_factory=list)
    pending: list[dict[str, str]] = field(default_factory=list)
    steps: int = 0
    last_result: str | None = None
    #: The pending call suspended for approval: on resume it is asked again,
    #: not reported interrupted.
    awaiting: str | None = None
    #: How many times the turn suspended for approval (for operators: the
    #: job's ``attempts`` already leave these resumes out).
    suspensions: int = 0
    #: How many times a worker shutting down handed the turn back (resumes
    #: that spend no attempt either).
    handbacks: int = 0
    #: The pending calls had not started when the turn was handed back: the
    #: resume runs them rather than report them interrupted.
    unstarted: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe form for the database."""
        return {
            "transcript": self.transcript,
            "pending": self.pending,
            "steps": self.steps,
            "last_result": self.last_result,
            "awaiting": self.awaiting,
            "suspensions": self.suspensions,
            "handbacks": self.handbacks,
            "unstarted": self.unstarted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Checkpoint:
        """The inverse of :meth:`to_json`; an empty checkpoint for None."""
        if not data:
            return cls()
        return cls(
            transcript=list(data.get("transcript", [])),
            pending=list(data.get("pending", [])),
            steps=int(data.get("steps", 0)),
            last_result=data.get("last_result"),
            awaiting=data.get("awaiting"),
            suspensions=int(data.get("suspensions", 0)),
            handbacks=int(data.get("handbacks", 0)),
            unstarted=bool(data.get("unstarted", False)),
        )


@dataclass
class LoopPorts:
    """The loop's connections to the outside world."""

    backend: ModelBackend
    registry: ToolRegistry
    sink: EventSink
    save: Callable[[Checkpoint], None]
    stop_check: Callable[[], None]
    #: The approval gate: :data:`RUN`, a refusal, or :class:`Suspend` (None: run all).
    approve: Callable[[ToolCallRequest], Verdict] | None = None
    #: The turn's cancel token: an answer that arrives after it is set is
    #: dropped (docs/runtime.md#preemptive-cancel).
    cancel: CancelToken = field(default_factory=CancelToken)
    #: The turn's per-turn budgets: each step's tokens and each result are
    #: counted on it (docs/runtime.md#per-turn-budgets; default: no limits).
    budget: Budget = field(default_factory=Budget)


def run_loop(
    ports: LoopPorts,
    context: list[ChatMessage],
    turn: TurnContext,
    tool_ctx: ToolContext,
    max_steps: int,
    resume: Checkpoint | None = None,
) -> str:
    """Run one turn to its final answer. Raises ChazError subclasses on failure."""
    cp = resume or Checkpoint()
    tools = ports.registry.specs(sorted(tool_ctx.allowed_tools), tool_ctx.cancel)
    if cp.pending and (cp.awaiting is not None or cp.unstarted):
        if cp.unstarted:
            # Saved before the first of them starts: a crash inside it must
            # make it interrupted on the next resume, never run it twice.
            cp.unstarted = False
            ports.save(cp)
        _run_calls(ports, cp, tool_ctx)
    elif cp.pending:
        _settle_interrupted(ports, cp)
    while True:
        ports.stop_check()
        if cp.steps >= max_steps:
            raise StepLimitExceeded(f"the turn took {max_steps} model steps without answering")
        # Asked for at most what its token budget has left; nothing left
        # ends the turn here, before a call it could not pay for.
        cap = ports.budget.cap()
        step_turn = turn.model_copy(
            update={"step": cp.steps, "last_result": cp.last_result, "max_tokens": cap}
        )
        response = ports.backend.complete(context + cp.transcript, tools, step_turn)
        # An answer that came back after the cancel was seen is neither
        # acted on nor replied: no Redis read here, the token is local.
        ports.cancel.raise_if_set()
        # Counted before the answer is acted on: a step past the token
        # budget, or cut at its cap, ends the turn, its answer neither run
        # nor replied.
        ports.budget.spent(response.usage, cap, response.truncated)
        cp.steps += 1
        if not response.tool_calls:
            # A model may answer with text no database stores (PostgreSQL
            # refuses NUL): repair it, as a tool's output is, rather than
            # fail the turn when its reply is written.
            return sanitized(response.text or "")
        calls = [capped(c, content_cap(tool_ctx)) for c in response.tool_calls]
        cp.transcript.append(_assistant(response.text, calls))
        cp.pending = [c.model_dump() for c in calls]
        ports.save(cp)
        _run_calls(ports, cp, tool_ctx)


def _run_calls(ports: LoopPorts, cp: Checkpoint, tool_ctx: ToolContext) -> None:
    """Run the pending calls in order, each past the approval gate first."""
    for raw in list(cp.pending):
        call = ToolCallRequest.model_validate(raw)
        try:
            ports.stop_check()
        except HandedBack:
            # Stopped between calls: the ones left never ran, so the worker
            # that resumes the turn runs them.
            cp.unstarted = True
            ports.save(cp)
            raise
        # A call that cannot run asks nobody to approve it.
        refused = ports.registry.refusal(call, tool_ctx)
        verdict = RUN if refused is not None else _gate(ports, cp, call)
        ports.sink.emit(ToolCallEvent(call.id, call.name, call.arguments))
        if refused is not None:
            outcome = refused
        elif verdict.run:
            outcome = ports.registry.invoke(call, tool_ctx)
        else:
            outcome = ToolOutcome(verdict.output, is_error=True)
        ports.sink.emit(ToolResultEvent(call.id, call.name, outcome.output, outcome.is_error))
        ports.budget.active()
        cp.transcript.append(_tool_message(call.id, outcome.output))
        cp.pending = [p for p in cp.pending if p["id"] != call.id]
        cp.last_result = outcome.output
        ports.save(cp)


def _gate(ports: LoopPorts, cp: Checkpoint, call: ToolCallRequest) -> Verdict:
    """Ask the approval gate; on :class:`Suspend`, checkpoint the call as awaiting."""
    if ports.approve is None:
        return RUN
    try:
        verdict = ports.approve(call)
    except Suspend:
        if cp.awaiting != call.id:
            cp.awaiting = call.id
            cp.suspensions += 1
            ports.save(cp)
        raise
    if cp.awaiting == call.id:
        # Decided: from here on the call is in flight like any other, so a
        # worker dying inside it makes it interrupted, never run twice.
        cp.awaiting = None
        ports.save(cp)
    return verdict


def _settle_interrupted(ports: LoopPorts, cp: Checkpoint) -> None:
    """Tell the model which calls died with the previous worker; never re-run them."""
    for raw in cp.pending:
        call = ToolCallRequest.model_validate(raw)
        ports.sink.emit(ToolCallEvent(call.id, call.name, call.arguments))
        output = json.dumps({"error": {"code": "tool.interrupted", "message": INTERRUPTED}})
        ports.sink.emit(ToolResultEvent(call.id, call.name, output, True))
        cp.transcript.append(_tool_message(call.id, output))
        cp.last_result = output
    cp.pending = []
    ports.save(cp)


def _assistant(text: str | None, calls: list[ToolCallRequest]) -> ChatMessage:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }


def _tool_message(call_id: str, output: str) -> ChatMessage:
    return {"role": "tool", "tool_call_id": call_id, "content": output}
