"""Tree capacity (max_live_per_tree) and the lane race, broken on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.jobs import Job
from chaz.domain.limits import EffectiveLimits, resolve_limits
from chaz.services import Services
from chaz.tools import default_registry
from chaz.usecases import admission
from chaz.usecases.turns import TurnRunner
from tests.support.dispatch import RecordingDispatcher
from tests.support.stack import Stack


def test_a_tree_runs_at_most_max_live_and_other_trees_are_not_blocked(tmp_path: Path) -> None:
    stack = Stack.embedded(tmp_path / "home", max_live_per_tree=2)
    try:
        stack.workers(1, concurrency=8)
        client = stack.client
        client.agents.put(
            chaz.AgentSpec(id="nap", script=[{"steps": [{"sleep": 0.6}, {"say": "rested"}]}])
        )
        fan = [
            {"call": "spawn_agent", "args": {"agent_id": "nap", "task": f"t{i}", "async": True}}
            for i in range(6)
        ]
        # The fan-out answers only the first message: each child's reply comes
        # back to the boss as a follow-up, which must not fan out again (it
        # did until 2026-12-07, and the tree grew to hundreds of sessions
        # that took the first six children's slots).
        client.agents.put(
            chaz.AgentSpec(
                id="boss",
                tools=["spawn_agent"],
                script=[
                    {"match": "fan out", "steps": [*fan, {"say": "spawned"}]},
                    {"steps": [{"say": "noted"}]},
                ],
            )
        )
        root = client.sessions.create(agent_id="boss")
        e = client.sessions.post(root.id, "fan out", sender="user:a")
        assert client.sessions.wait_for_reply(root.id, after=e.seq, timeout=30).content == "spawned"

        # Another tree is not held up by the full one.
        other = client.sessions.create(agent_id="nap")
        o = client.sessions.post(other.id, "me too", sender="user:b")
        client.sessions.wait_for_reply(other.id, after=o.seq, timeout=30)

        children = [j for j in client.jobs.list() if j.parent_job_id == e.job_id]
        assert len(children) == 6
        finals = [client.jobs.wait(j.id, timeout=60) for j in children]
        assert all(f.status is chaz.JobStatus.SUCCEEDED for f in finals)
        # Ordering, not a stopwatch: the other tree's turn started while the
        # full tree still had children waiting for a slot.
        other_job = client.jobs.get(o.job_id or "")
        assert other_job.started_at is not None
        assert other_job.started_at < max(f.started_at for f in finals)  # type: ignore[operator, type-var]
        # At no moment did more than two turns of the tree run.
        spans = [(f.started_at, f.finished_at) for f in finals]
        for start, _ in spans:
            live = sum(1 for s, f in spans if s <= start < f)  # type: ignore[operator, misc]
            assert live <= 2, spans
    finally:
        stack.close()


def test_a_job_admitted_while_the_lane_is_released_still_runs(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = Services(stack.settings)
    stack.client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
    recorder = RecordingDispatcher()
    svc.__dict__["dispatcher"] = recorder  # no workers: this test is the worker
    runner = TurnRunner(svc, default_registry())
    s = svc.store.create_session("echo")

    def admit_behind_a_held_lane(text: str) -> tuple[str, str]:
        first = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", text).job
        assert first is not None
        token = svc.lanes.acquire(s.id, first.id, 30, project="default")
        assert token is not None
        second = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", text + "2").job
        assert second is not None
        assert runner.wake(s.id, second.id).status == "busy"
        svc.lanes.release(s.id, token, project="default")
        recorder.wakes.clear()
        return first.id, second.id

    # Order 1: B is admitted while A's turn holds the lane, and B's own
    # wake-up finds the lane busy. The worker that runs A keeps the lane
    # and runs B under the same lease (its time budget is the test's to set:
    # a busy machine may take longer than the default for A's turn)...
    monkeypatch.setattr("chaz.usecases.turns.runner.KEEP_LANE_SECONDS", 3600.0)
    a, b = admit_behind_a_held_lane("a")
    outcome = runner.wake(s.id, a)
    assert (outcome.status, outcome.job_id, outcome.turns) == ("ran", b, 2)
    assert recorder.wakes == []
    # ... or, its budget spent, releases the lane and wakes B.
    monkeypatch.setattr("chaz.usecases.turns.runner.KEEP_LANE_TURNS", 1)
    c, d = admit_behind_a_held_lane("c")
    assert runner.wake(s.id, c).job_id == c
    assert recorder.wakes == [(s.id, d)], "releasing the lane must wake the next job"
    assert runner.wake(s.id, d).job_id == d

    # Order 2: the releaser looked for work before E committed; E's own
    # wake-up then finds the lane free and runs it.
    recorder.wakes.clear()
    e = admission.write(svc, s.id, EntryType.MESSAGE, "user:u", "e").job
    assert e is not None
    assert recorder.wakes == [(s.id, e.id)]
    assert runner.wake(s.id, e.id).job_id == e.id
    replies = [
        x.content
        for x in svc.store.entries(s.id)
        if x.type is EntryType.MESSAGE and x.sender == "agent:echo"
    ]
    assert replies == ["a", "a2", "c", "c2", "e"]
    svc.close()


def test_a_slot_handed_over_while_the_waiter_still_holds_its_lane_wakes_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost wake-up CI met once in three runs (2026-12-07): a session's head
    job finds its tree full and joins the waiting set; before its worker gives
    the lane back, a turn of the tree ends, pops that session and wakes it, and
    that wake-up finds the lane still held. The worker that gave the lane up
    must see it was handed the slot and wake the session itself."""
    svc = Services(stack.settings)
    agent = chaz.AgentSpec(
        id="echo", script=[{"steps": [{"echo": True}]}], limits=chaz.Limits(max_live_per_tree=1)
    )
    stack.client.agents.put(agent)
    recorder = RecordingDispatcher()
    svc.__dict__["dispatcher"] = recorder  # no workers: this test is the worker
    runner, other_worker = TurnRunner(svc, default_registry()), TurnRunner(svc, default_registry())
    root = svc.store.create_session("echo")
    child = svc.store.create_session("echo", tree_id=root.tree_id)
    running = admission.write(svc, root.id, EntryType.MESSAGE, "user:u", "busy").job
    waiting = admission.write(svc, child.id, EntryType.MESSAGE, "user:u", "me").job
    assert running is not None and waiting is not None
    # The root's turn holds the tree's one slot.
    assert svc.capacity.start(running, resolve_limits(svc.settings, root, agent))
    recorder.wakes.clear()

    start = svc.capacity.start
    handed: list[str | None] = []

    def full_then_the_running_turn_ends(job: Job, limits: EffectiveLimits) -> bool:
        took = start(job, limits)
        if job.id == waiting.id and not handed:
            assert not took, "the tree is full: the child's job waits"
            # The root's turn ends now and hands its slot to the child, whose
            # wake-up (sent by that turn's worker) finds the lane still held.
            handed.append(svc.capacity.give_back(running.id, root.tree_id, "default"))
            assert other_worker.wake(child.id, "").status == "busy"
        return took

    monkeypatch.setattr(svc.capacity, "start", full_then_the_running_turn_ends)
    outcome = runner.wake(child.id, waiting.id)
    assert (outcome.status, outcome.job_id) == ("waiting", waiting.id)
    assert handed == [child.id]
    assert recorder.wakes == [(child.id, waiting.id)], "the handed slot's wake-up was lost"
    assert runner.wake(child.id, waiting.id).job_id == waiting.id
    assert svc.store.get_job(waiting.id).status is chaz.JobStatus.SUCCEEDED
    svc.close()


