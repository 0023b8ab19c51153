"""The runtime: the scripted backend, the tool registry, the ReAct loop, the context."""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.entries import Entry, EntryType
from chaz.errors import (
    Cancelled,
    ChazError,
    HandedBack,
    ModelError,
    QueueFull,
    TokenBudgetExceeded,
    TurnNotMatched,
    ValidationError,
)
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
    TurnContext,
)
from chaz.runtime.backends.scripted import ScriptedBackend
from chaz.runtime.budget import Budget
from chaz.runtime.cancel import CancelToken
from chaz.runtime.context import build_context
from chaz.runtime.events import EventSink, RuntimeEvent, ToolCallEvent, ToolResultEvent
from chaz.runtime.gates import open_gate
from chaz.runtime.loop import (
    INTERRUPTED,
    RUN,
    Checkpoint,
    LoopPorts,
    StepLimitExceeded,
    Suspend,
    Verdict,
    run_loop,
)
from chaz.runtime.registry import Tool, ToolContext, ToolOutcome, ToolRegistry
from chaz.tools import default_registry


def turn(
    content: str = "hello world", step: int = 0, last_result: str | None = None
) -> TurnContext:
    return TurnContext(
        session_id="sess1",
        job_id="job1",
        trigger_content=content,
        step=step,
        last_result=last_result,
    )


def backend(*rules: dict[str, Any]) -> ScriptedBackend:
    return ScriptedBackend.from_script(list(rules))


# -- the scripted backend --------------------------------------------------------


def test_say_fills_placeholders_and_leaves_other_braces() -> None:
    b = backend({"steps": [{"say": "in={input} last={last_result} sid={session_id} {other} {}"}]})
    r = b.complete([], [], turn("hi", last_result="R"))
    assert r.text == "in=hi last=R sid=sess1 {other} {}"
    assert r.tool_calls == []
    # Without a last result the placeholder is empty, not "None".
    assert b.complete([], [], turn("hi")).text == "in=hi last= sid=sess1 {other} {}"


def test_placeholders_are_not_expanded_twice() -> None:
    b = backend({"steps": [{"say": "<{input}>"}]})
    assert b.complete([], [], turn("{session_id}")).text == "<{session_id}>"


def test_echo_returns_the_input() -> None:
    b = backend({"steps": [{"echo": True}]})
    assert b.complete([], [], turn("say it back {input}")).text == "say it back {input}"


def test_call_and_calls_produce_ids_per_step_and_filled_args() -> None:
    b = backend(
        {
            "steps": [
                {"call": "echo", "args": {"text": "{input}", "n": [1, {"k": "{session_id}"}]}},
                {
                    "calls": [
                        {"call": "word_count", "args": {"text": "{last_result}"}},
                        {"call": "echo", "raw_args": "{not json {input}"},
                    ]
                },
                {"call": "clock"},
                {"say": "done"},
            ]
        }
    )
    first = b.complete([], [], turn("abc", step=0))
    assert first.text is None
    assert [c.model_dump() for c in first.tool_calls] == [
        {
            "id": "call_0_0",
            "name": "echo",
            "arguments": json.dumps({"text": "abc", "n": [1, {"k": "sess1"}]}),
        }
    ]
    second = b.complete([], [], turn("abc", step=1, last_result="R1"))
    assert [(c.id, c.name) for c in second.tool_calls] == [
        ("call_1_0", "word_count"),
        ("call_1_1", "echo"),
    ]
    assert json.loads(second.tool_calls[0].arguments) == {"text": "R1"}
    assert second.tool_calls[1].arguments == "{not json {input}"  # raw: verbatim
    third = b.complete([], [], turn("abc", step=2))
    assert [(c.id, c.name, c.arguments) for c in third.tool_calls] == [("call_2_0", "clock", "{}")]
    assert b.complete([], [], turn("abc", step=3)).text == "done"


def test_sleep_delays_but_is_not_a_response() -> None:
    b = backend(
        {"steps": [{"sleep": 0.2}, {"say": "a"}, {"sleep": 0}, {"say": "b"}, {"sleep": 0.2}]}
    )
    t0 = time.monotonic()
    assert b.complete([], [], turn(step=0)).text == "a"
    assert time.monotonic() - t0 >= 0.2
    t1 = time.monotonic()
    assert b.complete([], [], turn(step=1)).text == "b"
    assert time.monotonic() - t1 < 0.15
    # After the last response: the trailing sleep runs, then the last result answers.
    t2 = time.monotonic()
    assert b.complete([], [], turn(step=2, last_result="LR")).text == "LR"
    assert time.monotonic() - t2 >= 0.2


