"""The fast path of ``POST /threads/{thread_id}/runs/wait`` (chaz/server/fastpath.py)
answers exactly what FastAPI's route answers: same status, headers and body,
for a run that succeeds and for every refusal (no key, a bad key, a missing
thread, another project's thread, a body that is not JSON, not an object, an
unsupported field, an oversized body, another content type).

Both apps run in this process over the same services and real workers, and
each request goes to both.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import chaz
from chaz.domain.principals import ALL_GRANTS
from chaz.errors import Unauthenticated
from chaz.server.app import create_app
from chaz.server.awaited import Gate
from chaz.server.state import call
from chaz.services import Services
from tests.support.stack import Stack

SAYER = chaz.AgentSpec(id="fast-sayer", script=[{"steps": [{"say": "hello from chaz"}]}])
OTHER = chaz.AgentSpec(id="fast-other", script=[{"steps": [{"say": "other"}]}])
ASK = {"messages": [{"role": "user", "content": "hi"}]}


class Apps:
    """The two apps (fast path on, off) and the keys and threads of two projects."""

    def __init__(self, stack: Stack) -> None:
        self.services = Services(stack.settings)
        self.fast = create_app(self.services)
        self.slow = create_app(self.services, fast_path=False)
        client = stack.client
        _, self.key = client.keys.create("user:fast", "fast-a", list(ALL_GRANTS))
        _, self.other_key = client.keys.create("user:fast", "fast-b", list(ALL_GRANTS))

    def thread(self, key: str) -> str:
        answer = self.send(self.slow, "POST", "/threads", key, {"metadata": {"graph_id": SAYER.id}})
        thread_id: str = answer.json()["thread_id"]
        return thread_id

    def send(
        self,
        app: FastAPI,
        method: str,
        path: str,
        key: str | None,
        body: object = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        async def one() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            sent = dict(headers or {})
            if key is not None:
                sent["x-api-key"] = key
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                if raw is not None:
                    return await client.request(method, path, content=raw, headers=sent)
                return await client.request(method, path, json=body, headers=sent)

        return asyncio.run(one())

    def both(self, thread_id: str, key: str | None, **kw: Any) -> tuple[httpx.Response, ...]:
        path = f"/threads/{thread_id}/runs/wait"
        return tuple(self.send(app, "POST", path, key, **kw) for app in (self.fast, self.slow))


@pytest.fixture(scope="module")
def apps(module_stack: Stack) -> Iterator[Apps]:
    module_stack.workers(1, concurrency=2)
    for spec in (SAYER, OTHER):
        module_stack.client.agents.put(spec)
    made = Apps(module_stack)
    try:
        yield made
    finally:
        made.services.close()


def _same(fast: httpx.Response, slow: httpx.Response) -> None:
    assert fast.status_code == slow.status_code, (fast.text, slow.text)
    assert fast.headers == slow.headers
    assert fast.content == slow.content


def _ids_out(text: str) -> str:
    return re.sub(r'"id":"[^"]+"', '"id":"ID"', text)


def test_a_run_answers_the_same_values_and_headers(apps: Apps) -> None:
    answers = [
        apps.send(app, "POST", f"/threads/{apps.thread(apps.key)}/runs/wait", apps.key, body)
        for app in (apps.fast, apps.slow)
        for body in ({"assistant_id": SAYER.id, "input": ASK},)
    ]
    fast, slow = answers
    assert fast.status_code == slow.status_code == 200
    said = [(m["type"], m["content"]) for m in fast.json()["messages"]]
    assert said == [("human", "hi"), ("ai", "hello from chaz")]
    assert set(fast.headers) == set(slow.headers)
    assert fast.headers["content-type"] == slow.headers["content-type"]
    assert re.fullmatch(r"/threads/[^/]+/runs/[^/]+", fast.headers["content-location"])
    assert _ids_out(fast.text) == _ids_out(slow.text)


@pytest.mark.parametrize(
    "case",
    [
        "no key",
        "bad key",
        "missing thread",
        "other project",
        "not json",
        "not an object",
        "empty",
        "unsupported field",
        "wrong assistant",
        "text/plain",
        "too large",
        "two messages",
    ],
)
def test_a_refusal_is_answered_exactly_as_fastapi_answers_it(apps: Apps, case: str) -> None:
    thread_id = apps.thread(apps.key)
    body: dict[str, Any] = {"assistant_id": SAYER.id, "input": ASK}
    key: str | None = apps.key
    kw: dict[str, Any] = {"body": body}
    if case == "no key":
        key = None
    elif case == "bad key":
        key = "chaz_not-a-key"
    elif case == "missing thread":
        thread_id = "no-such-thread"
    elif case == "other project":
        thread_id = apps.thread(apps.other_key)
    elif case == "not json":
        kw = {"raw": b'{"assistant_id": ', "headers": {"content-type": "application/json"}}
    elif case == "not an object":
        kw = {"body": [body]}
    elif case == "empty":
        kw = {"raw": b""}
    elif case == "unsupported field":
        kw = {"body": {**body, "durability": "sync"}}
    elif case == "wrong assistant":
        kw = {"body": {**body, "assistant_id": OTHER.id}}
    elif case == "text/plain":
        kw = {"raw": json.dumps(body).encode(), "headers": {"content-type": "text/plain"}}
    elif case == "too large":
        big = "x" * (apps.services.settings.max_content_bytes * 7 + 70_000)
        kw = {"body": {**body, "input": {"messages": [{"role": "user", "content": big}]}}}
    elif case == "two messages":
        kw = {"body": {**body, "input": {"messages": [ASK["messages"][0]] * 2}}}
    fast, slow = apps.both(thread_id, key, **kw)
    assert fast.status_code >= 400
    _same(fast, slow)
    if case == "other project":
        missing = apps.both("no-such-thread", key, **kw)[0]
        assert fast.status_code == missing.status_code == 404
        assert fast.json()["code"] == missing.json()["code"]


def test_the_fast_path_answers_without_fastapis_dependencies(apps: Apps) -> None:
    """With FastAPI's ``Caller`` dependency overridden to refuse every request,
    FastAPI's route refuses the run and the fast path still answers it: the
    answer is the fast path's own."""

    def refuse() -> None:
        raise Unauthenticated("overridden")

    fast = create_app(apps.services)
    slow = create_app(apps.services, fast_path=False)
    for app in (fast, slow):
        app.dependency_overrides[call] = refuse
    body = {"assistant_id": SAYER.id, "input": ASK}
    path = f"/threads/{apps.thread(apps.key)}/runs/wait"
    assert apps.send(slow, "POST", path, apps.key, body).status_code == 401
    answer = apps.send(fast, "POST", f"/threads/{apps.thread(apps.key)}/runs/wait", apps.key, body)
    assert answer.status_code == 200
    assert answer.json()["messages"][-1]["content"] == "hello from chaz"


