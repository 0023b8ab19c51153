"""Issue 13 item 7: many concurrent ``wait_for_reply`` calls in one client share
one subscription, and every waiter gets its own reply, never another's."""

from __future__ import annotations

import threading

import chaz
from chaz.domain.entries import EntryType
from tests.support.stack import Stack

ECHO = chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}])

WAITERS = 100
ROUNDS = 3


def test_a_hundred_concurrent_waiters_each_get_their_own_reply(stack: Stack) -> None:
    stack.workers(2, concurrency=8)
    client = stack.client
    client.agents.put(ECHO)
    sessions = [client.sessions.create(agent_id="echo").id for _ in range(WAITERS // 2)]
    # Two waiters per session, each on its own post: the reply to the other's
    # post (same channel, same agent) must not satisfy it.
    plan = [(sid, f"{sid} #{k}") for sid in sessions for k in range(2)]
    start = threading.Barrier(len(plan))
    got: dict[str, tuple[chaz.Entry, chaz.Entry]] = {}
    failed: list[BaseException] = []
    lock = threading.Lock()

    def producer(sid: str, text: str) -> None:
        try:
            start.wait(60)
            # Three rounds: the later ones wait on a channel the shared
            # subscription already hears (no backlog read before the wait).
            for r in range(ROUNDS):
                posted = client.sessions.post(sid, f"{text} r{r}", sender="user:alice")
                reply = client.sessions.wait_for_reply(sid, after=posted.seq, timeout=120)
                with lock:
                    got[f"{text} r{r}"] = (posted, reply)
        except BaseException as exc:  # reported below, with the others
            with lock:
                failed.append(exc)

    threads = [threading.Thread(target=producer, args=p) for p in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not failed, (failed[:3], stack.logs())
    assert sorted(got) == sorted(f"{text} r{r}" for _, text in plan for r in range(ROUNDS))
    for text, (posted, reply) in got.items():
        assert reply.type is EntryType.MESSAGE and reply.sender == "agent:echo"
        assert reply.job_id == posted.job_id, text
        assert reply.content == text
    # All of them listened through the client's one shared subscription.
    assert client.services.subscriber.alive


def test_close_ends_the_clients_shared_subscriber(stack: Stack) -> None:
    stack.workers(1)
    client = chaz.Client(stack.settings)
    try:
        client.agents.put(ECHO)
        s = client.sessions.create(agent_id="echo")
        posted = client.sessions.post(s.id, "hi", sender="user:alice")
        assert client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60).content == "hi"
        shared = client.services.subscriber
        assert shared.alive
        # A watch shares it too.
        seen = [e.seq for e in client.sessions.watch(s.id, timeout=0.1)]
        assert seen == [e.seq for e in client.sessions.entries(s.id)]
    finally:
        client.close()
    assert not shared.alive
