"""Invariant 8 (docs/contracts.md#invariant-8) broken on purpose: Redis restarts and dropped
database connections mid-turn."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from sqlalchemy.engine import make_url

import chaz
from chaz.coord.redis import ensure_embedded, process_running
from chaz.domain.entries import EntryType
from tests.conftest import PG_ADMIN, free_port
from tests.support.redis_server import RedisServer
from tests.support.stack import Stack

T = TypeVar("T")

HELD = chaz.AgentSpec(
    id="held",
    tools=["echo"],
    script=[
        {"match": "^quick", "steps": [{"echo": True}]},
        {
            "steps": [
                {"call": "echo", "args": {"text": "before"}},
                {"wait": "go-{session_id}", "timeout": 120},
                {"say": "done {input}"},
            ]
        },
    ],
)


class RestartableStack:
    """A stack whose Redis the test may ``kill -9`` and start again."""

    def __init__(self, stack: Stack, server: RedisServer | None) -> None:
        self.stack = stack
        self.server = server

    def kill_redis(self) -> None:
        if self.server is not None:
            self.server.kill()
            return
        pidfile = self.stack.settings.home.resolve() / "redis.pid"
        pid = int(pidfile.read_text().strip())
        os.kill(pid, signal.SIGKILL)
        while process_running(pid):
            time.sleep(0.02)

    def start_redis(self) -> None:
        if self.server is not None:
            self.server.start()
        else:
            ensure_embedded(self.stack.settings)


@pytest.fixture(params=["embedded", "server"])
def restartable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RestartableStack]:
    """A stack on a Redis of the test's own: embedded, or a redis-server on a free port.

    The lease outlives the outage, so a turn that rides through keeps its lane.
    """
    home = tmp_path / "home"
    server: RedisServer | None = None
    if request.param == "embedded":
        stack = Stack.embedded(home, lease_seconds=30.0)
    else:
        server = RedisServer(free_port(), tmp_path / "redis").start()
        stack = Stack.server(
            home, request.getfixturevalue("pg_url"), server.url, lease_seconds=30.0
        )
    try:
        yield RestartableStack(stack, server)
    finally:
        stack.close()
        if server is not None:
            server.stop()


#: Long enough for the consumer to notice and retry its connection a few times.
OUTAGE_SECONDS = 3.0


@pytest.mark.slow
def test_a_worker_with_a_turn_in_flight_rides_through_a_redis_restart(
    restartable: RestartableStack,
) -> None:
    stack = restartable.stack
    [worker] = stack.workers(1, concurrency=2)
    client = stack.client
    client.agents.put(HELD)
    s = client.sessions.create(agent_id="held")
    first = client.sessions.post(s.id, "long one", sender="user:alice")
    stack.wait_for(
        lambda: any(e.type is EntryType.TOOL_RESULT for e in client.sessions.entries(s.id)),
        30,
        "the turn to reach its gate",
    )

    # The turn waits at its gate, its Celery message unacknowledged.
    restartable.kill_redis()
    time.sleep(OUTAGE_SECONDS)
    restartable.start_redis()

    queued = client.sessions.post(s.id, "quick behind it", sender="user:alice")
    others = [client.sessions.create(agent_id="held") for _ in range(3)]
    posted = [
        (o, client.sessions.post(o.id, f"quick {i}", sender="user:bob"))
        for i, o in enumerate(others)
    ]
    for o, e in posted:
        assert client.sessions.wait_for_reply(o.id, after=e.seq, timeout=60).content == e.content

    stack.open_gate(f"go-{s.id}")
    reply = client.sessions.wait_for_reply(s.id, after=first.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE and reply.content == "done long one", reply.content
    after = client.sessions.wait_for_reply(s.id, after=queued.seq, timeout=60)
    assert after.content == "quick behind it"
    assert worker.alive(), stack.logs()

    entries = client.sessions.entries(s.id)
    assert not [e for e in entries if e.type is EntryType.ERROR], stack.logs()
    mine = [e for e in entries if e.job_id == first.job_id]
    assert [e.type for e in mine].count(EntryType.MESSAGE) == 2  # the trigger and one reply
    assert [e.type for e in mine].count(EntryType.TOOL_CALL) == 1
    job = client.jobs.get(first.job_id or "")
    assert job.status is chaz.JobStatus.SUCCEEDED and job.attempts == 1
    # FIFO: the queued job's turn began after the long one's reply.
    ack = next(e for e in entries if e.job_id == queued.job_id and e.type is EntryType.ACK)
    assert reply.seq < ack.seq


def _server_stack(tmp_path: Path, pg_url: str, redis_url: str) -> Stack:
    return Stack.server(tmp_path / "home", pg_url, redis_url)


def _terminate_backends(pg_url: str) -> int:
    """``pg_terminate_backend`` every other connection to this test's own database."""
    url = make_url(pg_url)
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (url.database,),
        ).fetchall()
    return len(rows)


