"""Rolled-back jobs in the store, on SQLite and PostgreSQL: the mark is a
compare-and-set on a job that has not ended, and the entries naming a marked
job are hidden from a turn's context, a compaction's range and the visible
read (chaz/domain/multitask.py, docs/http.md#runs)."""

from __future__ import annotations

from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.store import Store
from chaz.store.direct import DirectReads
from chaz.usecases.completion import ended

pytest_plugins = ["tests.support.store_fixtures"]


def said(text: str, job_id: str | None = None) -> NewEntry:
    return NewEntry(EntryType.MESSAGE, "user:u", text, job_id=job_id)


def test_a_rolled_back_jobs_entries_are_hidden_from_later_context(store: Store) -> None:
    s = store.create_session("bot")
    with store.admitting(s.id) as tx:
        kept = tx.insert(said("kept")).job
    with store.admitting(s.id) as tx:
        doomed = tx.insert(said("secret")).job
    assert kept is not None and doomed is not None
    with store.admitting(s.id) as tx:
        # What a rollback run does under the session's lock.
        earlier = tx.unfinished_jobs()
        assert [j.id for j in earlier] == [kept.id, doomed.id]
        assert tx.roll_back([doomed.id]) == 1
        tx.insert(said("now"))
    # Written by the job after its mark (a turn still stopping): hidden too.
    store.import_entries(s.id, [NewEntry(EntryType.MESSAGE, "agent:bot", "late", job_id=doomed.id)])
    for job in (kept, doomed):
        store.transition(job.id, JobStatus.CANCELLED, completion=ended)

    setup = store.turn_setup(s.id, max_context=200)
    assert setup is not None
    assert [e.content for e in setup.history] == ["kept", "now"]
    _, history, _ = store.compaction_range(s.id, 1000)
    assert [e.content for e in history] == ["kept", "now"]
    visible = store.entries(s.id, types=(EntryType.MESSAGE,), visible=True)
    assert [e.content for e in visible] == ["kept", "now"]
    # History is kept: the plain read has every entry.
    assert [e.content for e in store.entries(s.id)] == ["kept", "secret", "now", "late"]

    # Marked once; a job that has ended is never marked.
    first = store.get_job(doomed.id).rolled_back_at
    assert first is not None
    assert store.roll_back(doomed.id) is False
    assert store.get_job(doomed.id).rolled_back_at == first
    assert store.roll_back(kept.id) is False
    assert store.get_job(kept.id).rolled_back_at is None

    # The CLI's direct reader (no SQLAlchemy) reads the mark as the store does.
    direct = DirectReads.open(store.url)
    assert direct is not None
    try:
        jobs = direct.jobs(
            session_id=s.id, statuses=None, limit=10, newest_first=False, project=None
        )
    finally:
        direct.close()
    assert jobs == store.list_jobs(session_id=s.id)
    assert [j.rolled_back_at is not None for j in jobs] == [False, True, False]
