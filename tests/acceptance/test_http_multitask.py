"""Issue 22, item 4: the multitask strategies ``interrupt`` and ``rollback``
and ``runs.cancel(action="rollback")``, driven by LangGraph's own client
against a real ``chaz serve`` and real workers (docs/http.md#runs).

A run that must stay busy waits at a gate (a scripted ``wait`` step) until the
test opens it or a cancel ends it; an agent whose reply is ``{context}``
shows what a later turn's model was given.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import pytest

import chaz
from tests.acceptance.test_http import WAIT, Served, ask, project, refused, run
from tests.support.serve import serving
from tests.support.stack import Stack

#: "hold ..." waits at the session's gate, then answers; anything else answers
#: at once with the context its model was given.
ECHOER = chaz.AgentSpec(
    id="http-mt-echoer",
    script=[
        {"match": "^hold", "steps": [{"wait": "hold-{session_id}"}, {"say": "done: {input}"}]},
        {"steps": [{"say": "saw: {context}"}]},
    ],
)

#: A member of a room (a session with members, docs/rooms.md).
ROOMIE = chaz.AgentSpec(id="http-mt-roomie", script=[{"steps": [{"say": "hi"}]}])


@pytest.fixture(scope="module")
def served(module_stack: Stack) -> Iterator[Served]:
    module_stack.workers(1, concurrency=4)
    module_stack.client.agents.put_many([ECHOER, ROOMIE])
    with serving(module_stack) as url:
        yield Served(module_stack, url)


def said(values: Any) -> list[str]:
    """The contents of a thread's values' messages."""
    return [m["content"] for m in values["messages"]]


async def held(sdk: Any, tid: str, text: str) -> dict[str, Any]:
    """A run that waits at the thread's gate (pending or running)."""
    created: dict[str, Any] = await sdk.runs.create(tid, ECHOER.id, input=ask(text))
    assert created["status"] in ("pending", "running")
    return created


def test_interrupt_cancels_the_runs_in_progress_and_runs_the_new_one_next(
    served: Served,
) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=ECHOER.id))["thread_id"]
        first = await held(sdk, tid, "hold one")
        queued = await held(sdk, tid, "hold two")
        new = await sdk.runs.create(
            tid, ECHOER.id, input=ask("three"), multitask_strategy="interrupt"
        )
        assert new["multitask_strategy"] == "interrupt"
        # No gate opened: the held run was cancelled, the queued one withdrawn.
        values = await sdk.runs.join(tid, new["run_id"])
        for old in (first, queued):
            assert (await sdk.runs.get(tid, old["run_id"]))["status"] == "interrupted"
        assert (await sdk.runs.get(tid, new["run_id"]))["status"] == "success"
        # Their entries stay: the new run's model read both inputs.
        reply = "saw: user: hold one | user: hold two | user: three"
        assert said(values) == ["hold one", "hold two", "three", reply]
        assert said((await sdk.threads.get_state(tid))["values"]) == said(values)

        # On an idle thread interrupt cancels nothing: the run just runs.
        idle = (await sdk.threads.create(graph_id=ECHOER.id))["thread_id"]
        alone = await sdk.runs.wait(
            idle, ECHOER.id, input=ask("alone"), multitask_strategy="interrupt"
        )
        assert said(alone) == ["alone", "saw: user: alone"]
        assert [r["status"] for r in await sdk.runs.list(idle)] == ["success"]

        # It cancels runs: a key that may write but not control is refused, unwritten.
        writes = ["session.write", "history.read"]
        _, writer_key = served.stack.client.keys.create("user:writer", project(), writes)
        writer = served.sdk(writer_key)
        own = (await writer.threads.create(graph_id=ECHOER.id))["thread_id"]
        for strategy in ("interrupt", "rollback"):
            answer = await refused(
                writer.runs.create(own, ECHOER.id, input=ask("x"), multitask_strategy=strategy)
            )
            assert (answer.status_code, answer.json()["code"]) == (403, "auth.forbidden")
        assert await writer.runs.list(own) == []

        # A room has no one run a message stands in for: refused, unwritten.
        key = served.key(project())
        with chaz.Client(url=served.url, api_key=key) as client:
            room = client.sessions.create(ECHOER.id, members=[ROOMIE.id]).id
        answer = await refused(
            served.sdk(key).runs.create(
                room, ECHOER.id, input=ask("x"), multitask_strategy="interrupt"
            )
        )
        body = answer.json()
        assert (answer.status_code, body["code"], body["details"]["field"]) == (
            422,
            "request.unsupported",
            "multitask_strategy",
        )
        assert await served.sdk(key).runs.list(room) == []

    run(scenario())


def test_interrupts_sent_at_once_leave_exactly_one_new_run_running_last(
    served: Served,
) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=ECHOER.id))["thread_id"]
        first = await held(sdk, tid, "hold first")
        texts = [f"hold n{i}" for i in range(4)]
        sent = await asyncio.gather(
            *(
                sdk.runs.create(tid, ECHOER.id, input=ask(t), multitask_strategy="interrupt")
                for t in texts
            )
        )
        # Each cancelled every run admitted before it: the last admitted is left.
        runs = await sdk.runs.list(tid)
        assert {r["run_id"] for r in runs} == {first["run_id"], *(s["run_id"] for s in sent)}
        last, *earlier = runs
        for other in earlier:
            await sdk.runs.join(tid, other["run_id"])
            assert (await sdk.runs.get(tid, other["run_id"]))["status"] == "interrupted"
        assert (await sdk.runs.get(tid, last["run_id"]))["status"] in ("pending", "running")
        served.stack.open_gate(f"hold-{tid}")
        values = await sdk.runs.join(tid, last["run_id"])
        assert (await sdk.runs.get(tid, last["run_id"]))["status"] == "success"
        # Nothing is lost: every input is in the thread; one run answered.
        ai = [m["content"] for m in values["messages"] if m["type"] == "ai"]
        (mine,) = [t for t in texts if f"done: {t}" in ai]
        assert ai == [f"done: {mine}"]
        assert sorted(said(values)[:-1]) == sorted(["hold first", *texts])

    run(scenario())