def test_wait_blocks_until_its_gate_opens(tmp_path: Path) -> None:
    b = ScriptedBackend.from_script(
        [{"steps": [{"wait": "go-{session_id}"}, {"say": "through"}]}], tmp_path
    )
    answers: list[str | None] = []
    waiting = threading.Thread(target=lambda: answers.append(b.complete([], [], turn()).text))
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and answers == []  # held at the gate
    open_gate(tmp_path, "go-sess1")
    waiting.join(10)
    assert answers == ["through"]
    # An open gate stays open: a resumed turn passes it at once.
    assert b.complete([], [], turn()).text == "through"


def test_wait_that_times_out_fails_the_model_step(tmp_path: Path) -> None:
    b = ScriptedBackend.from_script(
        [{"steps": [{"wait": "never", "timeout": 0.05}, {"say": "x"}]}], tmp_path
    )
    with pytest.raises(ModelError, match="'never' was not opened"):
        b.complete([], [], turn())


@pytest.mark.parametrize(
    "step",
    [{"wait": "g", "say": "x"}, {"timeout": 1, "say": "x"}, {"wait": "g", "timeout": 0}],
)
def test_wait_step_shapes_are_checked(step: dict[str, Any]) -> None:
    with pytest.raises(PydanticValidationError):
        ScriptedBackend.from_script([{"steps": [step]}])


def test_a_gate_name_is_a_plain_file_name(tmp_path: Path) -> None:
    b = ScriptedBackend.from_script([{"steps": [{"wait": "{input}"}, {"say": "x"}]}], tmp_path)
    with pytest.raises(ModelError, match="gate name"):
        b.complete([], [], turn("../escape"))


def test_fail_raises_model_error_with_filled_message() -> None:
    b = backend({"steps": [{"fail": "model down for {input}"}]})
    with pytest.raises(ModelError) as info:
        b.complete([], [], turn("q"))
    assert info.value.message == "model down for q"
    assert info.value.code == "model.error"


def test_first_matching_rule_wins_and_no_match_raises() -> None:
    b = backend(
        {"match": "^fail", "steps": [{"say": "F"}]},
        {"match": "needle", "steps": [{"say": "N"}]},
        {"match": "needle", "steps": [{"say": "second"}]},
    )
    assert b.complete([], [], turn("a needle here")).text == "N"
    assert b.complete([], [], turn("fail needle")).text == "F"
    with pytest.raises(TurnNotMatched) as info:
        b.complete([], [], turn("nothing"))
    assert info.value.code == "model.no_rule"


@pytest.mark.timeout(60)  # a backtracking engine takes hours here; RE2 takes microseconds
def test_a_catastrophic_pattern_matches_in_linear_time() -> None:
    b = backend({"match": "^(a+)+$", "steps": [{"say": "A"}]}, {"steps": [{"say": "other"}]})
    assert b.complete([], [], turn("a" * 40 + "b")).text == "other"
    assert b.complete([], [], turn("a" * 100_000 + "b")).text == "other"
    assert b.complete([], [], turn("a" * 40)).text == "A"
    b = backend({"match": "(x+x+)+y", "steps": [{"say": "Y"}]}, {"steps": [{"say": "other"}]})
    assert b.complete([], [], turn("x" * 5000)).text == "other"


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"(?=a)b", r"(?<=a)b", r"(?!a)b", "(", "x" * 1001],
    ids=["backreference", "lookahead", "lookbehind", "negative-lookahead", "unbalanced", "long"],
)
def test_patterns_re2_cannot_compile_are_refused(pattern: str) -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(id="a", script=[{"match": pattern, "steps": [{"say": "x"}]}])
    assert (info.value.field or "").startswith("script")


def test_re2_keeps_the_everyday_syntax() -> None:
    b = backend(
        {"match": r"^echo\s+\w+", "steps": [{"say": "E"}]},
        {"match": "(?i)HELLO|ciao", "steps": [{"say": "H"}]},
        {"match": "caf[é]", "steps": [{"say": "C"}]},
        {"steps": [{"say": "other"}]},
    )
    assert [b.complete([], [], turn(t)).text for t in ("echo  hi", "say hello", "café", "x")] == [
        "E",
        "H",
        "C",
        "other",
    ]


def test_a_rule_without_match_catches_everything() -> None:
    b = backend({"match": "x", "steps": [{"say": "X"}]}, {"steps": [{"say": "any"}]})
    assert b.complete([], [], turn("")).text == "any"


def test_out_of_steps_answers_with_the_last_result() -> None:
    b = backend({"steps": [{"call": "clock"}]})
    assert b.complete([], [], turn(step=1, last_result="12:00")).text == "12:00"
    assert b.complete([], [], turn(step=5)).text == ""


# -- the tool registry -----------------------------------------------------------


