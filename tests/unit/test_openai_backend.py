"""OpenAIBackend against a real (fake) OpenAI-compatible HTTP server."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chaz.domain.agents import AgentSpec
from chaz.errors import ConfigError, ModelError
from chaz.runtime.backends.base import TokenCount, ToolSpec, TurnContext
from chaz.runtime.backends.openai_backend import CAP_CEILING, DEFAULT_MODEL, OpenAIBackend
from chaz.settings import Settings
from tests.support.fake_openai import CannedResponse, FakeOpenAI

TURN = TurnContext(session_id="s1", job_id="j1", trigger_content="hello")
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What time is it?"},
]
CLOCK = ToolSpec(
    name="clock",
    description="Current time in a timezone.",
    parameters={
        "type": "object",
        "properties": {"tz": {"type": "string"}},
        "required": ["tz"],
    },
)


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
def _no_ambient_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The client reads OPENAI_* itself; a developer's shell must not leak in.
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def backend(
    srv: FakeOpenAI, *, timeout: float = 5.0, max_retries: int = 0, **options: Any
) -> OpenAIBackend:
    return OpenAIBackend(
        "test-model",
        base_url=srv.base_url,
        api_key="sk-test",
        timeout=timeout,
        max_retries=max_retries,
        options=options,
    )


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


# -- answers -----------------------------------------------------------------


def test_text_answer(srv: FakeOpenAI) -> None:
    srv.push_text("It is noon.")

    response = backend(srv).complete(MESSAGES, [], TURN)

    assert response.text == "It is noon."
    assert response.tool_calls == []
    # The response's usage, as the server reported it (the fake: one and one).
    assert response.usage == TokenCount(input=1, output=1)


def test_tool_call_is_mapped_with_raw_arguments(srv: FakeOpenAI) -> None:
    srv.push_tool_call("clock", '{"tz": "UTC"}', id="call_abc")

    response = backend(srv).complete(MESSAGES, [CLOCK], TURN)

    assert response.text is None
    assert len(response.tool_calls) == 1
    call = response.tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_abc", "clock", '{"tz": "UTC"}')


def test_several_tool_calls_keep_order_and_malformed_arguments_verbatim(srv: FakeOpenAI) -> None:
    srv.push_tool_calls([("clock", {"tz": "CET"}, "c1"), ("clock", "{not json", "c2")])

    response = backend(srv).complete(MESSAGES, [CLOCK], TURN)

    assert [(c.id, json.loads(c.arguments)) for c in response.tool_calls[:1]] == [
        ("c1", {"tz": "CET"})
    ]
    assert response.tool_calls[1].arguments == "{not json"


# -- what is sent ------------------------------------------------------------


def test_request_carries_model_messages_and_tool_schema(srv: FakeOpenAI) -> None:
    srv.push_text("ok")

    backend(srv).complete(MESSAGES, [CLOCK], TURN)

    (sent,) = srv.requests
    assert sent["model"] == "test-model"
    assert sent["messages"] == MESSAGES
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "clock",
                "description": "Current time in a timezone.",
                "parameters": CLOCK.parameters,
            },
        }
    ]
    assert srv.received[0].headers["authorization"] == "Bearer sk-test"


def test_tool_history_messages_pass_through_unchanged(srv: FakeOpenAI) -> None:
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    srv.push_text("noon")

    backend(srv).complete(history, [CLOCK], TURN)

    assert srv.requests[0]["messages"] == history


def test_no_tools_key_when_no_tools(srv: FakeOpenAI) -> None:
    srv.push_text("ok")

    backend(srv).complete(MESSAGES, [], TURN)

    assert "tools" not in srv.requests[0]


def test_options_are_sent_as_request_fields(srv: FakeOpenAI) -> None:
    srv.push_text("ok")

    backend(srv, temperature=0.2, max_tokens=50).complete(MESSAGES, [], TURN)

    assert srv.requests[0]["temperature"] == 0.2
    assert srv.requests[0]["max_tokens"] == 50


def test_a_turns_token_cap_is_sent_as_the_requests_max_tokens(srv: FakeOpenAI) -> None:
    capped = TURN.model_copy(update={"max_tokens": 40})
    srv.push_text("cut sho", finish_reason="length")
    srv.push_text("ok")
    srv.push_text("ok")

    # Against a compatible server: max_tokens, which every such server reads.
    assert backend(srv).complete(MESSAGES, [], capped).truncated
    # An agent's own bound stays where it is lower, in the field it names.
    assert not backend(srv, max_tokens=30).complete(MESSAGES, [], capped).truncated
    backend(srv, max_completion_tokens=500).complete(MESSAGES, [], capped)

    assert srv.requests[0]["max_tokens"] == 40
    assert "max_completion_tokens" not in srv.requests[0]
    assert srv.requests[1]["max_tokens"] == 30
    assert srv.requests[2]["max_completion_tokens"] == 40
    assert "max_tokens" not in srv.requests[2]


def test_a_cap_past_the_ceiling_is_sent_only_under_the_agents_own_limit() -> None:
    compatible = OpenAIBackend("m", base_url="http://x/v1", api_key="k", timeout=1, max_retries=0)
    large = TURN.model_copy(update={"max_tokens": CAP_CEILING + 1})
    # A model may refuse a cap past its output limit: none is sent ...
    assert compatible.request_fields(large) is None
    at = TURN.model_copy(update={"max_tokens": CAP_CEILING})
    assert compatible.request_fields(at) == {"max_tokens": CAP_CEILING}
    # ... unless the agent names the model's limit, which the cap stays under.
    limited = OpenAIBackend(
        "m",
        base_url="http://x/v1",
        api_key="k",
        timeout=1,
        max_retries=0,
        options={"max_tokens": 16384},
    )
    assert limited.request_fields(large) == {"max_tokens": CAP_CEILING + 1}


def test_no_cap_is_sent_without_a_token_budget(srv: FakeOpenAI) -> None:
    srv.push_text("ok")
    backend(srv).complete(MESSAGES, [], TURN)
    assert "max_tokens" not in srv.requests[0]
    assert "max_completion_tokens" not in srv.requests[0]


def test_a_streamed_step_sends_the_cap_and_says_it_was_cut(srv: FakeOpenAI) -> None:
    srv.push(
        CannedResponse(
            message={"role": "assistant", "content": "cut", "refusal": None},
            chunks=("cu", "t"),
            finish_reason="length",
        )
    )
    streamed = OpenAIBackend(
        "test-model",
        base_url=srv.base_url,
        api_key="sk-test",
        timeout=5.0,
        max_retries=0,
        stream=True,
    )
    answer = streamed.complete(MESSAGES, [], TURN.model_copy(update={"max_tokens": 7}))
    assert (answer.text, answer.truncated) == ("cut", True)
    assert srv.requests[0]["max_tokens"] == 7


def test_openais_own_endpoint_gets_max_completion_tokens() -> None:
    official = OpenAIBackend("m", base_url=None, api_key="k", timeout=1, max_retries=0)
    capped = TURN.model_copy(update={"max_tokens": 12})
    assert official.request_fields(capped) == {"max_completion_tokens": 12}
    named = OpenAIBackend(
        "m", base_url="https://api.openai.com/v1", api_key="k", timeout=1, max_retries=0
    )
    assert named.request_fields(capped) == {"max_completion_tokens": 12}


def test_options_may_not_override_owned_fields() -> None:
    with pytest.raises(ConfigError, match="stream"):
        OpenAIBackend(
            "m", base_url=None, api_key="k", timeout=1, max_retries=0, options={"stream": True}
        )


# -- failures ------------------------------------------------------------------


def test_retries_on_500_then_succeeds(srv: FakeOpenAI) -> None:
    srv.push_error(500, times=2)
    srv.push_text("finally")

    response = backend(srv, max_retries=2).complete(MESSAGES, [], TURN)

    assert response.text == "finally"
    assert len(srv.requests) == 3


def test_retries_on_429(srv: FakeOpenAI) -> None:
    srv.push_error(429)
    srv.push_text("ok")

    assert backend(srv, max_retries=1).complete(MESSAGES, [], TURN).text == "ok"
    assert len(srv.requests) == 2


def test_persistent_500_becomes_model_error_after_retries(srv: FakeOpenAI) -> None:
    srv.push_error(503, times=3, message="overloaded")

    with pytest.raises(ModelError, match="503") as caught:
        backend(srv, max_retries=2).complete(MESSAGES, [], TURN)

    assert "overloaded" in caught.value.message
    assert caught.value.details["status_code"] == 503
    assert len(srv.requests) == 3


def test_400_becomes_model_error_without_retry(srv: FakeOpenAI) -> None:
    srv.push_error(400, message="bad tool schema")
    srv.push_text("never served")

    with pytest.raises(ModelError) as caught:
        backend(srv, max_retries=3).complete(MESSAGES, [], TURN)

    error = caught.value
    assert error.code == "model.error"
    assert "400" in error.message
    assert "bad tool schema" in error.message
    assert error.details["status_code"] == 400
    assert len(srv.requests) == 1
    assert srv.pending == 1


def test_timeout_becomes_model_error(srv: FakeOpenAI) -> None:
    srv.push_text("too late", delay=5.0)

    started = time.monotonic()
    with pytest.raises(ModelError, match="timed out"):
        backend(srv, timeout=0.3, max_retries=0).complete(MESSAGES, [], TURN)

    assert time.monotonic() - started < 3.0
    assert len(srv.requests) == 1


def test_connection_refused_becomes_model_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now.
    dead = OpenAIBackend(
        "m",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="k",
        timeout=2,
        max_retries=0,
        options={},
    )

    with pytest.raises(ModelError, match="could not reach model server"):
        dead.complete(MESSAGES, [], TURN)


def test_empty_choices_becomes_model_error(srv: FakeOpenAI) -> None:
    srv.push_json(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    )

    with pytest.raises(ModelError, match="no choices"):
        backend(srv).complete(MESSAGES, [], TURN)


def test_malformed_completion_body_becomes_model_error(srv: FakeOpenAI) -> None:
    srv.push_json({"unexpected": True})

    with pytest.raises(ModelError):
        backend(srv).complete(MESSAGES, [], TURN)


# -- from_spec -------------------------------------------------------------------


def test_from_spec_uses_settings_and_unused_key_for_local_server(srv: FakeOpenAI) -> None:
    spec = AgentSpec(id="a", model="openai:llama-3", options={"temperature": 0})
    srv.push_text("hi")

    made = OpenAIBackend.from_spec(spec, settings(openai_base_url=srv.base_url))
    made.complete(MESSAGES, [], TURN)

    assert made.model == "llama-3"
    assert srv.requests[0]["model"] == "llama-3"
    assert srv.requests[0]["temperature"] == 0
    assert srv.received[0].headers["authorization"] == "Bearer unused"


def test_from_spec_options_override_settings(srv: FakeOpenAI) -> None:
    spec = AgentSpec(id="a", model="openai", options={"base_url": srv.base_url, "api_key": "k1"})
    srv.push_text("hi")

    made = OpenAIBackend.from_spec(
        spec, settings(openai_base_url="http://127.0.0.1:9/v1", openai_api_key="k0")
    )
    made.complete(MESSAGES, [], TURN)

    assert made.model == DEFAULT_MODEL
    assert srv.received[0].headers["authorization"] == "Bearer k1"
    assert "base_url" not in srv.requests[0]
    assert "api_key" not in srv.requests[0]


def test_from_spec_without_any_key_for_official_api_is_config_error() -> None:
    spec = AgentSpec(id="a", model="openai")

    with pytest.raises(ConfigError):
        OpenAIBackend.from_spec(spec, settings())


def test_from_spec_rejects_other_models() -> None:
    with pytest.raises(ConfigError):
        # model_construct: only the model kind matters, not a scripted agent's rules.
        spec = AgentSpec.model_construct(id="a", model="scripted", options={})
        OpenAIBackend.from_spec(spec, settings())


# -- MCP tools' names (docs/tools.md#names) ----------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_mcp_tool_names_go_out_in_api_form_and_come_back_as_chaz_names(
    srv: FakeOpenAI, stream: bool
) -> None:
    mcp = ToolSpec(name="time.convert_time", description="Convert.", parameters={})
    long = ToolSpec(name="s" * 32 + "." + "t" * 64, description="Long.", parameters={})
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "time.convert_time", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "noon"},
    ]
    srv.push_tool_calls(
        [("time__convert_time", {"time": "12:00"}, None), ("clock", {"tz": "UTC"}, None)]
    )

    made = OpenAIBackend(
        "test-model", base_url=srv.base_url, api_key="k", timeout=5, max_retries=0, stream=stream
    )
    response = made.complete(history, [CLOCK, mcp, long], TURN)

    assert [c.name for c in response.tool_calls] == ["time.convert_time", "clock"]
    sent = srv.requests[0]
    names = [t["function"]["name"] for t in sent["tools"]]
    assert names[:2] == ["clock", "time__convert_time"]
    assert len(names[2]) == 64 and names[2].startswith("s" * 32 + "__")
    assert sent["messages"][2]["tool_calls"][0]["function"]["name"] == "time__convert_time"
    # The caller's history is not changed.
    assert history[2]["tool_calls"][0]["function"]["name"] == "time.convert_time"
