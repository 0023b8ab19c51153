"""The context read across windows, and the Summary's conditional write, on SQLite
and PostgreSQL (docs/sessions.md#compaction, docs/runtime.md#context-building)."""

from __future__ import annotations

import pytest

from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.sessions import ArchivedBy
from chaz.errors import SessionArchived
from chaz.store import Store
from chaz.store import statements as st

pytest_plugins = ["tests.support.store_fixtures"]
W = st.CONTEXT_WINDOW


def said(text: str, etype: EntryType = EntryType.MESSAGE) -> NewEntry:
    return NewEntry(etype, "user:u", text)


def noise(n: int) -> list[NewEntry]:
    return [NewEntry(EntryType.TOOL_CALL, "agent:bot", "{}") for _ in range(n)]


def trigger(store: Store, session_id: str, text: str) -> str:
    """Admit a turn (the store's own admission), its job the head; its entry id."""
    with store.admitting(session_id) as tx:
        return tx.insert(said(text)).entry.id


def test_a_sparse_context_is_read_across_windows_up_to_its_limit(store: Store) -> None:
    s = store.create_session("bot")
    # Context entries three windows apart, then the trigger.
    store.import_entries(s.id, [said("oldest"), *noise(3 * W), said("older"), *noise(W)])
    trigger(store, s.id, "now")
    setup = store.turn_setup(s.id, max_context=200)
    assert setup is not None
    assert [e.content for e in setup.history] == ["oldest", "older", "now"]
    # The limit keeps the newest.
    setup = store.turn_setup(s.id, max_context=2)
    assert setup is not None and [e.content for e in setup.history] == ["older", "now"]


def test_the_context_starts_at_the_newest_summary_at_or_before_the_trigger(
    store: Store,
) -> None:
    s = store.create_session("bot")
    store.import_entries(
        s.id,
        [said("before"), said("first", EntryType.SUMMARY), *noise(2 * W), said("after")],
    )
    trigger(store, s.id, "queued before the compaction")
    # A Summary written after the trigger is not this turn's boundary.
    store.import_entries(s.id, [said("later", EntryType.SUMMARY)])
    setup = store.turn_setup(s.id, max_context=200)
    assert setup is not None
    assert [e.content for e in setup.history] == [
        "first",
        "after",
        "queued before the compaction",
    ]


def test_a_fork_reads_through_its_source_and_stops_at_its_summary(store: Store) -> None:
    source = store.create_session("bot")
    store.import_entries(
        source.id, [said("gone"), said("boundary", EntryType.SUMMARY), *noise(W), said("kept")]
    )
    head = store.get_session(source.id).last_seq
    store.import_entries(source.id, [said("after the fork")])
    fork = store.create_session("bot", fork=(source.id, head))
    trigger(store, fork.id, "in the fork")
    setup = store.turn_setup(fork.id, max_context=200)
    assert setup is not None
    assert [e.content for e in setup.history] == ["boundary", "kept", "in the fork"]
    session, history, covers = store.compaction_range(fork.id, 1000)
    assert [e.content for e in history] == ["boundary", "kept", "in the fork"]
    assert covers == store.get_session(fork.id).last_seq and session.id == fork.id


def test_a_summary_is_not_written_over_a_message_that_came_in_meanwhile(store: Store) -> None:
    s = store.create_session("bot")
    store.import_entries(s.id, [said("one"), said("two")])
    _, _, covers = store.compaction_range(s.id, 1000)
    assert covers == 2
    draft = NewEntry(
        EntryType.SUMMARY, "agent:bot", "one, two", idempotency_key=f"summary:{s.id}:2"
    )
    # A non-context entry in between changes nothing; a Message does.
    store.import_entries(s.id, noise(1))
    store.import_entries(s.id, [said("three")])
    assert store.write_summary(s.id, draft, covers) is None
    assert store.get_session(s.id).last_seq == 4  # nothing written, no seq taken
    # Read again: written, once.
    _, _, covers = store.compaction_range(s.id, 1000)
    draft = NewEntry(EntryType.SUMMARY, "agent:bot", "all", idempotency_key=f"summary:{s.id}:4")
    first = store.write_summary(s.id, draft, covers)
    again = store.write_summary(s.id, draft, covers)
    assert first is not None and first.created and first.entry.seq == 5
    assert again is not None and not again.created and again.entry.id == first.entry.id
    # The range is now the Summary alone.
    _, history, _ = store.compaction_range(s.id, 1000)
    assert [e.id for e in history] == [first.entry.id]


def test_no_summary_is_written_into_an_archived_session(store: Store) -> None:
    s = store.create_session("bot")
    store.import_entries(s.id, [said("one")])
    store.archive_session(s.id, reason="done", by=ArchivedBy.MANUAL)
    draft = NewEntry(EntryType.SUMMARY, "agent:bot", "x", idempotency_key=f"summary:{s.id}:1")
    with pytest.raises(SessionArchived):
        store.write_summary(s.id, draft, 1)
