"""The openai backend streaming (``stream: true``) against a real fake server,
with partials on a real Redis, and a cancel cutting the request on the wire
(issue 13 items 3 and 4, docs/runtime.md#streaming).

Each cancel comes while the server holds its answer far longer than the test
allows: a request that ended, and a server that saw the client hang up, were
cut. Nothing rests on a tight wall-time bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis

from chaz.coord.partials import Partial, PartialPublisher, StreamListener
from chaz.domain.agents import AgentSpec
from chaz.errors import Cancelled, ConfigError, HandedBack
from chaz.runtime.backends.base import ModelResponse, TurnContext
from chaz.runtime.backends.openai_backend import OpenAIBackend
from chaz.runtime.cancel import CancelToken
from chaz.settings import Settings
from tests.support.fake_openai import FakeOpenAI

T = TypeVar("T")

#: What the server would hold its answer for without the cancel.
LONG = 30.0
#: How long anything here may take on a loaded machine.
WAIT = 10.0
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]

_sids = iter(range(10**6))


def _until(predicate: Callable[[], T], what: str) -> T:
    deadline = time.monotonic() + WAIT
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


class _Run:
    """One streamed turn step on a real backend, and a listener on its partials."""

    def __init__(self, srv: FakeOpenAI, client: redis.Redis, *, stream: bool = True) -> None:
        self.turn = TurnContext(
            session_id=f"stream-s{next(_sids)}-{time.time_ns()}",
            job_id="j1",
            trigger_content="hi",
        )
        self.cancel = CancelToken()
        self.backend = OpenAIBackend(
            "m",
            base_url=srv.base_url,
            api_key="k",
            timeout=LONG * 2,
            max_retries=2,
            cancel=self.cancel,
            stream=stream,
            partials=PartialPublisher(client, self.turn.session_id, self.turn.job_id),
        )
        self.listener = StreamListener(client, self.turn.session_id)
        self.heard: list[Partial] = []
        self.outcome: list[ModelResponse | BaseException] = []
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        def call() -> None:
            try:
                self.outcome.append(self.backend.complete(MESSAGES, [], self.turn))
            except BaseException as exc:
                self.outcome.append(exc)

        self._thread = threading.Thread(target=call, daemon=True)
        self._thread.start()

    def result(self) -> ModelResponse | BaseException:
        assert self._thread is not None
        self._thread.join(WAIT)
        assert self.outcome, "the model call did not end"
        return self.outcome[0]

    def next_partial(self) -> Partial:
        heard = _until(lambda: self.listener.next(0.1), "a partial")
        assert heard is not None
        assert heard[0] == "partial"
        partial = Partial.model_validate_json(heard[1])
        self.heard.append(partial)
        return partial

    def close(self) -> None:
        self.listener.close()
        self.backend.close()


def test_a_streamed_answer_is_published_as_it_arrives_and_answered_whole(
    srv: FakeOpenAI, client: redis.Redis
) -> None:
    srv.push_stream(["Hel", "lo, ", "wor", "ld"])
    run = _Run(srv, client)
    try:
        run.start()
        answer = run.result()
        assert isinstance(answer, ModelResponse) and answer.text == "Hello, world"
        assert srv.requests[0]["stream"] is True
        text = ""
        while text != "Hello, world":
            partial = run.next_partial()
            assert partial.session_id == run.turn.session_id and partial.job_id == "j1"
            text += partial.text
        assert [p.seq for p in run.heard] == list(range(1, len(run.heard) + 1))
    finally:
        run.close()


def test_a_streamed_step_reports_the_usage_chunk_it_asks_for(
    srv: FakeOpenAI, client: redis.Redis
) -> None:
    srv.push_stream(["a", "b"], usage=(120, 7))
    run = _Run(srv, client)
    try:
        run.start()
        answer = run.result()
        assert isinstance(answer, ModelResponse) and answer.text == "ab"
        assert srv.requests[0]["stream_options"] == {"include_usage": True}
        assert answer.usage is not None and (answer.usage.input, answer.usage.output) == (120, 7)
    finally:
        run.close()


def test_a_streamed_tool_call_is_assembled(srv: FakeOpenAI, client: redis.Redis) -> None:
    srv.push_tool_call("clock", {"tz": "UTC"}, id="call_1")
    run = _Run(srv, client)
    try:
        run.start()
        answer = run.result()
        assert isinstance(answer, ModelResponse) and answer.text is None
        [call] = answer.tool_calls
        assert (call.id, call.name, call.arguments) == ("call_1", "clock", '{"tz": "UTC"}')
    finally:
        run.close()


def test_a_cancel_during_a_stream_cuts_the_connection(srv: FakeOpenAI, client: redis.Redis) -> None:
    # The second chunk would come only after LONG seconds.
    srv.push_stream(["first ", "never sent"], pause=LONG)
    run = _Run(srv, client)
    try:
        run.start()
        assert run.next_partial().text == "first "
        run.cancel.set()
        assert isinstance(run.result(), Cancelled)
        # The server saw the client hang up in its pause: the rest was never sent.
        _until(lambda: srv.hangups == 1, "the server to see the hang-up")
        # The client's retries went nowhere: one request only.
        assert len(srv.requests) == 1
    finally:
        run.close()


def test_a_cancel_cuts_a_request_that_is_not_streamed(srv: FakeOpenAI, client: redis.Redis) -> None:
    srv.push_text("an answer nobody reads", delay=LONG)
    run = _Run(srv, client, stream=False)
    try:
        run.start()
        _until(lambda: srv.received, "the request")
        run.cancel.set()
        assert isinstance(run.result(), Cancelled)
        _until(lambda: srv.hangups == 1, "the server to see the hang-up")
        assert len(srv.requests) == 1
    finally:
        run.close()


def test_a_hand_back_cuts_the_request_and_is_not_a_cancel(
    srv: FakeOpenAI, client: redis.Redis
) -> None:
    # A worker whose shutdown grace ran out (docs/operations.md#termination):
    # the request is cut as on a cancel, and the next worker asks again.
    srv.push_text("an answer nobody reads", delay=LONG)
    run = _Run(srv, client, stream=False)
    try:
        run.start()
        _until(lambda: srv.received, "the request")
        run.cancel.hand_back()
        assert isinstance(run.result(), HandedBack)
        _until(lambda: srv.hangups == 1, "the server to see the hang-up")
        assert len(srv.requests) == 1
    finally:
        run.close()


def test_the_stream_option_is_a_boolean() -> None:
    spec = AgentSpec(id="g", model="openai:m", options={"base_url": "http://x/v1", "stream": 1})
    with pytest.raises(ConfigError, match="stream must be true or false"):
        OpenAIBackend.from_spec(spec, Settings(_env_file=None))
    spec = AgentSpec(id="g", model="openai:m", options={"base_url": "http://x/v1", "stream": True})
    backend = OpenAIBackend.from_spec(spec, Settings(_env_file=None))
    assert backend.stream is True and "stream" not in backend.options
