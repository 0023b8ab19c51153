"""The shared subscription (chaz.coord.pubsub.Subscriber) against a real Redis.

Routing, unsubscribing, closing, a dropped connection, a Redis restart and
fork, each waited on as an outcome (a message arrives, a count reaches
zero), never on a clock.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from chaz.coord.pubsub import Subscriber, Subscription
from chaz.services import Services
from chaz.settings import Settings
from tests.conftest import free_port
from tests.support.redis_server import RedisServer

T = TypeVar("T")


def _until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _channel() -> str:
    # Channels are global across Redis databases: a unique name keeps a
    # parallel test run's messages out.
    return f"chaz-test:sub:{uuid.uuid4().hex}"


def _next_data(sub: Subscription, timeout: float = 10.0) -> Any:
    """The next message's data, skipping re-read signals (None before the deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = sub.next(0.2)
        if data is not None:
            return data
    raise AssertionError("no message arrived")


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def subscriber(client: redis.Redis) -> Iterator[Subscriber]:
    sub = Subscriber(client)
    yield sub
    sub.close()


def _numsub(client: redis.Redis, channel: str) -> int:
    return int(dict(client.pubsub_numsub(channel))[channel])


def test_a_listen_is_in_force_when_it_returns_and_routes_by_channel(
    client: redis.Redis, subscriber: Subscriber
) -> None:
    a, b = _channel(), _channel()
    first = subscriber.listen(a)
    second = subscriber.listen(a)
    other = subscriber.listen(b)
    # Confirmed by Redis before listen returned: a publish now is heard.
    assert client.publish(a, "hello") == 1  # one connection for all three
    assert _next_data(first) == "hello"
    assert _next_data(second) == "hello"
    assert other.next(0) is None
    client.publish(b, "there")
    assert _next_data(other) == "there"
    assert first.next(0) is None
    for s in (first, second, other):
        s.close()


def test_the_last_close_of_a_channel_unsubscribes_it(client: redis.Redis) -> None:
    subscriber = Subscriber(client, linger=0)
    ch = _channel()
    one, two = subscriber.listen(ch), subscriber.listen(ch)
    assert _numsub(client, ch) == 1
    one.close()
    client.publish(ch, "still")
    assert _next_data(two) == "still"
    two.close()
    _until(lambda: _numsub(client, ch) == 0, 10, "the channel to be unsubscribed")
    again = subscriber.listen(ch)
    client.publish(ch, "back")
    assert _next_data(again) == "back"
    again.close()
    subscriber.close()


def test_a_channel_lingers_after_its_last_waiter_then_is_dropped(client: redis.Redis) -> None:
    subscriber = Subscriber(client, linger=0.5)
    try:
        ch = _channel()
        subscriber.listen(ch).close()
        assert _numsub(client, ch) == 1  # still subscribed: the next listen is free
        client.publish(ch, "nobody")  # heard and dropped, unless `again` is quick
        again = subscriber.listen(ch)
        client.publish(ch, "you")
        assert _next_data(again) in ("nobody", "you")  # harmless: watch drops by seq
        again.close()
        _until(lambda: _numsub(client, ch) == 0, 10, "the lingering channel to be dropped")
    finally:
        subscriber.close()


def test_many_threads_each_get_their_own_channels_messages(
    client: redis.Redis, subscriber: Subscriber
) -> None:
    channels = [_channel() for _ in range(100)]
    got: dict[str, Any] = {}
    ready = threading.Barrier(len(channels) + 1)
    lock = threading.Lock()

    def waiter(ch: str) -> None:
        with subscriber.listen(ch) as sub:
            ready.wait()
            data = _next_data(sub, 30)
        with lock:
            got[ch] = data

    threads = [threading.Thread(target=waiter, args=(ch,)) for ch in channels]
    for t in threads:
        t.start()
    ready.wait()
    for ch in channels:
        client.publish(ch, ch)
    for t in threads:
        t.join(60)
    assert got == {ch: ch for ch in channels}


def test_close_stops_the_reader_thread_and_refuses_new_listens(client: redis.Redis) -> None:
    sub = Subscriber(client)
    ch = _channel()
    sub.listen(ch).close()  # it lingers: close() still drops it
    assert sub.alive
    sub.close()
    assert not sub.alive
    _until(lambda: _numsub(client, ch) == 0, 10, "the connection to be gone")
    with pytest.raises(RuntimeError):
        sub.listen(ch)
    sub.close()  # idempotent


