"""The webhook outbox on both stacks, without workers (docs/http.md#webhooks):
the row commits with the job's end, each attempt claims it exactly once,
back-off and the dead state, and the address guard again at send time.

Attempts run in this process (``webhooks.deliver``) against a receiver on
127.0.0.1; a recording dispatcher stands in for the broker, so the tests
see which retries an attempt asked for. Nothing waits on the clock: a
delivery's ``next_at`` is moved to now where the test wants it due.
"""

from __future__ import annotations

import ipaddress
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

import chaz
from chaz.domain.entries import EntryType, KeyScope, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.domain.webhooks import ID_HEADER, SIGNATURE_HEADER, WebhookState, check_url, verify
from chaz.errors import Conflict, WebhookNotFound
from chaz.ids import utcnow
from chaz.services import Services
from chaz.store.types import JobFields
from chaz.store.webhooks import SECRETS, WEBHOOKS
from chaz.usecases import admission, completion, webhooks
from tests.support.dispatch import RecordingDispatcher
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="hooked", script=[{"steps": [{"say": "ok"}]}])


class Receiver:
    """Answers each POST with the next status of ``statuses`` (then 200)."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.hits: list[tuple[dict[str, str], bytes]] = []
        got = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                got.hits.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(got.statuses.pop(0) if got.statuses else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/in"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def services(stack: Stack) -> Iterator[Services]:
    stack.client.agents.put(AGENT)
    settings = stack.settings.model_copy(
        update={"webhook_allow_private": True, "webhook_attempts": 3, "webhook_timeout_seconds": 5}
    )
    svc = Services(settings)
    svc.__dict__["dispatcher"] = RecordingDispatcher()
    yield svc
    svc.close()


def _run(services: Services, stack: Stack, url: str | None) -> str:
    """A queued job of a producer's message, naming ``url`` as its webhook."""
    session = stack.client.sessions.create(AGENT.id)
    draft = NewEntry(EntryType.MESSAGE, "user:t", "hi", None, None, KeyScope.USER)
    done = admission.admit(services, session.id, draft, job_fields=JobFields(webhook=url))
    assert done.entry.job_id is not None
    return done.entry.job_id


def _due(services: Services, job_id: str) -> None:
    with services.store.db.write() as conn:
        conn.execute(update(WEBHOOKS).where(WEBHOOKS.c.job_id == job_id).values(next_at=utcnow()))


def _end(services: Services, job_id: str) -> None:
    services.store.transition(job_id, JobStatus.CANCELLED, completion=completion.ended)


def test_the_outbox_row_commits_with_the_end_and_is_delivered_once(
    services: Services, stack: Stack, receiver: Receiver
) -> None:
    hooks = services.store.webhooks
    plain = _run(services, stack, None)
    _end(services, plain)
    assert hooks.for_job(plain) is None  # a run without a webhook has no row

    job_id = _run(services, stack, receiver.url)
    assert services.store.get_job(job_id).webhook == receiver.url
    assert hooks.for_job(job_id) is None  # nothing before the end
    _end(services, job_id)
    row = hooks.for_job(job_id)
    assert row is not None and row.state is WebhookState.PENDING and row.attempts == 0
    assert row.project == "default" and row.url == receiver.url
    # A first attempt is due at once, even if the clock that wrote the row is ahead.
    with services.store.db.write() as conn:
        ahead = utcnow() + timedelta(minutes=5)
        conn.execute(update(WEBHOOKS).where(WEBHOOKS.c.job_id == job_id).values(next_at=ahead))

    # Eight senders of one due row at once (retries, sweeps): one attempt is sent.
    receiver.statuses = [500]
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda _: webhooks.deliver(services, job_id), range(8)))
    assert sorted(outcomes) == ["retry"] + ["skipped"] * 7
    assert len(receiver.hits) == 1
    row = hooks.for_job(job_id)
    assert row is not None and row.attempts == 1 and row.last_error == "HTTP 500"
    assert row.next_at > utcnow()  # waits out its back-off: not claimable yet
    dispatcher = services.dispatcher
    assert isinstance(dispatcher, RecordingDispatcher)
    assert dispatcher.webhooks == [(job_id, 5.0)]  # the back-off's base, for attempt 1
    assert webhooks.deliver(services, job_id) == "skipped"
    # A stale attempt's failure settles nothing once a later one claimed the row.
    _due(services, job_id)
    assert webhooks.deliver(services, job_id) == "delivered"
    assert not hooks.failed(row.id, 1, "late", status=500, retry_in=1.0)
    assert webhooks.deliver(services, job_id) == "skipped"
    _due(services, job_id)
    assert webhooks.deliver(services, job_id) == "skipped"  # delivered is final
    done = hooks.for_job(job_id)
    assert done is not None and done.state is WebhookState.DELIVERED and done.attempts == 2
    assert len(receiver.hits) == 2 and {h[ID_HEADER] for h, _ in receiver.hits} == {done.id}
    secret = hooks.secret("default")
    assert all(verify(secret, h[SIGNATURE_HEADER], body) for h, body in receiver.hits)
    assert hooks.secret("default") == secret  # made once, then kept
    assert hooks.rotate("default") != secret
    assert [w.id for w in hooks.list(project="default", state=WebhookState.DELIVERED)] == [done.id]
    assert hooks.list(project="elsewhere") == []


