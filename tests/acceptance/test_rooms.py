"""Issue 10, rooms: mention-gated turns of several agents in one session (docs/rooms.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chaz
from chaz.domain.entries import Entry, EntryType
from chaz.domain.jobs import Job
from chaz.errors import ChazError
from chaz.runtime.registry import ToolContext
from chaz.tools.branches import (
    ListAgentsArgs,
    ReadConversationArgs,
    list_agents,
    read_conversation,
)
from tests.acceptance.test_cli import chaz_cli, cli_env, ok
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]


def relay(agent_id: str, to: str) -> chaz.AgentSpec:
    """An agent that always hands the room to ``to``."""
    return chaz.AgentSpec(id=agent_id, script=[{"steps": [{"say": f"@{to} your turn"}]}])


HOST = chaz.AgentSpec(
    id="host",
    script=[
        # A stranger's mention (zed is saved but not in the room) wakes nobody.
        {"match": "^ping", "steps": [{"say": "pong, @zed"}]},
        # Nor does an agent's mention of itself.
        {"match": "^self", "steps": [{"say": "@HOST note to self"}]},
        {"steps": [{"say": "host heard"}]},
    ],
)


def test_room_routes_by_mention_within_the_burst_budget(stack: Stack) -> None:
    stack.workers(1, concurrency=2)
    client = stack.client
    client.agents.put_many(
        [HOST, relay("a", "b"), relay("b", "c"), relay("c", "a"), relay("zed", "a")]
    )
    room = client.sessions.create(
        agent_id="host", members=["a", "b", "c"], name="trio", burst_budget=3
    )
    assert (room.members, room.burst_budget) == (["a", "b", "c"], 3)

    def jobs() -> list[Job]:
        return sorted(client.jobs.list(session_id=room.id), key=lambda j: j.ordinal)

    def entries(kind: EntryType) -> list[Entry]:
        return [e for e in client.sessions.entries(room.id) if e.type is kind]

    def settled(notices: int) -> list[Job]:
        # The spent notice commits with the reply that found the budget spent,
        # so once it is there no further turn can be admitted.
        def done() -> list[Job] | None:
            js = jobs()
            if len(entries(EntryType.NOTICE)) < notices:
                return None
            return js if all(j.status.terminal for j in js) else None

        settled = stack.wait_for(done, 60, f"{notices} burst notices and every turn ended")
        assert settled is not None
        return settled

    # A person's mention wakes that member; the members relay a->b->c->a ...
    # and the agent-woken turns stop at exactly the budget (3).
    client.sessions.post(room.id, "@A start", sender="user:alice")
    first = settled(1)
    assert [j.member_agent_id for j in first] == ["a", "b", "c", "a"], stack.logs()
    assert {j.status for j in first} == {chaz.JobStatus.SUCCEEDED}
    replies = entries(EntryType.MESSAGE)[1:]
    assert [r.sender for r in replies] == ["agent:a", "agent:b", "agent:c", "agent:a"]
    # Each reply is its turn's and its member's.
    assert [r.job_id for r in replies] == [j.id for j in first]
    notice = entries(EntryType.NOTICE)[0]
    assert notice.sender == "system:room" and "burst budget spent" in notice.content
    assert notice.seq == replies[-1].seq + 1
    assert client.jobs.get(first[1].id).member_agent_id == "b"

    # A person's message resumes the room with a fresh budget.
    client.sessions.post(room.id, "go on @c, then the others", sender="user:alice")
    second = settled(2)[4:]
    assert [j.member_agent_id for j in second] == ["c", "a", "b", "c"]

    # No mention: the host. Its mention of a stranger, or of itself, wakes nobody.
    for text in ("ping", "self"):
        before = len(jobs())
        asked = client.sessions.post(room.id, text, sender="user:alice")
        reply = client.sessions.wait_for_reply(room.id, after=asked.seq, timeout=60)
        assert reply.sender == "agent:host", reply
        # The reply and whatever it wakes commit together: the count is final.
        assert [j.member_agent_id for j in jobs()[before:]] == ["host"]
    assert len(entries(EntryType.NOTICE)) == 2

    # An agent's Message posted from outside a turn routes the same way.
    client.sessions.post(room.id, "@b over to you", sender="agent:a")
    third = settled(3)[10:]
    assert [j.member_agent_id for j in third] == ["b", "c", "a"]

    # Membership changes are events; a removed member is no longer woken.
    client.sessions.remove_member(room.id, "c")
    kinds = [e.kind for e in client.events.list(room.id, limit=1000)]
    assert "room.member_removed" in kinds
    before = len(jobs())
    asked = client.sessions.post(room.id, "@c are you there?", sender="user:alice")
    reply = client.sessions.wait_for_reply(room.id, after=asked.seq, timeout=60)
    assert reply.sender == "agent:host"
    assert [j.member_agent_id for j in jobs()[before:]] == ["host"]

    # The collaboration tools show the room like any session, marked as a room.
    ctx = ToolContext(
        session_id=room.id,
        job_id=first[0].id,
        agent_id="a",
        tree_id=room.tree_id,
        call_depth=0,
        allowed_tools=frozenset(),
        services=client.services,
    )
    listed = list_agents(ListAgentsArgs(scope="session"), ctx)
    assert f"- {room.id} " in listed and "room: host+a+b" in listed, listed
    read = read_conversation(ReadConversationArgs(to=room.id), ctx)
    assert f'Conversation of session {room.id} "trio" (room: host+a+b)' in read, read
    assert "agent:c" in read  # past members' replies stay in the history

    # A reply whose job the room's quota refuses is kept, and a notice says so.
    capped = client.sessions.create(
        agent_id="host", members=["a", "b", "c"], limits={"max_jobs_per_session": 2}
    )
    client.sessions.post(capped.id, "@a start", sender="user:alice")

    def quota_notice() -> Entry | None:
        notes = [e for e in client.sessions.entries(capped.id) if e.type is EntryType.NOTICE]
        return notes[0] if notes else None

    note = stack.wait_for(quota_notice, 60, "the quota notice")
    assert note is not None
    assert note.metadata["code"] == "quota.jobs_exhausted" and note.metadata["member"] == "c"
    capped_jobs = client.jobs.list(session_id=capped.id)
    assert [j.member_agent_id for j in capped_jobs] == ["a", "b"]

    # An ordinary session is as before: an agent's Message admits nothing.
    plain = client.sessions.create(agent_id="a")
    posted = client.sessions.post(plain.id, "@b hello", sender="agent:b")
    assert posted.job_id is None and client.jobs.list(session_id=plain.id) == []
    asked = client.sessions.post(plain.id, "hi", sender="user:alice")
    assert client.jobs.wait(asked.job_id or "", timeout=60).member_agent_id is None


def test_wait_for_reply_returns_the_mentioned_members_reply(
    stack: Stack, producer: chaz.Client, producer_env: dict[str, str]
) -> None:
    stack.workers(1, concurrency=2)
    client = producer
    stack.client.agents.put_many(
        [HOST, chaz.AgentSpec(id="beta", script=[{"steps": [{"say": "beta here: {input}"}]}])]
    )
    room = client.sessions.create(agent_id="host", members=["beta"])
    asked = client.sessions.post(room.id, "@beta hi", sender="user:alice")
    reply = client.sessions.wait_for_reply(room.id, after=asked.seq, timeout=60)
    assert (reply.sender, reply.content) == ("agent:beta", "beta here: @beta hi"), reply
    assert reply.job_id == asked.job_id
    # The CLI's --wait is the same wait.
    env = producer_env
    out = ok(chaz_cli("--json", "send", room.id, "@beta again", "--wait", env=env))
    assert json.loads(out)["reply"]["sender"] == "agent:beta", out


def test_room_membership_is_checked(stack: Stack, producer: chaz.Client) -> None:
    client = producer
    stack.client.agents.put_many([HOST, relay("a", "b")])
    for members, code in (
        (["host"], "request.invalid"),
        (["a", "A"], "request.invalid"),
        (["nobody"], "agent.not_found"),
    ):
        with pytest.raises(ChazError) as caught:
            client.sessions.create(agent_id="host", members=members)
        assert caught.value.code == code, caught.value
    assert client.sessions.list() == []


def test_rooms_cli(tmp_path: Path) -> None:
    env = cli_env(home=tmp_path / "home")
    specs = [s.model_dump(mode="json") for s in (HOST, relay("a", "b"), relay("b", "a"))]
    ok(chaz_cli("agents", "put", "-", env=env, stdin=json.dumps(specs)))
    rid = ok(
        chaz_cli("rooms", "new", "host", "--member", "a", "--name", "duo", "--burst", "2", env=env)
    ).strip()
    ok(chaz_cli("rooms", "add", "duo", "b", env=env))
    rooms = json.loads(ok(chaz_cli("rooms", "ls", "--json", env=env)))
    assert [(r["id"], r["members"], r["burst_budget"]) for r in rooms] == [(rid, ["a", "b"], 2)]
    assert "host (host)+b" in ok(chaz_cli("rooms", "rm", rid, "a", env=env))
    r = chaz_cli("rooms", "add", "duo", "host", env=env)
    assert r.returncode == 2 and "error [request.invalid]" in r.stderr, r.stderr
    # A plain session is no room.
    ok(chaz_cli("sessions", "new", "a", env=env))
    assert len(json.loads(ok(chaz_cli("rooms", "ls", "--json", env=env)))) == 1
