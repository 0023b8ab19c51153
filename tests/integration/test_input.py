"""Bad input at the producer API and the tools: a chaz code, the same on both stacks,
and nothing written (issue 7, items 7-9, 12, 13). No workers: a turn that must run
is run in this process by the real :class:`chaz.usecases.turns.TurnRunner`."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import pydantic
import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from chaz.errors import ChazError, RequestTooLarge, ValidationError
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.registry import Tool, ToolContext
from chaz.store.models import (
    AgentRow,
    CommandRow,
    EntryRow,
    JobRow,
    ScheduleRow,
    SessionRow,
)
from chaz.tools import default_registry
from chaz.usecases.turns import RunnerDelegation, TurnRunner
from tests.support.counts import row_counts
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])
CAP = 1 << 20


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    module_stack.client.agents.put(AGENT)
    return module_stack


@pytest.fixture
def client(mstack: Stack) -> chaz.Client:
    return mstack.client


def rows(client: chaz.Client) -> dict[str, int]:
    """How many rows each table holds: a refused call must change none."""
    tables = (AgentRow, SessionRow, EntryRow, JobRow, CommandRow, ScheduleRow)
    return row_counts(client.services.store.engine, (t.__table__ for t in tables))


def refused(client: chaz.Client, call: Callable[[], Any]) -> ValidationError:
    """Run ``call``, which must raise a ValidationError and write nothing."""
    before = rows(client)
    with pytest.raises(ValidationError) as info:
        call()
    assert rows(client) == before
    return info.value


# -- item 7: one validation layer --------------------------------------------------

BAD_TEXT = {"nul": "a\x00b", "surrogate": "a\ud800b"}


@pytest.mark.parametrize("bad", sorted(BAD_TEXT))
@pytest.mark.parametrize(
    ("field", "post"),
    [
        ("content", lambda c, sid, v: c.sessions.post(sid, v)),
        ("sender", lambda c, sid, v: c.sessions.post(sid, "hi", sender=f"user:{v}")),
        ("metadata", lambda c, sid, v: c.sessions.post(sid, "hi", metadata={"k": v})),
        ("metadata", lambda c, sid, v: c.sessions.post(sid, "hi", metadata={v: 1})),
        ("metadata", lambda c, sid, v: c.sessions.post(sid, "hi", metadata={"k": [{"x": v}]})),
        ("idempotency_key", lambda c, sid, v: c.sessions.post(sid, "hi", idempotency_key=v)),
        ("session", lambda c, sid, v: c.sessions.post(v, "hi")),
        ("name", lambda c, sid, v: c.sessions.create("bot", name=v)),
        ("agent_id", lambda c, sid, v: c.sessions.create(v)),
        ("session", lambda c, sid, v: c.sessions.get(v)),
        ("execution_id", lambda c, sid, v: c.jobs.get(v)),
        ("agent_id", lambda c, sid, v: c.agents.get(v)),
        (
            "system_prompt",
            lambda c, sid, v: c.agents.put({**AGENT.model_dump(), "system_prompt": v}),
        ),
    ],
)
def test_nul_and_lone_surrogates_are_refused_everywhere(
    client: chaz.Client, field: str, post: Callable[..., Any], bad: str
) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: post(client, s.id, BAD_TEXT[bad]))
    assert (err.code, err.field) == ("request.invalid", field)


@pytest.mark.parametrize(
    "metadata",
    [
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": [float("-inf")]},
        {"x": object()},
        {"x": 10**5000},
        "not a dict",
        ["a", "list"],
    ],
    ids=["nan", "inf", "nested-inf", "object", "huge-int", "string", "list"],
)
def test_metadata_must_be_a_json_object_of_finite_values(
    client: chaz.Client, metadata: Any
) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: client.sessions.post(s.id, "hi", metadata=metadata))
    assert err.field == "metadata"


def test_circular_and_deep_metadata_are_refused(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    loop: dict[str, Any] = {}
    loop["self"] = loop
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["x"] = {}
        node = node["x"]
    for metadata in (loop, deep):
        err = refused(client, partial(client.sessions.post, s.id, "hi", metadata=metadata))
        assert err.field == "metadata"


def test_none_content_is_refused(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: client.sessions.post(s.id, None))  # type: ignore[arg-type]
    assert (err.code, err.field) == ("request.invalid", "content")


@pytest.mark.parametrize("limit", [0, -1, 10**6, 2**70, True, 1.5, "10"])
@pytest.mark.parametrize(
    "call",
    [
        lambda c, sid, n: c.sessions.list(limit=n),
        lambda c, sid, n: c.sessions.entries(sid, limit=n),
        lambda c, sid, n: c.jobs.list(limit=n),
    ],
    ids=["sessions.list", "sessions.entries", "jobs.list"],
)
def test_limits_out_of_range_are_refused(
    client: chaz.Client, call: Callable[..., Any], limit: Any
) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: call(client, s.id, limit))
    assert err.field == "limit"


@pytest.mark.parametrize("after", [-1, 2**31, 2**70])
def test_after_out_of_range_is_refused(client: chaz.Client, after: int) -> None:
    s = client.sessions.create("bot")
    assert refused(client, lambda: client.sessions.entries(s.id, after=after)).field == "after"


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0])
def test_timeouts_must_be_finite(client: chaz.Client, timeout: float) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: client.sessions.wait_for_reply(s.id, timeout=timeout))
    assert err.field == "timeout"


def test_keys_longer_than_their_column_are_refused(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: client.sessions.post(s.id, "hi", idempotency_key="k" * 201))
    assert err.field == "idempotency_key"
    client.sessions.post(s.id, "hi", idempotency_key="k" * 200)  # the column's width fits


def test_agent_spec_and_limits_errors_are_chaz_errors_with_the_field(client: chaz.Client) -> None:
    err = refused(client, lambda: client.agents.put({"id": "bad id", "script": AGENT.script}))
    assert err.field == "id"
    err = refused(
        client, lambda: client.agents.put({**AGENT.model_dump(), "options": {"t": float("nan")}})
    )
    assert err.field == "options"
    err = refused(client, lambda: client.sessions.create("bot", limits={"max_turn_steps": 0}))
    assert err.field == "limits.max_turn_steps"
    err = refused(client, lambda: client.sessions.create("bot", limits={"colour": 1}))
    assert err.field == "limits.colour"


# -- items 8 and 9: size and blank content -----------------------------------------


def test_content_above_the_cap_is_too_large(client: chaz.Client) -> None:
    assert client.settings.max_content_bytes == CAP
    s = client.sessions.create("bot")
    client.sessions.post(s.id, "x" * CAP)  # exactly the cap is accepted
    for content in ("x" * (CAP + 1), "é" * (CAP // 2 + 1)):  # bytes, not characters
        err = refused(client, partial(client.sessions.post, s.id, content))
        assert isinstance(err, RequestTooLarge)
        assert (err.code, err.field) == ("request.too_large", "content")
    err = refused(client, lambda: client.sessions.post(s.id, "hi", metadata={"k": "x" * CAP}))
    assert (err.code, err.field) == ("request.too_large", "metadata")


@pytest.mark.parametrize("content", ["", " ", "\n\t ", "\u3000"])
@pytest.mark.parametrize("type", ["message", "directive", "summary"])
def test_blank_content_is_refused_where_the_type_needs_words(
    client: chaz.Client, content: str, type: str
) -> None:
    s = client.sessions.create("bot")
    err = refused(client, lambda: client.sessions.post(s.id, content, type=type))
    assert (err.code, err.field) == ("request.invalid", "content")


@pytest.mark.parametrize("type", ["ack", "tool_result", "approval_decision"])
def test_blank_content_is_allowed_where_the_type_has_no_words(
    client: chaz.Client, type: str
) -> None:
    s = client.sessions.create("bot")
    entry = client.sessions.post(s.id, "", type=type, sender="system:x")
    assert (entry.content, entry.job_id) == ("", None)


# -- tools: what a tool returns is stored, never crashes the turn --------------------


@pytest.mark.parametrize(
    ("raw", "stored"),
    [('{"text": "a\\u0000b"}', "a\ufffdb"), ('{"text": "a\\ud800b"}', "a\ufffdb")],
    ids=["nul", "surrogate"],
)
def test_a_tool_result_with_a_nul_or_a_surrogate_does_not_crash_the_turn(
    client: chaz.Client, raw: str, stored: str
) -> None:
    agent = chaz.AgentSpec(
        id="echoer",
        tools=["echo"],
        script=[{"steps": [{"call": "echo", "raw_args": raw}, {"say": "got {last_result}"}]}],
    )
    client.agents.put(agent)
    s = client.sessions.create("echoer")
    entry = client.sessions.post(s.id, "go")
    assert entry.job_id is not None
    TurnRunner(client.services, client.tools).wake(s.id, entry.job_id)
    job = client.jobs.get(entry.job_id)
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, f"got {stored}"), job.error
    results = [e.content for e in client.sessions.entries(s.id) if e.type is EntryType.TOOL_RESULT]
    assert results == [stored]


class _Text(pydantic.BaseModel):
    text: str


def test_a_tool_result_above_the_cap_is_truncated_with_a_note(mstack: Stack) -> None:
    small = mstack.settings.model_copy(update={"max_content_bytes": 200})
    # Arguments are capped too: a tool whose result outgrows its arguments.
    tools = default_registry()
    tools.register(Tool("triple", "The text, three times.", _Text, lambda a, _: a.text * 3))
    with chaz.Client(small, migrate=False, tools=tools) as client:
        agent = chaz.AgentSpec(
            id="big",
            tools=["triple"],
            script=[{"steps": [{"call": "triple", "args": {"text": "{input}"}}]}],
        )
        client.agents.put(agent)
        s = client.sessions.create("big")
        entry = client.sessions.post(s.id, "y" * 60 + "é" * 20)  # 100 bytes
        assert entry.job_id is not None
        TurnRunner(client.services, client.tools).wake(s.id, entry.job_id)
        job = client.jobs.get(entry.job_id)
        assert job.status is JobStatus.SUCCEEDED, job.error
        [result] = [
            e.content for e in client.sessions.entries(s.id) if e.type is EntryType.TOOL_RESULT
        ]
        assert len(result.encode()) <= 200
        assert result.startswith("y" * 50) and "truncated: 300 bytes" in result


def echo_call_outcome(client: chaz.Client, agent_id: str, raw: str) -> tuple[str, str]:
    """Run one turn whose model calls ``echo`` with ``raw`` arguments: the
    ToolCall entry's stored arguments and the ToolResult's content."""
    client.agents.put(
        chaz.AgentSpec(
            id=agent_id,
            tools=["echo"],
            script=[{"steps": [{"call": "echo", "raw_args": raw}, {"say": "after"}]}],
        )
    )
    s = client.sessions.create(agent_id)
    entry = client.sessions.post(s.id, "go")
    assert entry.job_id is not None
    TurnRunner(client.services, client.tools).wake(s.id, entry.job_id)
    job = client.jobs.get(entry.job_id)
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, "after"), job.error
    entries = client.sessions.entries(s.id)
    [call] = [json.loads(e.content) for e in entries if e.type is EntryType.TOOL_CALL]
    [result] = [e.content for e in entries if e.type is EntryType.TOOL_RESULT]
    return call["arguments"], result


def test_an_integer_of_too_many_digits_is_a_malformed_call_not_a_crash(
    client: chaz.Client,
) -> None:
    # json raises a plain ValueError past Python's 4,300-digit conversion limit.
    _, result = echo_call_outcome(client, "digits", '{"text": ' + "9" * 5000 + "}")
    error = json.loads(result)["error"]
    assert error["code"] == "tool.malformed" and "not valid JSON" in error["message"]


def test_tool_call_arguments_above_the_cap_are_cut_and_the_call_refused(mstack: Stack) -> None:
    small = mstack.settings.model_copy(update={"max_content_bytes": 200})
    with chaz.Client(small, migrate=False) as client:
        stored, result = echo_call_outcome(client, "bigcall", json.dumps({"text": "x" * 1000}))
    assert len(stored.encode()) <= 200 and "truncated: 1012 bytes" in stored
    error = json.loads(result)["error"]
    assert error["code"] == "tool.malformed"
    assert "arguments are 1012 bytes, more than CHAZ_MAX_CONTENT_BYTES=200" in error["message"]
    assert "x" * 100 not in result  # echo never ran


# -- item 12: cancel validates before it acts ----------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"command_id": "c" * 101}, "command_id"),
        ({"command_id": ""}, "command_id"),
        ({"command_id": "a\x00"}, "command_id"),
        ({"reason": "a\x00"}, "reason"),
        ({"reason": "r" * 1001}, "reason"),
        ({"expected_version": 2**40}, "expected_version"),
    ],
)
def test_cancel_with_a_bad_argument_changes_nothing(
    client: chaz.Client, kwargs: dict[str, Any], field: str
) -> None:
    s = client.sessions.create("bot")
    entry = client.sessions.post(s.id, "hi")
    assert entry.job_id is not None
    err = refused(client, lambda: client.jobs.cancel(entry.job_id or "", **kwargs))
    assert err.field == field
    job = client.jobs.get(entry.job_id)
    assert (job.status, job.version) == (JobStatus.QUEUED, 1)
    fits = (entry.job_id * 7)[:100]  # the column's width, and unique to this job
    client.jobs.cancel(entry.job_id, command_id=fits)
    assert client.jobs.get(entry.job_id).status is JobStatus.CANCELLED


# -- item 13: a denied job looks exactly like a missing one ---------------------------


def test_job_output_answers_a_denied_job_as_a_missing_one(client: chaz.Client) -> None:
    owner = client.sessions.create("bot")
    entry = client.sessions.post(owner.id, "hi")
    assert entry.job_id is not None
    stranger = client.sessions.create("bot")
    ctx = ToolContext(
        session_id=stranger.id,
        job_id="j" * 16,
        agent_id="bot",
        tree_id=stranger.id,
        call_depth=0,
        allowed_tools=frozenset({"job_output"}),
        services=client.services,
        delegation=RunnerDelegation(TurnRunner(client.services, client.tools)),
    )

    def ask(job_id: str) -> dict[str, Any]:
        args = json.dumps({"job_id": job_id, "block": False})
        outcome = client.tools.invoke(
            ToolCallRequest(id="c", name="job_output", arguments=args), ctx
        )
        assert outcome.is_error
        error: dict[str, Any] = json.loads(outcome.output.replace(job_id, "<ID>"))
        return error

    missing = "0" * len(entry.job_id)
    assert ask(entry.job_id) == ask(missing)
    assert ask(missing)["error"]["code"] == "job.not_found"
    # The owner still reads it.
    ctx.session_id = owner.id
    args = json.dumps({"job_id": entry.job_id, "block": False})
    outcome = client.tools.invoke(ToolCallRequest(id="c", name="job_output", arguments=args), ctx)
    assert not outcome.is_error and json.loads(outcome.output)["status"] == "queued"


def test_every_refusal_is_a_chaz_error() -> None:
    # The helpers above catch ValidationError; RequestTooLarge is one.
    assert issubclass(RequestTooLarge, ValidationError) and issubclass(ValidationError, ChazError)


# -- issue 21, item 7: the last raw errors -------------------------------------------

WORDS = {"id": "w", "script": [{"steps": [{"say": "ok"}]}]}


@pytest.mark.parametrize(
    ("case", "call", "field"),
    [
        ("put_many of a string", lambda c: c.agents.put_many("abc"), "specs"),
        ("put_many of None", lambda c: c.agents.put_many(None), "specs"),
        ("put_many of one mapping", lambda c: c.agents.put_many(WORDS), "specs"),
        ("put_many, an id twice", lambda c: c.agents.put_many([WORDS, WORDS]), "specs"),
        ("put_many, a bad spec", lambda c: c.agents.put_many([{"id": "a b"}]), "specs[0].id"),
        ("schedules of a NUL", lambda c: c.schedules.list(agent_id="a\x00b"), "agent_id"),
        ("schedules of an int", lambda c: c.schedules.list(agent_id=5), "agent_id"),
        (
            "a session 'unattended=no'",
            lambda c: c.sessions.create("bot", unattended="no"),
            "unattended",
        ),
        (
            "a schedule 'unattended=1'",
            lambda c: c.schedules.add("bot", kind="interval", interval_seconds=60, unattended=1),
            "unattended",
        ),
        (
            "a 10 MB system prompt",
            lambda c: c.agents.put({**WORDS, "system_prompt": "x" * (10 << 20)}),
            "system_prompt",
        ),
        (
            "a gate that walks out of its folder",
            lambda c: c.agents.put(
                {"id": "g", "script": [{"steps": [{"wait": "../../etc/passwd"}]}]}
            ),
            "script.steps.0",
        ),
        (
            "a gate named '..'",
            lambda c: c.agents.put({"id": "g", "script": [{"steps": [{"wait": ".."}]}]}),
            "script.steps.0",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_the_last_raw_errors_are_request_invalid(
    client: chaz.Client, case: str, call: Callable[[chaz.Client], Any], field: str
) -> None:
    error = refused(client, lambda: call(client))
    assert error.code == "request.invalid", (case, error)
    assert str(error.details.get("field", "")).startswith(field), (case, error.details)


@pytest.mark.parametrize("cron", ["0 0 31 2 *", "0 0 30 2 *"])
def test_a_cron_no_date_matches_is_refused_by_add_and_update(
    client: chaz.Client, cron: str
) -> None:
    # It parses, so only the search for its next date finds it impossible
    # (croniter's CroniterBadDateError reached the caller, on both paths).
    kept = client.schedules.add("bot", kind="cron", cron="0 9 * * 1", prompt="weekly")
    for call in (
        lambda: client.schedules.add("bot", kind="cron", cron=cron, prompt="never"),
        lambda: client.schedules.update(kept.id, cron=cron),
    ):
        error = refused(client, call)
        assert (error.code, error.field) == ("request.invalid", "cron"), error
    after = client.schedules.get(kept.id)
    assert after == kept


def test_put_many_takes_mappings_as_put_does(client: chaz.Client) -> None:
    saved = client.agents.put_many([WORDS, {**WORDS, "id": "w2"}])
    assert [a.id for a in saved] == ["w", "w2"]


def test_a_decision_by_a_number_is_refused(client: chaz.Client) -> None:
    error = refused(client, lambda: client.approvals.decide("0" * 16, "approve", by=5))  # type: ignore[arg-type]
    assert error.code == "request.invalid"


def test_an_empty_session_filter_lists_no_jobs_of_other_sessions(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    client.sessions.post(s.id, "one")
    with pytest.raises(ChazError) as info:
        client.jobs.list(session_id="")
    assert info.value.code == "session.not_found"


@pytest.mark.parametrize(
    "url", ["::::not a url", "mysql+nodriver://u@h/db", "postgresql://h:notaport/db"]
)
def test_an_unusable_database_url_is_config_invalid(mstack: Stack, url: str) -> None:
    bad = mstack.settings.model_copy(update={"database_url": url})
    with pytest.raises(ChazError) as info:
        chaz.Client(bad)
    assert info.value.code == "config.invalid"
    assert url not in str(info.value)
