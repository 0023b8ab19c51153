"""Generated input at the producer API and the tools, on both stacks at once (issue 7).

Every call either succeeds or raises a ``chaz.errors`` error with a code; the
embedded stack (SQLite) and the server stack (PostgreSQL) give the same answer
to the same call; and a refused call writes nothing. Both stacks see the same
sequence of calls, so their states stay equal and can be compared call by call.
No workers: nothing here needs a turn to run.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import chaz
from chaz.errors import ChazError, ValidationError
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.registry import ToolContext, ToolOutcome
from chaz.store.models import Base
from chaz.tools import default_registry
from chaz.usecases.turns import RunnerDelegation, TurnRunner
from tests.support.counts import row_counts
from tests.support.stack import Stack
from tests.support.turns import interactive_turn

AGENT = chaz.AgentSpec(id="bot", tools=["echo"], script=[{"steps": [{"say": "ok"}]}])
CAP = 1 << 20
TOOLS = frozenset({"echo", "word_count", "clock", "list_jobs", "job_output", "spawn_agent"})
#: Compared by their output too; the others' outputs hold ids or times that differ.
PURE_TOOLS = frozenset({"echo", "word_count"})

#: A wider run (docs/testing.md#generated-input): this many examples per test,
#: random ones (``--hypothesis-seed`` repeats a run); unset, the fixed 200.
WIDE = int(os.environ.get("CHAZ_TEST_PROPERTY_EXAMPLES") or 0)
EXAMPLES = WIDE or 200
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a busy machine must not fail the test; the count bounds its time
    # The same examples on every default run: a failure is reproducible.
    derandomize=not WIDE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass
class Side:
    """One stack, with its client and the ids that differ between stacks."""

    stack: Stack
    client: chaz.Client
    base_session: str
    #: The context of an interactive turn admitted in the base session (not run).
    turn: ToolContext | None = None
    #: A session of another project: every call must treat it as missing.
    other_session: str = ""


@pytest.fixture(scope="module")
def sides(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, redis_url: str
) -> Iterator[list[Side]]:
    stacks = [
        Stack.embedded(tmp_path_factory.mktemp("prop-embedded") / "home"),
        Stack.server(tmp_path_factory.mktemp("prop-server") / "home", pg_url, redis_url),
    ]
    others = [chaz.Client(s.client.settings, project="other") for s in stacks]
    try:
        out = []
        for s, other in zip(stacks, others, strict=True):
            s.client.agents.put(AGENT)
            base = s.client.sessions.create("bot", name="base")
            other.agents.put(AGENT)
            elsewhere = other.sessions.create("bot", name="elsewhere")
            out.append(Side(s, s.client, base.id, _turn(s.client, base.id), elsewhere.id))
        yield out
    finally:
        for other in others:
            other.close()
        for s in stacks:
            s.close()


def rows(client: chaz.Client) -> dict[str, int]:
    return row_counts(client.services.store.engine, Base.metadata.sorted_tables)


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


# -- every public producer call ------------------------------------------------------

#: Stand for ids that differ between stacks: the base session's, its turn's
#: job's, and another project's session's.
BASE, JOB, OTHER = "@base", "@job", "@other"


def _turn(client: chaz.Client, session_id: str) -> ToolContext:
    """The context of the interactive turn a person's message admits (it is not run)."""
    return interactive_turn(client, session_id, client.tools.names())


def _resolve(side: Side, value: Any) -> Any:
    if value == BASE:
        return side.base_session
    if value == JOB:
        assert side.turn is not None
        return side.turn.job_id
    if value == OTHER:
        return side.other_session
    if isinstance(value, list):
        return [_resolve(side, v) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(side, v) for k, v in value.items()}
    return value


def _method(path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[Side], Any]:
    """Call ``client.<path>`` with the generated arguments; an ok result is its type."""

    def call(side: Side) -> Any:
        target: Any = side.client
        for part in path.split("."):
            target = getattr(target, part)
        result = target(
            *(_resolve(side, a) for a in args), **{k: _resolve(side, v) for k, v in kwargs.items()}
        )
        if path in ("sessions.watch", "events.follow"):
            result = list(itertools.islice(result, 3))
        # Only the kind: ids, times and search rankings differ between stacks.
        return type(result).__name__

    call.__qualname__ = f"{path}.call"
    return call


