"""Grants inside turns (issue 11 item 2, docs/security.md#grants-inside-turns).

An agent in a turn holds its own grants and its starter's, intersected; a
call it lacks a grant for is a tool error ``auth.forbidden`` the model
reads, and it writes nothing (no delivery, no session). Whatever the turn
hands on carries the narrowed grants: a sub-agent can do no more.
"""

from __future__ import annotations

import json

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.principals import Grant
from tests.support.principals import post_as
from tests.support.stack import Stack

#: The target of every message these tests try to send.
TARGET = "grants-target"

SPAWN_OR_SEND = [
    {
        "match": "^spawn",
        "steps": [
            {"call": "spawn_agent", "args": {"agent_id": "leaf", "task": "leaf work"}},
            {"say": "spawn said: {last_result}"},
        ],
    },
    {
        "match": "^fork",
        "steps": [
            {"call": "agent", "args": {"prompt": "leaf work", "agent_id": "leaf"}},
            {"say": "agent said: {last_result}"},
        ],
    },
    {
        "match": "^send",
        "steps": [
            {"call": "send_message", "args": {"to": TARGET, "message": "hello"}},
            {"say": "send said: {last_result}"},
        ],
    },
    {
        "match": "^read",
        "steps": [
            {"call": "read_conversation", "args": {"to": "{session_id}"}},
            {"say": "read said: {last_result}"},
        ],
    },
]

LEAF = chaz.AgentSpec(id="leaf", script=[{"steps": [{"say": "leaf did {input}"}]}])
SINK = chaz.AgentSpec(id="sink", script=[{"steps": [{"say": "sink got {input}"}]}])


def agent(agent_id: str, grants: list[Grant] | None = None) -> chaz.AgentSpec:
    return chaz.AgentSpec(
        id=agent_id,
        tools=["spawn_agent", "agent", "send_message", "read_conversation"],
        script=SPAWN_OR_SEND,
        grants=grants,
    )


def _results(client: chaz.Client, session_id: str) -> list[dict[str, object]]:
    return [
        json.loads(e.content) if e.metadata.get("is_error") else {"ok": e.content}
        for e in client.sessions.entries(session_id)
        if e.type is EntryType.TOOL_RESULT
    ]


def _forbidden(result: dict[str, object], grant: str) -> None:
    error = result["error"]
    assert isinstance(error, dict), result
    assert error["code"] == "auth.forbidden", result
    assert error["details"]["grant"] == grant, result


def _ask(client: chaz.Client, session_id: str, text: str, **kw: object) -> chaz.Entry:
    posted = post_as(client, session_id, text, **kw)  # type: ignore[arg-type]
    return client.sessions.wait_for_reply(session_id, after=posted.entry.seq, timeout=60)


