"""The pure rules of chaz: processing rule, job state machine, senders, limits, specs."""

from __future__ import annotations

import itertools
from typing import Any

import pydantic
import pytest

from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.entries import EntryType, parse_sender
from chaz.domain.jobs import ACTIVE, TERMINAL, JobStatus, check_transition
from chaz.domain.processing import admits_turn
from chaz.domain.validation import check_agent_id, check_session_name, check_tool_name
from chaz.errors import IllegalTransition, ValidationError
from chaz.settings import Settings, mask_url

# -- the processing rule (docs/contracts.md#processing-rule) -------------------

KNOWN = frozenset({"planner", "echo"})

#: sender -> whether a Message from it admits a turn.
SENDERS: dict[str, bool] = {
    "user:alice": True,
    "system:scheduler": True,
    "agent:planner": False,  # a known agent: never re-triggers
    "agent:x": True,  # an agent name nobody registered is just an outside sender
}


@pytest.mark.parametrize("sender", sorted(SENDERS))
@pytest.mark.parametrize("entry_type", list(EntryType))
def test_admits_turn_for_every_type_and_sender(entry_type: EntryType, sender: str) -> None:
    if entry_type is EntryType.DIRECTIVE:
        expected = True
    elif entry_type is EntryType.MESSAGE:
        expected = SENDERS[sender]
    else:
        expected = False
    assert admits_turn(entry_type, sender, KNOWN) is expected


def test_every_entry_type_is_covered() -> None:
    # If a type is added, the table above must be thought through again.
    assert {t.value for t in EntryType} == {
        "message",
        "directive",
        "tool_call",
        "tool_result",
        "ack",
        "error",
        "summary",
        "approval_request",
        "approval_decision",
        "attach",
        "notice",
    }


def test_known_agents_decide_not_the_prefix() -> None:
    assert admits_turn(EntryType.MESSAGE, "agent:x", set()) is True
    assert admits_turn(EntryType.MESSAGE, "agent:x", {"x"}) is False
    # A user that happens to share an agent's name is still a user.
    assert admits_turn(EntryType.MESSAGE, "user:planner", KNOWN) is True


def test_admits_turn_rejects_a_malformed_sender() -> None:
    with pytest.raises(ValidationError):
        admits_turn(EntryType.MESSAGE, "nobody", KNOWN)


# -- the job state machine -----------------------------------------------------

Q, R, S = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.STOPPING
W = JobStatus.WAITING_APPROVAL
OK, FAIL, CANC, INTR = (
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
    JobStatus.INTERRUPTED,
)

ALLOWED: set[tuple[JobStatus, JobStatus]] = {
    (Q, R),
    (Q, CANC),
    (R, OK),
    (R, FAIL),
    (R, S),
    (R, INTR),
    (S, CANC),
    (S, FAIL),
    (S, INTR),
    # Approvals (docs/approvals.md): suspend, then a decision or a cancel.
    (R, W),
    (W, Q),
    (W, CANC),
}
ILLEGAL = sorted(
    set(itertools.product(JobStatus, JobStatus)) - ALLOWED, key=lambda p: (p[0].value, p[1].value)
)


@pytest.mark.parametrize(("current", "target"), sorted(ALLOWED, key=str))
def test_allowed_transitions_pass(current: JobStatus, target: JobStatus) -> None:
    check_transition(current, target)


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_illegal_transitions_raise(current: JobStatus, target: JobStatus) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(current, target)
    assert info.value.code == "job.illegal_transition"
    assert info.value.details == {"current": current.value, "target": target.value}


@pytest.mark.parametrize(
    ("current", "target"),
    [(OK, R), (Q, OK), (CANC, Q), (Q, INTR), (FAIL, R), (INTR, R), (R, Q), (S, R), (R, CANC)],
)
def test_named_illegal_transitions(current: JobStatus, target: JobStatus) -> None:
    assert (current, target) in ILLEGAL
    with pytest.raises(IllegalTransition):
        check_transition(current, target)