def test_rollback_hides_the_cancelled_run_from_state_and_later_context(served: Served) -> None:
    async def scenario() -> None:
        key = served.key(project())
        sdk = served.sdk(key)
        tid = (await sdk.threads.create(graph_id=ECHOER.id))["thread_id"]
        before = await sdk.runs.wait(tid, ECHOER.id, input=ask("first"))
        assert said(before) == ["first", "saw: user: first"]
        (kept,) = await sdk.runs.list(tid)
        doomed = await held(sdk, tid, "hold secret")
        new = await sdk.runs.create(
            tid, ECHOER.id, input=ask("after"), multitask_strategy="rollback"
        )
        values = await sdk.runs.join(tid, new["run_id"])
        assert (await sdk.runs.get(tid, doomed["run_id"]))["status"] == "interrupted"
        # No trace of the rolled-back run in the state, and its model never saw it.
        context = "saw: user: first | assistant: saw: user: first | user: after"
        assert said(values) == ["first", "saw: user: first", "after", context]
        state = await sdk.threads.get_state(tid)
        assert state["values"] == values
        assert (await sdk.threads.get(tid))["values"] == values
        later = await sdk.runs.wait(tid, ECHOER.id, input=ask("later"))
        assert "secret" not in said(later)[-1]
        assert said(later)[-1].endswith("| user: later")

        # chaz keeps history: the entries are in the database, and the job says
        # it was rolled back (the producer API over HTTP, with the same key).
        with chaz.Client(url=served.url, api_key=key) as client:
            entries = client.sessions.entries(tid, limit=1000)
            hidden = [e for e in entries if e.job_id == doomed["run_id"]]
            assert "hold secret" in [e.content for e in hidden]
            job = client.jobs.get(doomed["run_id"])
            assert job.rolled_back_at is not None
            # A repeated rollback, and one of a run that ended first, change nothing.
            await sdk.runs.cancel(tid, doomed["run_id"], wait=True, action="rollback")
            await sdk.runs.cancel(tid, kept["run_id"], wait=True, action="rollback")
            assert client.sessions.entries(tid, limit=1000) == entries
            assert client.jobs.get(doomed["run_id"]) == job
            assert client.jobs.get(kept["run_id"]).rolled_back_at is None
            assert (await sdk.threads.get_state(tid))["values"] == later

    run(scenario())


def test_cancel_with_rollback_hides_a_named_run(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=ECHOER.id))["thread_id"]
        running = await held(sdk, tid, "hold private")
        waiting = await held(sdk, tid, "hold queued")
        runs: Any = sdk.runs  # with wait, cancel answers the run (typed None)
        ended = await runs.cancel(tid, running["run_id"], wait=True, action="rollback")
        assert ended["status"] == "interrupted"
        # Only the named run: the one queued behind it is neither cancelled nor hidden.
        assert said((await sdk.threads.get_state(tid))["values"]) == ["hold queued"]
        served.stack.open_gate(f"hold-{tid}")
        values = await sdk.runs.join(tid, waiting["run_id"])
        assert said(values) == ["hold queued", "done: hold queued"]

        # A bad action is refused naming it, and changes nothing.
        bad: Any = "undo"
        answer = await refused(sdk.runs.cancel(tid, waiting["run_id"], action=bad))
        assert (answer.status_code, answer.json()["details"]["field"]) == (422, "action")

    run(scenario())


def test_rollback_after_its_worker_was_killed_still_hides_the_run(stack: Stack) -> None:
    stack.client.agents.put(ECHOER)
    [worker] = stack.workers(1, concurrency=2, queues="chaz.turns")
    stack.housekeeper()  # beat: the reconciler wakes the orphaned turn
    with serving(stack) as url:
        served = Served(stack, url)

        async def scenario() -> None:
            sdk = served.sdk(served.key(project()))
            tid = (await sdk.threads.create(graph_id=ECHOER.id))["thread_id"]
            doomed = await held(sdk, tid, "hold secret")

            async def is_running() -> bool:
                got = await sdk.runs.get(tid, doomed["run_id"])
                return bool(got["status"] == "running")

            await _until(is_running, "the held run to start")
            worker.kill(signal.SIGKILL)
            assert worker.proc is not None
            worker.proc.wait(timeout=WAIT)
            await sdk.runs.cancel(tid, doomed["run_id"], action="rollback")
            assert (await sdk.threads.get_state(tid))["values"] == {"messages": []}

            # A new worker resumes the orphaned turn, which sees its cancel and ends.
            stack.workers(1, concurrency=2, queues="chaz.turns")
            await sdk.runs.join(tid, doomed["run_id"])
            assert (await sdk.runs.get(tid, doomed["run_id"]))["status"] == "interrupted"
            later = await sdk.runs.wait(tid, ECHOER.id, input=ask("later"))
            assert said(later) == ["later", "saw: user: later"]
            # Redelivered: the rollback again changes nothing.
            runs: Any = sdk.runs  # with wait, cancel answers the run (typed None)
            again = await runs.cancel(tid, doomed["run_id"], wait=True, action="rollback")
            assert again["status"] == "interrupted"
            assert (await sdk.threads.get_state(tid))["values"] == later

        run(scenario())


async def _until(check: Any, what: str) -> None:
    """Wait until ``check()`` is true: a bound on an outcome the test caused."""
    for _ in range(WAIT * 20):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
