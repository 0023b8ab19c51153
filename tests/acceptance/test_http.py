"""Issue 22's first slice: ``chaz serve`` driven by LangGraph's own client
(``langgraph-sdk``), on real workers (docs/http.md).

One module fleet and one ``chaz serve`` child for every test; each test works
in projects of its own, through API keys. Turns that must stay busy wait at a
gate the test opens (a scripted ``wait`` step), so nothing races the clock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Awaitable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

import chaz
from chaz.domain.principals import ALL_GRANTS
from chaz.settings import Settings
from tests.acceptance.test_cli import INTERRUPTIBLE_CLI, cli_env, wait_for
from tests.conftest import free_port
from tests.support.stack import Stack

#: How long a worker or the server may take to do its part on a loaded machine.
WAIT = 60
ANSWER = "The quick brown fox jumps over the lazy dog."
STREAMER = chaz.AgentSpec(
    id="http-streamer",
    script=[{"steps": [{"wait": "go-{session_id}"}, {"stream": ANSWER, "chunk": 5}]}],
)
SAYER = chaz.AgentSpec(id="http-sayer", script=[{"steps": [{"say": "hello from chaz"}]}])
HOLDER = chaz.AgentSpec(
    id="http-holder",
    script=[{"steps": [{"wait": "hold-{session_id}"}, {"say": "done: {input}"}]}],
)

FAILER = chaz.AgentSpec(id="http-failer", script=[{"steps": [{"fail": "the model is down"}]}])

T = TypeVar("T")


@dataclass
class Served:
    """The module's fleet with ``chaz serve`` in front of it."""

    stack: Stack
    url: str

    def key(self, project: str) -> str:
        """A new API key of a principal of ``project`` with every grant."""
        _, plaintext = self.stack.client.keys.create("user:http", project, list(ALL_GRANTS))
        return plaintext

    def sdk(self, key: str | None) -> LangGraphClient:
        """LangGraph's client for this server, with ``key`` (or none)."""
        return get_client(url=self.url, api_key=key)


@pytest.fixture(scope="module")
def served(module_stack: Stack) -> Iterator[Served]:
    module_stack.workers(1, concurrency=4)
    for spec in (STREAMER, SAYER, HOLDER, FAILER):
        module_stack.client.agents.put(spec)
    port = free_port()
    log = (module_stack.settings.home / "serve.log").open("w")
    child = subprocess.Popen(
        [*INTERRUPTIBLE_CLI, "serve", "--port", str(port), "--loglevel", "warning"],
        env=cli_env(settings=module_stack.settings),
        cwd=module_stack.settings.home.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        module_stack.wait_for(lambda: _answers(url, child), WAIT, "chaz serve to answer /ok")
        yield Served(module_stack, url)
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


def _answers(url: str, child: subprocess.Popen[bytes]) -> bool:
    assert child.poll() is None, "the server's process exited"
    try:
        return httpx.get(f"{url}/ok", timeout=5).json() == {"ok": True}
    except httpx.HTTPError:
        return False


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def refused(call: Awaitable[Any]) -> httpx.Response:
    """The error answer of a call the server must refuse."""
    try:
        await call
    except httpx.HTTPStatusError as exc:
        await exc.response.aread()
        return exc.response
    raise AssertionError("the call was not refused")


def ask(text: str) -> dict[str, Any]:
    """A run's input: one user message."""
    return {"messages": [{"role": "user", "content": text}]}


def project() -> str:
    return f"h-{uuid.uuid4().hex[:10]}"


def test_wait_stream_and_list_through_the_sdk(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        assert {a["assistant_id"] for a in await sdk.assistants.search(limit=100)} >= {
            SAYER.id,
            STREAMER.id,
        }
        thread = await sdk.threads.create(graph_id=SAYER.id)
        tid = thread["thread_id"]
        values = await sdk.runs.wait(tid, SAYER.id, input=ask("hi"))
        assert isinstance(values, dict)
        said = [(m["type"], m["content"]) for m in values["messages"]]
        assert said == [("human", "hi"), ("ai", "hello from chaz")]
        state = await sdk.threads.get_state(tid)
        assert state["values"] == values

        streamed = await sdk.threads.create(graph_id=STREAMER.id)
        sid = streamed["thread_id"]
        parts = sdk.runs.stream(
            sid,
            STREAMER.id,
            input=ask("tell me"),
            stream_mode=["values", "messages-tuple"],
        )
        first = await anext(parts)
        assert first.event == "metadata"
        run_id = first.data["run_id"]
        # The turn waits at its gate until the stream is open: every partial is heard.
        served.stack.open_gate(f"go-{sid}")
        rest = [p async for p in parts]
        chunks = [p.data[0] for p in rest if p.event == "messages"]
        assert len(chunks) >= 3
        assert "".join(c["content"] for c in chunks) == ANSWER
        assert {c["id"] for c in chunks} == {f"run-{run_id}-0"}
        assert [p.event for p in rest][-2:] == ["values", "end"]
        final = rest[-2].data["messages"]
        assert [(m["type"], m["content"]) for m in final] == [("human", "tell me"), ("ai", ANSWER)]
        assert rest[-1].data == {"run_id": run_id, "status": "success"}

        runs = await sdk.runs.list(sid)
        assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "success")]
        assert (await sdk.runs.get(sid, run_id))["status"] == "success"
        assert (await sdk.threads.get(sid))["status"] == "idle"

    run(scenario())


