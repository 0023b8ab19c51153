"""Generated input at the producer API and the tools, on both stacks at once (issue 7).

Every call either succeeds or raises a ``chaz.errors`` error with a code; the
embedded stack (SQLite) and the server stack (PostgreSQL) give the same answer
to the same call; and a refused call writes nothing. Both stacks see the same
sequence of calls, so their states stay equal and can be compared call by call.
No workers: nothing here needs a turn to run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

import chaz
from chaz.errors import ChazError, ValidationError
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.registry import ToolContext
from chaz.store.models import AgentRow, CommandRow, EntryRow, JobRow, SessionRow
from chaz.usecases.turns import RunnerDelegation, TurnRunner
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", tools=["echo"], script=[{"steps": [{"say": "ok"}]}])
CAP = 1 << 20
TOOLS = frozenset({"echo", "word_count", "clock", "list_jobs", "job_output", "spawn_agent"})
#: Compared by their output too; the others' outputs hold ids or times that differ.
PURE_TOOLS = frozenset({"echo", "word_count"})

PROPERTY = settings(
    max_examples=200,
    deadline=None,  # a busy machine must not fail the test; the count bounds its time
    derandomize=True,  # the same examples on every run: a failure is reproducible
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass
class Side:
    """One stack, with its client and the ids that differ between stacks."""

    stack: Stack
    client: chaz.Client
    base_session: str


@pytest.fixture(scope="module")
def sides(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str
) -> Iterator[list[Side]]:
    stacks = [
        Stack.embedded(tmp_path_factory.mktemp("prop-embedded") / "home"),
        Stack.server(tmp_path_factory.mktemp("prop-server") / "home", pg_url, redis_url),
    ]
    try:
        out = []
        for s in stacks:
            s.client.agents.put(AGENT)
            base = s.client.sessions.create("bot", name="base")
            out.append(Side(s, s.client, base.id))
        yield out
    finally:
        for s in stacks:
            s.close()


def rows(client: chaz.Client) -> dict[str, int]:
    with client.services.store.engine.connect() as conn:
        return {
            t.__tablename__: int(conn.scalar(select(func.count()).select_from(t)) or 0)
            for t in (AgentRow, SessionRow, EntryRow, JobRow, CommandRow)
        }


Outcome = tuple[Any, ...]


def outcome(side: Side, call: Callable[[Side], Any]) -> Outcome:
    """``("ok", summary)`` or ``("error", code, field)``; anything else fails the test."""
    before = rows(side.client)
    try:
        result = call(side)
    except ChazError as exc:
        assert rows(side.client) == before, f"{exc!r} left rows behind"
        field = exc.field if isinstance(exc, ValidationError) else None
        return ("error", exc.code, field)
    return ("ok", result)


def agree(sides: list[Side], call: Callable[[Side], Any]) -> Outcome:
    embedded, server = (outcome(s, call) for s in sides)
    assert embedded == server
    return embedded


# -- strategies ----------------------------------------------------------------------

# Every code point, lone surrogates and NUL included (hypothesis leaves surrogates out
# by default), plus the values that broke things before.
ANY_CHAR = st.characters(codec=None, exclude_categories=())
TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.sampled_from(["", " ", "\n", "\x00", "\ud800", "hi", "nl\n", "x" * 300]),
)
# Text that every rule accepts, so that the success paths are walked too.
GOOD = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30)
GOOD_TEXT = GOOD.filter(lambda t: not t.isspace())
BIG = st.sampled_from(["x" * (CAP + 1), "é" * (CAP // 2 + 1), "y" * CAP])
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
GOOD_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), GOOD),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(GOOD, inner, max_size=3)),
    max_leaves=6,
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8,
)
METADATA = st.one_of(
    st.none(),
    st.dictionaries(GOOD, GOOD_JSON, max_size=3),
    st.dictionaries(TEXT, JSON, max_size=4),
    st.sampled_from(["text", [1, 2], {"x": object()}, {"x": float("nan")}]),
)
LIMIT = st.one_of(
    st.integers(min_value=-3, max_value=12_000),
    st.sampled_from([0, 2**70, True, 1.5, "10", None]),
)
KEY = st.one_of(
    st.none(),
    st.none(),
    st.sampled_from(["k1", "k2"]),
    TEXT,
    st.sampled_from(["k", "k" * 200, "k" * 201, "job:x:ack", "spawn:a:b"]),
)
SENDER = st.one_of(
    st.sampled_from(["user:alice", "agent:bot", "system:cron"]),
    st.sampled_from(["user:alice", "agent:bot", "system:cron", "user:alice\n", "bob"]),
    TEXT.map(lambda t: f"user:{t}"),
)
VALID_TYPE = st.sampled_from(
    ["message", "directive", "ack", "summary", "tool_result", "approval_decision"]
)
ENTRY_TYPE = st.one_of(VALID_TYPE, VALID_TYPE, TEXT)
REF = st.one_of(st.just("base"), st.just("base"), st.sampled_from(["base", "missing"]), TEXT)


def _post(
    ref: str, content: Any, sender: str, type: str, metadata: Any, key: Any
) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        e = side.client.sessions.post(
            ref, content, sender=sender, type=type, metadata=metadata, idempotency_key=key
        )
        return (e.seq, e.type.value, e.sender, e.content, e.metadata, e.job_id is not None)

    return call


POST = st.builds(
    _post,
    REF,
    st.one_of(GOOD_TEXT, GOOD_TEXT, TEXT, BIG, st.none(), st.integers()),
    SENDER,
    ENTRY_TYPE,
    METADATA,
    KEY,
)


def _create(agent_id: str, name: Any, limits: Any) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        s = side.client.sessions.create(agent_id, name=name, limits=limits)
        return (s.agent_id, s.name, s.limits)

    return call


LIMITS: st.SearchStrategy[dict[str, Any] | None] = st.one_of(
    st.none(),
    st.builds(dict, max_turn_steps=st.integers(min_value=1, max_value=9)),
    st.dictionaries(
        st.sampled_from(["max_turn_steps", "max_call_depth", "max_queued_per_session", "nope"]),
        st.one_of(st.integers(min_value=-2, max_value=5), st.sampled_from(["x", 1.5, None])),
        max_size=3,
    ),
)
CREATE = st.builds(
    _create,
    st.one_of(st.just("bot"), st.just("bot"), st.sampled_from(["bot", "nobody"]), TEXT),
    st.one_of(st.none(), st.none(), GOOD_TEXT, TEXT),
    LIMITS,
)


def _listing(kind: str, ref: str, after: Any, limit: Any) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        if kind == "sessions":
            return len(side.client.sessions.list(limit=limit))
        if kind == "entries":
            return len(side.client.sessions.entries(ref, after=after, limit=limit))
        return len(side.client.jobs.list(limit=limit))

    return call


LISTING = st.builds(
    _listing,
    st.sampled_from(["sessions", "entries", "jobs"]),
    REF,
    st.one_of(st.integers(min_value=-2, max_value=5), st.sampled_from([2**31, 2**70])),
    LIMIT,
)


def _put_agent(
    agent_id: str, prompt: str, tools: list[str], match: Any, options: Any
) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        rule: dict[str, Any] = {"steps": [{"say": "hi"}]}
        if match is not None:
            rule["match"] = match
        spec = side.client.agents.put(
            {
                "id": agent_id,
                "system_prompt": prompt,
                "tools": tools,
                "script": [rule],
                "options": options,
            }
        )
        return spec.model_dump(mode="json")

    return call


TOOL_NAMES = st.lists(st.sampled_from(sorted(TOOLS)), max_size=2, unique=True)
PUT_AGENT = st.builds(
    _put_agent,
    st.one_of(st.sampled_from(["helper", "helper2"]), st.sampled_from(["nl\n", "a b"]), TEXT),
    st.one_of(GOOD_TEXT, TEXT),
    st.one_of(TOOL_NAMES, TOOL_NAMES, st.lists(TEXT, max_size=2)),
    st.one_of(
        st.none(),
        st.sampled_from(["^h", "x+y?", "(?i)hi"]),
        TEXT,
        st.sampled_from(["^(a+)+$", r"(a)\1", "(?=x)", "("]),
    ),
    st.one_of(
        st.just({}),
        st.dictionaries(GOOD, GOOD_JSON, max_size=2),
        st.dictionaries(TEXT, JSON, max_size=2),
        st.just({"t": float("inf")}),
    ),
)


def _cancel(job: str, command_id: Any, reason: Any, version: Any) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        return side.client.jobs.cancel(
            job, command_id=command_id, reason=reason, expected_version=version
        )["status"]

    return call


CANCEL = st.builds(
    _cancel,
    TEXT,
    st.one_of(st.none(), TEXT, st.just("c" * 101)),
    st.one_of(TEXT, st.just("r" * 1001)),
    st.one_of(st.none(), st.integers(min_value=-1, max_value=3), st.just(2**40)),
)


def _tool(name: str, args: Any) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        arguments = args if isinstance(args, str) else json.dumps(args)
        ctx = ToolContext(
            session_id=side.base_session,
            job_id="job0000000000000",
            agent_id="bot",
            tree_id=side.base_session,
            call_depth=0,
            allowed_tools=TOOLS,
            services=side.client.services,
            delegation=RunnerDelegation(TurnRunner(side.client.services, side.client.tools)),
        )
        out = side.client.tools.invoke(
            ToolCallRequest(id="call_0", name=name, arguments=arguments), ctx
        )
        if out.is_error:
            code = json.loads(out.output)["error"]["code"]
            assert code != "tool.crashed", out.output
            return ("tool-error", code)
        return ("tool-ok", out.output if name in PURE_TOOLS else None)

    return call


def _tool_args(name: str) -> st.SearchStrategy[Any]:
    values: st.SearchStrategy[Any] = st.one_of(JSON_LEAF, st.just({}), st.just([]))
    common = st.dictionaries(
        st.sampled_from(["text", "job_id", "block", "timeout", "limit", "status", "task"]),
        values,
        max_size=3,
    )
    if name == "spawn_agent":
        # In the background: the child's turn must not run inline here.
        spawn = st.fixed_dictionaries(
            {"agent_id": st.one_of(st.just("bot"), TEXT), "task": st.one_of(TEXT, BIG)},
            optional={"name": st.one_of(st.none(), TEXT)},
        )
        return spawn.map(lambda d: {**d, "async": True})
    if name in PURE_TOOLS:
        good = st.fixed_dictionaries({"text": st.one_of(GOOD, TEXT)})
        return st.one_of(good, good, common, st.just("not json"), st.just("[1]"), TEXT)
    return st.one_of(common, st.just("not json"), st.just("[1]"), TEXT)


TOOL = st.sampled_from(sorted(TOOLS | {"nope", "echo\n"})).flatmap(
    lambda name: st.builds(_tool, st.just(name), _tool_args(name))
)

# Posts that pass, so that admissions, replays and mismatches of keys happen too.
GOOD_POST = st.builds(
    _post,
    st.just("base"),
    GOOD_TEXT,
    st.sampled_from(["user:alice", "agent:bot", "system:cron"]),
    VALID_TYPE,
    st.one_of(st.none(), st.dictionaries(GOOD, GOOD_JSON, max_size=3)),
    st.one_of(st.none(), st.sampled_from(["k1", "k2", "job:x:ack"])),
)
CALL = st.one_of(GOOD_POST, POST, CREATE, LISTING, PUT_AGENT, CANCEL, TOOL)


@PROPERTY
@given(calls=st.lists(CALL, min_size=1, max_size=3))
def test_generated_calls_get_a_code_agree_across_stacks_and_write_nothing_when_refused(
    sides: list[Side], calls: list[Callable[[Side], Any]]
) -> None:
    for call in calls:
        result = agree(sides, call)
        # Seen with --hypothesis-show-statistics: how often each kind of call passes.
        kind = call.__qualname__.split(".")[0]
        detail = result[1] if result[0] == "error" else ""
        if kind == "_tool":
            detail = result[1][1] if result[1][0] == "tool-error" else ""
        event(f"{kind}: {result[0]} {detail}")


def test_the_property_sees_both_outcomes(sides: list[Side]) -> None:
    """The property is not vacuous: the same harness tells success, refusal and a difference."""
    assert agree(sides, _post("base", "hi", "user:a", "message", None, None))[0] == "ok"
    assert agree(sides, _post("base", "a\x00", "user:a", "message", None, None)) == (
        "error",
        "request.invalid",
        "content",
    )
    with pytest.raises(AssertionError):
        agree(sides, lambda side: side.stack.kind)  # the stacks differ: caught