def test_terminal_states_are_final_and_partition_the_states() -> None:
    assert set(JobStatus) == TERMINAL | ACTIVE
    assert not TERMINAL & ACTIVE
    for status in JobStatus:
        assert status.terminal is (status in TERMINAL)
    for done in TERMINAL:
        for target in JobStatus:
            with pytest.raises(IllegalTransition):
                check_transition(done, target)


# -- senders -------------------------------------------------------------------


@pytest.mark.parametrize(
    "sender",
    [
        "",
        "user",
        "user:",
        ":alice",
        "bot:alice",
        "User:alice",
        "user :alice",
        "user:al ice",
        "agent:x:y",
        "agent:x/y",
        "system:" + "a" * 129,
        "user:älice",
    ],
)
def test_parse_sender_rejects(sender: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_sender(sender)
    assert info.value.code == "request.invalid"


@pytest.mark.parametrize("sender", ["user:alice\n", "agent:planner\n"])
def test_parse_sender_rejects_a_trailing_newline(sender: str) -> None:
    with pytest.raises(ValidationError):
        parse_sender(sender)


def test_a_known_agent_cannot_retrigger_itself_with_a_newline() -> None:
    try:
        admitted = admits_turn(EntryType.MESSAGE, "agent:planner\n", KNOWN)
    except ValidationError:
        admitted = False
    assert admitted is False


@pytest.mark.parametrize(
    ("sender", "parsed"),
    [
        ("user:alice", ("user", "alice")),
        ("agent:re.search-1_x", ("agent", "re.search-1_x")),
        ("system:bob@example.com", ("system", "bob@example.com")),
        ("system:" + "a" * 128, ("system", "a" * 128)),
    ],
)
def test_parse_sender_accepts(sender: str, parsed: tuple[str, str]) -> None:
    assert parse_sender(sender) == parsed


# -- limits --------------------------------------------------------------------

QUOTA_FIELDS = (
    "max_queued_per_session",
    "max_jobs_per_session",
    "max_live_per_tree",
    "max_turn_steps",
)
VALUES: list[int | None] = [None, 1, 5, 100]


@pytest.mark.parametrize("field", QUOTA_FIELDS)
def test_limits_narrowed_only_narrows(field: str) -> None:
    for a, b in itertools.product(VALUES, VALUES):
        merged = Limits(**{field: a}).narrowed(Limits(**{field: b}))
        got = getattr(merged, field)
        if a is None and b is None:
            assert got is None
        else:
            present = [v for v in (a, b) if v is not None]
            assert got == min(present), (field, a, b, got)
            # Never looser than either side that set a value.
            assert all(got <= v for v in present)


def test_limits_narrowed_by_none_is_unchanged() -> None:
    limits = Limits(max_queued_per_session=3, max_call_depth=2)
    assert limits.narrowed(None) == limits


@pytest.mark.parametrize("field", ["max_call_depth", "max_spawn_fanout", "max_messages"])
def test_topology_limits_narrow_and_zero_means_unlimited(field: str) -> None:
    def narrowed(a: int | None, b: int | None) -> int | None:
        value: int | None = getattr(Limits(**{field: a}).narrowed(Limits(**{field: b})), field)
        return value

    assert narrowed(3, 1) == 1
    assert narrowed(1, 3) == 1
    # docs/contracts.md#topology: a topology limit of 0 disables the check,
    # so it is the loosest value and never wins a narrowing against a real
    # limit.
    assert narrowed(0, 5) == 5
    assert narrowed(5, 0) == 5
    assert narrowed(0, 0) == 0
    assert narrowed(None, 0) == 0
    assert Limits().topology(field) == {"max_call_depth": 1}.get(field, 8)
    assert Limits(**{field: 0}).topology(field) == 0


def test_limits_narrowed_is_a_fold() -> None:
    base = Limits(max_queued_per_session=10, max_jobs_per_session=None, max_live_per_tree=4)
    agent = Limits(max_queued_per_session=None, max_jobs_per_session=20, max_live_per_tree=8)
    session = Limits(max_queued_per_session=5)
    merged = base.narrowed(agent).narrowed(session)
    assert merged.max_queued_per_session == 5
    assert merged.max_jobs_per_session == 20
    assert merged.max_live_per_tree == 4


def test_limits_unset_call_depth_inherits() -> None:
    agent = Limits(max_call_depth=3)
    session = Limits(max_queued_per_session=5)
    assert agent.narrowed(session).max_call_depth == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_queued_per_session": 0},
        {"max_jobs_per_session": -1},
        {"max_live_per_tree": 0},
        {"max_turn_steps": 0},
        {"max_call_depth": -1},
        {"unknown": 1},
    ],
)
def test_limits_reject_bad_values(kwargs: dict[str, Any]) -> None:
    # The Python API answers with chaz's code and the field, not pydantic's error.
    with pytest.raises(ValidationError) as info:
        Limits(**kwargs)
    assert info.value.code == "request.invalid"
    assert info.value.field == next(iter(kwargs))
    with pytest.raises(ValidationError):
        Limits.parse(kwargs)
    with pytest.raises(pydantic.ValidationError):  # pydantic's own API keeps its error
        Limits.model_validate(kwargs)