def test_reject_refuses_a_run_on_a_busy_thread_and_enqueue_queues_it(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=HOLDER.id))["thread_id"]
        said = ask("one")
        first = await sdk.runs.create(tid, HOLDER.id, input=said)
        # A worker may have taken it already; it waits at the gate either way.
        assert first["status"] in ("pending", "running")
        assert (await sdk.threads.get(tid))["status"] == "busy"

        answer = await refused(
            sdk.runs.create(tid, HOLDER.id, input=said, multitask_strategy="reject")
        )
        assert answer.status_code == 409
        assert answer.json()["code"] == "session.busy"
        queued = await sdk.runs.create(tid, HOLDER.id, input=ask("two"))

        # A queued run cancelled (and waited for) never runs; its message stays.
        dropped = await sdk.runs.create(tid, HOLDER.id, input=ask("three"))
        await sdk.runs.cancel(tid, dropped["run_id"], wait=True)
        assert (await sdk.runs.get(tid, dropped["run_id"]))["status"] == "interrupted"

        served.stack.open_gate(f"hold-{tid}")
        joined: Any = await sdk.runs.join(tid, queued["run_id"])
        assert joined["messages"][-1]["content"] == "done: two"
        # A run that has ended already is joined at once, with the same values.
        assert await sdk.runs.join(tid, first["run_id"]) == joined
        runs = await sdk.runs.list(tid)
        assert [(r["run_id"], r["status"]) for r in runs] == [
            (dropped["run_id"], "interrupted"),
            (queued["run_id"], "success"),
            (first["run_id"], "success"),
        ]
        assert [r["run_id"] for r in await sdk.runs.list(tid, status="interrupted")] == [
            dropped["run_id"]
        ]
        state: Any = await sdk.threads.get_state(tid)
        messages = state["values"]["messages"]
        # The refused run wrote nothing; the queued one ran after the first.
        assert [m["content"] for m in messages] == [
            "one",
            "two",
            "three",
            "done: one",
            "done: two",
        ]

        # reject is decided under the session's lock: of runs sent at once to
        # an idle thread, exactly one is admitted.
        idle = (await sdk.threads.create(graph_id=HOLDER.id))["thread_id"]
        tries = [
            sdk.runs.create(idle, HOLDER.id, input=ask(f"r{i}"), multitask_strategy="reject")
            for i in range(6)
        ]
        outcomes = await asyncio.gather(*tries, return_exceptions=True)
        admitted = [o for o in outcomes if isinstance(o, dict)]
        refusals = [o for o in outcomes if not isinstance(o, dict)]
        assert len(admitted) == 1, outcomes
        assert all(
            isinstance(o, httpx.HTTPStatusError) and o.response.status_code == 409 for o in refusals
        ), refusals
        served.stack.open_gate(f"hold-{idle}")
        await sdk.runs.join(idle, admitted[0]["run_id"])
        assert len(await sdk.runs.list(idle)) == 1

    run(scenario())


