"""The cancel token (docs/runtime.md#preemptive-cancel), in process: what waits on
it ends when it is set, and an answer that arrives after it is set is dropped."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from chaz.errors import Cancelled, HandedBack, ModelError
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
    TurnContext,
)
from chaz.runtime.backends.scripted import ScriptedBackend
from chaz.runtime.cancel import CancelToken, Running
from chaz.runtime.events import EventSink
from chaz.runtime.loop import LoopPorts, run_loop
from chaz.runtime.registry import ToolContext, ToolRegistry
from chaz.tools.builtin import TOOLS

TURN = TurnContext(session_id="s", job_id="j", trigger_content="hi")
#: Longer than any test may take: a wait that ends did so because of the token.
FOREVER = 600.0


def _set_later(token: CancelToken, started: threading.Event) -> threading.Thread:
    """Set ``token`` from another thread once ``started`` is set (as the watcher would)."""

    def run() -> None:
        started.wait(FOREVER)
        token.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_token_is_set_once_and_runs_its_callbacks_once() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: calls.append("a"))
    forget = token.on_cancel(lambda: calls.append("b"))
    forget()  # unregistered: never runs
    token.raise_if_set()
    assert not token.is_set() and not token.wait(0.0)
    token.set()
    token.set()
    assert calls == ["a"] and token.is_set() and token.wait(0.0)
    with pytest.raises(Cancelled):
        token.raise_if_set()
    # A callback registered after the fact runs at once.
    token.on_cancel(lambda: calls.append("late"))
    assert calls == ["a", "late"]


def test_a_failing_callback_does_not_stop_the_others() -> None:
    token = CancelToken()
    calls: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    token.on_cancel(boom)
    token.on_cancel(lambda: calls.append("ran"))
    token.set()
    assert calls == ["ran"]


def test_a_scripted_sleep_ends_when_the_token_is_set() -> None:
    token = CancelToken()
    b = ScriptedBackend.from_script([{"steps": [{"sleep": FOREVER}, {"say": "late"}]}], None, token)
    token.set()
    with pytest.raises(Cancelled):
        b.complete([], [], TURN)


def test_a_scripted_wait_ends_when_the_token_is_set(tmp_path: Path) -> None:
    token = CancelToken()
    script = [{"steps": [{"wait": "never", "timeout": FOREVER}, {"say": "late"}]}]
    b = ScriptedBackend.from_script(script, tmp_path, token)
    started = threading.Event()
    _set_later(token, started)
    started.set()
    with pytest.raises(Cancelled):
        b.complete([], [], TURN)


def test_a_wait_that_times_out_is_still_a_model_error(tmp_path: Path) -> None:
    script = [{"steps": [{"wait": "never", "timeout": 0.05}, {"say": "late"}]}]
    b = ScriptedBackend.from_script(script, tmp_path, CancelToken())
    with pytest.raises(ModelError):
        b.complete([], [], TURN)


def test_the_sleep_tool_ends_when_its_context_token_is_set() -> None:
    registry = ToolRegistry(TOOLS)
    token = CancelToken()
    ctx = ToolContext(
        session_id="s",
        job_id="j",
        agent_id="a",
        tree_id="s",
        call_depth=0,
        allowed_tools=frozenset({"sleep"}),
        cancel=token,
    )
    started = threading.Event()
    _set_later(token, started)
    started.set()
    outcome = registry.invoke(
        ToolCallRequest(id="c", name="sleep", arguments='{"seconds": 300}'), ctx
    )
    assert outcome.is_error and "job.cancelled" in outcome.output


class _AnswersAfterTheCancel:
    """A model whose answer comes back after the turn's cancel was seen."""

    def __init__(self, token: CancelToken) -> None:
        self.token = token

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        self.token.set()
        return ModelResponse(text="a reply nobody may write")


def test_an_answer_that_arrives_after_the_cancel_is_dropped() -> None:
    token = CancelToken()
    written: list[object] = []
    sink = EventSink(written.append)
    ports = LoopPorts(
        backend=_AnswersAfterTheCancel(token),
        registry=ToolRegistry(TOOLS),
        sink=sink,
        save=lambda cp: None,
        stop_check=lambda: None,
        cancel=token,
    )
    ctx = ToolContext(
        session_id="s",
        job_id="j",
        agent_id="a",
        tree_id="s",
        call_depth=0,
        allowed_tools=frozenset(),
    )
    with pytest.raises(Cancelled):
        run_loop(ports, [{"role": "user", "content": "hi"}], TURN, ctx, max_steps=5)
    sink.close()
    assert written == []


def test_callbacks_run_in_the_order_they_were_registered() -> None:
    # The openai backend cuts its sockets before waking the turn that closes them.
    token = CancelToken()
    calls: list[int] = []
    for i in range(5):
        token.on_cancel(lambda i=i: calls.append(i))  # type: ignore[misc]
    token.set()
    assert calls == [0, 1, 2, 3, 4]


# -- hand-backs (docs/operations.md#termination) ------------------------------------


def test_a_hand_back_wakes_waiters_and_raises_handed_back_not_cancelled() -> None:
    token = CancelToken()
    woken: list[str] = []
    token.on_cancel(lambda: woken.append("cut"))
    token.hand_back()
    token.set()  # a cancel after the hand-back: the resuming worker sees its flag
    assert token.handing_back and token.wait(0.0) and woken == ["cut"]
    with pytest.raises(HandedBack):
        token.raise_if_set()


def test_a_cancel_seen_first_wins_over_a_hand_back() -> None:
    token = CancelToken()
    token.set()
    token.hand_back()
    assert not token.handing_back
    with pytest.raises(Cancelled):
        token.raise_if_set()


def test_a_scripted_wait_handed_back_raises_handed_back(tmp_path: Path) -> None:
    token = CancelToken()
    token.hand_back()
    b = ScriptedBackend.from_script(
        [{"steps": [{"wait": "never", "timeout": FOREVER}]}], tmp_path, token
    )
    with pytest.raises(HandedBack):
        b.complete([], [], TURN)


def test_running_hands_back_the_held_tokens_and_any_held_later() -> None:
    running = Running()
    held, dropped, late = CancelToken(), CancelToken(), CancelToken()
    running.hold(held)
    running.hold(dropped)
    running.drop(dropped)
    assert not running.handing_back
    assert running.hand_back_all() == 1
    assert held.handing_back and not dropped.is_set()
    running.hold(late)  # a turn that started meanwhile stops at its first check
    assert late.handing_back and running.handing_back
