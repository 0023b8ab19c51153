"""Issue 24's traces (docs/operations.md#tracing), exported by real workers, a
real ``chaz serve`` and this process's producer to a real OTLP/HTTP receiver
on 127.0.0.1 (tests/support/otlp.py): one post that spawns a child which
calls a tool is one connected trace with the child's turn linked, and a
turn resumed after its worker's SIGKILL continues its post's trace."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

import chaz
from chaz import tracing
from chaz.domain.entries import EntryType
from tests.support.otlp import Receiver, Span, receiver
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]
pytestmark = pytest.mark.tracing

PARENT = chaz.AgentSpec(
    id="tr-parent",
    tools=["spawn_agent", "echo"],
    script=[
        {
            "steps": [
                {"call": "spawn_agent", "args": {"agent_id": "tr-child", "task": "{input}"}},
                {"say": "parent got: {last_result}"},
            ]
        }
    ],
)
CHILD = chaz.AgentSpec(
    id="tr-child",
    tools=["echo"],
    script=[
        {
            "steps": [
                {"call": "echo", "args": {"text": "{input}"}},
                {"say": "child echoed {last_result}"},
            ]
        }
    ],
)
#: Blocks in its second model step until the test opens its gate.
GATED = chaz.AgentSpec(
    id="tr-gated",
    tools=["echo"],
    script=[
        {
            "steps": [
                {"call": "echo", "args": {"text": "before"}},
                {"wait": "tr-{session_id}", "timeout": 300},
                {"say": "after {last_result}"},
            ]
        }
    ],
)
#: How long spans may take to reach the receiver from a loaded machine's processes.
EXPORTED = 60


@pytest.fixture(scope="module")
def otlp() -> Iterator[Receiver]:
    """The receiver, and the standard variables that point every process the
    module starts (workers, ``chaz serve``) and this one at it."""
    with receiver() as found, pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_TRACES_EXPORTER", "otlp")
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.endpoint)
        env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        env.setenv("OTEL_SERVICE_NAME", "chaz-test")
        # Spans leave a process a tenth of a second after they end.
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        tracing.reset_for_tests(reread=True)
        assert tracing.on()
        try:
            yield found
        finally:
            tracing.flush()
            tracing.reset_for_tests(reread=True)


@pytest.fixture(scope="module")
def fleet(otlp: Receiver, module_stack: Stack) -> Stack:
    """One worker of two turn threads, started with tracing on."""
    module_stack.workers(1, concurrency=2)
    module_stack.client.agents.put(PARENT)
    module_stack.client.agents.put(CHILD)
    return module_stack


def _by_id(spans: list[Span]) -> dict[str, Span]:
    return {s.span_id: s for s in spans}


def _root(span: Span, index: dict[str, Span]) -> Span:
    """The span's root, every parent on the way received (the trace is connected)."""
    seen = span
    while seen.parent_id:
        assert seen.parent_id in index, f"{seen.name}'s parent never arrived"
        seen = index[seen.parent_id]
    return seen


def _under(span: Span, ancestor: Span, index: dict[str, Span]) -> bool:
    seen = span
    while seen.parent_id and seen.parent_id in index:
        seen = index[seen.parent_id]
        if seen.span_id == ancestor.span_id:
            return True
    return False


def _turn(spans: list[Span], job_id: str, start: int = 1) -> Span | None:
    return next(
        (
            s
            for s in spans
            if s.name == "chaz.turn"
            and s.attributes.get("chaz.job_id") == job_id
            and s.attributes.get("chaz.job.start") == start
        ),
        None,
    )


