"""Webhooks when a run ends (issue 22 item 6, docs/http.md#webhooks): real
``chaz serve``, real workers, LangGraph's client, and a receiver on 127.0.0.1
(allowed by ``CHAZ_WEBHOOK_ALLOW_PRIVATE``).

The receiver refuses the first attempt (500), holds the second until the
worker sending it has been SIGKILLed, and accepts the third: the delivery
survives the kill through its outbox row and the reconciler's sweep, and the
receiver ends with exactly one accepted delivery whose signature verifies.
Every wait is on an event the receiver or the database reports.
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

import chaz
from chaz.domain.principals import ALL_GRANTS
from chaz.domain.webhooks import (
    ATTEMPT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    Webhook,
    WebhookState,
    verify,
)
from chaz.settings import Settings
from tests.acceptance.test_cli import INTERRUPTIBLE_CLI, chaz_cli, cli_env
from tests.conftest import free_port
from tests.support.stack import Stack

WAIT = 60
SAYER = chaz.AgentSpec(id="hook-sayer", script=[{"steps": [{"say": "hello from chaz"}]}])


@dataclass
class Hit:
    """One request the receiver got, and what it answered."""

    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Receiver:
    """A webhook receiver: 500, then hold (until released) and 500, then 200."""

    hits: list[Hit] = field(default_factory=list)
    events: queue.Queue[int] = field(default_factory=queue.Queue)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        size = int(handler.headers.get("content-length", "0"))
        body = handler.rfile.read(size)
        with self.lock:
            n = len(self.hits) + 1
            status = 500 if n <= 2 else 200
            self.hits.append(Hit({k.lower(): v for k, v in handler.headers.items()}, body, status))
        self.events.put(n)
        if n == 2:
            # The test kills the worker that sent this one, then lets it go.
            self.release.wait(WAIT)
        try:
            handler.send_response(status)
            handler.send_header("content-length", "0")
            handler.end_headers()
        except OSError:
            pass  # its sender is dead

    def next(self) -> int:
        return self.events.get(timeout=WAIT)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.handle(self)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}/hook?from=chaz"
    finally:
        got.release.set()
        server.shutdown()
        server.server_close()


def _hooks(settings: Settings) -> Settings:
    # A receiver on this host is allowed; attempts are short and retried soon.
    return settings.model_copy(
        update={
            "webhook_allow_private": True,
            "webhook_backoff_seconds": 0.2,
            "webhook_timeout_seconds": 1.5,
            "webhook_attempts": 5,
        }
    )


@pytest.fixture(scope="module")
def served(module_stack: Stack) -> Iterator[tuple[Stack, str, Settings]]:
    settings = _hooks(module_stack.settings)
    module_stack.client.agents.put(SAYER)
    port = free_port()
    module_stack.settings.home.mkdir(parents=True, exist_ok=True)
    log = (module_stack.settings.home / "serve-hooks.log").open("w")
    child = subprocess.Popen(
        [*INTERRUPTIBLE_CLI, "serve", "--port", str(port), "--loglevel", "warning"],
        env=cli_env(settings=settings),
        cwd=module_stack.settings.home.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert child.poll() is None, "the server's process exited"
        try:
            return httpx.get(f"{url}/ok", timeout=5).json() == {"ok": True}
        except httpx.HTTPError:
            return False

    try:
        module_stack.wait_for(answers, WAIT, "chaz serve to answer /ok")
        yield module_stack, url, settings
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


def test_one_accepted_signed_delivery_through_500s_and_a_sigkill(
    served: tuple[Stack, str, Settings], receiver: tuple[Receiver, str]
) -> None:
    stack, url, settings = served
    got, hook = receiver
    project = "hooks-a"
    _, key = stack.client.keys.create("user:hooks", project, list(ALL_GRANTS))
    sdk = get_client(url=url, api_key=key)
    first, *_ = stack.workers(1, concurrency=4, beat=True, settings=settings)

    async def refusals(tid: str) -> list[tuple[int, str, Any]]:
        out = []
        for bad in ("http://169.254.169.254/latest", "http://[::ffff:a9fe:a9fe]/", "ftp://x/"):
            try:
                await sdk.runs.create(tid, SAYER.id, input=_ask("no"), webhook=bad)
            except httpx.HTTPStatusError as exc:
                body = exc.response.json()
                out.append((exc.response.status_code, body["code"], body["details"]["field"]))
        return out

    async def scenario() -> tuple[str, str, list[Any]]:
        tid = (await sdk.threads.create(graph_id=SAYER.id))["thread_id"]
        # Metadata stays refused even with private addresses allowed; a
        # malformed URL is request.invalid; neither writes anything.
        refused = await refusals(tid)
        assert await sdk.runs.list(tid) == []
        ran: list[str] = []
        values = await sdk.runs.wait(
            tid,
            SAYER.id,
            input=_ask("hi"),
            webhook=hook,
            on_run_created=lambda meta: ran.append(meta["run_id"]),
        )
        assert isinstance(values, dict)
        assert values["messages"][-1]["content"] == "hello from chaz"
        return tid, ran[0], refused

    tid, run_id, refused = asyncio.run(scenario())
    assert refused == [
        (422, "webhook.forbidden", "webhook"),
        (422, "webhook.forbidden", "webhook"),
        (422, "request.invalid", "webhook"),
    ]
    assert got.next() == 1  # answered 500: retried after the back-off
    assert got.next() == 2  # held: its worker dies mid-POST
    first.kill()
    first.proc.wait(WAIT)  # type: ignore[union-attr]
    got.release.set()
    # The claimed attempt's row outlives the worker; the next worker's
    # reconciler sends it again once the claim has lapsed.
    stack.workers(1, concurrency=2, beat=True, settings=settings)
    assert got.next() == 3
    store = stack.client.services.store

    def delivered() -> Webhook | None:
        w = store.webhooks.for_job(run_id)
        return w if w is not None and w.state is WebhookState.DELIVERED else None

    row = stack.wait_for(delivered, WAIT, "the delivery to be recorded delivered")
    assert row is not None
    assert row.attempts == 3 and row.last_status == 200 and row.project == project

    accepted = [h for h in got.hits if 200 <= h.status < 300]
    assert len(accepted) == 1, [h.status for h in got.hits]
    assert [h.headers[ATTEMPT_HEADER] for h in got.hits] == ["1", "2", "3"]
    assert {h.headers[ID_HEADER] for h in got.hits} == {row.id}
    # The operator reads the project's secret with the CLI; it verifies every attempt.
    shown = chaz_cli("webhooks", "secret", "--project", project, env=cli_env(settings=settings))
    assert shown.returncode == 0, shown.stderr
    secret = shown.stdout.strip()
    for h in got.hits:
        assert verify(secret, h.headers[SIGNATURE_HEADER], h.body)
    sent = json.loads(accepted[0].body)
    assert {k: sent[k] for k in ("run_id", "thread_id", "status", "error", "webhook_id")} == {
        "run_id": run_id,
        "thread_id": tid,
        "status": "success",
        "error": None,
        "webhook_id": row.id,
    }
    assert sent["output"] == {"content": "hello from chaz"} and sent["finished_at"]

    # The operator's listing shows it; a rotated secret no longer verifies old deliveries.
    listed = chaz_cli(
        "--json", "webhooks", "ls", "--project", project, env=cli_env(settings=settings)
    )
    assert listed.returncode == 0, listed.stderr
    assert [(w["job_id"], w["state"]) for w in json.loads(listed.stdout)] == [(run_id, "delivered")]
    rotated = chaz_cli(
        "webhooks", "secret", "--project", project, "--rotate", env=cli_env(settings=settings)
    )
    assert rotated.returncode == 0 and rotated.stdout.strip() != secret
    assert not verify(
        rotated.stdout.strip(), accepted[0].headers[SIGNATURE_HEADER], accepted[0].body
    )


def _ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}
