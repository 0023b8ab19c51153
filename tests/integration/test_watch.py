"""Watching a session: backlog, then live entries, in seq order, none lost or repeated."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import pytest

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.store import Store
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture(scope="module")
def mstack(module_stack: Stack) -> Stack:
    module_stack.client.agents.put(AGENT)
    return module_stack


@pytest.fixture
def client(mstack: Stack) -> chaz.Client:
    return mstack.client


class Watcher:
    """``client.sessions.watch`` on a thread, collecting until it has ``want`` entries."""

    def __init__(
        self, client: chaz.Client, sid: str, want: int, after: int = 0, timeout: float = 60
    ) -> None:
        self.got: list[chaz.Entry] = []
        self.arrived: list[float] = []
        self.error: BaseException | None = None
        self._want = want
        self._gen = client.sessions.watch(sid, after=after, timeout=timeout)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for entry in self._gen:
                self.got.append(entry)
                self.arrived.append(time.monotonic())
                if len(self.got) >= self._want:
                    break
        except BaseException as exc:
            self.error = exc
        finally:
            assert isinstance(self._gen, Generator)
            self._gen.close()  # unsubscribes at once rather than at garbage collection

    def wait_for(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"watcher still running with {len(self.got)}"
        assert self.error is None, self.error


def test_watch_sees_1000_concurrent_writes_exactly_once_in_order(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    n_threads, per_thread = 8, 125
    total = n_threads * per_thread
    watcher = Watcher(client, s.id, want=total, timeout=90)
    # Let the watcher subscribe before the writes start, so most arrive live.
    time.sleep(0.3)
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            for k in range(per_thread):
                client.sessions.post(s.id, f"{i}-{k}", sender="system:load", type="ack")
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(n_threads)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(90)
    assert errors == []
    watcher.join(30)

    assert [e.seq for e in watcher.got] == list(range(1, total + 1))
    assert len({e.id for e in watcher.got}) == total
    assert sorted(e.content for e in watcher.got) == sorted(
        f"{i}-{k}" for i in range(n_threads) for k in range(per_thread)
    )
    # What the watcher saw is what the database holds.
    stored = client.sessions.entries(s.id)
    assert [(e.id, e.seq) for e in stored] == [(e.id, e.seq) for e in watcher.got]
    assert not [e for e in stored if e.job_id is not None]


def test_entries_written_before_watch_come_from_the_backlog(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    for i in range(10):
        client.sessions.post(s.id, f"b{i}", sender="system:t", type="ack")
    got = list(client.sessions.watch(s.id, after=0, timeout=0.5))
    assert [e.seq for e in got] == list(range(1, 11))
    assert [e.content for e in got] == [f"b{i}" for i in range(10)]
    tail = list(client.sessions.watch(s.id, after=6, timeout=0.3))
    assert [e.seq for e in tail] == [7, 8, 9, 10]
    assert list(client.sessions.watch(s.id, after=10, timeout=0.3)) == []


def test_backlog_then_live_without_a_seam(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    for i in range(5):
        client.sessions.post(s.id, f"old{i}", sender="system:t", type="ack")
    watcher = Watcher(client, s.id, want=10, after=2, timeout=20)
    watcher.wait_for(3, timeout=5)
    for i in range(7):
        client.sessions.post(s.id, f"new{i}", sender="system:t", type="ack")
    watcher.join(20)
    assert [e.seq for e in watcher.got] == list(range(3, 13))


def test_a_lost_publish_is_delivered_by_the_idle_reread(client: chaz.Client, mstack: Stack) -> None:
    s = client.sessions.create("bot")
    client.sessions.post(s.id, "published", sender="system:t", type="ack")
    watcher = Watcher(client, s.id, want=3, timeout=20)
    watcher.wait_for(1, timeout=5)
    assert [e.seq for e in watcher.got] == [1]

    # The Store commits but never publishes: the notification is "lost".
    silent = Store(mstack.settings.effective_database_url())
    try:
        written = time.monotonic()
        silent.append(s.id, NewEntry(EntryType.ACK, "system:t", "unpublished"))
        watcher.wait_for(2, timeout=5)
        assert [e.seq for e in watcher.got] == [1, 2]
        assert watcher.arrived[1] - written < 2.0
        assert watcher.got[1].content == "unpublished"
        # A later, published entry skips ahead of nothing and arrives once.
        client.sessions.post(s.id, "published again", sender="system:t", type="ack")
        watcher.join(10)
    finally:
        silent.close()
    assert [e.seq for e in watcher.got] == [1, 2, 3]


def test_a_published_entry_that_skips_ahead_pulls_in_the_gap(client: chaz.Client) -> None:
    s = client.sessions.create("bot")
    watcher = Watcher(client, s.id, want=4, timeout=20)
    time.sleep(0.2)
    silent = Store(client.settings.effective_database_url())
    try:
        # Two silent writes followed at once by a published one: seq 3 arrives live
        # before the idle re-read, and the watcher must fill in 1 and 2 first.
        silent.append(s.id, NewEntry(EntryType.ACK, "system:t", "s1"))
        silent.append(s.id, NewEntry(EntryType.ACK, "system:t", "s2"))
        client.sessions.post(s.id, "p3", sender="system:t", type="ack")
        client.sessions.post(s.id, "p4", sender="system:t", type="ack")
        watcher.join(10)
    finally:
        silent.close()
    assert [e.content for e in watcher.got] == ["s1", "s2", "p3", "p4"]
    assert [e.seq for e in watcher.got] == [1, 2, 3, 4]
