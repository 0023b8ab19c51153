"""chaz behind a real PgBouncer in transaction pooling mode (issue 13 item 6,
docs/capacity.md#postgresql-connections).

One module-wide server stack whose CHAZ_DATABASE_URL points at a pgbouncer
process this module starts (tests/support/pgbouncer.py): migrations, two
real workers, a worker killed mid-turn, a cancel, follow-ups, and the
acceptance load: 100 producer threads posting and waiting, with the
machine's PostgreSQL left at its max_connections. Without pgbouncer
installed the module skips, or fails under CI=true.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.store import Store
from chaz.store.db import PoolOptions
from chaz.store.migrate import current_revision, head_revision, upgrade
from tests.conftest import IN_CI, PG_ADMIN
from tests.support import connections, pgbouncer
from tests.support.pgbouncer import PgBouncer
from tests.support.stack import Stack

#: A bound on each outcome waited for on a loaded machine, not a pace.
WAIT = 60
#: The acceptance load: producer threads, and turns each posts and waits for.
PRODUCERS = 100
ROUNDS = 3


@pytest.fixture(scope="module")
def bouncer(pg_url: str) -> Iterator[PgBouncer]:
    """A pgbouncer of this module's own, in front of the test run's database."""
    executable = pgbouncer.find()
    if executable is None:
        message = "pgbouncer is not installed (apt-get install -y pgbouncer)"
        if IN_CI:
            pytest.fail(message + " (CI=true: a missing server is a failure)")
        pytest.skip(message)
    b = PgBouncer(executable, pg_url).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def bstack(
    bouncer: PgBouncer, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A server stack that reaches PostgreSQL only through ``bouncer``, with two workers.

    Its migrations and TRUNCATE run through pgbouncer too."""
    home = tmp_path_factory.mktemp("bouncer") / "home"
    s = Stack.server(home, bouncer.url, redis_url, db_prepared_statements=False)
    try:
        s.workers(2, concurrency=4, queues="chaz.turns,chaz.control")
        yield s
    finally:
        s.close()


def _database(stack: Stack) -> str:
    return connections.database_of(stack.settings.effective_database_url())


def test_the_acceptance_load_runs_through_pgbouncer(bstack: Stack, bouncer: PgBouncer) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        row = admin.execute("SHOW max_connections").fetchone()
    # The server as it is: the load must fit whatever else runs on it.
    assert row is not None and int(row[0]) <= 100
    # A producer with a pool as large as its threads: each thread keeps a
    # client connection to pgbouncer, which costs PostgreSQL nothing.
    settings = bstack.settings.model_copy(update={"db_pool_size": PRODUCERS})
    producer = chaz.Client(settings)
    try:
        with producer.services.store.engine.connect() as conn:
            # No server-side prepared statements behind the pooler.
            assert conn.connection.driver_connection.prepare_threshold is None  # type: ignore[union-attr]
        with connections.PeakBackends(_database(bstack)) as peak:
            load = connections.producer_load(producer, PRODUCERS, ROUNDS)
    finally:
        producer.close()
    assert load.errors == [], load.errors[:5]
    assert load.replies == PRODUCERS * ROUNDS
    # PostgreSQL saw no more than pgbouncer's pool, whatever the clients held.
    assert 0 < peak.peak <= bouncer.pool_size
    # Each worker kept at most a connection per turn thread, plus its two fixed ones.
    for w in bstack._workers:
        held = connections.tcp_connections_to(w.pid, bouncer.port)
        assert 0 < held <= w.concurrency + 2, (w.pid, held)


def test_migrations_run_through_pgbouncer_at_once(bouncer: PgBouncer) -> None:
    """Three processes' worth of `chaz migrate` on a fresh database, through
    the pooler: one runs the revisions, the others wait for its lock."""
    name = f"chaz_bouncer_migrate_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = bouncer.url.rsplit("/", 1)[0] + f"/{name}"
    stores = [Store(url, PoolOptions(size=1, prepare_threshold=None)) for _ in range(3)]
    try:
        failures: list[BaseException] = []

        def migrate(store: Store) -> None:
            try:
                upgrade(store.engine)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert current_revision(stores[0].engine) == head_revision()
    finally:
        for s in stores:
            s.close()
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_follow_ups_run_in_order(bstack: Stack) -> None:
    client = bstack.client
    client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
    s = client.sessions.create("echo")
    posted = [client.sessions.post(s.id, f"m{i}", sender="user:alice") for i in range(6)]
    for p in posted:
        reply = client.sessions.wait_for_reply(s.id, after=p.seq, timeout=WAIT)
        assert reply.content == p.content
    jobs = [client.jobs.get(p.job_id or "") for p in posted]
    assert all(j.status is chaz.JobStatus.SUCCEEDED for j in jobs)


def test_a_cancel_ends_a_running_turn(bstack: Stack) -> None:
    client = bstack.client
    client.agents.put(
        chaz.AgentSpec(id="sleepy", script=[{"steps": [{"sleep": 30}, {"say": "too late"}]}])
    )
    s = client.sessions.create("sleepy")
    job_id = client.sessions.post(s.id, "nap", sender="user:alice").job_id or ""
    bstack.wait_for(
        lambda: client.jobs.get(job_id).status is chaz.JobStatus.RUNNING, WAIT, "the turn to run"
    )
    assert client.jobs.cancel(job_id, reason="stop")["status"] == "stopping"
    assert client.jobs.wait(job_id, timeout=WAIT).status is chaz.JobStatus.CANCELLED
    entries = client.sessions.entries(s.id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender == "agent:sleepy"]


def test_a_killed_workers_turn_resumes(bstack: Stack, tmp_path: Path) -> None:
    client = bstack.client
    gate = f"bouncer-{tmp_path.name}"
    client.agents.put(
        chaz.AgentSpec(
            id="crashy",
            tools=["echo"],
            script=[
                {
                    "steps": [
                        {"call": "echo", "args": {"text": "before"}},
                        {"wait": gate},
                        {"say": "after {last_result}"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("crashy")
    first = client.sessions.post(s.id, "long job", sender="user:alice")
    bstack.wait_for(
        lambda: any(e.type is EntryType.TOOL_RESULT for e in client.sessions.entries(s.id)),
        WAIT,
        "the echo tool's result",
    )
    ack = next(e for e in client.sessions.entries(s.id) if e.type is EntryType.ACK)
    victim = next(w for w in bstack._workers if w.pid == ack.metadata["pid"])
    victim.kill(signal.SIGKILL)
    # The gate opens only now: whichever worker resumes the turn goes on.
    bstack.open_gate(gate)
    reply = client.sessions.wait_for_reply(s.id, after=first.seq, timeout=WAIT)
    assert reply.type is EntryType.MESSAGE, reply.content
    job = client.jobs.get(first.job_id or "")
    assert job.status is chaz.JobStatus.SUCCEEDED and job.attempts == 2
    calls = [
        e for e in client.sessions.entries(s.id)
        if e.type is EntryType.TOOL_CALL and e.job_id == first.job_id
    ]  # fmt: skip
    assert len(calls) == 1, "a completed tool call ran again"


def test_many_threads_share_few_connections_without_churn(bstack: Stack) -> None:
    """The default pool (10, no overflow) under more threads than connections:
    threads wait for a connection, and none is opened twice."""
    producer = chaz.Client(bstack.settings)
    try:
        load = connections.producer_load(producer, 30, 2)
    finally:
        producer.close()
    assert load.errors == [] and load.replies == 60, load.errors[:5]
    assert 0 < load.producer_connects <= 10
    # No thread ever asked for a second connection while holding one.
    assert load.most_held_by_a_thread == 1
