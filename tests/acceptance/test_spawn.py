"""Issue 3: spawn_agent, observation tools and cancellation across a session tree."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import text

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.errors import Unauthorized, VersionConflict
from chaz.store.types import JobFields
from chaz.usecases import admission
from chaz.usecases.control import check_ownership
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Stack:
    """One worker of two turn threads, for the tests here that neither stop it nor need
    a pool of one thread."""
    module_stack.workers(1, concurrency=2)
    return module_stack


def spawner(agent_id: str, child: str, depth: int = 2) -> chaz.AgentSpec:
    return chaz.AgentSpec(
        id=agent_id,
        tools=["spawn_agent", "echo", "sleep", "job_output", "list_jobs"],
        limits=chaz.Limits(max_call_depth=depth),
        script=[
            {
                "steps": [
                    {"call": "spawn_agent", "args": {"agent_id": child, "task": "{input}"}},
                    {"say": f"{agent_id} got: {{last_result}}"},
                ]
            }
        ],
    )


LEAF = chaz.AgentSpec(
    id="leaf", tools=["echo", "clock"], script=[{"steps": [{"say": "leaf did {input}"}]}]
)


def test_foreground_chain_of_depth_two_runs_on_one_worker_thread(
    stack: Stack, producer: chaz.Client
) -> None:
    stack.workers(1, concurrency=1)
    client = producer
    for spec in (spawner("root", "mid"), spawner("mid", "leaf"), LEAF):
        stack.client.agents.put(spec)
    s = client.sessions.create(agent_id="root")
    e = client.sessions.post(s.id, "the task", sender="user:alice")
    reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60)
    assert reply.content == "root got: mid got: leaf did the task", stack.logs()

    root_job = client.jobs.get(e.job_id or "")
    mid_job = next(j for j in client.jobs.list() if j.parent_job_id == root_job.id)
    leaf_job = next(j for j in client.jobs.list() if j.parent_job_id == mid_job.id)
    assert (mid_job.call_depth, leaf_job.call_depth) == (1, 2)
    assert {mid_job.tree_id, leaf_job.tree_id} == {s.tree_id}
    # The child sessions are ordinary sessions, with the task as a Directive.
    leaf_session = client.sessions.get(leaf_job.session_id)
    entries = client.sessions.entries(leaf_session.id)
    assert [x.type for x in entries] == [EntryType.DIRECTIVE, EntryType.ACK, EntryType.MESSAGE]
    # Transitive narrowing: leaf has echo and clock, its parent only echo (+ collab tools).
    assert leaf_session.tools == ["echo"]


def test_third_level_beyond_max_call_depth_is_refused_and_spawns_nothing(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    for spec in (spawner("a", "b"), spawner("b", "c"), spawner("c", "leaf"), LEAF):
        fleet.client.agents.put(spec)
    s = client.sessions.create(agent_id="a")
    e = client.sessions.post(s.id, "go deep", sender="user:alice")
    reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60)
    assert "topology.depth" in reply.content
    assert sorted(x.agent_id for x in client.sessions.list()) == ["a", "b", "c"]
    c_session = next(x for x in client.sessions.list() if x.agent_id == "c")
    results = [x for x in client.sessions.entries(c_session.id) if x.type is EntryType.TOOL_RESULT]
    assert results[0].metadata["is_error"] is True
    assert json.loads(results[0].content)["error"]["code"] == "topology.depth"


def test_background_spawn_returns_execution_id_and_job_output_reads_it(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    fleet.client.agents.put(LEAF)
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="boss",
            tools=["spawn_agent", "job_output"],
            script=[
                {
                    "steps": [
                        {
                            "call": "spawn_agent",
                            "args": {"agent_id": "leaf", "task": "{input}", "async": True},
                        },
                        {"say": "{last_result}"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create(agent_id="boss")
    e = client.sessions.post(s.id, "background work", sender="user:alice")
    reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60)
    started = json.loads(reply.content)
    child_job = client.jobs.wait(started["execution_id"], timeout=30)
    assert child_job.status is chaz.JobStatus.SUCCEEDED
    assert child_job.result == "leaf did background work"
    assert child_job.caller_session_id == s.id


def test_job_output_ownership(stack: Stack) -> None:
    client = stack.client
    for spec in (spawner("root", "mid"), LEAF):
        client.agents.put(spec)
    svc = client.services
    # Build a lineage by hand: root session -> 3 generations of child jobs.
    top = client.sessions.create(agent_id="root")
    parent = client.sessions.post(top.id, "x", sender="user:a").job_id
    chain = []
    for depth in range(1, 4):
        child = svc.store.create_session("leaf", parent_job_id=parent, tree_id=top.tree_id)
        done = admission.admit(
            svc,
            child.id,
            NewEntry(EntryType.DIRECTIVE, "agent:root", "work"),
            job_fields=JobFields(parent_job_id=parent, call_depth=depth),
        )
        assert done.job is not None
        parent = done.job.id
        chain.append(done.job)
    deepest = chain[-1]
    stranger = client.sessions.create(agent_id="leaf")

    check_ownership(svc, deepest, deepest.session_id)  # its own session
    check_ownership(svc, deepest, top.id)  # an ancestor three hops up
    with pytest.raises(Unauthorized) as err:
        check_ownership(svc, deepest, stranger.id)
    assert err.value.code == "auth.denied"

    # A cycle in parent_job_id must not hang the walk.
    with svc.store.engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET parent_job_id = :leaf WHERE id = :top"),
            {"leaf": deepest.id, "top": chain[0].parent_job_id},
        )
    with pytest.raises(Unauthorized):  # a hang would trip the test timeout
        check_ownership(svc, svc.store.get_job(deepest.id), stranger.id)


def test_cancel_root_cancels_child_first_and_both_end_cancelled(
    stack: Stack, producer: chaz.Client
) -> None:
    stack.workers(1, concurrency=2)
    client = producer
    stack.client.agents.put(spawner("root", "sleeper"))
    stack.client.agents.put(
        chaz.AgentSpec(
            id="sleeper",
            tools=["sleep"],
            script=[
                {
                    "steps": [
                        {"call": "sleep", "args": {"seconds": 1.5}},
                        {"call": "sleep", "args": {"seconds": 1.5}},
                        {"say": "woke"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create(agent_id="root")
    e = client.sessions.post(s.id, "nap", sender="user:alice")
    root_id = e.job_id or ""
    deadline = time.monotonic() + 30
    child = None
    while time.monotonic() < deadline and child is None:
        child = next((j for j in client.jobs.list() if j.parent_job_id == root_id), None)
        time.sleep(0.05)
    assert child is not None
    while client.jobs.get(child.id).status is not chaz.JobStatus.RUNNING:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.05)
    root = client.jobs.get(root_id)
    with pytest.raises(VersionConflict):
        client.jobs.cancel(root_id, expected_version=root.version - 1)
    outcome = client.jobs.cancel(
        root_id, expected_version=root.version, command_id="cmd-1", reason="test"
    )
    assert outcome["status"] == "stopping" and outcome["cascaded"] == [child.id]
    again = client.jobs.cancel(root_id, command_id="cmd-1")
    assert again == outcome  # the same command returns its first outcome

    child_final = client.jobs.wait(child.id, timeout=30)
    root_final = client.jobs.wait(root_id, timeout=30)
    assert child_final.status is chaz.JobStatus.CANCELLED
    assert root_final.status is chaz.JobStatus.CANCELLED
    assert child_final.finished_at is not None and root_final.finished_at is not None
    assert child_final.finished_at <= root_final.finished_at
    # Cancelling a terminal job is a no-op that reports its state.
    late = client.jobs.cancel(root_id)
    assert late["changed"] is False and late["status"] == "cancelled"


@pytest.mark.parametrize("producer_principal", ["user:a"])
def test_cancel_a_queued_job_leaves_the_rest_in_order(fleet: Stack, producer: chaz.Client) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(id="slow", script=[{"steps": [{"sleep": 1.0}, {"echo": True}]}])
    )
    s = client.sessions.create(agent_id="slow")
    posted = [client.sessions.post(s.id, f"m{i}", sender="user:a") for i in range(4)]
    jobs = [p.job_id or "" for p in posted]
    deadline = time.monotonic() + 30
    while client.jobs.get(jobs[0]).status is not chaz.JobStatus.RUNNING:
        assert time.monotonic() < deadline, fleet.logs()
        time.sleep(0.02)
    queue = client.sessions.queue(s.id)
    assert [j.id for j in queue] == jobs
    outcome = client.jobs.cancel(jobs[2])
    assert outcome["status"] == "cancelled" and outcome["previous"] == "queued"
    assert [j.id for j in client.sessions.queue(s.id)] == [jobs[0], jobs[1], jobs[3]]
    assert client.jobs.get(jobs[0]).status is chaz.JobStatus.RUNNING
    finals = [client.jobs.wait(j, timeout=30) for j in jobs]
    assert [f.status.value for f in finals] == ["succeeded", "succeeded", "cancelled", "succeeded"]
    replies = [
        x.content
        for x in client.sessions.entries(s.id)
        if x.type is EntryType.MESSAGE and x.sender == "agent:slow"
    ]
    assert replies == ["m0", "m1", "m3"]


@pytest.mark.parametrize("producer_principal", ["user:a"])
def test_concurrent_cancel_commands_with_one_id_apply_once(
    stack: Stack, producer: chaz.Client
) -> None:
    client = producer
    stack.client.agents.put(LEAF)
    s = client.sessions.create(agent_id="leaf")
    job_id = client.sessions.post(s.id, "never runs", sender="user:a").job_id or ""
    outcomes: list[dict[str, object]] = []

    def go() -> None:
        outcomes.append(client.jobs.cancel(job_id, command_id="same"))

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o == outcomes[0] for o in outcomes)
    assert client.jobs.get(job_id).status is chaz.JobStatus.CANCELLED
    errors = [x for x in client.sessions.entries(s.id) if x.type is EntryType.ERROR]
    assert len(errors) == 1


@pytest.mark.parametrize("producer_principal", ["user:a"])
def test_fanout_and_message_limits_refuse_only_new_branches(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    fleet.client.agents.put(LEAF)
    spawn = [
        {"call": "spawn_agent", "args": {"agent_id": "leaf", "task": f"t{i}", "async": True}}
        for i in range(3)
    ]
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="fan",
            tools=["spawn_agent", "list_jobs", "job_output", "echo"],
            limits=chaz.Limits(max_spawn_fanout=2, max_call_depth=0),
            script=[{"steps": [*spawn, {"call": "list_jobs", "args": {}}, {"say": "done"}]}],
        )
    )
    s = client.sessions.create(agent_id="fan")
    e = client.sessions.post(s.id, "fan out", sender="user:a")
    assert client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60).content == "done"
    results = [x for x in client.sessions.entries(s.id) if x.type is EntryType.TOOL_RESULT]
    codes = [json.loads(r.content).get("error", {}).get("code") for r in results[:3]]
    assert codes == [None, None, "topology.fanout"]
    # Observation still works with the allowance spent (docs/contracts.md#acceptance, C5).
    listed = json.loads(results[3].content)
    assert results[3].metadata["is_error"] is False
    assert len([j for j in listed if j["parent_job_id"] == e.job_id]) == 2

    # Message depth: each spawn passes its count + 1 down the lineage.
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="talky",
            tools=["spawn_agent", "echo", "sleep"],
            limits=chaz.Limits(max_messages=1, max_call_depth=0),
            script=[
                {
                    "steps": [
                        {"call": "spawn_agent", "args": {"agent_id": "talky", "task": "{input}"}},
                        {"say": "talky: {last_result}"},
                    ]
                }
            ],
        )
    )
    t = client.sessions.create(agent_id="talky")
    e = client.sessions.post(t.id, "pass it on", sender="user:a")
    reply = client.sessions.wait_for_reply(t.id, after=e.seq, timeout=60)
    assert "topology.messages" in reply.content
    assert len([x for x in client.sessions.list() if x.agent_id == "talky"]) == 2
    child = next(j for j in client.jobs.list() if j.parent_job_id == e.job_id)
    assert child.message_count == 1
