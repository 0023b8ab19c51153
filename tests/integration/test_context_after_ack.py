"""A turn reads its context after its start and Ack, not before (issue 25
item 6): the start's unit of work (``Store.turn_start``) reads no entry, and
a turn run by the runner publishes its Ack before its first context read.
The context read later is the one the setup would have read: the entries up
to the trigger, none written since (the Ack), a rollback-hidden one still
hidden. On both stacks (SQLite's setup has a read transaction of its own)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.store import Store
from chaz.store.types import TurnSetup
from chaz.store.writes import roll_back
from chaz.usecases import completion
from chaz.usecases.turns import TurnRunner
from tests.support.stack import Stack

pytest_plugins = ["tests.support.store_fixtures"]

AGENT = chaz.AgentSpec(id="ctx", script=[{"steps": [{"say": "ok"}]}])


def _reads_entries(statement: str) -> bool:
    flat = " ".join(statement.split()).upper()
    return flat.startswith("SELECT") and "FROM ENTRIES" in flat


def _admit(store: Store, session_id: str, text: str) -> str:
    with store.admitting(session_id) as tx:
        done = tx.insert(NewEntry(EntryType.MESSAGE, "user:u", text))
    assert done.job is not None
    return done.job.id


def _said(setup: TurnSetup | None) -> tuple[list[tuple[str, int, str]], str | None]:
    assert setup is not None
    history = [(e.id, e.seq, e.content) for e in setup.history]
    return history, setup.trigger.id if setup.trigger is not None else None


def test_the_start_reads_no_entry_and_the_context_after_it_is_the_same(store: Store) -> None:
    s = store.create_session("bot")
    hidden = _admit(store, s.id, "zero")
    with store.db.write() as conn:
        # A rolled-back job's entries are hidden from every context.
        assert roll_back(conn, [hidden]) == 1
    store.transition(hidden, JobStatus.CANCELLED, completion=completion.ended)
    _admit(store, s.id, "one")
    _admit(store, s.id, "two")
    before = store.turn_setup(s.id, max_context=200)
    assert _said(before)[0] and [c for _, _, c in _said(before)[0]] == ["one"]
    ran: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        ran.append(statement)

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        with store.turn_start(s.id, 200) as tx:
            setup = tx.setup
            assert setup is not None and setup.history == [] and setup.trigger is None
            job, ack = tx.start("t1", ack_sender="agent:bot")
        assert ack is not None and job.starts == 1
        start_reads = [r for r in ran if _reads_entries(r)]
        ran.clear()
        after = store.turn_context(setup, 200)
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    # No context read between the wake-up and the Ack: it comes after.
    assert start_reads == [], start_reads
    assert any(_reads_entries(r) for r in ran), ran
    # The same entries as the setup read before the start (not the Ack).
    assert _said(after) == _said(before)
    # A resumed start (another token) reads the same context again.
    with store.turn_start(s.id, 200) as tx:
        assert tx.setup is not None
        tx.start("t2", ack_sender="agent:bot")
    assert _said(store.turn_context(tx.setup, 200)) == _said(before)


def test_a_turn_publishes_its_ack_before_it_reads_its_context(stack: Stack) -> None:
    client = stack.client
    client.agents.put(AGENT)
    svc = client.services
    s = client.sessions.create(AGENT.id)
    job_id = client.sessions.post(s.id, "hello").job_id
    assert job_id is not None
    order: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if _reads_entries(statement):
            order.append("entries")

    started = svc.signals.started

    def publish(*args: Any, **kwargs: Any) -> bool:
        order.append("ack")
        return started(*args, **kwargs)

    svc.signals.started = publish  # type: ignore[method-assign]
    event.listen(svc.store.engine, "before_cursor_execute", seen)
    try:
        outcome = TurnRunner(svc, client.tools).wake(s.id, job_id)
    finally:
        event.remove(svc.store.engine, "before_cursor_execute", seen)
        del svc.signals.started
    assert outcome.ran == (job_id,)
    assert "ack" in order and "entries" in order, order
    assert order.index("ack") < order.index("entries"), order
    assert client.jobs.get(job_id).status is JobStatus.SUCCEEDED
