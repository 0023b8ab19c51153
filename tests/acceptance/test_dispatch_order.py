"""Issue 25 item 6: an admission wakes its worker before it publishes its entry.

The publish is a Redis round trip the job's dispatch (commit -> Ack) need not
wait for (docs/performance.md#dispatch). A real worker then may publish the
job's Ack before the producer publishes the Message that admitted it; a
watcher still yields the session's entries in seq order, with no gap
(chaz.usecases.watch reads what a publish skipped ahead of).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import chaz
from chaz.coord import keys
from chaz.domain.entries import EntryType
from chaz.plumbing.dispatch import Wake
from tests.support.stack import Stack

ECHO = chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}])


def test_the_wake_up_leaves_before_the_entry_is_published_and_watchers_keep_seq_order(
    stack: Stack,
) -> None:
    stack.workers(1)
    client = stack.client
    client.agents.put(ECHO)
    s = client.sessions.create(agent_id="echo")
    heard = client.services.redis.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
    heard.subscribe(keys.entries_channel(s.id))
    assert heard.get_message(timeout=10)["type"] == "subscribe"

    # A watcher from the start, until the turn's reply.
    watched: list[chaz.Entry] = []

    def watch() -> None:
        for entry in client.sessions.watch(s.id, timeout=120):
            watched.append(entry)
            if entry.sender == "agent:echo" and entry.type is EntryType.MESSAGE:
                return

    watcher = threading.Thread(target=watch)
    watcher.start()

    # At its wake-up, the admission has published nothing yet: the first
    # thing the channel carries is the worker's Ack, published once the
    # turn's start committed; only then does this wake-up return, and the
    # producer publish its Message (out of commit order, on purpose).
    first: list[dict[str, Any]] = []
    real = client.services.dispatcher.send_wake

    def send_wake(session_id: str, execution_id: str, reason: Wake, **kw: Any) -> bool:
        sent = real(session_id, execution_id, reason, **kw)
        msg = heard.get_message(timeout=60)
        while msg is not None and msg["type"] != "message":
            msg = heard.get_message(timeout=60)
        assert msg is not None, stack.logs()
        first.append(json.loads(msg["data"]))
        return sent

    client.services.dispatcher.send_wake = send_wake  # type: ignore[method-assign]
    try:
        posted = client.sessions.post(s.id, "hello", sender="user:alice")
    finally:
        del client.services.dispatcher.send_wake
    assert [(d["type"], d["job_id"], d["seq"]) for d in first] == [
        ("ack", posted.job_id, posted.seq + 1)
    ]
    watcher.join(120)
    assert not watcher.is_alive()
    assert [(e.seq, e.type.value, e.sender) for e in watched] == [
        (posted.seq, "message", "user:alice"),
        (posted.seq + 1, "ack", "agent:echo"),
        (posted.seq + 2, "message", "agent:echo"),
    ]
    heard.close()
