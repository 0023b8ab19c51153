"""An admission's session update, entry and job as one statement on PostgreSQL
(``Store.admitting(prepared=...)``, ``st.ADMIT_IN_ONE``), and its session
update left HOT within ``st.ACTIVE_AT_GRAIN`` (issue 25 item 5,
docs/performance.md#postgresql-work-per-turn).

On both stacks: the rows are the ones the general path writes, a room's
entry is left to the room's rule, a taken key writes nothing, and the
quota rebuild's counts do not count the job written early."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text, update

from chaz.domain.entries import EntryType, NewEntry
from chaz.ids import new_id
from chaz.store import Store
from chaz.store import statements as st
from chaz.store.models import EntryRow, JobRow, SessionRow
from chaz.store.types import Appended, JobFields, KeyTaken
from chaz.store.writes import admit_in_one, bump

pytest_plugins = ["tests.support.store_fixtures"]

_VARYING = {
    "id",
    "job_id",
    "trigger_entry_id",
    "created_at",
    "trace_context",
    "session_id",
    "tree_id",
}


def _rows(store: Store, session_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each entry of the session with its job, without the columns that differ per row."""
    with store.engine.connect() as conn:
        entries = conn.execute(
            select(EntryRow).where(EntryRow.session_id == session_id).order_by(EntryRow.seq)
        ).mappings()
        found = []
        for e in list(entries):
            job = conn.execute(select(JobRow).where(JobRow.id == e["job_id"])).mappings().one()
            found.append(
                (
                    {k: v for k, v in e.items() if k not in _VARYING},
                    {k: v for k, v in job.items() if k not in _VARYING},
                )
            )
        return found


def _counters(store: Store, session_id: str) -> tuple[int, int]:
    with store.engine.connect() as conn:
        row = conn.execute(
            select(SessionRow.last_seq, SessionRow.last_ordinal).where(SessionRow.id == session_id)
        ).one()
    return int(row[0]), int(row[1])


def _admit(
    store: Store, session_id: str, draft: NewEntry, fields: JobFields | None, one: bool
) -> Appended:
    prepared = (draft, fields) if one else None
    with store.admitting(session_id, prepared=prepared) as tx:
        return tx.insert(draft, job_fields=fields)


def test_one_statement_writes_what_the_general_path_writes(store: Store) -> None:
    fields = JobFields(owner="user:o", unattended=True, message_count=3)
    rows = []
    for one in (False, True):
        s = store.create_session("bot")
        for i in range(2):
            draft = NewEntry(EntryType.MESSAGE, "user:a", f"hi {i}", {"k": i})
            done = _admit(store, s.id, draft, fields if i else None, one)
            assert done.created and done.job is not None and done.entry.seq == i + 1
            assert done.job.ordinal == i + 1 and done.job.session_id == s.id
            assert done.entry.job_id == done.job.id and done.job.unattended is bool(i)
            assert done.job.project == s.project and done.job.tree_id == s.tree_id
        rows.append(_rows(store, s.id))
        assert _counters(store, s.id) == (2, 2)
    assert rows[0] == rows[1]


def test_on_postgresql_it_is_one_statement_between_begin_and_commit(store: Store) -> None:
    s = store.create_session("bot")
    ran: list[str] = []

    def seen(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's own
            ran.append(" ".join(statement.split())[:20])

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        _admit(store, s.id, NewEntry(EntryType.MESSAGE, "user:a", "hi"), None, True)
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    if store.db.sqlite:
        assert len(ran) == 3, ran  # the bump, the entry, the job
    else:
        assert len(ran) == 1 and ran[0].startswith("WITH bumped"), ran


def test_a_taken_key_writes_nothing(store: Store) -> None:
    s = store.create_session("bot")
    first = NewEntry(EntryType.MESSAGE, "user:a", "hi", idempotency_key="k")
    _admit(store, s.id, first, None, True)
    again = NewEntry(EntryType.MESSAGE, "user:a", "again", idempotency_key="k")
    with pytest.raises(KeyTaken):
        _admit(store, s.id, again, None, True)
    assert len(_rows(store, s.id)) == 1
    assert _counters(store, s.id) == (1, 1)


def test_a_room_is_only_bumped_and_its_rule_writes(store: Store) -> None:
    s = store.create_session("bot")
    with store.db.write() as conn:
        conn.execute(update(SessionRow).where(SessionRow.id == s.id).values(members=["other"]))
    draft = NewEntry(EntryType.MESSAGE, "user:a", "hi all")
    with store.admitting(s.id, prepared=(draft, None)) as tx:
        assert tx.session.members == ["other"] and not tx.wrote_job
        entry = tx.insert_only(draft)  # a room's entry that wakes nobody
    assert entry.seq == 1 and entry.job_id is None
    with store.engine.connect() as conn:
        jobs = conn.scalars(select(JobRow.id).where(JobRow.session_id == s.id)).all()
    assert jobs == []


def test_the_quota_rebuild_does_not_count_the_job_written_early(store: Store) -> None:
    s = store.create_session("bot")
    _admit(store, s.id, NewEntry(EntryType.MESSAGE, "user:a", "one"), None, False)
    with store.admitting(s.id) as tx:
        before = (tx.job_counts(), tx.project_counts())
        tx.insert(NewEntry(EntryType.MESSAGE, "user:a", "two"))
    draft = NewEntry(EntryType.MESSAGE, "user:a", "three")
    with store.admitting(s.id, prepared=(draft, None)) as tx:
        counts, (live, total) = tx.job_counts(), tx.project_counts()
        assert tx.job_id not in live
        tx.insert(draft)
    # One more job (the general path's "two") than before it, not two.
    assert counts == (before[0][0] + 1, before[0][1] + 1)
    assert (len(live), total) == (len(before[1][0]) + 1, before[1][1] + 1)


def _active_at(store: Store, session_id: str) -> Any:
    with store.engine.connect() as conn:
        return conn.scalar(select(SessionRow.active_at).where(SessionRow.id == session_id))


@pytest.mark.parametrize("one", [False, True])
def test_active_at_moves_at_most_once_a_grain_and_the_update_in_between_is_hot(
    store: Store, one: bool
) -> None:
    s = store.create_session("bot")
    assert _active_at(store, s.id) is None
    _admit(store, s.id, NewEntry(EntryType.MESSAGE, "user:a", "one"), None, one)
    first = _active_at(store, s.id)
    assert first is not None
    draft = NewEntry(EntryType.MESSAGE, "user:a", "two")
    if store.db.sqlite:
        _admit(store, s.id, draft, None, one)
    else:
        counts = text(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
            " WHERE relname = 'sessions'"
        )
        with store.db.write() as conn:
            # The backend's counts not yet flushed to pg_stat_user_tables, so
            # those of this connection's earlier transactions too: a difference.
            upd0, hot0 = conn.execute(counts).one()
            if one:
                admit_in_one(conn, s.id, draft, None, new_id())
            else:
                bump(conn, s.id, admit=True)
            upd1, hot1 = conn.execute(counts).one()
            assert (upd1 - upd0, hot1 - hot0) == (1, 1), (upd0, hot0, upd1, hot1)
    assert _active_at(store, s.id) == first
    # Older than the grain: the next admission moves it.
    earlier = first - st.ACTIVE_AT_GRAIN - timedelta(milliseconds=10)
    with store.db.write() as conn:
        conn.execute(update(SessionRow).where(SessionRow.id == s.id).values(active_at=earlier))
    _admit(store, s.id, NewEntry(EntryType.MESSAGE, "user:a", "three"), None, one)
    moved = _active_at(store, s.id)
    assert moved is not None and moved > earlier