def test_a_post_that_spawns_a_child_which_calls_a_tool_is_one_connected_trace(
    fleet: Stack, producer: chaz.Client, otlp: Receiver
) -> None:
    s = producer.sessions.create(agent_id="tr-parent")
    posted = producer.sessions.post(s.id, "ping", sender="user:alice")
    reply = producer.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    assert reply.content == "parent got: child echoed ping", fleet.logs()
    parent_job = posted.job_id or ""
    [child_job] = [
        j
        for j in producer.jobs.list(limit=1000, newest_first=True)
        if j.parent_job_id == parent_job
    ]
    tracing.flush()  # this process's post span

    def complete(spans: list[Span]) -> bool:
        return _turn(spans, parent_job) is not None and _turn(spans, child_job.id) is not None

    spans = otlp.wait(complete, EXPORTED, "both turns' spans")
    index = _by_id(spans)
    parent_turn, child_turn = _turn(spans, parent_job), _turn(spans, child_job.id)
    assert parent_turn is not None and child_turn is not None

    # The producer's span is the root of the parent's trace (over HTTP, the
    # remote client's; the server's post joined it through traceparent).
    root = _root(parent_turn, index)
    assert root.name == "chaz.post" and root.attributes["chaz.session_id"] == s.id
    trace = root.trace_id
    posts = [x for x in spans if x.trace_id == trace and x.name == "chaz.post"]
    if len(posts) == 2:
        server = next(x for x in posts if x.parent_id)
        assert server.parent_id == root.span_id and root.attributes.get("chaz.remote") is True
    assert any(x.name == "chaz.admission" and x.trace_id == trace for x in spans)
    for name in ("chaz.queue", "chaz.lane", "chaz.reply"):
        assert any(x.name == name and _under(x, parent_turn, index) for x in spans), name

    # The parent's model calls (spawn, then answer) and its tool call.
    models = [x for x in spans if x.name == "chaz.model" and _under(x, parent_turn, index)]
    assert len(models) == 2
    assert all(m.attributes["gen_ai.request.model"] == "scripted" for m in models)
    assert all(m.attributes["chaz.model.streamed"] is False for m in models)
    assert {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} <= set(models[0].attributes)
    [spawn] = [x for x in spans if x.name == "chaz.tool" and _under(x, parent_turn, index)]
    assert spawn.attributes["chaz.tool.name"] == "spawn_agent"
    assert spawn.attributes["chaz.tool.is_error"] is False

    # The child's turn is a trace of its own, linked to the spawn's span.
    assert child_turn.trace_id != trace
    handoff = _root(child_turn, index)
    assert handoff.name == "chaz.handoff"
    # The link names the spawn's admission, inside the spawn's tool call.
    [(linked_trace, linked)] = handoff.links
    assert linked_trace == trace and index[linked].name == "chaz.admission"
    assert _under(index[linked], spawn, index)
    child_models = [x for x in spans if x.name == "chaz.model" and _under(x, child_turn, index)]
    assert len(child_models) == 2
    [echo] = [x for x in spans if x.name == "chaz.tool" and _under(x, child_turn, index)]
    assert echo.attributes["chaz.tool.name"] == "echo"

    # The worker's log lines carry the turn's trace and span ids.
    logs = "".join(p.read_text() for p in fleet.settings.home.glob("worker-*.log"))
    assert f"trace_id={trace} span_id={parent_turn.span_id}" in logs


def test_a_turn_resumed_after_a_sigkill_continues_its_trace(stack: Stack, otlp: Receiver) -> None:
    workers = stack.workers(2, concurrency=1, queues="chaz.turns")
    client = stack.client
    client.agents.put(GATED)
    s = client.sessions.create(agent_id="tr-gated")
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    job_id = posted.job_id or ""

    def echoed() -> bool:
        return any(e.type is EntryType.TOOL_RESULT for e in client.sessions.entries(s.id))

    # The echo ran; the turn now waits in its second model step, at the gate.
    stack.wait_for(echoed, 60, "the echo's result")
    ack = next(e for e in client.sessions.entries(s.id) if e.type is EntryType.ACK)
    victim = next(w for w in workers if w.pid == ack.metadata["pid"])
    victim.kill(signal.SIGKILL)
    stack.open_gate(f"tr-{s.id}")
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=120)
    assert reply.type is EntryType.MESSAGE, f"{reply.content}\n{stack.logs()}"
    job = client.jobs.get(job_id)
    assert job.attempts == 2
    tracing.flush()

    spans = otlp.wait(lambda got: _turn(got, job_id, start=2) is not None, EXPORTED, "the resume")
    index = _by_id(spans)
    resumed = _turn(spans, job_id, start=2)
    assert resumed is not None and resumed.attributes["chaz.job.attempt"] == 2
    [post] = [
        x for x in spans if x.name == "chaz.post" and x.attributes.get("chaz.job_id") == job_id
    ]
    # The same trace, under the same admission span as the first attempt's.
    assert resumed.trace_id == post.trace_id
    assert _root(resumed, index).span_id == post.span_id
    assert index[resumed.parent_id].name == "chaz.admission"
    # The resumed turn's model call (the step the kill cut, asked again) is its child.
    assert any(x.name == "chaz.model" and _under(x, resumed, index) for x in spans)