def test_openai_compatible_model_runs_a_turn_with_a_tool_call(stack: Stack) -> None:
    from tests.support.fake_openai import FakeOpenAI

    with FakeOpenAI(model="fake-model") as srv:
        srv.push_tool_call("word_count", {"text": "one two three"})
        srv.push_text("There are 3 words.")
        stack.workers(1)
        client = stack.client
        client.agents.put(
            chaz.AgentSpec(
                id="gpt",
                model="openai:fake-model",
                tools=["word_count"],
                options={"base_url": srv.base_url, "api_key": "test"},
            )
        )
        s = client.sessions.create(agent_id="gpt")
        e = client.sessions.post(s.id, "count: one two three", sender="user:a")
        reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30)
        assert reply.content == "There are 3 words."
        entries = client.sessions.entries(s.id)
        result = next(x for x in entries if x.type is EntryType.TOOL_RESULT)
        assert result.content == "3"
        first, second = srv.requests
        assert first["model"] == "fake-model"
        assert [t["function"]["name"] for t in first["tools"]] == ["word_count"]
        assert first["messages"][-1] == {
            "role": "user",
            "content": "count: one two three",
            "name": "user_a",
        }
        tool_msg = second["messages"][-1]
        assert tool_msg["role"] == "tool" and tool_msg["content"] == "3"
        assert json.loads(second["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {
            "text": "one two three"
        }


def test_a_saturated_session_does_not_block_other_sessions(stack: Stack) -> None:
    stack.workers(1, concurrency=4)
    client = stack.client
    client.agents.put(
        chaz.AgentSpec(id="slow", script=[{"steps": [{"sleep": 0.5}, {"echo": True}]}])
    )
    busy = client.sessions.create(agent_id="slow")
    for i in range(30):  # 15 s of queued work in one lane
        client.sessions.post(busy.id, f"backlog {i}", sender="user:a")
    quiet = client.sessions.create(agent_id="slow")
    e = client.sessions.post(quiet.id, "hello", sender="user:b")
    assert client.sessions.wait_for_reply(quiet.id, after=e.seq, timeout=30).content == "hello"
    # The quiet session's turn ran while most of the busy lane still waited.
    done_quiet = client.jobs.get(e.job_id or "").finished_at
    assert done_quiet is not None
    busy_jobs = client.jobs.list(session_id=busy.id)
    ahead = [j for j in busy_jobs if j.finished_at is not None and j.finished_at <= done_quiet]
    assert len(ahead) < 10, f"{len(ahead)} of 30 queued turns finished before the quiet one"
