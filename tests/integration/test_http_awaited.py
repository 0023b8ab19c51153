"""A run's wait on the event loop (chaz/server/awaited.py): entries taken in
seq order with no gap and no duplicate whatever the subscription delivers
(a redelivered entry, a reply published twice, one that skips ahead, a
re-read notice), a Redis restart under a shared subscription that is
waiting, and a client that has gone."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from chaz.coord import keys
from chaz.coord.pubsub import Subscriber
from chaz.domain.entries import Entry, EntryType
from chaz.errors import BackendUnavailable, Timeout
from chaz.server import awaited
from chaz.server.awaited import Awaited, Gate
from chaz.server.runs import ends_run
from tests.conftest import free_port
from tests.support.redis_server import RedisServer

SID = "s-awaited"
JOB = "j-run"


def _entry(seq: int, kind: str, job: str | None = JOB) -> Entry:
    types = {"input": EntryType.MESSAGE, "ack": EntryType.ACK, "reply": EntryType.MESSAGE}
    sender = "agent:bot" if kind == "reply" else ("user:u" if kind == "input" else "system")
    return Entry(
        id=f"e{seq}",
        session_id=SID,
        seq=seq,
        type=types[kind],
        sender=sender,
        content=kind,
        job_id=job,
        created_at=datetime.now(UTC),
    )


class Database:
    """The session's entries as stored; ``read`` is what the wait reads in a thread."""

    def __init__(self, *entries: Entry) -> None:
        self.entries = list(entries)
        self.reads: list[tuple[int, int | None]] = []

    def read(self, after: int, until: int | None) -> list[Entry]:
        self.reads.append((after, until))
        return [e for e in self.entries if e.seq > after and (until is None or e.seq <= until)]


class Script:
    """A subscription that delivers a fixed list of items (data, or None: re-read)."""

    def __init__(self, *items: str | None) -> None:
        self.items = list(items)

    def take(self) -> tuple[bool, Any | None]:
        return (True, self.items.pop(0)) if self.items else (False, None)


class Client:
    """The request of the wait: connected, or gone."""

    def __init__(self, gone: bool = False) -> None:
        self.gone = gone

    async def is_disconnected(self) -> bool:
        return self.gone


async def _wait(sub: Any, db: Database, client: Client, after: int = 1) -> list[Entry]:
    waiting = Awaited(SID, JOB, after, asyncio.get_running_loop())
    seen: list[Entry] = await waiting.until_end(
        Gate(2),
        sub,
        db.read,
        ends_run,
        client,
        timeout=60.0,
    )
    return seen


def test_redelivered_entries_and_a_reply_twice_are_taken_once_in_order() -> None:
    ack, reply = _entry(2, "ack"), _entry(3, "reply")
    db = Database(_entry(1, "input"), ack, reply)
    old, acked, again = _entry(1, "input").model_dump_json(), ack.model_dump_json(), reply
    script = Script(old, acked, acked, again.model_dump_json(), again.model_dump_json())
    seen = asyncio.run(_wait(script, db, Client()))
    assert [e.seq for e in seen] == [2, 3]
    assert db.reads == []  # all in order: nothing read
    assert script.items == [again.model_dump_json()]  # the duplicate after the end is left


def test_an_entry_that_skips_ahead_makes_the_range_be_read() -> None:
    entries = [_entry(1, "input"), _entry(2, "ack"), _entry(3, "ack", job="other")]
    db = Database(*entries, _entry(4, "reply"))
    seen = asyncio.run(_wait(Script(_entry(4, "reply").model_dump_json()), db, Client()))
    assert [e.seq for e in seen] == [2, 3, 4]
    assert db.reads == [(1, 4)]


def test_a_reply_of_another_run_does_not_end_the_wait() -> None:
    other = _entry(2, "reply", job="other")
    db = Database(_entry(1, "input"), other, _entry(3, "reply"))
    script = Script(other.model_dump_json(), None)
    seen = asyncio.run(_wait(script, db, Client()))
    assert [e.seq for e in seen] == [2, 3]
    assert db.reads == [(2, None)]  # the re-read notice: everything after the last taken


def test_a_client_that_has_gone_ends_the_wait_as_a_timeout() -> None:
    db = Database(_entry(1, "input"))
    with pytest.raises(Timeout):
        asyncio.run(_wait(Script(), db, Client(gone=True)))


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, killed and started again by the test."""
    server = RedisServer(free_port(), tmp_path / "redis").start()
    yield server
    server.stop()


def test_a_redis_restart_under_a_waiting_run_re_reads_what_was_published_meanwhile(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the re-read the reconnection asks for can end this wait.
    monkeypatch.setattr(awaited, "POLL_SECONDS", 3600.0)
    client = redis.Redis.from_url(own_redis.url)
    subscriber = Subscriber(client)
    sid = f"s-{uuid.uuid4().hex}"
    db = Database(_entry(1, "input"))

    async def scenario() -> tuple[list[Entry], int]:
        loop = asyncio.get_running_loop()
        waiting = Awaited(SID, JOB, 1, loop)
        sub = subscriber.listen(keys.entries_channel(sid), wake=waiting.wake)
        try:
            task = asyncio.create_task(
                waiting.until_end(Gate(1), sub, db.read, ends_run, Client(), 3600.0)
            )
            ack = _entry(2, "ack").model_dump_json()
            await loop.run_in_executor(None, client.publish, keys.entries_channel(sid), ack)
            await loop.run_in_executor(None, client.publish, keys.entries_channel(sid), ack)
            # The reply commits while Redis is away: its publish is lost.
            db.entries += [_entry(2, "ack"), _entry(3, "reply")]
            own_redis.kill()
            await loop.run_in_executor(None, own_redis.start)
            seen = await asyncio.wait_for(task, 120)
            return seen, sub.resyncs
        finally:
            sub.close()

    try:
        seen, resyncs = asyncio.run(scenario())
    finally:
        subscriber.close()
        client.close()
    assert [e.seq for e in seen] == [2, 3]
    assert resyncs >= 1
    assert (1, None) in db.reads or (2, None) in db.reads


def test_a_step_that_finds_the_gate_full_past_its_timeout_is_refused() -> None:
    """Under overload a run's step waits for the gate at most the pool's
    timeout, then answers ``backend.unavailable``, as a full pool would; the
    step that held the gate is not disturbed, and the gate is free after."""
    held, release = threading.Event(), threading.Event()

    def hold() -> str:
        held.set()
        release.wait(30)
        return "held"

    async def scenario() -> tuple[str, str]:
        gate = Gate(1, timeout=0.2)
        first = asyncio.ensure_future(gate.run(hold))
        while not held.is_set():
            await asyncio.sleep(0.01)
        with pytest.raises(BackendUnavailable) as refused:
            await gate.run(lambda: "second")
        assert refused.value.code == "backend.unavailable"
        release.set()
        return await first, await gate.run(lambda: "third")

    assert asyncio.run(scenario()) == ("held", "third")