def _read_after_drop(read: Callable[[], T]) -> T:
    # The test's own pooled connections died too: the first use finds out
    # (and SQLAlchemy drops the pool), the next works.
    with contextlib.suppress(Exception):
        return read()
    return read()


def test_a_dropped_database_connection_mid_turn_retries_from_the_checkpoint(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    stack = _server_stack(tmp_path, pg_url, redis_url)
    try:
        [worker] = stack.workers(1, concurrency=2)
        client = stack.client
        client.agents.put(HELD)
        s = client.sessions.create(agent_id="held")
        first = client.sessions.post(s.id, "long one", sender="user:alice")
        stack.wait_for(
            lambda: any(e.type is EntryType.TOOL_RESULT for e in client.sessions.entries(s.id)),
            30,
            "the turn to reach its gate",
        )
        assert _terminate_backends(pg_url) > 0
        stack.open_gate(f"go-{s.id}")  # the turn's next write meets a dead connection

        reply = _read_after_drop(
            lambda: client.sessions.wait_for_reply(s.id, after=first.seq, timeout=60)
        )
        assert reply.type is EntryType.MESSAGE, f"{reply.content}\n{stack.logs()}"
        assert reply.content == "done long one"
        job = client.jobs.get(first.job_id or "")
        assert job.status is chaz.JobStatus.SUCCEEDED and job.attempts == 2
        mine = [e for e in client.sessions.entries(s.id) if e.job_id == first.job_id]
        # The finished tool call is not repeated; the resume is on the timeline.
        assert [e.type.value for e in mine] == [
            "message", "ack", "tool_call", "tool_result", "ack", "message",
        ]  # fmt: skip
        assert mine[4].metadata["resumed"] == 2
        assert mine[4].content == "resumed: attempt 2"
        assert worker.alive()
    finally:
        stack.close()


def test_the_error_entry_of_a_crashed_turn_carries_no_sql(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    stack = _server_stack(tmp_path, pg_url, redis_url)
    store_url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(store_url, autocommit=True) as conn:
        # A real database error on the turn's ToolCall insert, whose SQL and
        # bind parameters SQLAlchemy puts into the exception's text.
        conn.execute(
            "CREATE OR REPLACE FUNCTION chaz_test_refuse() RETURNS trigger AS $$"
            " BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$ LANGUAGE plpgsql"
        )
        conn.execute("DROP TRIGGER IF EXISTS chaz_test_refuse ON entries")
        conn.execute(
            "CREATE TRIGGER chaz_test_refuse BEFORE INSERT ON entries FOR EACH ROW"
            " WHEN (NEW.type = 'tool_call' AND NEW.content LIKE '%secret-value%')"
            " EXECUTE FUNCTION chaz_test_refuse()"
        )
    try:
        stack.workers(1, concurrency=2)
        client = stack.client
        client.agents.put(
            chaz.AgentSpec(
                id="leaky",
                tools=["echo"],
                script=[{"steps": [{"call": "echo", "args": {"text": "{input}"}}, {"say": "ok"}]}],
            )
        )
        s = client.sessions.create(agent_id="leaky")
        e = client.sessions.post(s.id, "secret-value 42", sender="user:alice")
        err = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60)
        assert err.type is EntryType.ERROR, err.content
        assert err.metadata["code"] == "turn.crashed"
        job = client.jobs.get(e.job_id or "")
        assert job.status is chaz.JobStatus.FAILED
        for text in (err.content, json.dumps(err.metadata), json.dumps(job.error)):
            for leak in ("INSERT", "SQL", "parameters", "secret-value", "psycopg", "entries"):
                assert leak not in text, text
        # The details went to the worker log, with the reference the entry gives.
        ref = (job.error or {})["details"]["ref"]
        assert ref in err.content
        log = "".join(p.read_text() for p in stack.settings.home.glob("worker-*.log"))
        assert ref in log and "refused by a test trigger" in log
    finally:
        stack.close()
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER IF EXISTS chaz_test_refuse ON entries")


def _waiting(client: chaz.Client, sessions: list[str]) -> bool:
    """Whether the client's shared subscription listens to every session's channel."""
    from chaz.coord import keys

    channels = [keys.entries_channel(sid) for sid in sessions]
    counts = dict(client.services.redis.pubsub_numsub(*channels))
    return all(int(counts.get(ch, 0)) >= 1 for ch in channels)


def _held_waiters(
    stack: Stack, n: int
) -> tuple[list[str], dict[str, chaz.Entry], list[BaseException], list[threading.Thread]]:
    """``n`` sessions whose turns wait at their gates, and a thread waiting for each reply."""
    client = stack.client
    client.agents.put(HELD)
    sessions = [client.sessions.create(agent_id="held").id for _ in range(n)]
    posts = {sid: client.sessions.post(sid, f"long {sid}", sender="user:alice") for sid in sessions}
    stack.wait_for(
        lambda: all(
            any(e.type is EntryType.TOOL_RESULT for e in client.sessions.entries(sid))
            for sid in sessions
        ),
        60,
        "every turn to reach its gate",
    )
    replies: dict[str, chaz.Entry] = {}
    failed: list[BaseException] = []

    def wait(sid: str) -> None:
        try:
            replies[sid] = client.sessions.wait_for_reply(sid, after=posts[sid].seq, timeout=120)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=wait, args=(sid,)) for sid in sessions]
    for t in threads:
        t.start()
    stack.wait_for(lambda: _waiting(client, sessions), 30, "every waiter to listen")
    return sessions, replies, failed, threads