def test_an_agent_without_the_grants_cannot_spawn_or_send_and_writes_nothing(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put_many([agent("reader", [Grant.HISTORY_READ]), LEAF, SINK])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("reader")
    before = {x.id for x in client.sessions.list()}

    for text, grant in (
        ("spawn", "agent.spawn"),
        ("fork", "agent.spawn"),
        ("send", "message.send"),
    ):
        reply = _ask(client, s.id, text)
        assert reply.type is EntryType.MESSAGE and "auth.forbidden" in reply.content, reply
        _forbidden(_results(client, s.id)[-1], grant)

    # Nothing was written: no delivery either way, no session, no job elsewhere.
    assert client.deliveries.list(s.id) == []
    assert client.deliveries.list(target.id) == []
    assert {x.id for x in client.sessions.list()} == before
    assert client.sessions.entries(target.id) == []
    # What it holds still works: it may read (its own conversation).
    reply = _ask(client, s.id, "read")
    assert reply.content.startswith("read said: Conversation of session"), reply.content


def test_a_turn_started_without_agent_spawn_cannot_spawn_though_its_agent_may(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put_many([agent("boss"), LEAF, SINK])
    stack.workers(1, concurrency=2)
    client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("boss")
    before = {x.id for x in client.sessions.list()}

    reply = _ask(client, s.id, "spawn", grants=[Grant.HISTORY_READ, Grant.MESSAGE_SEND])
    assert "auth.forbidden" in reply.content, reply.content
    _forbidden(_results(client, s.id)[-1], "agent.spawn")
    assert {x.id for x in client.sessions.list()} == before
    assert client.deliveries.list(s.id) == []
    # The job records who started it and what it could do.
    job = client.jobs.get(reply.job_id or "")
    assert job.owner == "user:alice"
    assert job.grants == ["history.read", "message.send"]

    # The permitted equivalent: a starter holding agent.spawn.
    reply = _ask(client, s.id, "spawn", grants=[Grant.AGENT_SPAWN])
    assert reply.content == "spawn said: leaf did leaf work", reply.content


def test_a_sub_agent_inherits_the_narrowed_grants(stack: Stack) -> None:
    client = stack.client
    courier = chaz.AgentSpec(
        id="courier",
        tools=["send_message"],
        script=[
            {
                "match": "^(psst|hello)",
                "steps": [
                    {"call": "send_message", "args": {"to": TARGET, "message": "{input}"}},
                    {"say": "courier: {last_result}"},
                ],
            },
            # The target's answer comes back as a follow-up: it is only noted.
            {"steps": [{"say": "noted"}]},
        ],
    )
    boss = chaz.AgentSpec(
        id="boss",
        tools=["spawn_agent", "send_message"],
        script=[
            {
                "steps": [
                    {"call": "spawn_agent", "args": {"agent_id": "courier", "task": "{input}"}},
                    {"say": "boss: {last_result}"},
                ]
            }
        ],
    )
    client.agents.put_many([boss, courier, SINK])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("sink", name=TARGET)
    s = client.sessions.create("boss")

    # The starter may spawn but not send: the courier (whose agent may do
    # anything) holds the same narrowing.
    reply = _ask(client, s.id, "psst", grants=[Grant.AGENT_SPAWN, Grant.HISTORY_READ])
    assert "auth.forbidden" in reply.content, reply.content
    [child] = [x for x in client.sessions.list() if x.agent_id == "courier"]
    [child_job] = client.jobs.list(session_id=child.id)
    assert child_job.grants == ["agent.spawn", "history.read"]
    assert child_job.owner == "user:alice"
    assert child.project == s.project and child.owner == "user:alice"
    _forbidden(_results(client, child.id)[-1], "message.send")
    [spawned] = client.deliveries.list(s.id, direction="out")
    assert spawned.grants == ["agent.spawn", "history.read"] and spawned.owner == "user:alice"
    assert client.deliveries.list(target.id) == []

    # A full starter: the same chain delivers.
    reply = _ask(client, s.id, "hello there")
    assert reply.content.startswith("boss: courier: "), reply.content
    assert [d.kind.value for d in client.deliveries.list(target.id, direction="in")] == ["message"]


def test_a_message_drained_from_a_busy_inbox_runs_with_the_senders_grants(
    stack: Stack,
) -> None:
    client = stack.client
    slow = chaz.AgentSpec(
        id="slow",
        script=[
            {"match": "^hold", "steps": [{"wait": "hold-{session_id}"}, {"say": "held"}]},
            {"steps": [{"say": "got it"}]},
        ],
    )
    client.agents.put_many([agent("boss"), slow])
    stack.workers(1, concurrency=2)
    target = client.sessions.create("slow", name=TARGET)
    held = client.sessions.post(target.id, "hold", sender="user:bob")
    stack.wait_for(
        lambda: client.jobs.get(held.job_id or "").status is chaz.JobStatus.RUNNING,
        30,
        "the target's turn running",
    )
    s = client.sessions.create("boss")
    narrow = [Grant.MESSAGE_SEND, Grant.HISTORY_READ]
    reply = _ask(client, s.id, "send", grants=narrow)
    assert '"status": "queued"' in reply.content, reply.content  # waits in the inbox
    [queued] = client.deliveries.list(target.id, direction="in")
    assert queued.grants == ["history.read", "message.send"] and queued.owner == "user:alice"
    assert queued.job_id is None

    stack.open_gate(f"hold-{target.id}")
    drained = stack.wait_for(
        lambda: (d := client.deliveries.get(queued.id)).job_id and d, 30, "the drain"
    )
    assert drained
    job = client.jobs.get(drained.job_id or "")
    assert job.grants == ["history.read", "message.send"] and job.owner == "user:alice"
    assert job.project == target.project
    # The target's own next turn, started by its owner, holds every grant.
    own = client.sessions.post(target.id, "more", sender="user:bob")
    assert client.jobs.get(own.job_id or "").grants is None


def test_a_room_member_woken_by_a_turn_holds_the_posters_grants(stack: Stack) -> None:
    client = stack.client
    host = chaz.AgentSpec(id="host", script=[{"steps": [{"say": "@helper over to you"}]}])
    helper = chaz.AgentSpec(id="helper", script=[{"steps": [{"say": "done"}]}])
    client.agents.put_many([host, helper])
    stack.workers(1, concurrency=2)
    room = client.sessions.create("host", members=["helper"])
    posted = post_as(client, room.id, "hello room", grants=[Grant.HISTORY_READ])

    def helper_job() -> chaz.Job | None:
        jobs = [j for j in client.jobs.list(session_id=room.id) if j.member_agent_id == "helper"]
        return jobs[0] if jobs and jobs[0].status.terminal else None

    woken = stack.wait_for(helper_job, 30, "the helper's turn")
    assert woken is not None
    assert woken.grants == ["history.read"] and woken.owner == "user:alice"
    assert client.jobs.get(posted.entry.job_id or "").grants == ["history.read"]


def test_a_follow_up_continues_the_caller_with_the_grants_it_handed_on(stack: Stack) -> None:
    client = stack.client
    caller = chaz.AgentSpec(
        id="caller",
        tools=["agent"],
        script=[
            {
                "match": "^bg",
                "steps": [
                    {
                        "call": "agent",
                        "args": {"prompt": "work", "agent_id": "leaf", "run_in_background": True},
                    },
                    {"say": "started"},
                ],
            },
            {"steps": [{"say": "noted"}]},
        ],
    )
    client.agents.put_many([caller, LEAF])
    stack.workers(1, concurrency=2)
    s = client.sessions.create("caller")
    narrow = [Grant.AGENT_SPAWN, Grant.HISTORY_READ]
    assert _ask(client, s.id, "bg", grants=narrow).content == "started"

    def follow_up() -> chaz.Delivery | None:
        found = [
            d
            for d in client.deliveries.list(s.id, direction="in")
            if d.kind.value == "followup" and d.job_id
        ]
        return found[0] if found else None

    delivery = stack.wait_for(follow_up, 30, "the follow-up admitted")
    assert delivery is not None
    assert delivery.grants == ["agent.spawn", "history.read"] and delivery.owner == "user:alice"
    job = client.jobs.get(delivery.job_id or "")
    assert job.grants == ["agent.spawn", "history.read"] and job.owner == "user:alice"


def test_schedule_tools_need_schedule_manage_and_stamp_the_turns_authority(
    stack: Stack,
) -> None:
    client = stack.client
    planner = chaz.AgentSpec(
        id="planner",
        tools=["schedule_add"],
        script=[
            {
                "steps": [
                    {
                        "call": "schedule_add",
                        "args": {"prompt": "tick", "interval_seconds": 3600, "target": "fresh"},
                    },
                    {"say": "{last_result}"},
                ]
            }
        ],
    )
    client.agents.put(planner)
    stack.workers(1, concurrency=2)
    s = client.sessions.create("planner")
    refused = _ask(client, s.id, "plan", grants=[Grant.HISTORY_READ]).content
    assert json.loads(refused)["error"]["code"] == "auth.forbidden"
    assert client.schedules.list("planner") == []

    made = json.loads(
        _ask(
            client,
            s.id,
            "plan",
            grants=[Grant.SCHEDULE_MANAGE, Grant.HISTORY_READ],
            unattended=True,
        ).content
    )
    schedule = client.schedules.get(made["id"])
    assert schedule.grants == ["history.read", "schedule.manage"]
    assert schedule.owner == "user:alice" and schedule.project == s.project
    assert schedule.unattended
