"""Issue 9: agents that work together, through public entries (docs/contracts.md#acceptance,
C1-C10).

Scripted agents call ``agent``, ``spawn_agent`` and ``send_message`` inside
real turns on real worker processes; the tests read what happened through
the producer API. The module shares one stack per kind (embedded, server)
and its workers: each test uses agents and sessions of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import chaz
from chaz.domain.deliveries import DeliveryKind
from chaz.domain.entries import Entry, EntryType
from tests.support.stack import Stack

WAIT = 60


@pytest.fixture(scope="module")
def st(module_stack: Stack) -> Iterator[Stack]:
    module_stack.workers(2, concurrency=4)
    yield module_stack


def agent(
    stack: Stack,
    agent_id: str,
    rules: list[dict[str, Any]],
    tools: tuple[str, ...] = (),
    **limits: int,
) -> None:
    stack.client.agents.put(
        chaz.AgentSpec(id=agent_id, tools=list(tools), script=rules, limits=chaz.Limits(**limits))
    )


def ask(stack: Stack, session_id: str, text: str) -> Entry:
    """Post ``text`` as a person and return the reply of the turn it admits."""
    posted = stack.client.sessions.post(session_id, text, sender="user:tester")
    reply = stack.client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=WAIT)
    return reply


def tool_results(stack: Stack, session_id: str) -> list[dict[str, Any]]:
    out = []
    for e in stack.client.sessions.entries(session_id):
        if e.type is EntryType.TOOL_RESULT:
            try:
                out.append(json.loads(e.content))
            except json.JSONDecodeError:
                out.append({"text": e.content})
    return out


def followups(stack: Stack, session_id: str) -> list[Entry]:
    return [
        e
        for e in stack.client.sessions.entries(session_id)
        if e.type is EntryType.DIRECTIVE and "followup" in e.metadata
    ]


def counts(stack: Stack) -> tuple[int, int, int]:
    """Sessions, jobs and deliveries in the whole store."""
    svc = stack.client.services
    with svc.store.engine.connect() as conn:
        from sqlalchemy import text

        return tuple(  # type: ignore[return-value]
            int(conn.scalar(text(f"SELECT count(*) FROM {t}")) or 0)
            for t in ("sessions", "jobs", "deliveries")
        )


LEAF = [{"steps": [{"say": "leaf did: {input}"}]}]
NOTED = {"match": "finished|failed", "steps": [{"say": "noted"}]}


def test_c1_names_and_identity(st: Stack) -> None:
    names = set(st.client.tools.names())
    assert {"agent", "spawn_agent", "send_message", "list_jobs", "job_output"} <= names
    assert not {"job_stop", "task_stop", "list_tasks", "task_output"} & names
    agent(st, "c1-leaf", LEAF)
    agent(
        st,
        "c1-boss",
        [
            NOTED,
            {
                "match": "^fg",
                "steps": [
                    {"call": "agent", "args": {"prompt": "{input}", "agent_id": "c1-leaf"}},
                    {"say": "{last_result}"},
                ],
            },
            {
                "match": "^bg",
                "steps": [
                    {
                        "call": "agent",
                        "args": {
                            "prompt": "{input}",
                            "agent_id": "c1-leaf",
                            "run_in_background": True,
                        },
                    },
                    {"say": "{last_result}"},
                ],
            },
        ],
        tools=("agent",),
    )
    s = st.client.sessions.create("c1-boss")
    assert ask(st, s.id, "fg one").content == "leaf did: fg one"
    started = json.loads(ask(st, s.id, "bg two").content)
    child = st.client.jobs.wait(started["execution_id"], timeout=WAIT)
    assert child.status is chaz.JobStatus.SUCCEEDED and child.session_id == started["session_id"]
    # Foreground and background both admitted a job through a delivery.
    out = st.client.deliveries.list(s.id, direction="out")
    spawns = [d for d in out if d.kind is DeliveryKind.SPAWN]
    assert len(spawns) == 2 and all(d.job_id for d in spawns)
    for d in spawns:
        assert st.client.jobs.get(d.job_id or "").delivery_id == d.id
    # The background child's answer came back once, as its own turn.
    st.wait_for(lambda: len(followups(st, s.id)) == 1, WAIT, "the follow-up")
    fu = followups(st, s.id)[0]
    assert "leaf did: bg two" in fu.content and fu.metadata["followup"]["is_error"] is False
    st.wait_for(
        lambda: st.client.jobs.get(fu.job_id or "").status.terminal, WAIT, "the follow-up turn"
    )
    assert len(followups(st, s.id)) == 1


def test_c2_fork_at_an_entry_and_run_in_one_call(st: Stack) -> None:
    agent(
        st,
        "c2-reader",
        [
            # Stage 2 naming asks the session's own model for a title.
            {"match": "^Name this conversation", "steps": [{"say": "Fork Review Notes"}]},
            {"steps": [{"say": "context: {context}"}]},
        ],
    )
    agent(
        st,
        "c2-caller",
        [
            {"match": "^alpha", "steps": [{"say": "caller saw alpha"}]},
            {
                "match": "^fork",
                "steps": [
                    {
                        "call": "agent",
                        "args": {
                            # Entry 3 is the reply to "alpha" (1 alpha, 2 its Ack).
                            "prompt": "what do you know?",
                            "agent_id": "c2-reader",
                            "start_from": "{session_id}:3",
                            "description": "review",
                        },
                    },
                    {"say": "{last_result}"},
                ],
            },
            {
                "match": "^missing",
                "steps": [
                    {"call": "agent", "args": {"prompt": "hi", "to": "no-such-session"}},
                    {"say": "{last_result}"},
                ],
            },
        ],
        tools=("agent",),
    )
    s = st.client.sessions.create("c2-caller")
    assert ask(st, s.id, "alpha").seq == 3
    reply = ask(st, s.id, "fork it")
    # One call made the session at entry 3 and ran the prompt there: its
    # context is the source's history up to entry 3, then the prompt.
    assert reply.content == (
        "context: user: alpha | user: caller saw alpha | user: what do you know?"
    ), reply.content
    child = next(x for x in st.client.sessions.list(limit=500) if x.forked_from == f"{s.id}:3")
    assert child.agent_id == "c2-reader"
    assert child.tree_id == s.tree_id and child.call_depth == 1
    # Named at once from the description (stage 1), renamed by its own model
    # after its first turn (stage 2).
    pointer = next(e for e in st.client.sessions.entries(s.id) if e.type is EntryType.ATTACH)
    assert pointer.content == "fork: review"
    st.wait_for(
        lambda: st.client.sessions.get(child.id).name == "Fork Review Notes", WAIT, "the rename"
    )
    # to= never creates what it names.
    before = counts(st)
    reply = ask(st, s.id, "missing target")
    assert "session.not_found" in reply.content
    after = counts(st)
    assert (after[0], after[2]) == (before[0], before[2])


def test_c5_exhausted_topology_refuses_only_what_it_limits(st: Stack) -> None:
    """boss -> mid (a new session: depth 1, message 1) -> relay (to=: message 2).

    mid's depth allowance is spent: its creation is refused, its to= is not.
    relay's message allowance is spent: its to= is refused, its observation
    is not, and no accepted work is cancelled.
    """
    agent(st, "c5-leaf", LEAF)
    target = st.client.sessions.create("c5-leaf", name="c5-target")
    agent(
        st,
        "c5-relay",
        [
            {
                "steps": [
                    {"call": "agent", "args": {"prompt": "y", "to": "c5-target"}},
                    {"call": "list_jobs", "args": {}},
                    {"say": "relay: done"},
                ]
            }
        ],
        tools=("agent", "list_jobs"),
        max_messages=2,
    )
    relay = st.client.sessions.create("c5-relay", name="c5-relay-s")
    agent(
        st,
        "c5-mid",
        [
            {
                "steps": [
                    {"call": "agent", "args": {"prompt": "x", "agent_id": "c5-leaf"}},
                    {"call": "agent", "args": {"prompt": "relay on", "to": "c5-relay-s"}},
                    {"say": "mid: {last_result}"},
                ]
            }
        ],
        tools=("agent",),
        max_call_depth=1,
    )
    agent(
        st,
        "c5-boss",
        [
            {
                "steps": [
                    {"call": "agent", "args": {"prompt": "go on", "agent_id": "c5-mid"}},
                    {"say": "{last_result}"},
                ]
            }
        ],
        tools=("agent", "list_jobs"),
        max_call_depth=2,
    )
    boss = st.client.sessions.create("c5-boss")
    assert ask(st, boss.id, "go").content == "mid: relay: done"
    mid = next(x for x in st.client.sessions.list(limit=500) if x.agent_id == "c5-mid")
    mid_results = tool_results(st, mid.id)
    assert mid_results[0]["error"]["code"] == "topology.depth"
    relay_results = tool_results(st, relay.id)
    assert relay_results[0]["error"]["code"] == "topology.messages"
    assert "error" not in relay_results[1]  # list_jobs still answers
    # Nothing was created by the refused attempts; nothing accepted was cancelled.
    leafs = [x for x in st.client.sessions.list(limit=500) if x.agent_id == "c5-leaf"]
    assert [x.id for x in leafs] == [target.id]
    assert st.client.jobs.list(session_id=target.id) == []
    for sid in (boss.id, mid.id, relay.id):
        assert {j.status for j in st.client.jobs.list(session_id=sid)} == {chaz.JobStatus.SUCCEEDED}
    relay_job = st.client.jobs.list(session_id=relay.id)[0]
    assert relay_job.message_count == 2 and relay_job.call_depth == 0


def test_thirty_background_children_under_a_fanout_of_eight(st: Stack) -> None:
    agent(st, "fan-leaf", LEAF)
    calls = [
        {
            "call": "agent",
            "args": {"prompt": f"part {i}", "agent_id": "fan-leaf", "run_in_background": True},
        }
        for i in range(30)
    ]
    agent(
        st,
        "fan-boss",
        [{"match": "^go", "steps": [{"calls": calls}, {"say": "spawned"}]}, NOTED],
        tools=("agent",),
        max_spawn_fanout=8,
        max_call_depth=1,
    )
    boss = st.client.sessions.create("fan-boss")
    before = counts(st)
    assert ask(st, boss.id, "go").content == "spawned"
    results = tool_results(st, boss.id)[:30]
    refused = [r for r in results if "error" in r]
    created = [r for r in results if "execution_id" in r]
    assert len(created) == 8 and len(refused) == 22
    assert {r["error"]["code"] for r in refused} == {"topology.fanout"}
    after = counts(st)
    # 8 sessions, 8 spawn deliveries; jobs: the boss's, 8 children's (and
    # follow-ups, admitted as the children finish).
    assert after[0] - before[0] == 8
    out = st.client.deliveries.list(boss.id, direction="out")
    spawns = [d for d in out if d.kind is DeliveryKind.SPAWN]
    assert len(spawns) == 8
    st.wait_for(lambda: len(followups(st, boss.id)) == 8, WAIT, "eight follow-ups")


def test_c6_cross_session_runs_charge_the_target(st: Stack) -> None:
    agent(
        st,
        "c6-slow",
        [
            {
                "match": "^hold",
                "steps": [{"wait": "c6-{session_id}", "timeout": 120}, {"say": "ok"}],
            },
            {"steps": [{"say": "slow did: {input}"}]},
        ],
    )
    sessions = st.client.sessions
    busy = sessions.create("c6-slow", name="c6-busy", limits={"max_queued_per_session": 1})
    spent = sessions.create("c6-slow", name="c6-spent", limits={"max_jobs_per_session": 1})
    ask(st, spent.id, "one")  # its only job
    held = st.client.sessions.post(busy.id, "hold", sender="user:tester")
    st.wait_for(
        lambda: st.client.jobs.get(held.job_id or "").status is chaz.JobStatus.RUNNING,
        WAIT,
        "the held turn",
    )
    queued = st.client.sessions.post(busy.id, "queued one", sender="user:tester")
    agent(
        st,
        "c6-caller",
        [
            {
                "match": "^go",
                "steps": [
                    {
                        "call": "agent",
                        "args": {"prompt": "p", "to": "c6-busy", "run_in_background": True},
                    },
                    # Foreground runs obey admission too.
                    {"call": "agent", "args": {"prompt": "p", "to": "c6-spent"}},
                    {"say": "done"},
                ],
            },
            {
                "match": "^again",
                "steps": [
                    {
                        "call": "agent",
                        "args": {"prompt": "later", "to": "c6-busy", "run_in_background": True},
                    },
                    {"say": "{last_result}"},
                ],
            },
            NOTED,
        ],
        tools=("agent",),
    )
    caller = st.client.sessions.create("c6-caller", limits={"max_queued_per_session": 1})
    assert ask(st, caller.id, "go").content == "done"
    codes = [r["error"]["code"] for r in tool_results(st, caller.id)]
    assert codes == ["quota.queue_full", "quota.jobs_exhausted"]
    # Nothing was charged to, or left in, either target by the refusals.
    assert [j.id for j in st.client.jobs.list(session_id=busy.id)] == [held.job_id, queued.job_id]
    assert len(st.client.jobs.list(session_id=spent.id)) == 1
    st.open_gate(f"c6-{busy.id}")
    st.client.jobs.wait(queued.job_id or "", timeout=WAIT)
    # The queued job started and left the queue once: one more fits now.
    started = json.loads(ask(st, caller.id, "again").content)
    job = st.client.jobs.wait(started["execution_id"], timeout=WAIT)
    assert job.session_id == busy.id and job.caller_session_id == caller.id
    assert job.status is chaz.JobStatus.SUCCEEDED


def test_c7_attach_pointer_stays_in_the_caller_and_names_the_target_head(st: Stack) -> None:
    agent(st, "c7-leaf", [{"steps": [{"wait": "c7-{session_id}", "timeout": 120}, {"say": "r"}]}])
    agent(
        st,
        "c7-boss",
        [
            {
                "match": "^go",
                "steps": [
                    {
                        "call": "agent",
                        "args": {
                            "prompt": "work",
                            "agent_id": "c7-leaf",
                            "run_in_background": True,
                        },
                    },
                    {"say": "{last_result}"},
                ],
            },
            NOTED,
        ],
        tools=("agent",),
    )
    s = st.client.sessions.create("c7-boss")
    started = json.loads(ask(st, s.id, "go").content)
    child = started["session_id"]
    entries = st.client.sessions.entries(s.id)
    call = next(e for e in entries if e.type is EntryType.TOOL_CALL)
    pointer = next(e for e in entries if e.type is EntryType.ATTACH)
    # Beside the calling entry, in the caller's session, naming the target.
    assert pointer.seq == call.seq + 1
    assert pointer.metadata["caller_entry_id"] == call.id and pointer.metadata["spawn_out"]
    assert pointer.metadata["attach"]["session_id"] == child
    assert pointer.metadata["attach"]["status"] == "queued"
    first = st.client.sessions.entries(child)[0]
    assert first.metadata["spawned_from_session"] == s.id
    st.open_gate(f"c7-{child}")
    st.client.jobs.wait(started["execution_id"], timeout=WAIT)
    done = st.client.sessions.get(child)
    patched = st.client.sessions.entries(s.id, after=pointer.seq - 1, limit=1)[0]
    assert patched.id == pointer.id and patched.seq == pointer.seq  # no head moved
    assert patched.metadata["attach"]["status"] == "succeeded"
    assert patched.metadata["attach"]["head_seq"] == done.last_seq
    att = st.client.sessions.attachment(s.id, pointer.seq)
    assert (att.session_id, att.head_seq) == (child, done.last_seq)
    assert att.entries[-1].content == "r" and att.entries[-1].seq == done.last_seq
    # A pointer is read only where it lives: a mismatched source is refused.
    with st.client.services.store.engine.begin() as conn:
        from sqlalchemy import text

        meta = {**pointer.metadata, "source_session_id": child}
        conn.execute(
            text("UPDATE entries SET metadata = :m WHERE id = :i"),
            {"m": json.dumps(meta), "i": pointer.id},
        )
    with pytest.raises(chaz.errors.AttachMismatch):
        st.client.sessions.attachment(s.id, pointer.seq)


def test_c10_completion_replies_once_and_only_when_it_should(st: Stack) -> None:
    agent(
        st,
        "c10-kid",
        [
            {"match": "^empty", "steps": [{"say": " "}]},
            {"match": "^fail", "steps": [{"fail": "the kid broke"}]},
            {
                "match": "^wait",
                "steps": [
                    {"wait": "c10-{session_id}", "timeout": 120},
                    # A step boundary after the wait, where a cancel is seen.
                    {"call": "echo", "args": {"text": "x"}},
                    {"say": "late"},
                ],
            },
            {"steps": [{"say": "kid: {input}"}]},
        ],
        tools=("echo",),
    )

    def bg(prompt: str) -> dict[str, Any]:
        return {
            "call": "agent",
            "args": {"prompt": prompt, "agent_id": "c10-kid", "run_in_background": True},
        }

    agent(
        st,
        "c10-boss",
        [
            NOTED,
            {
                "match": "^go",
                "steps": [
                    {"calls": [bg("hello"), bg("empty"), bg("fail now"), bg("wait for it")]},
                    {"say": "spawned"},
                ],
            },
            {
                "match": "^cascade",
                "steps": [
                    bg("wait too"),
                    {"wait": "c10-boss-{session_id}", "timeout": 120},
                    {"call": "echo", "args": {"text": "x"}},
                    {"say": "never"},
                ],
            },
        ],
        tools=("agent", "echo"),
        max_spawn_fanout=0,
    )
    s = st.client.sessions.create("c10-boss")
    assert ask(st, s.id, "go").content == "spawned"
    kids = [r for r in tool_results(st, s.id) if "execution_id" in r]
    hello, empty, fail, waiting = kids
    for started in (hello, empty, fail):
        st.client.jobs.wait(started["execution_id"], timeout=WAIT)
    # The waiting kid is cancelled on its own: it answers once, as an error.
    st.wait_for(
        lambda: st.client.jobs.get(waiting["execution_id"]).status is chaz.JobStatus.RUNNING,
        WAIT,
        "the waiting kid to run",
    )
    st.client.jobs.cancel(waiting["execution_id"], reason="enough")
    st.open_gate(f"c10-{waiting['session_id']}")
    st.client.jobs.wait(waiting["execution_id"], timeout=WAIT)
    st.wait_for(lambda: len(followups(st, s.id)) == 3, WAIT, "three follow-ups")
    by_kid = {fu.metadata["followup"]["session_id"]: fu for fu in followups(st, s.id)}
    assert set(by_kid) == {hello["session_id"], fail["session_id"], waiting["session_id"]}
    assert by_kid[hello["session_id"]].metadata["followup"]["is_error"] is False
    assert "kid: hello" in by_kid[hello["session_id"]].content
    assert by_kid[fail["session_id"]].metadata["followup"]["is_error"] is True
    assert "the kid broke" in by_kid[fail["session_id"]].content
    assert by_kid[waiting["session_id"]].metadata["followup"]["is_error"] is True
    assert "cancelled" in by_kid[waiting["session_id"]].content
    # A reconciler pass (a redelivered completion) adds nothing.
    from chaz.usecases.reconcile import Reconciler

    Reconciler(st.client.services, grace_seconds=0).run()
    assert len(followups(st, s.id)) == 3
    for fu in followups(st, s.id):
        assert st.client.jobs.wait(fu.job_id or "", timeout=WAIT).status is chaz.JobStatus.SUCCEEDED

    # Cancelling the caller cascades to its child, and nothing replies.
    posted = st.client.sessions.post(s.id, "cascade", sender="user:tester")
    boss_job = posted.job_id or ""
    kid = st.wait_for(
        lambda: next(
            (j for j in st.client.jobs.list(limit=1000) if j.parent_job_id == boss_job), None
        ),
        WAIT,
        "the cascade kid",
    )
    assert kid is not None
    st.wait_for(
        lambda: st.client.jobs.get(kid.id).status is chaz.JobStatus.RUNNING, WAIT, "kid running"
    )
    outcome = st.client.jobs.cancel(boss_job, reason="stop all")
    assert outcome["cascaded"] == [kid.id]
    st.open_gate(f"c10-{kid.session_id}")
    st.open_gate(f"c10-boss-{s.id}")
    assert st.client.jobs.wait(kid.id, timeout=WAIT).status is chaz.JobStatus.CANCELLED
    assert st.client.jobs.wait(boss_job, timeout=WAIT).status is chaz.JobStatus.CANCELLED
    Reconciler(st.client.services, grace_seconds=0).run()
    assert len(followups(st, s.id)) == 3
