"""A poisoned broker message never kills a worker (docs/coordination.md#poisoned-messages).

Messages that kombu cannot even turn into a message (a payload that is not
JSON, an envelope without properties, a body whose base64 is broken) used to
escape kombu's consumer loop, and Celery took them as unrecoverable: the
worker that popped one exited. Each is now set aside on ``chaz:deadletter``
and the worker goes on.
"""

from __future__ import annotations

import json

import chaz
from chaz.coord import keys
from chaz.services import Services
from tests.conftest import free_port
from tests.support.metrics import scrape
from tests.support.stack import Stack

ECHO = chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}])

#: What a confused or hostile producer can push onto a queue list.
POISON = {
    "chaz.turns": [
        b"not json",
        json.dumps({"body": "e30=", "content-type": "application/json"}).encode(),
        json.dumps(
            {
                "body": "%%% not base64 %%%",
                "content-type": "application/json",
                "content-encoding": "utf-8",
                "headers": {"task": "chaz.turn", "id": "x"},
                "properties": {"body_encoding": "base64", "delivery_tag": "t-1"},
            }
        ).encode(),
    ],
    "chaz.control": [b"\xff\xfe garbage \x00"],
}


def test_poisoned_messages_are_set_aside_and_workers_go_on(stack: Stack) -> None:
    ports = [free_port(), free_port()]
    workers = stack.workers(2, concurrency=2, metrics_ports=ports)
    client = stack.client
    client.agents.put(ECHO)
    redis = Services(stack.settings).redis
    for queue, payloads in POISON.items():
        for payload in payloads:
            redis.lpush(queue, payload)

    stack.wait_for(
        lambda: redis.llen(keys.deadletter()) == 4, 60, "four messages on the dead-letter list"
    )
    dead = redis.lrange(keys.deadletter(), 0, -1)
    assert all(w.alive() for w in workers), stack.logs()
    records = [json.loads(d) for d in dead]
    assert sorted(r["queue"] for r in records) == ["chaz.control"] + ["chaz.turns"] * 3
    assert all(r["error"] and r["at"] for r in records)
    raws = {r["raw"] for r in records}
    assert "not json" in raws
    assert redis.llen("chaz.turns") == 0 and redis.llen("chaz.control") == 0

    # Every worker still takes turns: one session per worker thread and more.
    sessions = [client.sessions.create("echo") for _ in range(4)]
    posted = [
        client.sessions.post(s.id, f"hi {i}", sender="user:t") for i, s in enumerate(sessions)
    ]
    for i, (s, e) in enumerate(zip(sessions, posted, strict=True)):
        reply = client.sessions.wait_for_reply(s.id, after=e.seq, timeout=60)
        assert reply.content == f"hi {i}"
    assert all(w.alive() for w in workers), stack.logs()
    log = stack.logs()
    assert log.count("set aside a malformed broker message") == 4, log
    # Counted once each, by queue, by whichever worker popped it.
    counted = {
        queue: sum(
            scrape(port).get(("chaz_broker_messages_set_aside_total", (("queue", queue),)), 0)
            for port in ports
        )
        for queue in POISON
    }
    assert counted == {"chaz.turns": 3, "chaz.control": 1}, counted


def test_dead_letter_list_is_bounded(stack: Stack) -> None:
    [worker] = stack.workers(1, concurrency=1, queues="chaz.control")
    redis = Services(stack.settings).redis
    extra = 7
    redis.lpush("chaz.control", *[f"junk {i}".encode() for i in range(keys.DEADLETTER_MAX + extra)])
    last = f"junk {keys.DEADLETTER_MAX + extra - 1}"

    def newest() -> str | None:
        head = redis.lindex(keys.deadletter(), 0)
        return json.loads(head)["raw"] if head else None

    # LPUSH puts the last payload at the head of the queue's list and the
    # worker pops from its tail: "junk 0" is set aside first, the last one last.
    stack.wait_for(lambda: newest() == last, 120, "the last junk message set aside")
    assert redis.llen(keys.deadletter()) == keys.DEADLETTER_MAX
    assert redis.llen("chaz.control") == 0
    assert worker.alive(), stack.logs()