# -- agent specs ---------------------------------------------------------------

SCRIPT: list[dict[str, Any]] = [{"steps": [{"say": "hi"}]}]


def test_a_good_spec_validates() -> None:
    spec = AgentSpec(id="a.b-c_1", script=SCRIPT, tools=["echo"])
    assert spec.model == "scripted"
    assert AgentSpec.model_validate(spec.model_dump(mode="json")) == spec
    assert AgentSpec(id="gpt", model="openai:gpt-4o-mini").script is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"id": "", "script": SCRIPT}, id="empty-id"),
        pytest.param({"id": "has space", "script": SCRIPT}, id="space-in-id"),
        pytest.param({"id": "a/b", "script": SCRIPT}, id="slash-in-id"),
        pytest.param({"id": "x" * 65, "script": SCRIPT}, id="long-id"),
        pytest.param({"id": "a:b", "script": SCRIPT}, id="colon-in-id"),
        pytest.param({"id": "a"}, id="scripted-without-script"),
        pytest.param({"id": "a", "script": []}, id="scripted-with-empty-script"),
        pytest.param({"id": "a", "model": "claude", "script": SCRIPT}, id="unknown-model"),
        pytest.param(
            {"id": "a", "script": [{"match": "(", "steps": [{"say": "x"}]}]}, id="bad-regex"
        ),
        pytest.param(
            {"id": "a", "script": [{"steps": [{"say": "x", "echo": True}]}]}, id="two-kinds"
        ),
        pytest.param(
            {"id": "a", "script": [{"steps": [{"say": "x", "call": "echo"}]}]}, id="say-and-call"
        ),
        pytest.param({"id": "a", "script": [{"steps": [{}]}]}, id="no-kind"),
        pytest.param({"id": "a", "script": [{"steps": []}]}, id="no-steps"),
        pytest.param(
            {"id": "a", "script": [{"steps": [{"say": "x", "args": {}}]}]}, id="args-without-call"
        ),
        pytest.param({"id": "a", "script": [{"steps": [{"sleep": -1}]}]}, id="negative-sleep"),
        pytest.param(
            {"id": "a", "script": [{"steps": [{"say": "x"}], "extra": 1}]}, id="unknown-rule-key"
        ),
        pytest.param({"id": "a", "script": SCRIPT, "colour": "red"}, id="unknown-field"),
    ],
)
def test_bad_specs_raise_pydantic_validation_error(data: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        AgentSpec.model_validate(data)


def test_building_a_bad_spec_raises_chaz_validation_error_with_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(id="has space", script=SCRIPT)
    assert (info.value.code, info.value.field) == ("request.invalid", "id")
    with pytest.raises(ValidationError) as info:
        AgentSpec(id="a", script=SCRIPT, limits={"max_turn_steps": 0})
    assert info.value.field == "limits.max_turn_steps"
    with pytest.raises(ValidationError) as info:
        AgentSpec.parse({"id": "a", "script": SCRIPT, "colour": "red"})
    assert info.value.field == "colour"


# -- identifiers: fullmatch, never `$` (a trailing newline) -----------------------


@pytest.mark.parametrize("agent_id", ["nl\n", "nl\r\n", "a\nb", "\nnl"])
def test_agent_id_with_a_newline_is_refused(agent_id: str) -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(id=agent_id, script=SCRIPT)
    assert info.value.field == "id"
    with pytest.raises(pydantic.ValidationError):
        AgentSpec.model_validate({"id": agent_id, "script": SCRIPT})
    with pytest.raises(ValidationError):
        check_agent_id(agent_id)


@pytest.mark.parametrize("name", ["echo\n", "echo\r", "ec ho", "", "x" * 65])
def test_tool_name_with_a_newline_or_bad_character_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec(id="a", script=SCRIPT, tools=[name])
    assert info.value.field == "tools.0"
    with pytest.raises(ValidationError):
        check_tool_name(name)


@pytest.mark.parametrize(
    "name", ["talk\n", "ta\nlk", "talk\x00", "\ttalk", "a\x7f", "x" * 256, "", "   "]
)
def test_session_name_with_a_control_character_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_session_name(name)
    assert info.value.field == "name"


def test_session_names_keep_their_inner_spaces_and_lose_the_outer_ones() -> None:
    assert check_session_name("  my talk  ") == "my talk"
    assert check_session_name("x" * 255) == "x" * 255
    assert check_session_name("café ☕") == "café ☕"


def test_sleep_zero_is_a_valid_step() -> None:
    AgentSpec(id="a", script=[{"steps": [{"sleep": 0}, {"say": "x"}]}])


# -- settings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "postgresql+psycopg://chaz:s3cr3t@db.example:5432/chaz",
            "postgresql+psycopg://chaz:****@db.example:5432/chaz",
        ),
        ("redis://:s3cr3t@127.0.0.1:6379/0", "redis://:****@127.0.0.1:6379/0"),
        ("rediss://default:s3:cr3t@host:6380", "rediss://default:****@host:6380"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("postgresql://chaz@db/chaz", "postgresql://chaz@db/chaz"),
        ("sqlite:////tmp/x/chaz.db", "sqlite:////tmp/x/chaz.db"),
        ("unix:///tmp/x/redis.sock", "unix:///tmp/x/redis.sock"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_settings_masked_hides_every_secret(tmp_path: Any) -> None:
    settings = Settings(
        _env_file=None,
        home=tmp_path,
        database_url="postgresql+psycopg://chaz:pw-db-1@db:5432/chaz",
        redis_url="redis://:pw-redis-2@cache:6379/0",
        openai_api_key="sk-pw-key-3",
    )
    masked = settings.masked()
    text = repr(masked)
    for secret in ("pw-db-1", "pw-redis-2", "sk-pw-key-3"):
        assert secret not in text
    assert masked["database_url"] == "postgresql+psycopg://chaz:****@db:5432/chaz"
    assert masked["redis_url"] == "redis://:****@cache:6379/0"
    assert masked["openai_api_key"] == "****"
    assert masked["home"] == str(tmp_path)


def test_settings_masked_fills_in_the_embedded_defaults(tmp_path: Any) -> None:
    settings = Settings(_env_file=None, home=tmp_path)
    masked = settings.masked()
    assert masked["database_url"] == f"sqlite:///{tmp_path.resolve() / 'chaz.db'}"
    assert masked["redis_url"] == f"unix://{tmp_path.resolve() / 'redis.sock'}"
    assert masked["openai_api_key"] is None


def test_a_client_reads_the_environment_when_it_is_constructed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chaz

    monkeypatch.setenv("CHAZ_HOME", str(tmp_path / "first"))
    first = chaz.Client(migrate=False)
    monkeypatch.setenv("CHAZ_HOME", str(tmp_path / "second"))
    monkeypatch.setenv("CHAZ_MAX_TURN_STEPS", "7")
    second = chaz.Client(migrate=False)
    assert first.settings.home == tmp_path / "first"
    assert (second.settings.home, second.settings.max_turn_steps) == (tmp_path / "second", 7)
    first.close()
    second.close()
