"""The tracing rules (docs/operations.md#tracing) on the SDK's in-memory exporter:
when tracing is on, how a context travels (carrier, job row, headers), which
admissions start a linked trace, what the model and tool spans say, and
that log records carry the ids. The real export to an OTLP receiver is
tests/acceptance/test_tracing.py's."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pydantic
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chaz import tracing
from chaz.runtime.backends.base import (
    ModelResponse,
    TokenCount,
    ToolCallRequest,
    TurnContext,
)
from chaz.runtime.cancel import CancelToken
from chaz.runtime.registry import Tool, ToolContext, ToolOutcome, ToolRegistry
from chaz.runtime.spans import TracedBackend, TracedTools, tool_attributes


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.reset_for_tests(provider)
    try:
        yield exporter
    finally:
        tracing.reset_for_tests(reread=True)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": " "}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, False),
    ],
)
def test_tracing_is_on_only_when_an_exporter_is_named(env: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(env) is wanted


def test_off_every_helper_does_nothing_and_the_sdk_is_never_imported() -> None:
    # A fresh process with no OTEL_* variable: a producer's post path and a
    # worker's turn path import neither the tracing SDK nor its exporters
    # (the free-when-off rule). redis-py imports the SDK's metrics and
    # resources, and the API, for its own observability settings when they
    # are installed: that is redis's, at import, on no path of a turn.
    code = (
        "import sys\n"
        "from chaz import tracing\n"
        "import chaz, workers.tasks, chaz.usecases.turns, chaz.runtime.spans\n"
        "assert tracing.on() is False\n"
        "assert tracing.carrier() is None and tracing.job_carrier('s') is None\n"
        "with tracing.span('x') as s: assert s is None\n"
        "mine = ('opentelemetry.sdk.trace', 'opentelemetry.exporter')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(mine))\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_exporter_leaves_tracing_off_rather_than_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin-of-my-own")
    tracing.reset_for_tests(reread=True)
    try:
        assert tracing.on() is False
        assert tracing.carrier() is None
    finally:
        tracing.reset_for_tests(reread=True)


def test_a_carrier_names_the_current_span_and_a_child_joins_it(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.span("chaz.post") as post:
        text = tracing.job_carrier("s1")
    assert text is not None and len(text) <= tracing.MAX_CARRIER
    ctx = post.get_span_context()
    assert json.loads(text)["traceparent"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
    # Elsewhere (another worker, after a SIGKILL): a turn joins the row's trace.
    with tracing.span("chaz.turn", parent=text, turn=True):
        pass
    [turn] = named(spans, "chaz.turn")
    assert turn.context.trace_id == ctx.trace_id
    assert turn.parent is not None and turn.parent.span_id == ctx.span_id


def test_a_job_admitted_inside_a_turn_starts_a_linked_trace(spans: InMemorySpanExporter) -> None:
    with tracing.span("chaz.turn", turn=True), tracing.span("chaz.tool") as tool:
        text = tracing.job_carrier("child")
    here = tool.get_span_context()
    [root] = named(spans, "chaz.handoff")
    assert root.parent is None
    assert root.context.trace_id != here.trace_id
    assert [link.context.span_id for link in root.links] == [here.span_id]
    assert root.attributes == {"chaz.session_id": "child"}
    with tracing.span("chaz.turn", parent=text, turn=True):
        pass
    child = [s for s in named(spans, "chaz.turn") if s.context.trace_id == root.context.trace_id]
    assert len(child) == 1 and child[0].parent.span_id == root.context.span_id  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "carrier",
    [
        "not json",
        "[1, 2]",
        json.dumps({"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}),
        json.dumps({"traceparent": "garbage"}),
        json.dumps({"tracestate": "a=b"}),
        json.dumps({"traceparent": 7}),
    ],
)
def test_a_bad_carrier_starts_a_new_trace(spans: InMemorySpanExporter, carrier: str) -> None:
    assert tracing.from_carrier(carrier) is None
    with tracing.span("chaz.turn", parent=carrier):
        pass
    [turn] = named(spans, "chaz.turn")
    assert turn.parent is None


def test_headers_join_case_insensitively_and_bad_ones_are_ignored(
    spans: InMemorySpanExporter,
) -> None:
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with tracing.joined({"Traceparent": f"00-{trace_id}-{span_id}-01"}), tracing.span("a"):
        pass
    with tracing.joined({"traceparent": "00-nonsense"}), tracing.span("b"):
        pass
    [a] = named(spans, "a")
    [b] = named(spans, "b")
    assert f"{a.context.trace_id:032x}" == trace_id and a.parent.span_id == int(span_id, 16)  # type: ignore[union-attr]
    assert b.parent is None


def test_an_oversized_tracestate_is_not_kept_in_the_row(spans: InMemorySpanExporter) -> None:
    carrier = {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": ",".join(f"k{i}=" + "v" * 200 for i in range(3)),
    }
    with tracing.joined(carrier):
        text = tracing.job_carrier("s")
    # Too long for the column: the job starts a trace of its own rather than fail.
    assert text is None or len(text) <= tracing.MAX_CARRIER


def test_log_records_carry_the_ids_of_their_span(spans: InMemorySpanExporter) -> None:
    with tracing.span("chaz.turn") as span:
        record = logging.getLogger("t").makeRecord("t", logging.INFO, "f", 1, "m", (), None)
    ctx = span.get_span_context()
    assert record.trace_id == f"{ctx.trace_id:032x}"  # type: ignore[attr-defined]
    assert record.span_id == f"{ctx.span_id:016x}"  # type: ignore[attr-defined]
    outside = logging.getLogger("t").makeRecord("t", logging.INFO, "f", 1, "m", (), None)
    assert outside.trace_id == "0" * 32  # type: ignore[attr-defined]
    formatter = logging.Formatter("%(message)s" + tracing.LOG_FORMAT_IDS)
    assert f"trace_id={ctx.trace_id:032x}" in formatter.format(record)


class _Backend:
    stream = True

    def complete(self, messages, tools, turn):
        return ModelResponse(
            tool_calls=[ToolCallRequest(id="c1", name="echo")], usage=TokenCount(input=7, output=3)
        )


def test_a_model_call_span_says_model_tokens_and_streaming(spans: InMemorySpanExporter) -> None:
    backend = TracedBackend(_Backend(), "openai:gpt-x")
    turn = TurnContext(session_id="s", job_id="j", trigger_content="hi", step=2)
    backend.complete([{"role": "user", "content": "hi"}], [], turn)
    [model] = named(spans, "chaz.model")
    assert model.attributes is not None
    assert dict(model.attributes) == {
        "gen_ai.request.model": "openai:gpt-x",
        "chaz.model.streamed": True,
        "chaz.model.step": 2,
        "chaz.model.messages": 1,
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 3,
        "chaz.model.tool_calls": 1,
    }


class _Sourced(ToolRegistry):
    def source(self, name: str) -> str | None:
        return "mcp:time" if name.startswith("time.") else None


def test_a_tool_span_names_its_source_and_server() -> None:
    assert tool_attributes(ToolRegistry(), "echo", "c1") == {
        "chaz.tool.name": "echo",
        "chaz.tool.call_id": "c1",
    }
    assert tool_attributes(_Sourced(), "time.convert_time", "c2") == {
        "chaz.tool.name": "time.convert_time",
        "chaz.tool.call_id": "c2",
        "chaz.tool.source": "mcp:time",
        "chaz.tool.server": "time",
    }


def test_a_tool_call_span_records_an_error_outcome(spans: InMemorySpanExporter) -> None:
    from chaz.tools import default_registry

    traced = TracedTools(default_registry())
    assert traced.names() == default_registry().names()
    ctx = ToolContext(
        session_id="s",
        job_id="j",
        agent_id="a",
        tree_id="t",
        call_depth=0,
        allowed_tools=frozenset({"echo"}),
    )
    out = traced.invoke(ToolCallRequest(id="c1", name="echo", arguments="{not json"), ctx)
    assert isinstance(out, ToolOutcome) and out.is_error
    [tool] = named(spans, "chaz.tool")
    assert tool.attributes is not None and tool.attributes["chaz.tool.is_error"] is True


class _Source:
    """A tool source (as an MCP server is) that records the cancel it was handed."""

    def __init__(self) -> None:
        self.cancels: list[object] = []

    def owns(self, name: str) -> bool:
        return name.startswith("srv.")

    def tool(self, name: str, cancel: object = None) -> Tool | None:
        self.cancels.append(cancel)
        return Tool(
            name=name,
            description="a source's tool",
            args=pydantic.BaseModel,
            run=lambda args, ctx: "ok",
            schema={"type": "object", "properties": {}},
        )


def test_a_traced_registry_offers_a_sources_tools_with_the_turns_cancel() -> None:
    # The loop asks for specs with the turn's cancel (an MCP server may have
    # to start); the traced registry must pass both through, not drop either.
    source = _Source()
    traced = TracedTools(ToolRegistry(sources=[source]))
    cancel = CancelToken()
    [spec] = traced.specs(["srv.echo"], cancel)
    assert spec.name == "srv.echo"
    assert source.cancels == [cancel]
    assert traced.unknown(["srv.echo", "nope"]) == ["nope"]


class _App:
    def __init__(self) -> None:
        self.sent: list[dict[str, object]] = []

    def send_task(self, name: str, **options: object) -> None:
        self.sent.append(options)


def test_a_wake_up_carries_its_senders_context_in_the_message_headers(
    spans: InMemorySpanExporter,
) -> None:
    from celery.app.task import Context

    from chaz.plumbing.dispatch import Dispatcher, Wake
    from chaz.settings import Settings
    from workers.tasks import _trace_headers

    dispatcher = Dispatcher(Settings(_env_file=None))
    app = _App()
    dispatcher._app = app
    dispatcher.send_wake("s", "j", Wake.RECONCILE)  # outside a span: no headers
    with tracing.span("chaz.admission") as span:
        dispatcher.send_wake("s", "j", Wake.ADMITTED)
    assert "headers" not in app.sent[0]
    headers = app.sent[1]["headers"]
    assert isinstance(headers, dict)
    ctx = span.get_span_context()
    assert headers["traceparent"].startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
    # What the worker reads back: Celery makes a custom header a request attribute.
    assert _trace_headers(Context(headers)) == headers
    assert _trace_headers(Context({"headers": headers})) == headers
    assert _trace_headers(Context({"traceparent": 5})) == {}


def test_an_approval_wait_is_a_span_from_the_request_to_its_decision(
    spans: InMemorySpanExporter,
) -> None:
    from datetime import UTC, datetime, timedelta

    from chaz.domain.approvals import Approval, ApprovalState
    from chaz.usecases.turns.approval import _traced_wait

    asked = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    found = Approval(
        request_id="r",
        job_id="j",
        session_id="s",
        tool="echo",
        call_id="c1",
        arguments={},
        state=ApprovalState.APPROVED,
        decided_by="user:bob",
        created_at=asked,
        expires_at=asked + timedelta(hours=1),
        decided_at=asked + timedelta(seconds=90),
    )
    with tracing.span("chaz.turn"):
        _traced_wait(found)
    [wait] = named(spans, "chaz.approval")
    assert wait.end_time is not None and wait.start_time is not None
    assert wait.end_time - wait.start_time == 90 * 10**9
    assert wait.attributes is not None and wait.attributes["chaz.approval.state"] == "approved"
    assert wait.attributes["chaz.approval.decided_by"] == "user:bob"
    [turn] = named(spans, "chaz.turn")
    assert wait.parent is not None and wait.parent.span_id == turn.context.span_id