def test_services_close_ends_the_shared_subscription(tmp_path: Path, redis_url: str) -> None:
    services = Services(Settings(_env_file=None, home=tmp_path, redis_url=redis_url))
    shared = services.subscriber
    assert services.subscriber is shared  # one per process
    shared.listen(_channel()).close()
    assert shared.alive
    services.close()
    assert not shared.alive


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own: it is killed and its clients dropped."""
    server = RedisServer(free_port(), tmp_path / "redis").start()
    yield server
    server.stop()


def test_a_dropped_connection_resubscribes_and_asks_for_a_re_read(
    own_redis: RedisServer,
) -> None:
    client = redis.Redis.from_url(own_redis.url, decode_responses=True)
    sub = Subscriber(client)
    try:
        ch = _channel()
        listening = sub.listen(ch)
        killed = client.client_kill_filter(_type="pubsub")
        assert killed == 1
        # Subscribed again, and told to re-read what it may have missed.
        _until(lambda: listening.resyncs >= 1, 30, "a re-read signal")
        assert _numsub(client, ch) == 1
        client.publish(ch, "after")
        assert _next_data(listening) == "after"
    finally:
        sub.close()
        client.close()


def test_a_redis_restart_resubscribes_every_waiting_channel(own_redis: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis.url, decode_responses=True)
    sub = Subscriber(client)
    try:
        channels = [_channel() for _ in range(5)]
        subs = [sub.listen(ch) for ch in channels]
        own_redis.kill()
        own_redis.start()
        _until(lambda: all(s.resyncs for s in subs), 30, "every channel to be told to re-read")
        assert [_numsub(client, ch) for ch in channels] == [1] * len(channels)
        assert [s.next(0) for s in subs] == [None] * len(subs)  # the re-read signal
        for ch in channels:
            client.publish(ch, ch)
        assert [_next_data(s) for s in subs] == channels
    finally:
        sub.close()
        client.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_subscription_of_its_own(tmp_path: Path, redis_url: str) -> None:
    services = Services(Settings(_env_file=None, home=tmp_path, redis_url=redis_url))
    try:
        parent = services.subscriber
        held = parent.listen(_channel())
        pid = os.fork()
        if pid == 0:  # the child: the parent's reader thread does not exist here
            code = 1
            try:
                mine = services.subscriber
                ch = _channel()
                with mine.listen(ch) as sub:
                    redis.Redis.from_url(redis_url).publish(ch, "child")
                    code = 0 if mine is not parent and _next_data(sub) == "child" else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parent.alive  # the parent's is untouched
        held.close()
    finally:
        services.close()


def test_a_lingering_channel_hands_its_recent_messages_to_the_next_waiter(
    client: redis.Redis, subscriber: Subscriber
) -> None:
    ch = _channel()
    first = subscriber.listen(ch)
    assert first.since is not None
    first.close()  # lingers
    before = time.monotonic()
    client.publish(ch, "while nobody waited")
    # Heard (the reader routed it) before the next waiter comes.
    _until(lambda: subscriber.listen(ch).next(0) is not None, 10, "the message to be kept")
    second = subscriber.listen(ch)
    assert second.since is not None and second.since < before
    assert _next_data(second) == "while nobody waited"
    second.close()


def test_a_reconnection_restarts_what_a_channel_is_known_to_have_heard(
    own_redis: RedisServer,
) -> None:
    client = redis.Redis.from_url(own_redis.url, decode_responses=True)
    sub = Subscriber(client)
    try:
        ch = _channel()
        held = sub.listen(ch)
        assert client.client_kill_filter(_type="pubsub") == 1
        _until(lambda: held.resyncs >= 1, 30, "the channel to be confirmed again")
        after_drop = time.monotonic()
        _until(lambda: _numsub(client, ch) == 1, 10, "the resubscription")
        again = sub.listen(ch)
        # Known complete only since the new confirmation, not since the first.
        assert again.since is not None and again.since < after_drop
        assert held.since is not None and again.since > held.since
    finally:
        sub.close()
        client.close()