# Hostile values where a string goes: the wrong types, unknown ids, NULs, surrogates.
WRONG = st.sampled_from([None, 0, -1, 2**70, 1.5, True, [], ["x"], {}, {"a": 1}])
ID = st.one_of(
    st.just(BASE),
    st.just(BASE),
    st.sampled_from([OTHER, JOB]),
    TEXT,
    WRONG,
    st.sampled_from(["missing", "x" * 300]),
)
STR = st.one_of(GOOD_TEXT, TEXT, WRONG, BIG)
NUM = st.one_of(
    st.integers(min_value=-3, max_value=60),
    st.sampled_from([0, 2**31, 2**70, -(2**70), 1.5, float("nan"), True, "3", None]),
)
# A wait that is refused or ends at once: no call here may block the suite.
SECONDS = st.sampled_from([0, 0.01, -1, float("nan"), float("inf"), 2**70, "0.01", None, True])
AGENT_REF = st.one_of(st.just("bot"), st.just("bot"), TEXT, WRONG)
ANY_ARG = st.one_of(ID, STR, NUM)
# Cron expressions: valid, malformed, and ones that parse but name no date.
CRON = st.one_of(
    st.sampled_from(["* * * * *", "0 9 * * 1", "61 * * * *", "0 0 31 2 *", "0 0 30 2 *"]), STR
)


#: Every ``client.NAMESPACE.METHOD`` that METHODS calls (``sessions.post``: POST).
GENERATED: set[str] = {"sessions.post"}


def _m(
    path: str,
    *args: st.SearchStrategy[Any],
    required: dict[str, st.SearchStrategy[Any]] | None = None,
    **kwargs: st.SearchStrategy[Any],
) -> Any:
    """A strategy of calls to ``path``; each of ``kwargs`` is present or not."""
    GENERATED.add(path)
    return st.builds(
        _method,
        st.just(path),
        st.tuples(*args),
        st.fixed_dictionaries(required or {}, optional=kwargs),
    )