class _Count(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = 1


def _refuses(_args: _Count, _ctx: ToolContext) -> str:
    raise QueueFull("no room", limit=1)


def _crashes(_args: _Count, _ctx: ToolContext) -> str:
    raise RuntimeError("kaboom")


def registry_with_extras() -> ToolRegistry:
    r = default_registry()
    r.register(Tool("refuses", "Raises a ChazError.", _Count, _refuses))
    r.register(Tool("crashes", "Raises a plain exception.", _Count, _crashes))
    return r


def ctx(allowed: set[str]) -> ToolContext:
    return ToolContext(
        session_id="sess1",
        job_id="job1",
        agent_id="a",
        tree_id="sess1",
        call_depth=0,
        allowed_tools=frozenset(allowed),
    )


def error_of(outcome: ToolOutcome) -> dict[str, Any]:
    assert outcome.is_error, outcome
    data = json.loads(outcome.output)
    assert set(data) == {"error"}
    err: dict[str, Any] = data["error"]
    return err


ALL = {"echo", "word_count", "clock", "sleep", "refuses", "crashes"}
ALL |= {"todo_create", "todo_update", "todo_list"}


def test_a_valid_call_runs() -> None:
    r = registry_with_extras()
    out = r.invoke(
        ToolCallRequest(id="1", name="word_count", arguments='{"text": "a b c"}'), ctx(ALL)
    )
    assert out == ToolOutcome("3", is_error=False)
    # Empty arguments mean "no arguments".
    out = r.invoke(ToolCallRequest(id="2", name="clock", arguments=""), ctx(ALL))
    assert not out.is_error
    assert datetime.fromisoformat(out.output).tzinfo is not None


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("echo", "{not json", "tool.malformed"),
        ("echo", '{"text": "a"', "tool.malformed"),
        ("echo", "[1, 2]", "tool.malformed"),
        ("echo", '"text"', "tool.malformed"),
        ("echo", "null", "tool.malformed"),
        ("echo", "3", "tool.malformed"),
        ("echo", "{}", "tool.invalid_arguments"),
        ("echo", '{"text": 1}', "tool.invalid_arguments"),
        ("echo", '{"text": "a", "extra": 1}', "tool.invalid_arguments"),
        ("sleep", '{"seconds": -1}', "tool.invalid_arguments"),
        ("sleep", '{"seconds": 301}', "tool.invalid_arguments"),
        ("no_such_tool", "{}", "tool.unknown"),
        ("", "{}", "tool.unknown"),
        ("crashes", '{"n": 1}', "tool.crashed"),
        ("refuses", "{}", "quota.queue_full"),
        ("todo_create", '{"title": ""}', "tool.invalid_arguments"),
        ("todo_create", '{"title": "%s"}' % ("x" * 501), "tool.invalid_arguments"),
        ("todo_create", '{"title": "a\\u0000"}', "tool.invalid_arguments"),
        ("todo_create", '{"title": "a", "note": "%s"}' % ("n" * 4001), "tool.invalid_arguments"),
        ("todo_update", '{"todo_id": "a", "status": "bogus"}', "tool.invalid_arguments"),
        ("todo_update", '{"status": "done"}', "tool.invalid_arguments"),
        ("todo_list", '{"status": "later"}', "tool.invalid_arguments"),
    ],
)
def test_bad_calls_become_error_outcomes(name: str, arguments: str, code: str) -> None:
    r = registry_with_extras()
    out = r.invoke(ToolCallRequest(id="x", name=name, arguments=arguments), ctx(ALL))
    err = error_of(out)
    assert err["code"] == code
    assert err["message"]


def test_a_tool_not_allowed_is_unknown_and_does_not_run() -> None:
    runs: list[str] = []

    def spy(args: _Count, _ctx: ToolContext) -> str:
        runs.append("ran")
        return "ran"

    r = default_registry()
    r.register(Tool("spy", "Records calls.", _Count, spy))
    out = r.invoke(ToolCallRequest(id="1", name="spy", arguments="{}"), ctx({"echo"}))
    err = error_of(out)
    assert err["code"] == "tool.unknown"
    assert "echo" in err["message"] and "spy" not in err["message"].split("available:")[1]
    assert runs == []
    # Allowed but unregistered is unknown too, and not offered.
    out = r.invoke(ToolCallRequest(id="2", name="ghost", arguments="{}"), ctx({"ghost", "echo"}))
    err = error_of(out)
    assert err["code"] == "tool.unknown"
    assert "ghost" not in err["message"].split("available:")[1]
    assert (
        r.invoke(ToolCallRequest(id="3", name="spy", arguments="{}"), ctx({"spy"})).output == "ran"
    )
    assert runs == ["ran"]


def test_invalid_arguments_do_not_run_the_tool() -> None:
    runs: list[int] = []

    def spy(args: _Count, _ctx: ToolContext) -> str:
        runs.append(args.n)
        return "ok"

    r = ToolRegistry([Tool("spy", "Records calls.", _Count, spy)])
    for arguments in ('{"n": "many"}', '{"m": 1}', "[]", "{"):
        assert r.invoke(
            ToolCallRequest(id="1", name="spy", arguments=arguments), ctx({"spy"})
        ).is_error
    assert runs == []


