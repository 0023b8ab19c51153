"""The event log: rows written with their change, read in id order, followed live."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Generator

import pytest

import chaz
from chaz.domain.events import DELIVERY_ACCEPTED, SESSION_RENAMED, job_event
from chaz.errors import SessionNotFound, ValidationError
from chaz.stack import settings_env
from chaz.store.events import record
from chaz.usecases import event_log
from tests.support.cli import run_in_process
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])


def _session(stack: Stack, name: str | None = None) -> chaz.Session:
    stack.client.agents.put(AGENT)
    return stack.client.sessions.create("bot", name=name)


def test_events_commit_with_their_change_and_list_in_id_order(stack: Stack) -> None:
    client = stack.client
    store = client.services.store
    s = _session(stack, name="logged")
    other = _session(stack)

    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        record(conn, s.id, job_event("running"), {"job_id": "j-rolled-back"})
        raise RuntimeError("the change fails: its event must go with it")
    with store.engine.begin() as conn:
        kept = record(conn, s.id, job_event("running"), {"job_id": "j1"})
    event_log.emit(client.services, other.id, DELIVERY_ACCEPTED, {"delivery_id": "d-other"})
    added = [
        event_log.emit(client.services, s.id, DELIVERY_ACCEPTED, {"delivery_id": f"d{i}"})
        for i in range(3)
    ]

    listed = client.events.list(s.id)
    assert [e.id for e in listed] == [kept.id, *(e.id for e in added)]
    assert [e.id for e in listed] == sorted(e.id for e in listed)
    assert "j-rolled-back" not in json.dumps([e.data for e in listed])
    assert listed[0].kind == "job.running" and listed[0].data == {"job_id": "j1"}
    assert listed[1:] == added  # what emit returned is what was stored
    # Resuming after an id, by name as well as by id, and a page at a time.
    assert client.events.list("logged", after=listed[1].id) == listed[2:]
    assert client.events.list(s.id, after=listed[0].id, limit=2) == listed[1:3]
    assert client.events.list(s.id, after=listed[-1].id) == []

    with pytest.raises(ValidationError) as bad:
        client.events.list(s.id, after=-1)
    assert bad.value.field == "after"
    with pytest.raises(ValidationError):
        client.events.list(s.id, limit=0)
    with pytest.raises(SessionNotFound):
        client.events.list("no-such-session")
    with pytest.raises(ValidationError):
        store.events.add(s.id, "k" * 49, {})
    assert client.events.list(s.id) == listed  # refused input wrote nothing


def test_follow_yields_the_backlog_then_live_events_in_order(stack: Stack) -> None:
    client = stack.client
    svc = client.services
    s = _session(stack)
    backlog = [event_log.emit(svc, s.id, SESSION_RENAMED, {"n": i}) for i in range(3)]
    follower = client.events.follow(s.id, timeout=60)
    got = [next(follower) for _ in backlog]
    assert got == backlog

    def write_live() -> None:
        # Announced on the events channel.
        event_log.emit(svc, s.id, DELIVERY_ACCEPTED, {"n": 3})
        # Written inside another change's transaction and never announced on
        # the events channel: only the entry it commits with is published.
        with svc.store.engine.begin() as conn:
            record(conn, s.id, job_event("succeeded"), {"n": 4})
        client.sessions.post(s.id, "done", sender="system:test", type="ack")
        # Not announced at all: found by the follower's periodic re-read.
        with svc.store.engine.begin() as conn:
            record(conn, s.id, job_event("failed"), {"n": 5})

    writer = threading.Thread(target=write_live)
    writer.start()
    try:
        live = [next(follower) for _ in range(3)]
    finally:
        writer.join(30)
        assert isinstance(follower, Generator)  # closing it unsubscribes
        follower.close()
    assert [e.data["n"] for e in live] == [3, 4, 5]
    assert [e.kind for e in live] == ["delivery.accepted", "job.succeeded", "job.failed"]
    ids = [e.id for e in got + live]
    assert ids == sorted(set(ids))  # in id order, none twice
    # A new follower from the start reads exactly the same log.
    assert list(client.events.follow(s.id, timeout=0)) == got + live
    assert list(client.events.follow(s.id, after=live[0].id, timeout=0)) == live[1:]


def test_an_event_that_commits_late_is_not_skipped(stack: Stack) -> None:
    """PostgreSQL hands out ids at insert, not at commit: id 11 may commit before id 10."""
    if stack.kind != "server":
        pytest.skip("SQLite has one writer at a time: ids commit in order")
    client = stack.client
    store = client.services.store
    s = _session(stack)
    first = event_log.emit(client.services, s.id, SESSION_RENAMED, {"n": 0})
    slow = store.engine.connect()
    try:
        tx = slow.begin()
        late = record(slow, s.id, SESSION_RENAMED, {"n": 1})
        early = event_log.emit(client.services, s.id, SESSION_RENAMED, {"n": 2})
        assert late.id < early.id
        # While the lower id is uncommitted, a read cannot claim to be complete
        # past it: it says so instead of answering [early].
        assert store.events.settled(s.id, after=first.id, limit=10, wait=0.2) is None
        tx.commit()
    finally:
        slow.close()
    assert [e.id for e in client.events.list(s.id, after=first.id)] == [late.id, early.id]
    assert [e.id for e in client.events.follow(s.id, timeout=0)] == [
        first.id,
        late.id,
        early.id,
    ]


def test_cli_prints_the_event_log(stack: Stack) -> None:
    svc = stack.client.services
    s = _session(stack, name="cli-log")
    events = [
        event_log.emit(svc, s.id, DELIVERY_ACCEPTED, {"delivery_id": f"d{i}", "text": "hi there"})
        for i in range(3)
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
    env.update(settings_env(stack.settings))

    def chaz_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_in_process(*args, env=env)

    def ok(result: subprocess.CompletedProcess[str]) -> str:
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr}"
        assert "Traceback" not in result.stderr
        return result.stdout

    lines = ok(chaz_cli("events", "cli-log", "--jsonl")).splitlines()
    assert [json.loads(line) for line in lines] == [e.model_dump(mode="json") for e in events]
    # --after and --limit page through it; --follow prints the backlog, then
    # waits for more (here only until its --timeout).
    page = ok(chaz_cli("events", s.id, "--jsonl", "--after", str(events[0].id), "--limit", "1"))
    assert [json.loads(line)["id"] for line in page.splitlines()] == [events[1].id]
    followed = ok(chaz_cli("events", s.id, "--follow", "--jsonl", "--timeout", "0"))
    assert [json.loads(line)["id"] for line in followed.splitlines()] == [e.id for e in events]
    # The human form: a table with the kinds and the data.
    table = ok(chaz_cli("events", s.id)).splitlines()
    assert table[0].split() == ["ID", "TIME", "KIND", "DATA"]
    assert [row.split()[0] for row in table[1:]] == [str(e.id) for e in events]
    assert all("delivery.accepted" in row and '"d' in row for row in table[1:])
    missing = chaz_cli("events", "no-such-session")
    assert missing.returncode == 2
    assert "session.not_found" in missing.stderr
