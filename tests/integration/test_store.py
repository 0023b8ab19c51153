"""The store on a real SQLite file and a real PostgreSQL: seq, idempotency, fences."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.errors import IllegalTransition, LeaseLost, SessionNotFound, ValidationError
from chaz.ids import new_id, utcnow
from chaz.store import Store
from chaz.store import statements as st
from chaz.store.models import EntryRow, JobRow, SessionRow
from chaz.store.types import Appended, Fence, Finish, KeyTaken
from chaz.store.writes import bump, entry_row, insert_entry, new_job
from chaz.usecases import completion
from tests.support.concurrency import race

T = TypeVar("T")

pytest_plugins = ["tests.support.store_fixtures"]


def ok(results: list[T | BaseException]) -> list[T]:
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return [r for r in results if not isinstance(r, BaseException)]


def count(store: Store, table: Any, **where: Any) -> int:
    stmt = select(func.count()).select_from(table)
    for column, value in where.items():
        stmt = stmt.where(getattr(table, column) == value)
    with store.engine.connect() as conn:
        return int(conn.scalar(stmt) or 0)


def write(
    store: Store,
    session_id: str,
    type: EntryType,
    sender: str,
    content: str,
    *,
    fence: Fence | None = None,
    **fields: Any,
) -> Appended:
    """The store's half of ``chaz.usecases.admission.write``: admit by the processing rule,
    with no quota (quotas are Redis's, tested in test_admission)."""
    draft = NewEntry(type, sender, content, **fields)
    if not store.admits(type, sender):
        return store.append(session_id, draft, fence)
    try:
        with store.admitting(session_id) as tx:
            return tx.insert(draft)
    except KeyTaken:
        found = store.replay(session_id, draft)
        assert found is not None
        return found


def test_seq_is_strictly_increasing_per_session(store: Store) -> None:
    a = store.create_session("bot")
    b = store.create_session("bot")
    seqs_a = [write(store, a.id, EntryType.ACK, "system:t", f"a{i}").entry.seq for i in range(10)]
    seqs_b = [write(store, b.id, EntryType.ACK, "system:t", f"b{i}").entry.seq for i in range(3)]
    assert seqs_a == list(range(1, 11))
    assert seqs_b == [1, 2, 3]
    assert store.get_session(a.id).last_seq == 10
    assert [e.seq for e in store.entries(a.id)] == list(range(1, 11))
    assert [e.content for e in store.entries(a.id, after=7)] == ["a7", "a8", "a9"]


def test_a_write_admits_by_the_processing_rule(store: Store) -> None:
    s = store.create_session("bot")
    m = write(store, s.id, EntryType.MESSAGE, "user:alice", "hi")
    own = write(store, s.id, EntryType.MESSAGE, "agent:bot", "reply")
    stranger = write(store, s.id, EntryType.MESSAGE, "agent:x", "hello")
    d = write(store, s.id, EntryType.DIRECTIVE, "agent:bot", "do it")
    ack = write(store, s.id, EntryType.ACK, "system:w", "working")
    assert m.job is not None and m.entry.job_id == m.job.id
    assert m.job.trigger_entry_id == m.entry.id and m.job.status is JobStatus.QUEUED
    assert own.job is None and own.entry.job_id is None
    assert stranger.job is not None
    assert d.job is not None
    assert ack.job is None
    assert [j.ordinal for j in store.list_jobs(session_id=s.id)] == [1, 2, 3]


def test_append_to_a_missing_session_writes_nothing(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        write(store, "nope", EntryType.MESSAGE, "user:a", "x")
    assert count(store, EntryRow, session_id="nope") == 0
    assert count(store, JobRow, session_id="nope") == 0


@pytest.mark.parametrize("name", ["talk\n", "ta\nlk", "nul\x00", "x" * 256])
def test_a_session_name_with_a_control_character_is_refused(store: Store, name: str) -> None:
    before = count(store, SessionRow)
    with pytest.raises(ValidationError) as info:
        store.create_session("bot", name=name)
    assert info.value.field == "name"
    assert count(store, SessionRow) == before


def test_idempotency_key_returns_the_first_append(store: Store) -> None:
    s = store.create_session("bot")
    first = write(store, s.id, EntryType.MESSAGE, "user:a", "hi", idempotency_key="k1")
    again = write(store, s.id, EntryType.MESSAGE, "user:a", "different", idempotency_key="k1")
    assert first.created and not again.created
    assert again.entry == first.entry
    assert first.job is not None and again.job is not None and again.job.id == first.job.id
    assert count(store, EntryRow, session_id=s.id) == 1
    assert count(store, JobRow, session_id=s.id) == 1
    assert store.get_session(s.id).last_seq == 1
    # The same key in another session is another entry.
    other = store.create_session("bot")
    third = write(store, other.id, EntryType.MESSAGE, "user:a", "hi", idempotency_key="k1")
    assert third.created and third.entry.id != first.entry.id


def test_idempotency_key_under_a_race(store: Store) -> None:
    s = store.create_session("bot")

    def post(i: int) -> Appended:
        return write(store, s.id, EntryType.MESSAGE, "user:a", f"try {i}", idempotency_key="dup")

    results = ok(race(8, post))
    assert sum(r.created for r in results) == 1
    assert len({r.entry.id for r in results}) == 1
    assert len({r.job.id for r in results if r.job}) == 1
    assert all(r.job is not None for r in results)
    assert count(store, EntryRow, session_id=s.id) == 1
    assert count(store, JobRow, session_id=s.id) == 1
    assert store.get_session(s.id).last_seq == 1
    # Nothing was burnt by the losers: the next append is seq 2, ordinal 2.
    nxt = write(store, s.id, EntryType.MESSAGE, "user:a", "next")
    assert nxt.entry.seq == 2 and nxt.job is not None and nxt.job.ordinal == 2


def test_an_admission_whose_key_is_taken_writes_no_job_either(store: Store) -> None:
    """An admission's entry and job are one statement on PostgreSQL
    (``st.INSERT_ENTRY_AND_JOB``): a taken key fails the statement, and its
    job is not left behind even by a caller that carries on in the same
    transaction (here: past a savepoint), nor are the entry's seq and the
    job's ordinal taken by a row."""
    s = store.create_session("bot")
    write(store, s.id, EntryType.MESSAGE, "user:a", "hi", idempotency_key="k")
    draft = NewEntry(EntryType.MESSAGE, "user:a", "again", idempotency_key="k")
    with store.db.write() as conn:
        row = bump(conn, s.id, admit=True)
        with pytest.raises(IntegrityError), conn.begin_nested():
            insert_entry(conn, row, draft, admit=True, job_fields=None)
        mine = select(func.count()).select_from(JobRow).where(JobRow.session_id == s.id)
        assert conn.scalar(mine) == 1
        assert conn.scalar(mine.where(JobRow.ordinal == row["last_ordinal"])) == 0
    assert count(store, EntryRow, session_id=s.id) == 1
    assert count(store, JobRow, session_id=s.id) == 1


def test_the_one_statement_admission_writes_every_column_a_new_job_has() -> None:
    """``st.INSERT_ENTRY_AND_JOB`` names its columns once, at import: a column
    ``new_job`` sets and it left out would be dropped without an error."""
    session = {"id": "s", "tree_id": "s", "project": "p", "unattended": False}
    job = new_job(session, 1, "e", None, utcnow())
    assert set(job) == set(st.JOB_COLUMNS)
    draft = NewEntry(EntryType.MESSAGE, "user:a", "hi")
    assert set(entry_row("e", "s", 1, draft, "j", utcnow())) == set(st.ENTRY_COLUMNS)


def _job_values(session_id: str, ordinal: int, trigger: str | None) -> dict[str, Any]:
    return {
        "id": new_id(),
        "session_id": session_id,
        "tree_id": session_id,
        "ordinal": ordinal,
        "trigger_entry_id": trigger,
        "status": "queued",
        "version": 1,
        "call_depth": 0,
        "message_count": 0,
        "attempts": 0,
        "created_at": utcnow(),
    }


def test_two_jobs_for_one_trigger_entry_are_impossible(store: Store) -> None:
    s = store.create_session("bot")
    done = write(store, s.id, EntryType.MESSAGE, "user:a", "hi")
    assert done.job is not None
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(insert(JobRow).values(**_job_values(s.id, 99, done.entry.id)))
    # Same ordinal twice is refused as well.
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(insert(JobRow).values(**_job_values(s.id, 1, None)))
    assert count(store, JobRow, session_id=s.id) == 1
    # Jobs without a trigger entry (NULL) do not collide with each other.
    with store.engine.begin() as conn:
        conn.execute(insert(JobRow).values(**_job_values(s.id, 100, None)))
        conn.execute(insert(JobRow).values(**_job_values(s.id, 101, None)))
    assert count(store, JobRow, session_id=s.id) == 3


def test_seq_and_idempotency_key_are_unique_in_the_database(store: Store) -> None:
    s = store.create_session("bot")
    e = write(store, s.id, EntryType.ACK, "system:t", "x", idempotency_key="k").entry
    base = {
        "session_id": s.id,
        "type": "ack",
        "sender": "system:t",
        "content": "y",
        "metadata": {},
        "created_at": utcnow(),
    }
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(insert(EntryRow).values(id=new_id(), seq=e.seq, **base))
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(
            insert(EntryRow).values(
                id=new_id(), seq=99, idempotency_key="k", key_scope="runtime", **base
            )
        )
    assert count(store, EntryRow, session_id=s.id) == 1
    # The same key in the other scope is another key.
    with store.engine.begin() as conn:
        conn.execute(
            insert(EntryRow).values(
                id=new_id(), seq=99, idempotency_key="k", key_scope="user", **base
            )
        )
    assert count(store, EntryRow, session_id=s.id) == 2


def test_concurrent_appends_leave_no_gap_and_no_duplicate(store: Store) -> None:
    s = store.create_session("bot")
    per_thread = 50

    def writer(i: int) -> list[tuple[int, int | None]]:
        out = []
        for k in range(per_thread):
            done = write(store, s.id, EntryType.MESSAGE, f"user:w{i}", f"{i}-{k}")
            out.append((done.entry.seq, done.job.ordinal if done.job else None))
        return out

    results = ok(race(8, writer))
    seqs = sorted(seq for r in results for seq, _ in r)
    assert seqs == list(range(1, 401))
    for r in results:
        # Each writer sees its own appends in increasing order.
        assert [seq for seq, _ in r] == sorted(seq for seq, _ in r)
    ordinals = sorted(o for r in results for _, o in r if o is not None)
    assert ordinals == list(range(1, 401))
    stored = store.entries(s.id)
    assert [e.seq for e in stored] == list(range(1, 401))
    assert store.get_session(s.id).last_seq == 400
    jobs = store.list_jobs(session_id=s.id, limit=1000)
    by_entry = {e.id: e for e in stored}
    assert len(jobs) == 400
    for job in jobs:
        trigger = by_entry[job.trigger_entry_id or ""]
        assert trigger.job_id == job.id
    # Admission order follows seq order.
    assert [
        j.ordinal for j in sorted(jobs, key=lambda j: by_entry[j.trigger_entry_id or ""].seq)
    ] == list(range(1, 401))


def _running_job(store: Store, session_id: str, token: str) -> str:
    done = write(store, session_id, EntryType.MESSAGE, "user:a", "go")
    assert done.job is not None
    job, _ = store.start_turn(done.job.id, token)
    assert job.status is JobStatus.RUNNING
    return job.id


def test_a_stale_fence_writes_nothing(store: Store) -> None:
    s = store.create_session("bot")
    job_id = _running_job(store, s.id, "tok-1")
    old, new = Fence(job_id, "tok-1"), Fence(job_id, "tok-2")
    store.save_checkpoint(old, {"steps": 1})
    write(store, s.id, EntryType.ACK, "agent:bot", "working", job_id=job_id, fence=old)
    assert store.checkpoint(job_id) == {"steps": 1}

    taken, _ = store.start_turn(job_id, "tok-2")  # another worker took the turn over
    assert taken.attempts == 2 and taken.status is JobStatus.RUNNING
    last_seq = store.get_session(s.id).last_seq
    version = store.get_job(job_id).version

    with pytest.raises(LeaseLost) as info:
        store.save_checkpoint(old, {"steps": 99})
    assert info.value.code == "lane.lease_lost"
    assert store.checkpoint(job_id) == {"steps": 1}

    with pytest.raises(LeaseLost):
        write(store, s.id, EntryType.TOOL_CALL, "agent:bot", "stale", job_id=job_id, fence=old)
    with pytest.raises(LeaseLost):
        store.end_turn(
            old,
            Finish(job_id, JobStatus.SUCCEEDED, result="stale"),
            s.id,
            NewEntry(EntryType.MESSAGE, "agent:bot", "stale reply"),
            completion=completion.ended,
        )
    with pytest.raises(LeaseLost):
        store.end_turn(
            old,
            Finish(job_id, JobStatus.FAILED),
            s.id,
            NewEntry(EntryType.ERROR, "agent:bot", "x"),
            completion=completion.ended,
        )
    assert store.get_session(s.id).last_seq == last_seq
    assert [e.content for e in store.entries(s.id)] == ["go", "working"]
    job = store.get_job(job_id)
    assert job.status is JobStatus.RUNNING and job.version == version and job.result is None

    # The new holder writes fine.
    store.save_checkpoint(new, {"steps": 2})
    assert store.checkpoint(job_id) == {"steps": 2}


def test_a_hand_back_drops_the_fence_and_the_next_start_takes_the_job_over(store: Store) -> None:
    # docs/executions.md#hand-backs
    s = store.create_session("bot")
    job_id = _running_job(store, s.id, "tok-1")
    old = Fence(job_id, "tok-1")
    with pytest.raises(LeaseLost):
        store.hand_back(Fence(job_id, "tok-x"), {"handbacks": 9})  # not the holder
    version = store.get_job(job_id).version

    store.hand_back(old, {"steps": 1, "handbacks": 1})
    job = store.get_job(job_id)
    assert (job.status, job.version, job.attempts) == (JobStatus.RUNNING, version + 1, 1)
    assert store.checkpoint(job_id) == {"steps": 1, "handbacks": 1}
    # The worker that handed it back can write nothing for it any more, nor
    # hand it back twice (a redelivered message, a retried call).
    with pytest.raises(LeaseLost):
        store.save_checkpoint(old, {"steps": 99})
    with pytest.raises(LeaseLost):
        store.hand_back(old, {"handbacks": 2})
    with pytest.raises(LeaseLost):
        store.end_turn(
            old,
            Finish(job_id, JobStatus.SUCCEEDED, result="stale"),
            s.id,
            NewEntry(EntryType.MESSAGE, "agent:bot", "stale reply"),
            completion=completion.ended,
        )
    assert store.checkpoint(job_id) == {"steps": 1, "handbacks": 1}

    # The next worker, for a resume: no second Ack, and no attempt spent.
    taken, ack = store.start_turn(job_id, "tok-2", ack_sender="agent:bot")
    assert (taken.attempts, taken.starts) == (1, 2)
    assert taken.status is JobStatus.RUNNING and ack is None
    store.save_checkpoint(Fence(job_id, "tok-2"), {"steps": 2, "handbacks": 1})
    assert store.checkpoint(job_id) == {"steps": 2, "handbacks": 1}


def test_only_a_restart_spends_an_attempt_on_either_start_path(store: Store) -> None:
    # docs/executions.md#attempts: the compare-and-set start (``seen``) and
    # the locking one count alike, from the row the database holds.
    s = store.create_session("bot")
    job_id = _running_job(store, s.id, "tok-1")
    store.hand_back(Fence(job_id, "tok-1"), {"handbacks": 1})
    taken, _ = store.start_turn(job_id, "tok-2", seen=store.get_job(job_id))
    assert (taken.attempts, taken.starts) == (1, 2)
    # tok-2's worker died holding the job: each takeover is an attempt.
    stale = store.get_job(job_id)
    taken, _ = store.start_turn(job_id, "tok-3")
    assert (taken.attempts, taken.starts) == (2, 3)
    taken, _ = store.start_turn(job_id, "tok-4", seen=stale)  # a changed job: the locking path
    assert (taken.attempts, taken.starts) == (3, 4)
    store.hand_back(Fence(job_id, "tok-4"), {"handbacks": 2})
    taken, _ = store.start_turn(job_id, "tok-5")
    assert (taken.attempts, taken.starts) == (3, 5)
    job = store.get_job(job_id)
    assert (job.attempts, job.starts, job.status) == (3, 5, JobStatus.RUNNING)


def test_a_fence_on_a_missing_job_is_refused(store: Store) -> None:
    s = store.create_session("bot")
    with pytest.raises(LeaseLost):
        write(store, s.id, EntryType.ACK, "agent:bot", "x", fence=Fence("ghost", "t"))
    assert store.get_session(s.id).last_seq == 0


def test_finish_commits_the_entry_and_the_job_together(store: Store) -> None:
    s = store.create_session("bot")
    job_id = _running_job(store, s.id, "tok")
    fence = Fence(job_id, "tok")
    done = store.end_turn(
        fence,
        Finish(job_id, JobStatus.SUCCEEDED, result="the answer"),
        s.id,
        NewEntry(EntryType.MESSAGE, "agent:bot", "the answer"),
        completion=completion.ended,
    )
    assert done is not None
    assert done.job is None and done.entry.job_id == job_id
    job = store.get_job(job_id)
    assert job.status is JobStatus.SUCCEEDED
    assert job.result == "the answer" and job.finished_at is not None
    assert store.entries(s.id)[-1].content == "the answer"
    # Finishing released the fence: the old holder can write no more.
    with pytest.raises(LeaseLost):
        store.save_checkpoint(fence, {"late": True})


def test_a_failed_finish_rolls_back_its_entry(store: Store) -> None:
    s = store.create_session("bot")
    job_id = _running_job(store, s.id, "tok")
    fence = Fence(job_id, "tok")
    store.end_turn(
        fence,
        Finish(job_id, JobStatus.SUCCEEDED, result="r"),
        s.id,
        NewEntry(EntryType.ACK, "agent:bot", ""),
        completion=completion.ended,
    )
    before = store.get_session(s.id).last_seq
    # The job is already terminal (and its fence released): the entry must not stay.
    with pytest.raises(LeaseLost):
        store.end_turn(
            fence,
            Finish(job_id, JobStatus.FAILED, error={"code": "x"}),
            s.id,
            NewEntry(EntryType.ERROR, "system:worker", "late failure"),
            completion=completion.ended,
        )
    assert store.get_session(s.id).last_seq == before
    assert [e.content for e in store.entries(s.id)] == ["go", ""]
    job = store.get_job(job_id)
    assert job.status is JobStatus.SUCCEEDED and job.result == "r" and job.error is None
    # The seq was not burnt.
    assert write(store, s.id, EntryType.ACK, "system:t", "next").entry.seq == before + 1


def test_transition_checks_version_and_the_state_machine(store: Store) -> None:
    s = store.create_session("bot")
    done = write(store, s.id, EntryType.MESSAGE, "user:a", "hi")
    assert done.job is not None
    job = done.job
    with pytest.raises(IllegalTransition):
        store.transition(job.id, JobStatus.SUCCEEDED, completion=completion.ended)
    with pytest.raises(chaz.errors.VersionConflict):
        store.transition(
            job.id,
            JobStatus.CANCELLED,
            expected_version=job.version + 1,
            completion=completion.ended,
        )
    cancelled = store.transition(
        job.id, JobStatus.CANCELLED, expected_version=job.version, completion=completion.ended
    )
    assert cancelled.status is JobStatus.CANCELLED and cancelled.version == job.version + 1
    assert store.get_job(job.id) == cancelled
    with pytest.raises(IllegalTransition):
        store.transition(job.id, JobStatus.QUEUED, completion=completion.ended)
    with pytest.raises(IllegalTransition):
        store.start_turn(job.id, "tok")
    assert store.get_job(job.id).status is JobStatus.CANCELLED