def test_attempts_run_out_and_the_guard_is_applied_again_at_send_time(
    services: Services, stack: Stack, receiver: Receiver
) -> None:
    hooks = services.store.webhooks
    job_id = _run(services, stack, receiver.url)
    _end(services, job_id)
    receiver.statuses = [500, 503, 502]
    for expected in ("retry", "retry", "dead"):
        _due(services, job_id)
        assert webhooks.deliver(services, job_id) == expected
    dead = hooks.for_job(job_id)
    assert dead is not None and dead.state is WebhookState.DEAD and dead.attempts == 3
    assert dead.last_error == "HTTP 502" and dead.last_status == 502
    assert dead.settled_at is not None
    _due(services, job_id)
    assert webhooks.deliver(services, job_id) == "skipped"  # dead is final
    assert hooks.counts()["dead"] == 1
    # An operator retries it: attempts from zero, and the receiver is back.
    with pytest.raises(WebhookNotFound):
        webhooks.retry(services, dead.id, "another-project")
    assert webhooks.retry(services, dead.id, "default").state is WebhookState.PENDING
    assert webhooks.deliver(services, job_id) == "delivered"
    with pytest.raises(Conflict):
        webhooks.retry(services, dead.id, "default")

    # Allowed at the request, refused at the send (the operator's setting
    # changed, or a name now resolves to loopback): dead at once, never sent.
    refused = _run(services, stack, receiver.url)
    _end(services, refused)
    strict = Services(services.settings.model_copy(update={"webhook_allow_private": False}))
    strict.__dict__["dispatcher"] = RecordingDispatcher()
    try:
        hits = len(receiver.hits)
        assert webhooks.deliver(strict, refused) == "dead"
        assert len(receiver.hits) == hits
    finally:
        strict.close()
    row = hooks.for_job(refused)
    assert row is not None and row.state is WebhookState.DEAD
    assert row.last_error is not None and "loopback" in row.last_error

    # The reconciler's sweep re-sends what is due and unclaimed, past the grace.
    again = _run(services, stack, receiver.url)
    _end(services, again)
    dispatcher = services.dispatcher
    assert isinstance(dispatcher, RecordingDispatcher)
    dispatcher.webhooks.clear()
    assert webhooks.sweep(services, timedelta(hours=1)) == 0  # still young
    assert webhooks.sweep(services, timedelta(0)) == 1
    assert dispatcher.webhooks == [(again, None)]
    # Retention removes settled deliveries only; the pending one stays.
    assert hooks.expire(utcnow() + timedelta(seconds=1), limit=100) == 2
    assert [w.job_id for w in hooks.list()] == [again]


def test_an_https_post_to_the_checked_address_verifies_the_urls_name() -> None:
    """The POST connects to the address the guard checked, and TLS still
    verifies the certificate against the URL's host (the server name sent)."""
    tls = Path(__file__).parent.parent / "support" / "tls"
    got: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            got.append(self.headers["host"])
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "hook-test.pem", tls / "hook-test.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    trust = ssl.create_default_context(cafile=str(tls / "hook-test.pem"))
    loopback = ipaddress.ip_address("127.0.0.1")
    try:
        named = check_url(f"https://hook.test:{port}/in")
        assert webhooks.post(named, loopback, b"{}", {}, 5.0, verify=trust) == 204
        assert got == [f"hook.test:{port}"]
        # Another name at the same address: the certificate does not match it.
        other = check_url(f"https://other.test:{port}/in")
        with pytest.raises(httpx.ConnectError):
            webhooks.post(other, loopback, b"{}", {}, 5.0, verify=trust)
        assert len(got) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends(
    services: Services, stack: Stack, receiver: Receiver
) -> None:
    hooks = services.store.webhooks
    old = hooks.secret("default")
    new = hooks.rotate("default", overlap=timedelta(hours=1))
    assert hooks.secrets("default") == (new, old) and hooks.secret("default") == new

    def delivered() -> tuple[str, bytes]:
        job_id = _run(services, stack, receiver.url)
        _end(services, job_id)
        assert webhooks.deliver(services, job_id) == "delivered"
        headers, body = receiver.hits[-1]
        return headers[SIGNATURE_HEADER], body

    # During the overlap a receiver holding either secret accepts the delivery.
    header, body = delivered()
    assert header.count("v1=") == 2
    assert verify(new, header, body) and verify(old, header, body)
    # Once it is over (moved to the past here, not waited for), only the new one signs.
    with services.store.db.write() as conn:
        conn.execute(
            update(SECRETS)
            .where(SECRETS.c.project == "default")
            .values(previous_until=utcnow() - timedelta(seconds=1))
        )
    assert hooks.secrets("default") == (new,)
    header, body = delivered()
    assert verify(new, header, body) and not verify(old, header, body)
    # A rotation without overlap leaves only the newest.
    newest = hooks.rotate("default")
    assert hooks.secrets("default") == (newest,)
    header, body = delivered()
    assert verify(newest, header, body) and not verify(new, header, body)
