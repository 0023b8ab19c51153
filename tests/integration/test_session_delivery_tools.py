"""The writing session tools (docs/contracts.md#session-tools) called through the registry, as a
turn calls them.

No worker runs here: each test posts a person's Message (so a real,
interactive job exists), builds the ToolContext a turn would give its tools,
and invokes ``session_send``, ``session_create``, ``session_deliveries`` and
``session_rename`` through :class:`~chaz.runtime.registry.ToolRegistry`:
argument checks, refusals that write nothing, a redelivered call, renames,
the person's twins, and the reconciler's sweep of a stuck request.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

import chaz
from chaz.domain.deliveries import DeliveryKind, DeliveryState
from chaz.domain.sessions import NameSource
from chaz.errors import SessionArchived, SessionNotFound, ValidationError
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.registry import ToolContext
from chaz.store.models import DeliveryRow, JobRow, SessionRow
from chaz.usecases import deliveries, naming
from chaz.usecases.turns import TurnRunner
from tests.support.stack import Stack
from tests.support.turns import interactive_turn

SESSION_TOOLS = ["session_send", "session_create", "session_deliveries", "session_rename", "echo"]
BOT = chaz.AgentSpec(id="bot", tools=SESSION_TOOLS, script=[{"steps": [{"say": "ok"}]}])
OTHER = chaz.AgentSpec(id="other", tools=["echo"], script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture
def client(stack: Stack) -> chaz.Client:
    stack.client.agents.put(BOT)
    stack.client.agents.put(OTHER)
    return stack.client


def _turn(
    client: chaz.Client, session_id: str, sender: str = "user:alice", type: str = "message"
) -> ToolContext:
    """The context of the turn an entry from ``sender`` admits (it is not run)."""
    return interactive_turn(client, session_id, SESSION_TOOLS, sender=sender, type=type)


def _call(
    client: chaz.Client, ctx: ToolContext, name: str, args: dict[str, Any], call_id: str = "c1"
) -> tuple[dict[str, Any], bool]:
    outcome = client.tools.invoke(
        ToolCallRequest(id=call_id, name=name, arguments=json.dumps(args)), ctx
    )
    return json.loads(outcome.output), outcome.is_error


def _code(client: chaz.Client, ctx: ToolContext, name: str, args: dict[str, Any]) -> str:
    out, is_error = _call(client, ctx, name, args, call_id=f"c{abs(hash(json.dumps(args)))}")
    assert is_error, out
    return str(out["error"]["code"])


def _counts(client: chaz.Client) -> tuple[int, int, int]:
    """Sessions, deliveries and jobs in the whole store."""
    with client.services.store.engine.connect() as conn:
        return (
            int(conn.scalar(select(func.count()).select_from(SessionRow)) or 0),
            int(conn.scalar(select(func.count()).select_from(DeliveryRow)) or 0),
            int(conn.scalar(select(func.count()).select_from(JobRow)) or 0),
        )


def test_bad_arguments_and_refused_targets_write_nothing(client: chaz.Client) -> None:
    me = client.sessions.create("bot", name="caller")
    target = client.sessions.create("other", name="target")
    gone = client.sessions.create("other", name="gone")
    client.sessions.archive(gone.id)
    elsewhere = client.sessions.create("other")
    with client.services.store.engine.begin() as conn:
        conn.execute(
            update(SessionRow).where(SessionRow.id == elsewhere.id).values(project="another")
        )
    ctx = _turn(client, me.id)
    before = _counts(client)
    huge = "x" * (client.settings.max_content_bytes + 1)
    send = "session_send"
    cases: list[tuple[str, dict[str, Any], str]] = [
        (send, {"target_session_id": target.id, "message": huge}, "request.too_large"),
        (send, {"target_session_id": target.id, "message": ""}, "tool.invalid_arguments"),
        (send, {"target_session_id": target.id, "message": "   "}, "request.invalid"),
        (
            send,
            {"target_session_id": target.id, "message": "m", "reply": "maybe"},
            "tool.invalid_arguments",
        ),
        (
            send,
            {"target_session_id": target.id, "message": "m", "sender": "user:x"},
            "tool.invalid_arguments",
        ),
        (send, {"target_session_id": "target", "message": "m"}, "session.not_found"),  # a name
        (send, {"target_session_id": "0" * 16, "message": "m"}, "session.not_found"),
        (send, {"target_session_id": elsewhere.id, "message": "m"}, "session.not_found"),
        (send, {"target_session_id": gone.id, "message": "m"}, "session.archived"),
        (send, {"target_session_id": me.id, "message": "m"}, "topology.self"),
        ("session_create", {"message": "m", "name": "n" * 256}, "request.invalid"),
        ("session_create", {"message": "m", "name": "target"}, "conflict.name_taken"),
        ("session_create", {"message": "m", "target_agent_id": "nobody"}, "agent.not_found"),
        ("session_create", {"message": huge}, "request.too_large"),
        ("session_create", {"message": "m", "model": "gpt"}, "tool.invalid_arguments"),
        ("session_deliveries", {"limit": 101}, "tool.invalid_arguments"),
        ("session_deliveries", {"direction": "sideways"}, "tool.invalid_arguments"),
        ("session_deliveries", {"request_id": "0" * 16}, "delivery.not_found"),
        ("session_rename", {"name": "   "}, "request.invalid"),
        ("session_rename", {"name": "r" * 256}, "request.invalid"),
        ("session_rename", {"name": "a\x01b"}, "request.invalid"),
        ("session_rename", {"name": "target"}, "conflict.name_taken"),
        ("session_rename", {"name": "x", "target_session_id": gone.id}, "session.archived"),
        ("session_rename", {"name": "x", "target_session_id": "0" * 16}, "session.not_found"),
        ("session_rename", {"name": "x", "target_session_id": elsewhere.id}, "session.not_found"),
        ("session_rename", {"name": "x", "target_session_id": "target"}, "session.not_found"),
    ]
    got = [(name, args, _code(client, ctx, name, args)) for name, args, _ in cases]
    assert [c for _, _, c in got] == [c for _, _, c in cases], got
    assert _counts(client) == before
    assert client.sessions.get(me.id).name == "caller"
    assert client.sessions.get(gone.id).name == "gone"


def test_a_redelivered_call_makes_one_request_and_a_new_call_another(client: chaz.Client) -> None:
    me = client.sessions.create("bot")
    target = client.sessions.create("other")
    ctx = _turn(client, me.id)
    args = {"target_session_id": target.id, "message": "sum it up", "reply": "completion"}
    first, err = _call(client, ctx, "session_send", args, call_id="call_1_0")
    again, err2 = _call(client, ctx, "session_send", args, call_id="call_1_0")
    assert not err and not err2
    assert again == first and first["status"] == "accepted"  # queued: no worker runs it
    assert first["reply"] == "completion" and first["targetSessionId"] == target.id
    sent = [
        d
        for d in client.deliveries.list(target.id, direction="in")
        if d.kind.value == "session_send"
    ]
    assert [d.id for d in sent] == [first["requestId"]]
    assert client.sessions.queue(target.id)[0].id == first["executionId"]
    # The Directive the target reads says who asks and that its answer goes back.
    directive = client.sessions.entries(target.id)[-1]
    assert directive.content.endswith("sum it up") and first["requestId"] in directive.content
    # Another call of the same turn is distinct work: a second request, queued behind.
    other, _ = _call(client, ctx, "session_send", args, call_id="call_2_0")
    assert other["requestId"] != first["requestId"]
    assert [j.id for j in client.sessions.queue(target.id)] == [
        first["executionId"],
        other["executionId"],
    ]
    # session_create retried with its call id makes one session.
    made, _ = _call(client, ctx, "session_create", {"message": "new work"}, call_id="call_3_0")
    remade, _ = _call(client, ctx, "session_create", {"message": "new work"}, call_id="call_3_0")
    assert remade["sessionId"] == made["sessionId"] and remade["requestId"] == made["requestId"]
    assert made["created"] and made["agentId"] == "bot"


def test_session_tools_refuse_turns_no_person_started(client: chaz.Client) -> None:
    me = client.sessions.create("bot")
    target = client.sessions.create("other")
    calls = [
        ("session_send", {"target_session_id": target.id, "message": "m"}),
        ("session_create", {"message": "m"}),
        ("session_deliveries", {}),
        ("session_rename", {"name": "nope"}),
    ]
    # An unknown agent's or a bridge's Message, a person's Directive: not a person's Message.
    for sender, kind in (
        ("agent:stranger", "message"),
        ("system:bridge", "message"),
        ("user:alice", "directive"),
    ):
        ctx = _turn(client, me.id, sender=sender, type=kind)
        before = _counts(client)
        assert [_code(client, ctx, n, a) for n, a in calls] == ["session.tool_forbidden"] * 4
        assert _counts(client) == before
    # A delivered turn (here, one a person's request admitted) is not interactive either.
    request = client.deliveries.send(me.id, "do it", sender="user:alice")
    assert request.job_id is not None
    delivered = _turn(client, target.id)
    delivered.session_id, delivered.job_id = me.id, request.job_id
    assert _code(client, delivered, "session_deliveries", {}) == "session.tool_forbidden"


def test_session_create_and_its_deliveries(client: chaz.Client) -> None:
    me = client.sessions.create("bot")
    ctx = _turn(client, me.id)
    made, err = _call(
        client,
        ctx,
        "session_create",
        {"message": "draft the plan", "name": "  planning  ", "description": "the Q3 plan"},
    )
    assert not err, made
    child = client.sessions.get(made["sessionId"])
    assert (child.name, child.description, child.agent_id) == ("planning", "the Q3 plan", "bot")
    assert child.name_source is NameSource.USER and child.project == me.project
    request = client.deliveries.get(made["requestId"])
    assert request.kind is DeliveryKind.SESSION_CREATE and request.reply.value == "completion"
    assert request.job_id == made["executionId"] and made["status"] == "accepted"
    # target_agent_id creates a session of that agent that continues its latest
    # live session of the project (a fork at that session's head).
    client.agents.put(chaz.AgentSpec(id="recaller", script=[{"steps": [{"say": "{context}"}]}]))
    older = client.sessions.create("recaller")
    latest = client.sessions.create("recaller")
    client.sessions.post(older.id, "touch", sender="user:alice")  # now the most recently active
    head = client.sessions.get(older.id).last_seq
    cont, err = _call(
        client, ctx, "session_create", {"message": "go on", "target_agent_id": "recaller"}, "c2"
    )
    assert not err and cont["created"], cont
    assert cont["sessionId"] not in (older.id, latest.id, me.id)
    continued = client.sessions.get(cont["sessionId"])
    assert continued.agent_id == cont["agentId"] == "recaller"
    assert (continued.fork_session_id, continued.fork_seq) == (older.id, head)

    listed, _ = _call(client, ctx, "session_deliveries", {"direction": "outgoing"}, "c3")
    assert [d["requestId"] for d in listed["deliveries"]] == [cont["requestId"], made["requestId"]]
    assert {d["status"] for d in listed["deliveries"]} == {"accepted"}
    assert _call(
        client, ctx, "session_deliveries", {"status": "consumed", "direction": "outgoing"}, "c4"
    )[0] == {"deliveries": []}
    one, _ = _call(client, ctx, "session_deliveries", {"request_id": made["requestId"]}, "c5")
    assert [d["kind"] for d in one["deliveries"]] == ["request"]
    # Nothing came into the caller's session.
    assert _call(client, ctx, "session_deliveries", {}, "c6")[0] == {"deliveries": []}
    # A session that neither sent nor received a request sees it as a missing one.
    stranger = _turn(client, client.sessions.create("bot").id)
    out, is_error = _call(client, stranger, "session_deliveries", {"request_id": made["requestId"]})
    assert is_error and out["error"]["code"] == "delivery.not_found"
    # The target sees it, from its side.
    into = _turn(client, continued.id)
    seen, _ = _call(client, into, "session_deliveries", {"request_id": cont["requestId"]})
    assert [d["requestId"] for d in seen["deliveries"]] == [cont["requestId"]]
    # Its first turn reads the older session's history, then the request.
    TurnRunner(client.services, client.tools).wake(continued.id, cont["executionId"])
    recalled = client.jobs.get(cont["executionId"]).result or ""
    assert recalled.index("touch") < recalled.index("go on"), recalled


def test_rename_rules_for_tools_and_people(client: chaz.Client) -> None:
    me = client.sessions.create("bot")
    ctx = _turn(client, me.id)
    made, _ = _call(client, ctx, "session_create", {"message": "write the report"})
    child = client.sessions.get(made["sessionId"])
    assert child.name_source is NameSource.AUTO and child.name
    done, err = _call(
        client,
        ctx,
        "session_rename",
        {"name": "  Quarterly report  ", "target_session_id": child.id},
        "c2",
    )
    assert not err and done == {"sessionId": child.id, "name": "Quarterly report"}
    renamed = client.sessions.get(child.id)
    assert renamed.name_source is NameSource.USER
    # Automatic naming (the chaz.rename task's use case) leaves an explicit name alone.
    assert naming.rename(client.services, child.id) is None
    assert client.sessions.get(child.id).name == "Quarterly report"
    # A rename starts no turn.
    assert [j.id for j in client.sessions.queue(child.id)] == [made["executionId"]]
    mine, _ = _call(client, ctx, "session_rename", {"name": "home"}, "c3")
    assert mine == {"sessionId": me.id, "name": "home"}

    # The person's twin has the same rules.
    assert client.sessions.rename(child.id, "  spaced  ").name == "spaced"
    with pytest.raises(ValidationError):
        client.sessions.rename(child.id, "x" * 256)
    with pytest.raises(ValidationError):
        client.sessions.rename(child.id, "   ")
    with pytest.raises(SessionNotFound):
        client.sessions.rename("0" * 16, "x")
    client.sessions.archive(child.id)
    with pytest.raises(SessionArchived):
        client.sessions.rename(child.id, "after the archive")
    assert client.sessions.get(child.id).name == "spaced"


def test_a_persons_request_and_the_sweep_of_a_stuck_one(client: chaz.Client) -> None:
    me = client.sessions.create("bot")
    target = client.sessions.create("other")
    with pytest.raises(ValidationError):
        client.deliveries.send(target.id, "m", reply="followup")
    with (
        chaz.Client(client.settings, migrate=False, project="another") as elsewhere,
        pytest.raises(SessionNotFound),
    ):
        elsewhere.deliveries.send(target.id, "m")
    request = client.deliveries.send(target.id, "report", reply="completion", from_session=me.id)
    assert request.kind is DeliveryKind.SESSION_SEND and request.sender_session_id == me.id
    assert client.deliveries.status(request.id) == "accepted"
    assert client.deliveries.result(request.id) is None
    assert [d.id for d in client.deliveries.list(target.id, status="accepted")] == [request.id]
    assert client.deliveries.list(target.id, status="consumed") == []

    # Its job ended without its policy applied (a crash between the two, simulated):
    # the reconciler's sweep finalizes it, and its result goes back, once.
    with client.services.store.engine.begin() as conn:
        conn.execute(
            update(JobRow)
            .where(JobRow.id == request.job_id)
            .values(status="succeeded", result="the answer", finished_at=func.now())
        )
    report = deliveries.sweep(client.services, timedelta(0))
    assert report.finalized == 1
    again = deliveries.sweep(client.services, timedelta(0))
    assert again.finalized == 0
    done = client.deliveries.get(request.id)
    assert done.state is DeliveryState.DONE and client.deliveries.status(request.id) == "consumed"
    assert done.metadata["result"]["text"] == "the answer"
    result = client.deliveries.result(request.id)
    assert result is not None and result.target_session_id == me.id
    assert result.metadata["text"] == "the answer" and result.state is DeliveryState.ADMITTED
    with client.services.store.engine.connect() as conn:
        results = conn.execute(
            text("SELECT count(*) FROM deliveries WHERE kind = 'result'")
        ).scalar()
    assert results == 1
    delivered = client.sessions.entries(me.id)[-1]
    assert delivered.metadata["result"]["request_id"] == request.id
    assert delivered.content.startswith(f"[result of request {request.id}")


def test_the_cli_sends_lists_and_shows_requests(stack: Stack, client: chaz.Client) -> None:
    from tests.acceptance.test_cli import chaz_cli, cli_env, ok

    me = client.sessions.create("bot", name="desk")
    target = client.sessions.create("other", name="worker")
    env = cli_env(settings=stack.settings)
    sent = json.loads(
        ok(
            chaz_cli(
                "deliveries",
                "send",
                target.id,
                "count the rows",
                "--reply",
                "completion",
                "--from",
                me.id,
                "--sender",
                "user:alice",
                "--json",
                env=env,
            )
        )
    )
    assert (sent["kind"], sent["reply"], sent["sender"]) == (
        "session_send",
        "completion",
        "user:alice",
    )
    shown = json.loads(ok(chaz_cli("deliveries", "get", sent["id"], "--json", env=env)))
    assert shown["status"] == "accepted" and shown["result"] is None
    listed = json.loads(
        ok(chaz_cli("deliveries", "ls", "worker", "--status", "accepted", "--json", env=env))
    )
    assert [d["id"] for d in listed] == [sent["id"]]
    assert "session_send" in ok(chaz_cli("deliveries", "ls", "worker", env=env))
    # A name is not an address for a request: exit 2, nothing sent.
    refused = chaz_cli("deliveries", "send", "worker", "hi", env=env)
    assert refused.returncode == 2 and "session.not_found" in refused.stderr
    assert len(client.deliveries.list(target.id)) == 1


def test_a_cancelled_request_fails_and_answers_only_when_asked_to(client: chaz.Client) -> None:
    me = client.sessions.create("bot")
    target = client.sessions.create("other")
    one_way = client.deliveries.send(target.id, "fyi", from_session=me.id)
    asked = client.deliveries.send(target.id, "and you?", reply="completion", from_session=me.id)
    for request in (one_way, asked):
        client.jobs.cancel(request.job_id or "")
        done = client.deliveries.get(request.id)
        assert (done.state, done.code) == (DeliveryState.FAILED, "job.cancelled")
        assert done.metadata["result"]["status"] == "failed"
        assert client.deliveries.status(request.id) == "failed"
    assert client.deliveries.result(one_way.id) is None
    result = client.deliveries.result(asked.id)
    assert result is not None and result.metadata["code"] == "job.cancelled"
    # Cancelling again changes nothing: still one result.
    client.jobs.cancel(asked.job_id or "")
    assert [d.id for d in client.deliveries.list(me.id, direction="in")] == [result.id]


def test_a_request_to_its_own_session_is_refused_before_any_approval(
    client: chaz.Client,
) -> None:
    # session_send needs a person's approval; one bound to fail asks nobody.
    client.agents.put(
        chaz.AgentSpec(
            id="selfish",
            tools=["session_send"],
            script=[
                {
                    "steps": [
                        {
                            "call": "session_send",
                            "args": {"target_session_id": "{session_id}", "message": "me"},
                        },
                        {"say": "{last_result}"},
                    ]
                }
            ],
        )
    )
    me = client.sessions.create("selfish")
    posted = client.sessions.post(me.id, "send yourself something", sender="user:alice")
    assert posted.job_id is not None
    TurnRunner(client.services, client.tools).wake(me.id, posted.job_id)
    job = client.jobs.get(posted.job_id)
    assert job.status.value == "succeeded", job.error
    assert json.loads(job.result or "{}")["error"]["code"] == "topology.self"
    assert client.approvals.pending() == []
    types = [e.type.value for e in client.sessions.entries(me.id)]
    assert "approval_request" not in types, types
    assert _counts(client)[1] == 0  # no delivery
