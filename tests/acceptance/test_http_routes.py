"""More of LangGraph's routes on ``chaz serve`` (docs/http.md#routes):
threadless runs, threads update and history, runs delete, and assistants
written, driven by ``langgraph-sdk`` against real workers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Iterator
from typing import Any

import httpx
import pytest

import chaz
from tests.acceptance.test_http import Served, ask, project, refused, run
from tests.support.serve import serving
from tests.support.stack import Stack

ECHO = chaz.AgentSpec(id="routes-echo", script=[{"steps": [{"say": "echo: {input}"}]}])
STREAMER = chaz.AgentSpec(
    id="routes-streamer", script=[{"steps": [{"stream": "one two three four", "chunk": 4}]}]
)
HOLDER = chaz.AgentSpec(
    id="routes-holder",
    script=[{"steps": [{"wait": "hold-{session_id}"}, {"say": "done: {input}"}]}],
)


@pytest.fixture(scope="module")
def served(module_stack: Stack) -> Iterator[Served]:
    module_stack.workers(1, concurrency=4)
    for spec in (ECHO, STREAMER, HOLDER):
        module_stack.client.agents.put(spec)
    with serving(module_stack) as url:
        yield Served(module_stack, url)


def said(values: Any) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in values["messages"]]


async def expect(call: Awaitable[Any], status: int, code: str, field: str | None = None) -> None:
    answer = await refused(call)
    body = answer.json()
    assert (answer.status_code, body["code"]) == (status, code), body
    if field is not None:
        assert body["details"]["field"] == field, body


def test_threadless_runs_make_a_thread_each_and_refusals_make_none(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        created: list[Any] = []
        values: Any = await sdk.runs.wait(
            None, ECHO.id, input=ask("hi"), on_run_created=created.append
        )
        assert said(values) == [("human", "hi"), ("ai", "echo: hi")]
        (meta,) = created
        first = meta["thread_id"]
        assert (await sdk.threads.get_state(first))["values"] == values
        assert [r["status"] for r in await sdk.runs.list(first)] == ["success"]

        background: Any = await sdk.runs.create(None, ECHO.id, input=ask("later"))
        second = background["thread_id"]
        assert second not in (None, first)
        joined: Any = await sdk.runs.join(second, background["run_id"])
        assert said(joined) == [("human", "later"), ("ai", "echo: later")]

        parts = [
            p
            async for p in sdk.runs.stream(
                None, STREAMER.id, input=ask("go"), stream_mode=["values"]
            )
        ]
        assert parts[0].event == "metadata"
        assert [p.event for p in parts][-2:] == ["values", "end"]
        third = parts[0].data["thread_id"]
        final: Any = parts[-2].data
        assert said(final)[-1] == ("ai", "one two three four")
        assert parts[-1].data == {"run_id": parts[0].data["run_id"], "status": "success"}
        thread: Any = await sdk.threads.get(third)
        assert thread["metadata"]["graph_id"] == STREAMER.id
        kept = await sdk.runs.wait(None, ECHO.id, input=ask("k"), on_completion="keep")
        assert said(kept)[-1] == ("ai", "echo: k")

        before = {t["thread_id"] for t in await sdk.threads.search(limit=100)}
        assert {first, second, third} <= before
        refusals = [
            (sdk.runs.wait(None, ECHO.id, input=ask("x"), interrupt_before="*"), 422),
            (sdk.runs.create(None, ECHO.id, input=ask("x"), on_completion="delete"), 422),
            (sdk.runs.create(None, ECHO.id, input={"messages": []}), 422),
            (sdk.runs.wait(None, ECHO.id, input=ask("x"), webhook="http://10.1/"), 422),
            (sdk.runs.create(None, "no-such-agent", input=ask("x")), 404),
            (sdk.runs.create(None, ECHO.id, input=ask("x"), stream_mode="messages-tuple"), 422),
        ]
        for call, status in refusals:
            answer = await refused(call)
            assert answer.status_code == status, answer.text
            assert answer.json()["code"] in (
                "request.unsupported",
                "request.invalid",
                "webhook.forbidden",
                "agent.not_found",
            )
        # A refused threadless run leaves no thread behind.
        assert {t["thread_id"] for t in await sdk.threads.search(limit=100)} == before
        _, reader_key = served.stack.client.keys.create("user:reader", "readers", "history.read")
        await expect(
            served.sdk(reader_key).runs.wait(None, ECHO.id, input=ask("x")), 403, "auth.forbidden"
        )

    run(scenario())


def test_threads_update_and_history(served: Served) -> None:
    async def scenario() -> None:
        key = served.key(project())
        sdk = served.sdk(key)
        tid = (await sdk.threads.create(graph_id=ECHO.id))["thread_id"]
        for text in ("one", "two"):
            await sdk.runs.wait(tid, ECHO.id, input=ask(text))

        updated = await sdk.threads.update(tid, metadata={"graph_id": ECHO.id})
        assert updated["thread_id"] == tid
        assert updated["metadata"] == {"graph_id": ECHO.id, "assistant_id": ECHO.id}
        with httpx.Client(base_url=served.url, headers={"x-api-key": key}) as http:
            minimal = http.patch(f"/threads/{tid}", json={}, headers={"prefer": "return=minimal"})
            assert (minimal.status_code, minimal.content) == (204, b"")
        await expect(sdk.threads.update(tid, metadata={"team": "a"}), 422, "request.unsupported")
        await expect(
            sdk.threads.update(tid, metadata={"graph_id": HOLDER.id}),
            422,
            "request.unsupported",
            "metadata.graph_id",
        )
        await expect(sdk.threads.update(tid, metadata={}, ttl=5), 422, "request.unsupported", "ttl")

        history: Any = await sdk.threads.get_history(tid)
        assert [said(s["values"])[-1] for s in history] == [
            ("ai", "echo: two"),
            ("human", "two"),
            ("ai", "echo: one"),
            ("human", "one"),
        ]
        assert [len(s["values"]["messages"]) for s in history] == [4, 3, 2, 1]
        state = await sdk.threads.get_state(tid)
        assert history[0]["values"] == state["values"]
        assert history[-1]["parent_checkpoint"] is None
        assert history[0]["parent_checkpoint"] == history[1]["checkpoint"]
        assert await sdk.threads.get_history(tid, limit=2) == history[:2]
        older = await sdk.threads.get_history(tid, before=history[1]["checkpoint"])
        assert older == history[2:]
        by_id = await sdk.threads.get_history(
            tid, before=history[2]["checkpoint"]["checkpoint_id"], limit=5
        )
        assert by_id == history[3:]

        await expect(sdk.threads.get_history(tid, before="nope"), 422, "request.invalid", "before")
        await expect(
            sdk.threads.get_history(tid, before=f"{uuid.uuid4().hex[:16]}:3"),
            422,
            "request.invalid",
            "before",
        )
        await expect(sdk.threads.get_history(tid, limit=0), 422, "request.invalid", "limit")
        await expect(sdk.threads.get_history(tid, metadata={"step": 1}), 422, "request.unsupported")
        await expect(sdk.threads.get_history(tid, select=["values"]), 422, "request.unsupported")

        other = served.sdk(served.key(project()))
        nobody = uuid.uuid4().hex[:16]
        for denied, missing in (
            (other.threads.get_history(tid), sdk.threads.get_history(nobody)),
            (
                other.threads.update(tid, metadata={"graph_id": ECHO.id}),
                sdk.threads.update(nobody, metadata={}),
            ),
        ):
            a, b = await refused(denied), await refused(missing)
            assert (a.status_code, a.json()["code"]) == (b.status_code, b.json()["code"])
            assert (a.status_code, a.json()["code"]) == (404, "session.not_found")

    run(scenario())


def test_a_run_is_deleted_once_it_has_ended_and_its_messages_stay(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=HOLDER.id))["thread_id"]
        held: Any = await sdk.runs.create(tid, HOLDER.id, input=ask("one"))
        rid = held["run_id"]
        # Running (or queued): refused, and nothing changes.
        await expect(sdk.runs.delete(tid, rid), 409, "conflict", "run_id")
        assert [r["run_id"] for r in await sdk.runs.list(tid)] == [rid]

        other = served.sdk(served.key(project()))
        nobody = uuid.uuid4().hex[:16]
        a, b = (
            await refused(other.runs.delete(tid, rid)),
            await refused(sdk.runs.delete(nobody, rid)),
        )
        assert (a.status_code, a.json()["code"]) == (b.status_code, b.json()["code"])
        assert (a.status_code, a.json()["code"]) == (404, "session.not_found")
        await expect(sdk.runs.delete(tid, nobody), 404, "job.not_found")

        served.stack.open_gate(f"hold-{tid}")
        await sdk.runs.join(tid, rid)
        kept: Any = await sdk.runs.wait(tid, HOLDER.id, input=ask("two"))
        await sdk.runs.delete(tid, rid)
        runs = await sdk.runs.list(tid)
        assert [r["run_id"] for r in runs] != [] and rid not in [r["run_id"] for r in runs]
        await expect(sdk.runs.get(tid, rid), 404, "job.not_found")
        await expect(sdk.runs.join(tid, rid), 404, "job.not_found")
        await expect(sdk.runs.delete(tid, rid), 404, "job.not_found")
        # chaz keeps the history: the run's messages are still the thread's.
        assert (await sdk.threads.get_state(tid))["values"] == kept
        assert said(kept) == [
            ("human", "one"),
            ("ai", "done: one"),
            ("human", "two"),
            ("ai", "done: two"),
        ]
        # The producer API still sees the job: it is hidden, not gone.
        job = served.stack.client.services.store.get_job(rid)
        assert job.hidden_at is not None and job.status.value == "succeeded"

    run(scenario())


NOPE: Any = ["nope"]
CHANGED_SCRIPT: Any = [{"steps": [{"say": "changed: {input}"}]}]
SPEC_SCRIPT: Any = [{"steps": [{"say": "copied: {input}"}]}]


def test_assistants_are_written_by_an_operator_only(served: Served) -> None:
    async def scenario() -> None:
        keyed = served.sdk(served.key(project()))
        for call in (
            keyed.assistants.create(ECHO.id, assistant_id="routes-copy"),
            keyed.assistants.update(ECHO.id, context={"system_prompt": "x"}),
            keyed.assistants.delete(ECHO.id),
        ):
            await expect(call, 403, "auth.forbidden")
        echo: Any = await keyed.assistants.get(ECHO.id)
        assert echo["context"]["system_prompt"] == ECHO.system_prompt
        if served.stack.kind != "embedded":
            # No key is the operator only on the embedded default's loopback listener.
            await expect(served.sdk(None).assistants.delete(ECHO.id), 401, "auth.unauthenticated")
            return
        op = served.sdk(None)
        copy: Any = await op.assistants.create(
            ECHO.id, assistant_id="routes-copy", context={"script": SPEC_SCRIPT}
        )
        assert (copy["assistant_id"], copy["graph_id"]) == ("routes-copy", "routes-copy")
        assert copy["context"]["script"] == SPEC_SCRIPT
        assert copy["context"]["system_prompt"] == ECHO.system_prompt  # from the template
        tid = (await keyed.threads.create(graph_id="routes-copy"))["thread_id"]
        values: Any = await keyed.runs.wait(tid, "routes-copy", input=ask("a"))
        assert said(values)[-1] == ("ai", "copied: a")

        changed: Any = await op.assistants.update("routes-copy", context={"script": CHANGED_SCRIPT})
        assert changed["context"]["script"][0]["steps"][0]["say"] == "changed: {input}"
        values = await keyed.runs.wait(tid, "routes-copy", input=ask("b"))
        assert said(values)[-1] == ("ai", "changed: b")

        await expect(op.assistants.create(ECHO.id, assistant_id="routes-copy"), 409, "conflict")
        same: Any = await op.assistants.create(
            None, assistant_id="routes-copy", if_exists="do_nothing"
        )
        assert same == changed
        by_name: Any = await op.assistants.create(
            None, name="routes-named", context={"script": SPEC_SCRIPT}
        )
        assert by_name["assistant_id"] == "routes-named"
        fresh: Any = await op.assistants.create(None, context={"script": SPEC_SCRIPT})
        assert len(fresh["assistant_id"]) == 16

        for call, code, field in (
            (op.assistants.create(None, assistant_id="bad id!"), "request.invalid", "assistant_id"),
            (
                op.assistants.create(None, assistant_id="x1", context={"model": "nope"}),
                "request.invalid",
                "context.model",
            ),
            (
                op.assistants.create(
                    None, assistant_id="x2", context={"script": SPEC_SCRIPT, "tools": NOPE}
                ),
                "request.invalid",
                "context.tools",
            ),
            (op.assistants.create(None, assistant_id="x3"), "request.invalid", None),
            (
                op.assistants.create(ECHO.id, assistant_id="x4", metadata={"a": 1}),
                "request.unsupported",
                "metadata",
            ),
            (
                op.assistants.create(ECHO.id, assistant_id="x5", description="d"),
                "request.unsupported",
                "description",
            ),
            (
                op.assistants.create(ECHO.id, assistant_id="x6", name="other"),
                "request.invalid",
                "name",
            ),
            (
                op.assistants.update("routes-copy", graph_id=HOLDER.id),
                "request.unsupported",
                "graph_id",
            ),
            (op.assistants.delete("routes-copy", delete_threads=True), "request.unsupported", None),
        ):
            await expect(call, 422, code, field)
        await expect(op.assistants.create("no-such", assistant_id="x7"), 404, "agent.not_found")
        assert not {"x1", "x2", "x3", "x4", "x5", "x6", "x7"} & {
            a["assistant_id"] for a in await op.assistants.search(limit=1000)
        }

        # In use (a thread of it): chaz keeps what it did, so it stays.
        await expect(op.assistants.delete("routes-copy"), 409, "conflict")
        await op.assistants.delete("routes-named")
        await expect(op.assistants.get("routes-named"), 404, "agent.not_found")
        await expect(op.assistants.delete("routes-named"), 404, "agent.not_found")
        with httpx.Client(base_url=served.url) as http:
            answer = http.delete("/assistants/" + "x" * 300)
            assert answer.status_code in (404, 422) and answer.json()["code"] in (
                "request.invalid",
                "agent.not_found",
            )

    run(scenario())