METHODS = st.one_of(
    # sessions, rooms and members
    _m(
        "sessions.create",
        AGENT_REF,
        name=st.one_of(st.none(), GOOD_TEXT, STR),
        members=st.one_of(st.lists(AGENT_REF, max_size=3), WRONG, STR),
        burst_budget=NUM,
        unattended=st.one_of(st.booleans(), WRONG),
        permission_mode=st.one_of(st.sampled_from(["default", "plan", "nope"]), STR),
    ),
    _m("sessions.add_member", ID, AGENT_REF),
    _m("sessions.remove_member", ID, AGENT_REF),
    _m("sessions.rooms", NUM, archived=st.one_of(st.booleans(), WRONG)),
    _m("sessions.get", ID),
    _m(
        "sessions.list",
        st.one_of(st.none(), AGENT_REF),
        NUM,
        tree=st.one_of(st.none(), ID),
        archived=st.one_of(st.booleans(), WRONG),
    ),
    _m("sessions.rename", ID, STR),
    # Never the base session archived: the calls after it would all meet session.archived.
    # (Not generated text either: a prefix of "base" names it.)
    _m(
        "sessions.archive",
        st.one_of(WRONG, st.sampled_from([OTHER, "", "\x00", "\ud800", "zz-missing", "x" * 300])),
        reason=STR,
    ),
    _m(
        "sessions.stop",
        ID,
        command_id=st.one_of(st.none(), st.sampled_from(["c1", "c2"]), STR),
        reason=STR,
    ),
    _m("sessions.entries", ID, NUM, NUM),
    _m("sessions.watch", ID, NUM, SECONDS),
    _m("sessions.wait_for_reply", ID, NUM, SECONDS),
    _m(
        "sessions.fork",
        ID,
        NUM,
        agent_id=st.one_of(st.none(), AGENT_REF),
        name=st.one_of(st.none(), GOOD_TEXT, STR),
    ),
    _m("sessions.attachment", ID, NUM),
    _m("sessions.queue", ID),
    _m("sessions.page", st.one_of(st.none(), AGENT_REF), NUM, st.one_of(st.none(), STR)),
    _m("sessions.search", STR, st.one_of(st.none(), AGENT_REF), NUM),
    _m("sessions.compact", ID, required={"timeout": SECONDS}),
    # jobs
    _m("jobs.get", ID),
    _m("jobs.list", limit=NUM),
    _m("jobs.wait", ID, SECONDS),
    _m("jobs.totals", st.one_of(st.none(), ID), st.one_of(st.none(), ID)),
    # Always a timeout: the default waits 30 s for a job that never runs here.
    _m(
        "jobs.output",
        ID,
        required={"timeout": SECONDS},
        block=st.one_of(st.booleans(), WRONG),
        full=st.one_of(st.booleans(), WRONG),
    ),
    _m(
        "jobs.cancel",
        st.one_of(st.just(OTHER), TEXT, WRONG),
        command_id=st.one_of(st.none(), STR),
        reason=STR,
        expected_version=NUM,
    ),
    # agents
    _m("agents.get", AGENT_REF),
    _m("agents.list"),
    _m("agents.put", st.one_of(WRONG, STR, st.dictionaries(TEXT, JSON, max_size=3))),
    _m("agents.put_many", st.one_of(WRONG, STR, st.lists(st.dictionaries(TEXT, JSON), max_size=2))),
    # deliveries
    _m("deliveries.get", ID),
    _m(
        "deliveries.list",
        ID,
        direction=st.one_of(st.sampled_from(["in", "out", "both"]), STR),
        limit=NUM,
        status=st.one_of(st.none(), st.sampled_from(["accepted", "failed"]), STR),
    ),
    _m(
        "deliveries.send",
        ID,
        STR,
        reply=st.one_of(st.sampled_from(["none", "completion"]), STR),
        sender=st.one_of(st.none(), SENDER, WRONG),
        from_session=st.one_of(st.none(), ID),
    ),
    _m("deliveries.result", ID),
    _m("deliveries.status", ID),
    # events
    _m("events.list", ID, NUM, NUM),
    # Always a timeout: followed without one, it waits for events that never come.
    _m(
        "events.follow",
        ID,
        NUM,
        st.sampled_from([0, 0.01, -1, float("nan"), float("inf"), 2**70, "0.01", True]),
    ),
    # schedules
    _m(
        "schedules.add",
        AGENT_REF,
        unattended=st.one_of(st.booleans(), WRONG),
        prompt=STR,
        cron=CRON,
        interval_seconds=NUM,
        timezone=st.one_of(st.sampled_from(["UTC", "Europe/Paris", "Mars/Base"]), STR),
        target=st.one_of(st.sampled_from(["new", "session"]), STR),
        session_id=ID,
        max_fires=NUM,
        nope=ANY_ARG,
    ),
    _m("schedules.update", ID, prompt=STR, enabled=st.one_of(st.booleans(), WRONG), cron=CRON),
    _m("schedules.pause", ID),
    _m("schedules.resume", ID),
    _m("schedules.remove", ID),
    _m("schedules.get", ID),
    _m("schedules.list", st.one_of(st.none(), AGENT_REF)),
    _m("schedules.fires", ID, NUM),
    # approvals
    _m(
        "approvals.decide",
        ID,
        st.one_of(st.sampled_from(["approve", "deny"]), STR),
        by=st.one_of(st.none(), SENDER, WRONG),
    ),
    _m("approvals.pending", st.one_of(st.none(), ID)),
    _m("approvals.get", ID),
    # keys and projects: reads, and refusals of changes (no limit is changed)
    _m("keys.list", st.one_of(st.none(), STR)),
    _m("keys.revoke", ID),
    _m(
        "keys.create",
        STR,
        st.one_of(st.just("default"), STR),
        st.one_of(st.none(), st.just(["nope"]), st.just("session.write"), WRONG),
        label=st.one_of(st.none(), STR),
    ),
    _m("projects.get", st.one_of(st.just("default"), STR)),
    _m("projects.list"),
    _m("projects.set_limits", st.one_of(TEXT, WRONG), NUM, NUM),
    # webhooks: the outbox's reads, a retry of an unknown delivery, the signing secret
    _m("webhooks.list", state=st.one_of(st.none(), STR), limit=LIMIT),
    _m("webhooks.retry", ID),
    _m("webhooks.secret"),
    _m("webhooks.rotate_secret"),
)


@PROPERTY
@given(calls=st.lists(METHODS, min_size=1, max_size=3))
def test_every_public_call_gets_a_code_agrees_across_stacks_and_writes_nothing_when_refused(
    sides: list[Side], calls: list[Callable[[Side], Any]]
) -> None:
    for call in calls:
        result = agree(sides, call)
        detail = result[1] if result[0] == "error" else ""
        event(f"{call.__qualname__.rsplit('.', 1)[0]}: {result[0]} {detail}")


def test_every_public_method_of_the_client_is_generated(sides: list[Side]) -> None:
    """A method added to a namespace of ``chaz.Client`` must join METHODS."""
    client = sides[0].client
    public = {
        f"{name}.{method}"
        for name, namespace in vars(client).items()
        if not name.startswith("_") and type(namespace).__module__.startswith("chaz.client.")
        for method in dir(namespace)
        if not method.startswith("_") and callable(getattr(namespace, method))
    }
    assert len(public) > 50, sorted(public)
    assert public - GENERATED == set()


# -- every registered tool in an interactive turn ------------------------------------


