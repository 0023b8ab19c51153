"""The HTTP server's pure parts (docs/http.md): job states as run statuses,
entries as chat messages, the error table, and the refusal of fields chaz
does not implement."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chaz import errors
from chaz.domain.entries import Entry, EntryType
from chaz.domain.jobs import JobStatus
from chaz.server import fields, mapping
from chaz.server.errors import STATUS, body_of, status_of

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SDK_RUN_STATUSES = {"pending", "running", "error", "success", "timeout", "interrupted"}


def entry(seq: int, type: EntryType, sender: str, content: str = "x") -> Entry:
    return Entry(
        id=f"e{seq}", session_id="s", seq=seq, type=type, sender=sender, content=content,
        created_at=NOW,
    )  # fmt: skip


def test_every_job_state_is_a_run_status_the_sdk_knows() -> None:
    assert set(mapping.RUN_STATUS) == set(JobStatus)
    assert set(mapping.RUN_STATUS.values()) <= SDK_RUN_STATUSES
    assert mapping.RUN_STATUS[JobStatus.QUEUED] == "pending"
    assert mapping.RUN_STATUS[JobStatus.WAITING_APPROVAL] == "running"
    assert mapping.RUN_STATUS[JobStatus.SUCCEEDED] == "success"
    assert mapping.RUN_STATUS[JobStatus.FAILED] == "error"
    assert mapping.RUN_STATUS[JobStatus.CANCELLED] == "interrupted"
    # A status filter names exactly the states that map to it.
    for status, states in mapping.JOB_STATES.items():
        assert {mapping.RUN_STATUS[s] for s in states} == {status}
    assert sorted(s for states in mapping.JOB_STATES.values() for s in states) == sorted(JobStatus)


def test_the_conversation_is_messages_and_directives_in_seq_order() -> None:
    entries = [
        entry(1, EntryType.MESSAGE, "user:alice", "hi"),
        entry(2, EntryType.ACK, "agent:a", "processing"),
        entry(3, EntryType.TOOL_CALL, "agent:a", "{}"),
        entry(4, EntryType.MESSAGE, "agent:a", "hello"),
        entry(5, EntryType.DIRECTIVE, "agent:planner", "do X"),
        entry(6, EntryType.ERROR, "agent:a", "model.error: down"),
    ]
    got = mapping.values(entries)["messages"]
    assert [(m["type"], m["content"], m["name"], m["id"]) for m in got] == [
        ("human", "hi", "user:alice", "e1"),
        ("ai", "hello", "agent:a", "e4"),
        # A Directive is what the agent is told, whoever sent it.
        ("human", "do X", "agent:planner", "e5"),
    ]
    assert got[1]["tool_calls"] == [] and "tool_calls" not in got[0]
    assert mapping.message(entries[1]) is None


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.ValidationError("x", field="f"), 422),
        (errors.Unsupported("x", field="webhook"), 422),
        (errors.RequestTooLarge("x"), 413),
        (errors.SessionNotFound("x"), 404),
        (errors.JobNotFound("x"), 404),
        (errors.AgentNotFound("x"), 404),
        (errors.SessionBusy("x"), 409),
        (errors.IdempotencyMismatch("x"), 409),
        (errors.Unauthenticated("x"), 401),
        (errors.Forbidden("x"), 403),
        (errors.QueueFull("x"), 429),
        (errors.DepthExceeded("x"), 422),
        (errors.Timeout("x"), 504),
        (errors.BackendUnavailable("x"), 503),
        (errors.ModelError("x"), 500),
        (errors.ConfigError("x"), 500),
    ],
)
def test_each_error_has_its_status_and_its_code_in_the_body(
    error: errors.ChazError, status: int
) -> None:
    assert status_of(error) == status
    body = body_of(error)
    assert body["code"] == error.code and body["detail"] == error.message
    assert body["retryable"] is error.retryable


def test_the_error_table_names_only_chaz_errors() -> None:
    assert all(issubclass(cls, errors.ChazError) for cls in STATUS)
    assert all(400 <= status < 600 for status in STATUS.values())


def test_a_field_chaz_does_not_implement_is_refused_by_name() -> None:
    fields.refuse_unknown({"a": 1, "b": None, "c": False, "d": []}, ("a",))
    fields.refuse_unknown(
        {"on_disconnect": "continue"}, (), defaults={"on_disconnect": ("continue",)}
    )
    with pytest.raises(errors.Unsupported) as caught:
        fields.refuse_unknown({"a": 1, "webhook": "https://x"}, ("a",))
    assert caught.value.code == "request.unsupported" and caught.value.field == "webhook"
    with pytest.raises(errors.Unsupported) as caught:
        fields.refuse_unknown({"team": "a"}, (), prefix="metadata.")
    assert caught.value.field == "metadata.team"
    # 0 is not False: a value that differs from the default is refused.
    with pytest.raises(errors.Unsupported):
        fields.refuse_unknown({"after_seconds": 0}, ())


def test_a_runs_input_is_one_message_of_text() -> None:
    assert fields.input_text({"messages": [{"role": "user", "content": "hi"}]}) == "hi"
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert fields.input_text({"messages": [{"type": "human", "content": blocks}]}) == "ab"
    role, content = "input.messages.0.role", "input.messages.0.content"
    refusals = [
        ({"messages": []}, errors.Unsupported, "input.messages"),
        ({"messages": [{"content": "a"}, {"content": "b"}]}, errors.Unsupported, "input.messages"),
        ({"messages": [{"role": "assistant", "content": "a"}]}, errors.Unsupported, role),
        ({"messages": [{"content": [{"type": "image_url"}]}]}, errors.Unsupported, content),
        ({"messages": [{"content": 5}]}, errors.ValidationError, content),
        ({"messages": [{"content": "a"}], "files": []}, None, None),
        ({"messages": [{"content": "a"}], "files": ["f"]}, errors.Unsupported, "input.files"),
        ("text", errors.ValidationError, "input"),
    ]  # fmt: skip
    for raw, kind, field in refusals:
        if kind is None:
            assert fields.input_text(raw) == "a"
            continue
        with pytest.raises(kind) as caught:
            fields.input_text(raw)
        assert caught.value.details["field"] == field, raw


def test_stream_modes() -> None:
    assert fields.stream_modes(None) == ("values",)
    assert fields.stream_modes("messages-tuple") == ("messages-tuple",)
    assert fields.stream_modes(["values", "values", "messages-tuple"]) == (
        "values",
        "messages-tuple",
    )
    assert fields.stream_modes(["updates", "events", "custom"]) == ("updates", "events", "custom")
    for mode in ("messages", "debug", "tasks"):
        with pytest.raises(errors.Unsupported) as caught:
            fields.stream_modes(["values", mode])
        assert caught.value.field == "stream_mode"
    with pytest.raises(errors.ValidationError):
        fields.stream_modes([])