def test_a_key_of_another_project_finds_nothing(served: Served) -> None:
    async def scenario() -> None:
        owner = served.sdk(served.key(project()))
        other = served.sdk(served.key(project()))
        tid = (await owner.threads.create(graph_id=SAYER.id))["thread_id"]
        said = ask("mine")
        await owner.runs.wait(tid, SAYER.id, input=said)
        (done,) = await owner.runs.list(tid)
        rid = done["run_id"]

        missing_thread = uuid.uuid4().hex[:16]
        pairs = [
            (other.threads.get(tid), owner.threads.get(missing_thread)),
            (other.threads.get_state(tid), owner.threads.get_state(missing_thread)),
            (other.runs.list(tid), owner.runs.list(missing_thread)),
            (other.runs.get(tid, rid), owner.runs.get(missing_thread, rid)),
            (other.runs.cancel(tid, rid), owner.runs.cancel(missing_thread, rid)),
            (
                other.runs.create(tid, SAYER.id, input=said),
                owner.runs.create(missing_thread, SAYER.id, input=said),
            ),
        ]
        # A run of this thread that does not exist: job.not_found, as for another thread's.
        gone = await refused(owner.runs.get(tid, missing_thread))
        assert (gone.status_code, gone.json()["code"]) == (404, "job.not_found")
        for denied, missing in pairs:
            a, b = await refused(denied), await refused(missing)
            assert (a.status_code, a.json()["code"]) == (b.status_code, b.json()["code"])
            assert (a.status_code, a.json()["code"]) == (404, "session.not_found")
        assert [t["thread_id"] for t in await other.threads.search()] == []
        assert len(await owner.runs.list(tid)) == 1  # the refused create wrote nothing

        # A key without the grant is refused before anything is looked up.
        _, reader_key = served.stack.client.keys.create("user:reader", "readers", "history.read")
        reader = served.sdk(reader_key)
        answer = await refused(reader.threads.create(graph_id=SAYER.id))
        assert (answer.status_code, answer.json()["code"]) == (403, "auth.forbidden")
        assert await reader.threads.search() == []

        # A saved agent's key writes as that agent: under the processing rule
        # its message admits nothing, so it cannot start a run.
        agent_project = project()
        _, agent_key = served.stack.client.keys.create(f"agent:{SAYER.id}", agent_project, None)
        as_agent = served.sdk(agent_key)
        own = (await as_agent.threads.create(graph_id=SAYER.id))["thread_id"]
        answer = await refused(as_agent.runs.create(own, SAYER.id, input=said))
        body = answer.json()
        assert (answer.status_code, body["code"], body["details"]["field"]) == (
            422,
            "request.invalid",
            "x-api-key",
        )
        assert (await as_agent.threads.get_state(own))["values"] == {"messages": []}

        bad_key = await refused(served.sdk("chz_nope_nope").threads.get(tid))
        assert (bad_key.status_code, bad_key.json()["code"]) == (401, "auth.unauthenticated")
        # No key at all: the operator only on the embedded default's loopback listener.
        keyless = served.sdk(None)
        if served.stack.kind == "embedded":
            # The operator acts in the default project: project A's thread is not there.
            assert isinstance(await keyless.threads.search(), list)
            answer = await refused(keyless.threads.get(tid))
            assert (answer.status_code, answer.json()["code"]) == (404, "session.not_found")
        else:
            answer = await refused(keyless.threads.get(tid))
            assert (answer.status_code, answer.json()["code"]) == (401, "auth.unauthenticated")

    run(scenario())


def test_a_failed_run_is_an_error_to_wait_and_to_stream(served: Served) -> None:
    async def scenario() -> None:
        key = served.key(project())
        sdk = served.sdk(key)
        tid = (await sdk.threads.create(graph_id=FAILER.id))["thread_id"]
        with pytest.raises(Exception, match=r"^model\.error: "):
            await sdk.runs.wait(tid, FAILER.id, input=ask("go"))
        parts = [p async for p in sdk.runs.stream(tid, FAILER.id, input=ask("again"))]
        assert [p.event for p in parts] == ["metadata", "values", "values", "error", "end"]
        assert parts[3].data["error"] == "model.error"
        assert parts[4].data == {"run_id": parts[0].data["run_id"], "status": "error"}
        assert [r["status"] for r in await sdk.runs.list(tid)] == ["error", "error"]

        # A body that is not JSON: request.invalid, and nothing written.
        answer = httpx.post(
            f"{served.url}/threads/{tid}/runs",
            content=b"{not json",
            headers={"x-api-key": key, "content-type": "application/json"},
        )
        assert (answer.status_code, answer.json()["code"]) == (422, "request.invalid")
        assert len(await sdk.runs.list(tid)) == 2

    run(scenario())