def _codes(cls: type[ChazError]) -> set[str]:
    return {cls.code}.union(*(_codes(sub) for sub in cls.__subclasses__()))


#: Every code chaz.errors defines.
KNOWN_CODES = frozenset(_codes(ChazError))

#: Keys whose values bound a wait: always short or refused.
WAITS = frozenset({"timeout", "seconds", "block"})


#: Keys that name a session: mostly the base session, so success paths are walked.
SESSION_KEYS = frozenset({"to", "target_session_id", "session_id", "start_from"})
TYPED: dict[str | None, st.SearchStrategy[Any]] = {
    "string": st.one_of(GOOD_TEXT, GOOD_TEXT, TEXT),
    "integer": st.one_of(st.integers(min_value=-2, max_value=60), st.just(2**70)),
    "number": st.one_of(st.integers(min_value=-2, max_value=60), st.just(float("inf"))),
    "boolean": st.booleans(),
}


def _args_for(name: str) -> st.SearchStrategy[Any]:
    spec = default_registry().specs([name])[0]
    properties: dict[str, Any] = spec.parameters.get("properties", {})
    wrong: st.SearchStrategy[Any] = st.one_of(JSON_LEAF, st.just({}), st.just([]))

    def value(key: str) -> st.SearchStrategy[Any]:
        if key in WAITS:
            return SECONDS
        if key in SESSION_KEYS and name == "archive_agent":
            # Never the base session: the calls after it would all meet session.archived.
            return st.one_of(st.just("missing"), wrong)
        if key in SESSION_KEYS:
            return st.one_of(
                st.just(BASE), st.just(BASE), st.sampled_from([OTHER, "missing"]), wrong
            )
        if key in ("job_id", "schedule_id", "todo_id"):
            return st.one_of(st.just(JOB), st.just("missing"), wrong)
        if key in ("agent_id", "target_agent_id"):
            return st.one_of(st.just("bot"), st.just("bot"), wrong)
        typed = TYPED.get(properties[key].get("type"), GOOD_TEXT)
        return st.one_of(typed, typed, typed, typed, wrong)

    # A wait always given, and short or refused: the defaults wait for jobs that never run here.
    required = set(spec.parameters.get("required", [])) | ({"timeout", "seconds"} & set(properties))
    args = st.fixed_dictionaries(
        {k: value(k) for k in properties if k in required},
        optional={k: value(k) for k in properties if k not in required},
    )
    # In the background: a child's turn must not run inline here.
    if name == "agent":
        args = args.map(lambda d: {**d, "run_in_background": True})
    if name == "spawn_agent":
        args = args.map(lambda d: {**d, "async": True})
    first = list(properties)[:1]
    hostile = st.one_of(
        args.map(lambda d: {**d, "nope": 1}),
        args.map(lambda d: {**d, **dict.fromkeys(first, "x" * (CAP + 1))}),
        st.sampled_from(["not json", "[1]", "", "{", '{"a": ' * 200]),
        TEXT,
    )
    return st.one_of(args, args, args, hostile)


def _registered(name: str, args: Any) -> Callable[[Side], Any]:
    def call(side: Side) -> Any:
        assert side.turn is not None
        arguments = args if isinstance(args, str) else json.dumps(_resolve(side, args))
        out = side.client.tools.invoke(
            ToolCallRequest(id=f"c{abs(hash(json.dumps(args)))}", name=name, arguments=arguments),
            side.turn,
        )
        assert isinstance(out, ToolOutcome)
        if not out.is_error:
            return ("tool-ok",)
        code = json.loads(out.output)["error"]["code"]
        assert code in KNOWN_CODES or code.startswith("tool."), out.output
        assert code != "tool.crashed", out.output
        return ("tool-error", code)

    call.__qualname__ = f"{name}.call"
    return call


def _registered_outcome(side: Side, call: Callable[[Side], Any]) -> Outcome:
    before = rows(side.client)
    result = call(side)
    if result[0] == "tool-error":
        assert rows(side.client) == before, f"{result!r} left rows behind"
    return tuple(result)


REGISTERED = st.sampled_from(sorted(default_registry().names())).flatmap(
    lambda name: st.builds(_registered, st.just(name), _args_for(name))
)


@PROPERTY
@given(calls=st.lists(REGISTERED, min_size=1, max_size=3))
def test_every_tool_gives_an_outcome_with_a_known_code_on_both_stacks(
    sides: list[Side], calls: list[Callable[[Side], Any]]
) -> None:
    for call in calls:
        embedded, server = (_registered_outcome(s, call) for s in sides)
        assert embedded == server
        event(f"{call.__qualname__.split('.')[0]}: {' '.join(embedded)}")
