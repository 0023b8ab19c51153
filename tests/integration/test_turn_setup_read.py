"""A turn's setup reads its session, agent and head job in one statement
(issue 25 item 6: one round trip fewer between a wake-up and the Ack), on
SQLite and PostgreSQL: the head is the oldest unfinished job, and a session
with none (or no session) gives no setup."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.store import Store

pytest_plugins = ["tests.support.store_fixtures"]


def admit(store: Store, session_id: str, text: str) -> str:
    """Admit a turn with the store's own admission; its job id."""
    with store.admitting(session_id) as tx:
        done = tx.insert(NewEntry(EntryType.MESSAGE, "user:u", text))
    assert done.job is not None
    return done.job.id


def statements(store: Store, session_id: str) -> tuple[Any, list[str]]:
    """The setup of ``session_id``'s next turn, and the statements its read ran."""
    ran: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        ran.append(" ".join(statement.split()))

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        setup = store.turn_setup(session_id, max_context=200)
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    return setup, [s for s in ran if s.upper().startswith("SELECT")]


def test_the_session_agent_and_head_job_come_in_one_read_before_the_context(
    store: Store,
) -> None:
    s = store.create_session("bot")
    first = admit(store, s.id, "one")
    admit(store, s.id, "two")
    setup, ran = statements(store, s.id)
    assert setup is not None
    assert setup.job.id == first and setup.job.status is JobStatus.QUEUED
    assert setup.session.id == s.id and setup.agent.id == "bot"
    assert [e.content for e in setup.history] == ["one"]
    # The head (session, agent and job in one statement), then the context.
    assert len(ran) == 2, ran
    assert "FROM sessions JOIN agents" in ran[0] and "FROM jobs" in ran[0], ran[0]
    assert "FROM entries" in ran[1], ran[1]


def test_no_unfinished_job_and_no_session_give_no_setup(store: Store) -> None:
    s = store.create_session("bot")
    assert statements(store, s.id)[0] is None
    assert statements(store, "no-such-session")[0] is None