def test_waiters_get_every_reply_through_a_redis_restart(restartable: RestartableStack) -> None:
    stack = restartable.stack
    stack.workers(1, concurrency=4)
    sessions, replies, failed, threads = _held_waiters(stack, 4)

    restartable.kill_redis()
    time.sleep(OUTAGE_SECONDS)
    restartable.start_redis()
    for sid in sessions:
        stack.open_gate(f"go-{sid}")
    for t in threads:
        t.join(150)
    assert not failed, (failed, stack.logs())
    assert {sid: replies[sid].content for sid in sessions} == {
        sid: f"done long {sid}" for sid in sessions
    }


def test_waiters_get_every_reply_when_their_subscription_is_dropped(
    restartable: RestartableStack,
) -> None:
    stack = restartable.stack
    stack.workers(1, concurrency=4)
    sessions, replies, failed, threads = _held_waiters(stack, 4)

    # Every pubsub connection of this test's own Redis: the client's shared one.
    assert stack.client.services.redis.client_kill_filter(_type="pubsub") >= 1
    for sid in sessions:
        stack.open_gate(f"go-{sid}")
    for t in threads:
        t.join(150)
    assert not failed, (failed, stack.logs())
    assert {sid: replies[sid].content for sid in sessions} == {
        sid: f"done long {sid}" for sid in sessions
    }