def test_a_body_past_the_servers_cap_is_refused_before_it_is_read(served: Served) -> None:
    key = served.key(project())
    cap = 6 * served.stack.settings.max_content_bytes + 64 * 1024
    with httpx.Client(base_url=served.url, headers={"x-api-key": key}, timeout=60) as http:
        tid = http.post("/threads", json={"metadata": {"graph_id": SAYER.id}}).json()["thread_id"]
        huge = b'{"assistant_id": "' + b"x" * (cap + 1) + b'"}'
        answer = http.post(
            f"/threads/{tid}/runs", content=huge, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 413
        assert (answer.json()["code"], answer.json()["details"]["limit"]) == (
            "request.too_large",
            cap,
        )
        # Nothing was admitted, and the server still answers.
        assert http.get(f"/threads/{tid}/runs").json() == []
        assert http.get("/ok").json() == {"ok": True}


def test_unsupported_fields_are_refused_with_the_field_named(served: Served) -> None:
    async def scenario() -> None:
        sdk = served.sdk(served.key(project()))
        tid = (await sdk.threads.create(graph_id=SAYER.id))["thread_id"]
        said = ask("x")
        cases: list[tuple[Awaitable[Any], str]] = [
            (sdk.runs.wait(tid, SAYER.id, input=said, interrupt_after="*"), "interrupt_after"),
            (sdk.runs.create(tid, SAYER.id, input=said, after_seconds=5), "after_seconds"),
            (sdk.runs.create(tid, SAYER.id, input=said, interrupt_before="*"), "interrupt_before"),
            (sdk.runs.create(tid, SAYER.id, input=said, durability="exit"), "durability"),
            (sdk.threads.create(graph_id=SAYER.id, ttl=5), "ttl"),
            (sdk.threads.create(metadata={"team": "a"}, graph_id=SAYER.id), "metadata.team"),
        ]
        for call, field in cases:
            answer = await refused(call)
            assert answer.status_code == 422, field
            body = answer.json()
            assert (body["code"], body["details"]["field"]) == ("request.unsupported", field)
        # Query parameters too: runs.list(select=...) is not silently ignored.
        answer = await refused(sdk.runs.list(tid, select=["run_id"]))
        assert (answer.status_code, answer.json()["details"]["field"]) == (422, "select")
        assert await sdk.runs.list(tid) == []
        assert (await sdk.threads.get_state(tid))["values"] == {"messages": []}
        # No such route: 404 with a stable code too.
        answer = await refused(sdk.http.get("/no/such/route"))
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found")

        # A field chaz does implement, given a bad value, is request.invalid.
        answer = await refused(sdk.runs.create(tid, "no-such-assistant", input=said))
        body = answer.json()
        assert (answer.status_code, body["code"], body["details"]["field"]) == (
            422,
            "request.invalid",
            "assistant_id",
        )
        # An id that is not a string (schemathesis found a dict answered 500).
        bads: list[dict[str, Any]] = [{"graph_id": []}, {"assistant_id": {}}]
        for bad in bads:
            for answer in (
                await refused(sdk.threads.create(metadata=bad)),
                await refused(sdk.threads.search(metadata=bad)),
            ):
                body = answer.json()
                assert (answer.status_code, body["code"]) == (422, "request.invalid"), bad
                assert body["details"]["field"] == f"metadata.{next(iter(bad))}"
        # A webhook to a private address, by default: refused, nothing written
        # (docs/security.md#webhooks; tests/acceptance/test_webhooks.py delivers).
        answer = await refused(sdk.runs.wait(tid, SAYER.id, input=said, webhook="http://10.1/"))
        body = answer.json()
        assert (answer.status_code, body["code"], body["details"]["address"]) == (
            422,
            "webhook.forbidden",
            "10.0.0.1",
        )
        assert await sdk.runs.list(tid) == []

    run(scenario())


@pytest.mark.slow  # boots a `chaz up` of its own: .ci/run's marked run takes it
def test_chaz_up_http_serves_the_embedded_default_without_a_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = free_port()
    log = tmp_path / "up.out"
    with log.open("w") as out:
        up = subprocess.Popen(
            [*INTERRUPTIBLE_CLI, "up", "--concurrency", "2", "--http", str(port)],
            env=cli_env(home=home),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "Press Ctrl-C" in log.read_text() or up.poll() is not None, 120, "up")
        assert up.poll() is None, log.read_text()
        assert f"http://127.0.0.1:{port}" in log.read_text()
        settings = Settings(_env_file=None, home=home, database_url=None, redis_url=None)
        with chaz.Client(settings) as client:
            client.agents.put(SAYER)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(url, up), WAIT, "chaz serve under chaz up")

        async def scenario() -> None:
            sdk = get_client(url=url, api_key=None)
            tid = (await sdk.threads.create(graph_id=SAYER.id))["thread_id"]
            values: Any = await sdk.runs.wait(tid, SAYER.id, input=ask("hi"))
            assert [m["content"] for m in values["messages"]] == ["hi", "hello from chaz"]
            assert values["messages"][0]["name"] == "user:you"  # the operator's person

        run(scenario())
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
        assert not _listening(port), "chaz serve outlived chaz up"
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