def test_a_chaz_error_keeps_its_code_and_details() -> None:
    out = registry_with_extras().invoke(ToolCallRequest(id="1", name="refuses"), ctx(ALL))
    assert error_of(out) == {
        "code": "quota.queue_full",
        "message": "no room",
        "retryable": True,
        "details": {"limit": 1},
    }


def test_a_crash_names_the_exception() -> None:
    out = registry_with_extras().invoke(ToolCallRequest(id="1", name="crashes"), ctx(ALL))
    assert "RuntimeError" in error_of(out)["message"]
    assert "kaboom" in error_of(out)["message"]


def test_deeply_nested_arguments_are_an_error_outcome() -> None:
    call = ToolCallRequest(id="1", name="echo", arguments="[" * 100_000)
    out = default_registry().invoke(call, ctx({"echo"}))
    assert error_of(out)["code"] == "tool.malformed"


def test_register_twice_is_refused() -> None:
    r = default_registry()
    with pytest.raises(ValueError):
        r.register(Tool("echo", "again", _Count, _crashes))


@pytest.mark.parametrize("name", ["echo2\n", "two words", ""])
def test_register_refuses_a_bad_tool_name(name: str) -> None:
    with pytest.raises(ValidationError):
        ToolRegistry().register(Tool(name, "Bad name.", _Count, _refuses))


def test_specs_follow_the_order_given_and_skip_unknown() -> None:
    r = default_registry()
    specs = r.specs(["word_count", "ghost", "echo"])
    assert [s.name for s in specs] == ["word_count", "echo"]
    assert specs[1].parameters["required"] == ["text"]
    assert "title" not in specs[1].parameters


# -- the ReAct loop ----------------------------------------------------------------


class Recorder:
    """A real event sink writing into a list, plus checkpoints recorded into a list."""

    def __init__(self) -> None:
        self.events: list[RuntimeEvent] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.sink = EventSink(self.events.append)

    def save(self, cp: Checkpoint) -> None:
        # What the store would keep: a JSON round trip, not a live reference.
        self.checkpoints.append(json.loads(json.dumps(cp.to_json())))


class RecordingBackend:
    """The scripted backend, keeping the messages and tools each step was given."""

    def __init__(self, inner: ScriptedBackend) -> None:
        self.inner = inner
        self.seen: list[tuple[list[ChatMessage], list[ToolSpec], TurnContext]] = []

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        self.seen.append((copy.deepcopy(messages), tools, turn))
        return self.inner.complete(messages, tools, turn)


def never_stop() -> None:
    return None


def ports(
    b: Any, rec: Recorder, registry: ToolRegistry | None = None, stop: Any = never_stop
) -> LoopPorts:
    return LoopPorts(
        backend=b,
        registry=registry or default_registry(),
        sink=rec.sink,
        save=rec.save,
        stop_check=stop,
    )


CONTEXT: list[ChatMessage] = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "one two three"},
]


def kinds(events: list[RuntimeEvent]) -> list[tuple[str, str, str]]:
    return [
        ("call" if isinstance(e, ToolCallEvent) else "result", e.call_id, e.name) for e in events
    ]


