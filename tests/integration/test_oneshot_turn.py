"""A turn's start and end as one statement each on PostgreSQL (chaz/store/oneshot.py).

The start (job, session seq, Ack) runs as one statement in the setup's
transaction; the end (fenced job end, session seq, reply) as one statement
that commits itself. These tests count the statements, and check that the
single statements keep what the general path guarantees: the fence (a stale
token writes nothing), the transition gate (a cancelled job's turn writes no
reply), seq order, the start's asynchronous commit, and the fallback when
the job changed since its setup read it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import JobStatus
from chaz.errors import IllegalTransition, LeaseLost
from chaz.services import Services
from chaz.store.types import Fence, Finish
from chaz.usecases import admission, completion
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="quiet", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture
def services(stack: Stack) -> Iterator[Services]:
    if stack.kind != "server":
        pytest.skip("single-statement writes are PostgreSQL's (SQLite keeps the general path)")
    stack.client.agents.put(AGENT)
    svc = Services(stack.settings)
    yield svc
    svc.close()


class _Statements:
    """The SQL statements an engine runs while counting."""

    def __init__(self, svc: Services) -> None:
        self.seen: list[str] = []
        self.on = False
        event.listen(svc.store.db.engine, "before_cursor_execute", self._run)

    def _run(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if self.on:
            self.seen.append(statement)

    def __enter__(self) -> list[str]:
        self.seen.clear()
        self.on = True
        return self.seen

    def __exit__(self, *_exc: object) -> None:
        self.on = False


def _job(stack: Stack, svc: Services) -> tuple[str, str]:
    session = stack.client.sessions.create(AGENT.id)
    done = admission.admit(svc, session.id, NewEntry(EntryType.MESSAGE, "user:u", "hi"))
    assert done.job is not None
    return session.id, done.job.id


def _token(svc: Services, job_id: str) -> str | None:
    with svc.store.db.read() as conn:
        found = conn.execute(text("SELECT lease_token FROM jobs WHERE id = :j"), {"j": job_id})
        return found.scalar()


def _reply(job_id: str) -> NewEntry:
    return NewEntry(EntryType.MESSAGE, "agent:quiet", "ok", idempotency_key=f"job:{job_id}:reply")


def _end(svc: Services, session_id: str, job_id: str, token: str, status: JobStatus) -> Any:
    return svc.store.end_turn(
        Fence(job_id, token),
        Finish(job_id, status, result="ok"),
        session_id,
        _reply(job_id),
        completion=completion.ended,
    )


def test_a_turn_starts_and_ends_in_one_statement_each(stack: Stack, services: Services) -> None:
    sid, jid = _job(stack, services)
    counted = _Statements(services)
    with services.store.turn_start(sid, 100) as tx:
        assert tx.setup is not None and tx.setup.job.id == jid
        with counted as seen:
            job, ack = tx.start("t1", ack_sender="agent:quiet", ack_metadata={"pid": 1})
        # One statement writes, and reads the turn's context with it: nothing
        # follows it in the transaction (chaz.store.core.TurnStart.start).
        assert seen[0].lstrip().upper().startswith("WITH"), seen
        assert "json_agg(" in seen[0] and seen[1:] == [], seen
        # The start's transaction does not wait for the disk (set in the statement).
        conn = tx._conn
        assert conn is not None
        assert conn.execute(text("SHOW synchronous_commit")).scalar() == "off"
    assert job.status is JobStatus.RUNNING and job.starts == 1 and job.attempts == 1
    assert ack is not None and ack.seq == 2 and ack.metadata == {"pid": 1}
    with counted as seen:
        done = _end(services, sid, jid, "t1", JobStatus.SUCCEEDED)
    assert len(seen) == 1, seen
    assert done is not None and done.created and done.entry.seq == 3
    entries = services.store.entries(sid)
    assert [(e.seq, e.type) for e in entries] == [
        (1, EntryType.MESSAGE),
        (2, EntryType.ACK),
        (3, EntryType.MESSAGE),
    ]
    assert entries[1].job_id == jid and entries[2].job_id == jid
    with services.store.db.read() as conn:
        keys = conn.execute(
            text("SELECT seq, idempotency_key, key_scope FROM entries WHERE session_id = :s"),
            {"s": sid},
        ).all()
    assert sorted(tuple(k) for k in keys)[1:] == [
        (2, f"job:{jid}:ack", "runtime"),
        (3, f"job:{jid}:reply", "runtime"),
    ]
    ended = services.store.get_job(jid)
    assert ended.status is JobStatus.SUCCEEDED and ended.result == "ok"
    assert _token(services, jid) is None and ended.finished_at is not None
    # The session's counter is the entries' last seq: the next append follows.
    after = services.store.append(sid, NewEntry(EntryType.DIRECTIVE, "user:u", "next"))
    assert after.entry.seq == 4


def test_a_stale_fence_writes_nothing(stack: Stack, services: Services) -> None:
    sid, jid = _job(stack, services)
    with services.store.turn_start(sid, 100) as tx:
        tx.start("t1", ack_sender="agent:quiet")
    # Another worker took the job over (a new token).
    with services.store.db.write() as conn:
        conn.execute(text("UPDATE jobs SET lease_token = 't2' WHERE id = :j"), {"j": jid})
    with pytest.raises(LeaseLost):
        _end(services, sid, jid, "t1", JobStatus.SUCCEEDED)
    assert [e.type for e in services.store.entries(sid)] == [EntryType.MESSAGE, EntryType.ACK]
    job = services.store.get_job(jid)
    assert job.status is JobStatus.RUNNING and _token(services, jid) == "t2"
    # The holder's end still goes through, at the next seq.
    done = _end(services, sid, jid, "t2", JobStatus.SUCCEEDED)
    assert done is not None and done.entry.seq == 3


def test_a_cancelled_turn_writes_no_reply(stack: Stack, services: Services) -> None:
    sid, jid = _job(stack, services)
    with services.store.turn_start(sid, 100) as tx:
        tx.start("t1", ack_sender="agent:quiet")
    with services.store.db.write() as conn:
        conn.execute(text("UPDATE jobs SET status = 'stopping' WHERE id = :j"), {"j": jid})
    with pytest.raises(IllegalTransition):
        _end(services, sid, jid, "t1", JobStatus.SUCCEEDED)
    assert [e.type for e in services.store.entries(sid)] == [EntryType.MESSAGE, EntryType.ACK]
    assert services.store.get_job(jid).status is JobStatus.STOPPING


def test_a_start_of_a_job_changed_since_its_setup_takes_the_locking_path(
    stack: Stack, services: Services
) -> None:
    sid, jid = _job(stack, services)
    with services.store.turn_start(sid, 100) as tx:
        # Another writer changed the job after the setup read it (its
        # version moved): the single statement writes nothing, the locking
        # path starts the job as it now is.
        with services.store.db.write() as conn:
            conn.execute(text("UPDATE jobs SET version = version + 1 WHERE id = :j"), {"j": jid})
        job, ack = tx.start("t1", ack_sender="agent:quiet")
    assert job.status is JobStatus.RUNNING and job.starts == 1 and job.version == 3
    assert ack is not None and ack.seq == 2
    assert [e.seq for e in services.store.entries(sid)] == [1, 2]
    assert _token(services, jid) == "t1"


def test_a_resumed_start_writes_no_second_ack(stack: Stack, services: Services) -> None:
    sid, jid = _job(stack, services)
    with services.store.turn_start(sid, 100) as tx:
        tx.start("t1", ack_sender="agent:quiet")
    with services.store.turn_start(sid, 100) as tx:
        job, ack = tx.start("t2", ack_sender="agent:quiet")
    assert ack is None and job.starts == 2 and job.attempts == 2
    assert [e.type for e in services.store.entries(sid)] == [EntryType.MESSAGE, EntryType.ACK]
    done = _end(services, sid, jid, "t2", JobStatus.SUCCEEDED)
    assert done is not None and done.entry.seq == 3
