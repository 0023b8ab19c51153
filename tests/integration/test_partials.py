"""Partials on a real Redis (chaz/coord/partials.py): deltas are coalesced into
few publishes, each partial is heard on the session's partials channel in
order and kept in the job's bounded replay buffer, and a Redis that is down
costs the publisher nothing but the preview."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from chaz.coord import keys
from chaz.coord.partials import (
    BUFFER_SECONDS,
    START,
    Partial,
    PartialPublisher,
    StreamListener,
    buffered,
)
from tests.conftest import free_port

#: Longer than any test lasts: only size, step changes and flushes publish.
NEVER = 3600.0


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _heard(listener: StreamListener, n: int) -> list[Partial]:
    got: list[Partial] = []
    deadline = time.monotonic() + 10.0
    while len(got) < n:
        assert time.monotonic() < deadline, f"heard {len(got)} of {n} partials"
        # None also for the subscription's own confirmation: read on.
        message = listener.next(0.5)
        if message is None:
            continue
        kind, data = message
        assert kind == "partial"
        got.append(Partial.model_validate_json(data))
    return got


def test_small_deltas_are_coalesced_into_few_partials(client: redis.Redis) -> None:
    with StreamListener(client, "sess-coalesce") as listener:
        pub = PartialPublisher(client, "sess-coalesce", "job-1", interval=NEVER, max_chars=8)
        pub.write(0, "a")  # the first delta goes out at once: the reader sees a start
        for delta in "bcd":
            pub.write(0, delta)  # buffered
        pub.write(0, "efghij")  # 9 characters buffered: over max_chars
        pub.write(0, "k")
        pub.write(1, "after a tool call")  # a new step flushes the old one first
        pub.flush()
        pub.flush()  # nothing buffered: nothing published
        heard = _heard(listener, 4)
    assert [(p.step, p.seq, p.text) for p in heard] == [
        (0, 1, "a"),
        (0, 2, "bcdefghij"),
        (0, 3, "k"),
        (1, 4, "after a tool call"),
    ]
    assert {(p.type, p.session_id, p.job_id) for p in heard} == {
        ("partial", "sess-coalesce", "job-1")
    }
    assert pub.seq == 4


def test_discarded_text_is_never_published(client: redis.Redis) -> None:
    with StreamListener(client, "sess-discard") as listener:
        pub = PartialPublisher(client, "sess-discard", "job-1", interval=NEVER)
        pub.write(0, "kept")
        pub.write(0, "dropped")
        pub.discard()
        pub.flush()
        pub.write(0, "last")
        pub.flush()
        assert [p.text for p in _heard(listener, 2)] == ["kept", "last"]


def test_a_redis_that_is_down_loses_only_the_preview() -> None:
    down = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    pub = PartialPublisher(down, "s", "j")
    pub.write(0, "nobody hears this")
    pub.flush()
    assert pub.seq == 1


def test_partials_are_buffered_per_job_for_replay(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    job = f"job-buf-{time.monotonic_ns()}"
    pub = PartialPublisher(client, "sess-buf", job, interval=NEVER)
    for text in ("one ", "two ", "three"):
        pub.write(0, text)
        pub.flush()
    everything = buffered(client, job)
    assert [(p.seq, p.text) for _, p in everything] == [(1, "one "), (2, "two "), (3, "three")]
    positions = [pos for pos, _ in everything]
    assert positions == sorted(positions, key=lambda p: tuple(map(int, p.split("-"))))
    # After a position: exactly what followed it; `only`: that one.
    assert [p.text for _, p in buffered(client, job, positions[0])] == ["two ", "three"]
    assert [p.text for _, p in buffered(client, job, positions[-1])] == []
    assert [p.text for _, p in buffered(client, job, positions[1], only=True)] == ["two "]
    assert buffered(client, job, START, only=True) == []
    ttl = client.ttl(keys.partials_buffer(job))
    assert 0 < ttl <= BUFFER_SECONDS
    # Gone (a Redis restart, an expiry): nothing to replay, and no error.
    client.delete(keys.partials_buffer(job))
    assert buffered(client, job) == []
    down = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    assert buffered(down, job) == []
    client.close()
