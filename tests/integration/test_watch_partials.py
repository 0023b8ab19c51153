"""``watch(partial=True)`` without workers: partials published by hand come
between the entries as heard, the default watch never yields them, and a
partial that trails its job's reply is dropped (docs/runtime.md#streaming)."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import pytest

import chaz
from chaz.coord.partials import PartialPublisher
from chaz.domain.entries import EntryType, NewEntry
from chaz.store import Store
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])
#: Longer than any test lasts: only flushes publish.
NEVER = 3600.0


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    module_stack.client.agents.put(AGENT)
    return module_stack


class Collector:
    """A watch on a thread, collecting what it yields until it has ``want``."""

    def __init__(self, client: chaz.Client, sid: str, *, partial: bool, want: int) -> None:
        self.got: list[chaz.Entry | chaz.Partial] = []
        self._want = want
        self._gen = client.sessions.watch(sid, after=0, timeout=60, partial=partial)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._gen:
                self.got.append(item)
                if len(self.got) >= self._want:
                    break
        finally:
            assert isinstance(self._gen, Generator)  # closing it unsubscribes
            self._gen.close()

    def until(self, n: int) -> list[chaz.Entry | chaz.Partial]:
        deadline = time.monotonic() + 30
        while len(self.got) < n:
            assert time.monotonic() < deadline, f"got {self.got}"
            time.sleep(0.01)
        return self.got

    def join(self) -> None:
        self._thread.join(30)
        assert not self._thread.is_alive()


def _publisher(mstack: Stack, sid: str, job_id: str) -> PartialPublisher:
    return PartialPublisher(mstack.client.services.redis, sid, job_id, interval=NEVER)


def test_partials_come_between_entries_and_only_when_asked_for(mstack: Stack) -> None:
    client = mstack.client
    s = client.sessions.create("bot")
    client.sessions.post(s.id, "first", sender="system:t", type="ack")
    with_partials = Collector(client, s.id, partial=True, want=4)
    plain = Collector(client, s.id, partial=False, want=2)
    with_partials.until(1)
    plain.until(1)
    pub = _publisher(mstack, s.id, "job-a")
    pub.write(0, "Hel")
    pub.write(0, "lo")
    pub.flush()
    with_partials.until(3)
    client.sessions.post(s.id, "second", sender="system:t", type="ack")
    got = with_partials.until(4)
    assert [type(i).__name__ for i in got] == ["Entry", "Partial", "Partial", "Entry"]
    assert [i.text for i in got if isinstance(i, chaz.Partial)] == ["Hel", "lo"]
    assert plain.until(2) == [got[0], got[3]]
    with_partials.join()
    plain.join()


def test_a_partial_that_trails_its_jobs_reply_is_dropped(mstack: Stack) -> None:
    client = mstack.client
    s = client.sessions.create("bot")
    watch = Collector(client, s.id, partial=True, want=2)
    # The reply is committed unannounced: the watch reads it from the database.
    silent = Store(mstack.settings.effective_database_url())
    try:
        silent.append(s.id, NewEntry(EntryType.MESSAGE, "agent:bot", "done", job_id="job-a"))
    finally:
        silent.close()
    [reply] = watch.until(1)
    assert isinstance(reply, chaz.Entry) and reply.job_id == "job-a"
    stale = _publisher(mstack, s.id, "job-a")
    stale.write(0, "stale")
    stale.flush()
    live = _publisher(mstack, s.id, "job-b")
    live.write(0, "live")
    live.flush()
    got = watch.until(2)
    watch.join()
    assert [i.text for i in got if isinstance(i, chaz.Partial)] == ["live"]