def test_two_replicas_answer_the_threads_values_with_their_copies(
    module_stack: Stack, apps: Apps
) -> None:
    """Runs of one thread alternate between two replicas (each with its own
    copy of the thread's values, chaz/server/convo.py): every answer is the
    thread's state as the database has it, and a replica's second run in a
    row is answered from its copy."""
    other = Services(module_stack.settings)
    try:
        replicas = [apps.fast, create_app(other)]
        thread_id = apps.thread(apps.key)
        path = f"/threads/{thread_id}/runs/wait"
        for n, app in enumerate([replicas[0], replicas[0], replicas[1], replicas[0]]):
            body = {"assistant_id": SAYER.id, "input": {"messages": [{"content": f"q{n}"}]}}
            answer = apps.send(app, "POST", path, apps.key, body)
            assert answer.status_code == 200, answer.text
            state = apps.send(apps.slow, "GET", f"/threads/{thread_id}/state", apps.key)
            assert answer.json() == state.json()["values"]
            assert [m["content"] for m in answer.json()["messages"]][-2:] == [
                f"q{n}",
                "hello from chaz",
            ]
        convo = replicas[0].state.chaz.conversations
        assert convo.hits >= 1
    finally:
        other.close()


def test_runs_wait_past_the_threads_of_the_gate(apps: Apps) -> None:
    """Runs' waits hold no thread (chaz/server/awaited.py): with one thread for
    the blocking steps of every run, runs on several threads and two runs on
    one thread, in flight at once, all answer their own thread's values."""
    app = create_app(apps.services)
    app.state.chaz.gate = Gate(1)
    threads = [apps.thread(apps.key) for _ in range(3)]

    async def all_at_once() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"/threads/{t}/runs/wait",
                        json={"assistant_id": SAYER.id, "input": {"messages": [{"content": q}]}},
                        headers={"x-api-key": apps.key},
                    )
                    for t, q in [(t, f"q-{t}") for t in threads] + [(threads[0], "again")]
                )
            )

    answers = asyncio.run(all_at_once())
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    for t, answer in zip(threads, answers, strict=False):
        said = [m["content"] for m in answer.json()["messages"]]
        assert f"q-{t}" in said and said[-1] == "hello from chaz"
        state = apps.send(apps.slow, "GET", f"/threads/{t}/state", apps.key).json()["values"]
        assert said == [m["content"] for m in state["messages"]][: len(said)]
    final = apps.send(apps.slow, "GET", f"/threads/{threads[0]}/state", apps.key)
    assert [m["content"] for m in final.json()["values"]["messages"]].count("hello from chaz") == 2