class Answers:
    """A backend that answers one fixed text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        return ModelResponse(text=self.text)


def test_a_reply_no_database_can_store_is_repaired_not_fatal() -> None:
    rec = Recorder()
    answer = run_loop(
        ports(Answers("a\x00b\ud800c"), rec), CONTEXT, turn(), ctx(set()), max_steps=2
    )
    assert answer == "a\ufffdb\ufffdc"


def test_loop_runs_tools_in_order_and_checkpoints_each_step() -> None:
    b = RecordingBackend(
        backend(
            {
                "steps": [
                    {"call": "echo", "args": {"text": "{input}"}},
                    {
                        "calls": [
                            {"call": "word_count", "args": {"text": "{last_result}"}},
                            {"call": "echo", "raw_args": "{bad"},
                        ]
                    },
                    {"say": "final: {last_result}"},
                ]
            }
        )
    )
    rec = Recorder()
    tool_ctx = ctx({"echo", "word_count"})
    answer = run_loop(ports(b, rec), CONTEXT, turn("one two three"), tool_ctx, max_steps=5)
    rec.sink.close()

    assert kinds(rec.events) == [
        ("call", "call_0_0", "echo"),
        ("result", "call_0_0", "echo"),
        ("call", "call_1_0", "word_count"),
        ("result", "call_1_0", "word_count"),
        ("call", "call_1_1", "echo"),
        ("result", "call_1_1", "echo"),
    ]
    results = [e for e in rec.events if isinstance(e, ToolResultEvent)]
    assert [(r.output, r.is_error) for r in results[:2]] == [("one two three", False), ("3", False)]
    assert results[2].is_error and "tool.malformed" in results[2].output
    # The model answers with the last result it saw: the malformed-call error.
    assert answer == f"final: {results[2].output}"

    # Checkpoints: after each model step that called tools, and after each result.
    assert [(c["steps"], [p["id"] for p in c["pending"]]) for c in rec.checkpoints] == [
        (1, ["call_0_0"]),
        (1, []),
        (2, ["call_1_0", "call_1_1"]),
        (2, ["call_1_1"]),
        (2, []),
    ]
    last = rec.checkpoints[-1]
    assert [m["role"] for m in last["transcript"]] == [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
    ]
    assert last["last_result"] == results[2].output

    # Each model step saw the context plus the transcript so far, and the allowed tools.
    assert [t.step for _, _, t in b.seen] == [0, 1, 2]
    assert [len(m) for m, _, _ in b.seen] == [2, 4, 7]
    assert b.seen[0][0] == CONTEXT
    assert sorted(s.name for s in b.seen[0][1]) == ["echo", "word_count"]
    assert b.seen[2][2].last_result == results[2].output


def test_a_plain_answer_writes_no_events_and_no_checkpoint() -> None:
    rec = Recorder()
    answer = run_loop(
        ports(backend({"steps": [{"say": "hi {input}"}]}), rec),
        CONTEXT,
        turn("you"),
        ctx(set()),
        max_steps=1,
    )
    rec.sink.close()
    assert answer == "hi you"
    assert rec.events == []
    assert rec.checkpoints == []


def test_model_errors_propagate_after_the_events_so_far() -> None:
    rec = Recorder()
    b = backend({"steps": [{"call": "clock"}, {"fail": "down"}]})
    with pytest.raises(ModelError):
        run_loop(ports(b, rec), CONTEXT, turn(), ctx({"clock"}), max_steps=5)
    rec.sink.close()
    assert kinds(rec.events) == [("call", "call_0_0", "clock"), ("result", "call_0_0", "clock")]


def test_resume_reports_a_pending_call_interrupted_and_never_reruns_it() -> None:
    calls: list[int] = []
    lock = threading.Lock()

    def count(args: _Count, _ctx: ToolContext) -> str:
        with lock:
            calls.append(args.n)
        return f"counted {len(calls)}"

    registry = default_registry()
    registry.register(Tool("count", "Counts its invocations.", _Count, count))
    script = backend(
        {"steps": [{"call": "count", "args": {"n": 1}}, {"say": "after: {last_result}"}]}
    )

    # A first worker got as far as the model's tool call, then died mid-call.
    first = Recorder()

    def die_in_tool() -> None:
        if first.checkpoints and first.checkpoints[-1]["pending"]:
            raise Cancelled("worker died")

    with pytest.raises(Cancelled):
        run_loop(ports(script, first, registry, die_in_tool), CONTEXT, turn(), ctx({"count"}), 5)
    first.sink.close()
    assert calls == []
    saved = first.checkpoints[-1]
    assert saved["steps"] == 1 and [p["id"] for p in saved["pending"]] == ["call_0_0"]

    # The next worker resumes from the saved checkpoint.
    second = Recorder()
    b = RecordingBackend(script)
    answer = run_loop(
        ports(b, second, registry),
        CONTEXT,
        turn(),
        ctx({"count"}),
        5,
        resume=Checkpoint.from_json(saved),
    )
    second.sink.close()
    assert calls == []  # never re-run
    assert kinds(second.events) == [("call", "call_0_0", "count"), ("result", "call_0_0", "count")]
    result = second.events[1]
    assert isinstance(result, ToolResultEvent) and result.is_error
    assert json.loads(result.output)["error"] == {
        "code": "tool.interrupted",
        "message": INTERRUPTED,
    }
    assert answer == f"after: {result.output}"
    # The settled checkpoint has no pending call, and the model resumed at step 1
    # with the interrupted result in its transcript.
    assert second.checkpoints[0]["pending"] == []
    assert [t.step for _, _, t in b.seen] == [1]
    assert b.seen[0][0][-1] == {
        "role": "tool",
        "tool_call_id": "call_0_0",
        "content": result.output,
    }
    assert b.seen[0][0][-2]["tool_calls"][0]["id"] == "call_0_0"


def test_resume_after_a_finished_call_does_not_repeat_it() -> None:
    calls: list[int] = []

    def count(args: _Count, _ctx: ToolContext) -> str:
        calls.append(args.n)
        return f"counted {len(calls)}"

    registry = default_registry()
    registry.register(Tool("count", "Counts its invocations.", _Count, count))
    script = backend(
        {
            "steps": [
                {"call": "count"},
                {"call": "count", "args": {"n": 2}},
                {"say": "{last_result}"},
            ]
        }
    )
    first = Recorder()

    def die_after_first_result() -> None:
        if len(calls) == 1 and not first.checkpoints[-1]["pending"]:
            raise Cancelled("worker died")

    with pytest.raises(Cancelled):
        run_loop(
            ports(script, first, registry, die_after_first_result),
            CONTEXT,
            turn(),
            ctx({"count"}),
            5,
        )
    first.sink.close()
    assert calls == [1]
    second = Recorder()
    answer = run_loop(
        ports(script, second, registry),
        CONTEXT,
        turn(),
        ctx({"count"}),
        5,
        resume=Checkpoint.from_json(first.checkpoints[-1]),
    )
    second.sink.close()
    assert calls == [1, 2]
    assert answer == "counted 2"
    assert kinds(second.events) == [("call", "call_1_0", "count"), ("result", "call_1_0", "count")]


def test_step_limit() -> None:
    rec = Recorder()
    b = RecordingBackend(backend({"steps": [{"call": "clock"}] * 5 + [{"say": "never"}]}))
    with pytest.raises(StepLimitExceeded) as info:
        run_loop(ports(b, rec), CONTEXT, turn(), ctx({"clock"}), max_steps=3)
    rec.sink.close()
    assert info.value.code == "turn.step_limit"
    assert isinstance(info.value, ChazError)
    assert len(b.seen) == 3
    assert [e.call_id for e in rec.events if isinstance(e, ToolCallEvent)] == [
        "call_0_0",
        "call_1_0",
        "call_2_0",
    ]


def test_step_limit_counts_the_resumed_steps() -> None:
    rec = Recorder()
    b = RecordingBackend(backend({"steps": [{"call": "clock"}] * 5}))
    with pytest.raises(StepLimitExceeded):
        run_loop(
            ports(b, rec), CONTEXT, turn(), ctx({"clock"}), max_steps=3, resume=Checkpoint(steps=3)
        )
    rec.sink.close()
    assert b.seen == []


def test_stop_check_stops_at_a_step_boundary() -> None:
    rec = Recorder()
    steps: list[int] = []

    def stop() -> None:
        if steps:
            raise Cancelled("stop requested")
        steps.append(1)

    b = RecordingBackend(backend({"steps": [{"call": "clock"}, {"say": "x"}]}))
    with pytest.raises(Cancelled):
        run_loop(ports(b, rec, stop=stop), CONTEXT, turn(), ctx({"clock"}), max_steps=5)
    rec.sink.close()
    assert len(b.seen) == 1
    assert rec.events == []  # stopped before the tool ran


def test_event_sink_keeps_order_and_surfaces_writer_failures() -> None:
    got: list[RuntimeEvent] = []

    def write(event: RuntimeEvent) -> None:
        if event.call_id == "boom":
            raise OSError("disk full")
        got.append(event)

    sink = EventSink(write)
    for i in range(200):
        sink.emit(ToolCallEvent(str(i), "t", "{}"))
    sink.emit(ToolCallEvent("boom", "t", "{}"))
    sink.emit(ToolCallEvent("after", "t", "{}"))
    with pytest.raises(OSError):
        sink.close()
    assert [e.call_id for e in got] == [str(i) for i in range(200)]
    with pytest.raises(OSError):
        sink.emit(ToolCallEvent("late", "t", "{}"))


# -- the model's context -------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entry(seq: int, type: EntryType, sender: str, content: str) -> Entry:
    return Entry(
        id=f"e{seq}",
        session_id="sess1",
        seq=seq,
        type=type,
        sender=sender,
        content=content,
        created_at=T0,
    )


def test_context_keeps_only_messages_directives_and_summaries() -> None:
    entries = [
        entry(1, EntryType.MESSAGE, "user:alice", "hello"),
        entry(2, EntryType.ACK, "system:worker", "working"),
        entry(3, EntryType.TOOL_CALL, "agent:me", '{"name": "echo"}'),
        entry(4, EntryType.TOOL_RESULT, "agent:me", "echoed"),
        entry(5, EntryType.MESSAGE, "agent:me", "hi alice"),
        entry(6, EntryType.ERROR, "system:worker", "oops"),
        entry(7, EntryType.DIRECTIVE, "agent:planner", "do X"),
        entry(8, EntryType.APPROVAL_REQUEST, "agent:me", "may I?"),
        entry(9, EntryType.APPROVAL_DECISION, "user:alice", "yes"),
        entry(10, EntryType.MESSAGE, "agent:planner", "psst"),
    ]
    assert build_context("SYS", entries, "me") == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "hello", "name": "user_alice"},
        {"role": "assistant", "content": "hi alice"},
        {"role": "user", "content": "do X"},
        {"role": "user", "content": "psst", "name": "agent_planner"},
    ]


def test_context_starts_at_the_latest_summary() -> None:
    entries = [
        entry(1, EntryType.MESSAGE, "user:alice", "old"),
        entry(2, EntryType.SUMMARY, "system:compact", "first summary"),
        entry(3, EntryType.MESSAGE, "agent:me", "older reply"),
        entry(4, EntryType.SUMMARY, "system:compact", "second summary"),
        entry(5, EntryType.MESSAGE, "user:alice", "new"),
        entry(6, EntryType.TOOL_RESULT, "agent:me", "audit only"),
    ]
    messages = build_context("SYS", entries, "me")
    assert [m["role"] for m in messages] == ["system", "system", "user"]
    assert "second summary" in messages[1]["content"]
    assert "first summary" not in repr(messages)
    assert "old" not in repr(messages)
    assert messages[2]["content"] == "new"


def test_context_roles_depend_on_who_the_agent_is() -> None:
    entries = [entry(1, EntryType.MESSAGE, "agent:me", "mine")]
    assert build_context("S", entries, "me")[1]["role"] == "assistant"
    other = build_context("S", entries, "someone")[1]
    assert other["role"] == "user" and other["name"] == "agent_me"
    assert build_context("S", [], "me") == [{"role": "system", "content": "S"}]


# -- the approval gate (docs/approvals.md) ----------------------------------------


def _counting_registry(calls: list[int]) -> ToolRegistry:
    def count(args: _Count, _ctx: ToolContext) -> str:
        calls.append(args.n)
        return f"counted {len(calls)}"

    registry = default_registry()
    registry.register(Tool("count", "Counts its invocations.", _Count, count))
    return registry


def test_a_call_held_for_approval_suspends_then_runs_once_or_is_refused() -> None:
    script = backend(
        {
            "steps": [
                {"call": "echo", "args": {"text": "free"}},
                {"call": "count", "args": {"n": 1}},
                {"say": "after: {last_result}"},
            ]
        }
    )
    decision: dict[str, Verdict | None] = {"call_1_0": None}

    def gate(call: ToolCallRequest) -> Verdict:
        if call.name != "count":
            return RUN
        found = decision.get(call.id)
        if found is None:
            raise Suspend(call)
        return found

    def attempt(rec: Recorder, resume: Checkpoint | None, calls: list[int]) -> str:
        p = ports(script, rec, _counting_registry(calls))
        p.approve = gate
        try:
            return run_loop(p, CONTEXT, turn(), ctx({"echo", "count"}), 5, resume=resume)
        finally:
            rec.sink.close()

    calls: list[int] = []
    first = Recorder()
    with pytest.raises(Suspend):
        attempt(first, None, calls)
    saved = first.checkpoints[-1]
    assert calls == [] and saved["awaiting"] == "call_1_0" and saved["suspensions"] == 1
    assert [p["id"] for p in saved["pending"]] == ["call_1_0"]
    # The free call ran; the held one was not even announced.
    assert kinds(first.events) == [("call", "call_0_0", "echo"), ("result", "call_0_0", "echo")]

    # Still undecided: it suspends again, counted once.
    again = Recorder()
    with pytest.raises(Suspend):
        attempt(again, Checkpoint.from_json(saved), calls)
    assert calls == [] and not again.checkpoints and not again.events

    # Approved: the call runs once, and the awaiting mark is gone before it runs.
    decision["call_1_0"] = RUN
    approved = Recorder()
    assert attempt(approved, Checkpoint.from_json(saved), calls) == "after: counted 1"
    assert calls == [1]
    assert approved.checkpoints[0]["awaiting"] is None
    assert approved.checkpoints[0]["pending"] == saved["pending"]

    # Denied: the model reads the refusal; the tool never runs.
    refusal = json.dumps({"error": {"code": "approval.denied", "message": "denied by a person"}})
    decision["call_1_0"] = Verdict(False, refusal)
    denied = Recorder()
    assert attempt(denied, Checkpoint.from_json(saved), calls) == f"after: {refusal}"
    assert calls == [1]
    result = denied.events[-1]
    assert isinstance(result, ToolResultEvent) and result.is_error


# -- a hand-back (docs/operations.md#termination) ------------------------------------


def test_a_hand_back_between_calls_leaves_the_rest_to_the_resume_which_runs_them() -> None:
    calls: list[int] = []
    token = CancelToken()

    def count(args: _Count, _ctx: ToolContext) -> str:
        calls.append(args.n)
        # The worker's grace ran out while the first call ran: it finishes.
        token.hand_back()
        return f"counted {args.n}"

    registry = default_registry()
    registry.register(Tool("count", "Counts its invocations.", _Count, count))
    script = backend(
        {
            "steps": [
                {
                    "calls": [
                        {"call": "count", "args": {"n": 1}},
                        {"call": "count", "args": {"n": 2}},
                    ]
                },
                {"say": "{last_result}"},
            ]
        }
    )
    first = Recorder()
    with pytest.raises(HandedBack):
        run_loop(
            ports(script, first, registry, token.raise_if_set), CONTEXT, turn(), ctx({"count"}), 5
        )
    first.sink.close()
    assert calls == [1]
    saved = first.checkpoints[-1]
    assert saved["unstarted"] is True and [p["id"] for p in saved["pending"]] == ["call_0_1"]

    second = Recorder()
    answer = run_loop(
        ports(script, second, registry),
        CONTEXT,
        turn(),
        ctx({"count"}),
        5,
        resume=Checkpoint.from_json(saved),
    )
    second.sink.close()
    # The call that never started runs now, once; the finished one is not repeated.
    assert calls == [1, 2] and answer == "counted 2"
    assert kinds(second.events) == [("call", "call_0_1", "count"), ("result", "call_0_1", "count")]
    # Cleared before the call ran: a crash inside it would make it interrupted.
    assert second.checkpoints[0]["unstarted"] is False
    assert second.checkpoints[0]["pending"] == saved["pending"]


def test_a_tool_cut_by_a_hand_back_stays_pending_and_is_not_its_outcome() -> None:
    token = CancelToken()
    registry = default_registry()
    script = backend({"steps": [{"call": "sleep", "args": {"seconds": 300}}, {"say": "x"}]})
    rec = Recorder()
    c = dataclasses.replace(ctx({"sleep"}), cancel=token)
    # Handed back already: the sleep's wait on the token returns at once (only
    # the tool sees the token here; the loop's step checks do not).
    token.hand_back()
    with pytest.raises(HandedBack):
        run_loop(ports(script, rec, registry), CONTEXT, turn(), c, 5)
    rec.sink.close()
    # Started, so on resume it is reported interrupted (as after a crash), never re-run.
    assert kinds(rec.events) == [("call", "call_0_0", "sleep")]
    assert rec.checkpoints[-1]["unstarted"] is False
    assert [p["id"] for p in rec.checkpoints[-1]["pending"]] == ["call_0_0"]


def test_checkpoint_counts_decisions_and_hand_backs_and_round_trips() -> None:
    cp = Checkpoint.from_json({"suspensions": 1, "handbacks": 2})
    assert (cp.suspensions, cp.handbacks) == (1, 2)
    # Older checkpoints (no such fields) read as none of either.
    old = Checkpoint.from_json({"steps": 1})
    assert (old.suspensions, old.handbacks) == (0, 0)
    assert Checkpoint.from_json(cp.to_json()) == cp


def test_each_step_asks_for_what_the_token_budget_has_left_and_none_left_ends_before_it() -> None:
    b = RecordingBackend(
        backend(
            {
                "steps": [
                    {"call": "echo", "args": {"text": "a"}, "usage": {"input": 30, "output": 10}},
                    {"call": "echo", "args": {"text": "b"}, "usage": {"input": 45, "output": 5}},
                    {"say": "never asked"},
                ]
            }
        )
    )
    rec = Recorder()
    loop_ports = dataclasses.replace(ports(b, rec), budget=Budget(Limits(max_tokens_per_turn=130)))
    with pytest.raises(TokenBudgetExceeded) as ended:
        run_loop(loop_ports, CONTEXT, turn(), ctx({"echo"}), max_steps=5)
    # 130 at first; then 130 - 40 less the 30-token prompt; then 130 - 90
    # leaves 40, less than the last prompt's 45: no third call.
    assert [t.max_tokens for _, _, t in b.seen] == [130, 60]
    assert ended.value.details["prompt"] == 45 and ended.value.details["tokens"] == 90


def test_the_lazily_registered_names_are_each_modules_tools() -> None:
    from importlib import import_module

    from chaz.tools import MODULES

    for module, names in MODULES.items():
        assert tuple(t.name for t in import_module(module).TOOLS) == names, module


def test_a_lazily_registered_tool_loads_its_module_on_first_look_up() -> None:
    loads: list[str] = []

    def load() -> list[Tool]:
        loads.append("x")
        return [Tool("one", "One.", _Count, _crashes), Tool("two", "Two.", _Count, _crashes)]

    r = ToolRegistry()
    r.register_lazily(["one", "two"], load)
    assert r.names() == ["one", "two"] and r.unknown(["one", "three"]) == ["three"]
    assert loads == []
    assert [s.name for s in r.specs(["two", "one"])] == ["two", "one"]
    assert [s.name for s in r.specs(["one"])] == ["one"] and loads == ["x"]
    with pytest.raises(ValueError, match="registered twice"):
        r.register_lazily(["one"], load)
