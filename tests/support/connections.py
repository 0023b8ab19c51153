"""A producer load (N threads, each posting to its own session and waiting for
the reply) and the PostgreSQL figures around it: connections opened, backends
at the peak, backend CPU.

Used by tests/acceptance/test_pgbouncer.py (the acceptance load) and by
``python -m tests.support.connections`` (the figures of
docs/performance.md#postgresql-connections).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy import event

import chaz
from chaz.domain.entries import EntryType
from tests.support import redis_claims

#: The benchmark's agent: a zero-latency scripted reply.
AGENT = chaz.AgentSpec(id="bench", script=[{"steps": [{"say": "ok"}]}])
PG_ADMIN = os.environ.get("CHAZ_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass
class LoadResult:
    """What a producer load did."""

    replies: int = 0
    errors: list[str] = field(default_factory=list)
    #: Connections the producer's engine opened (SQLAlchemy ``connect`` events).
    producer_connects: int = 0
    #: The most connections one producer thread held at once: above 1, a
    #: thread asked for a second connection while holding one, which a full
    #: pool without overflow could make wait forever.
    most_held_by_a_thread: int = 0
    seconds: float = 0.0


def producer_load(client: chaz.Client, threads: int, rounds: int) -> LoadResult:
    """``threads`` threads, each with a session of its own: post, then wait for
    the reply, ``rounds`` times."""
    client.agents.put(AGENT)
    sessions = [client.sessions.create(agent_id=AGENT.id).id for _ in range(threads)]
    result = LoadResult()
    lock = threading.Lock()
    connects = [0]

    def count(*_: Any) -> None:
        with lock:
            connects[0] += 1

    held = threading.local()

    def checkout(*_: Any) -> None:
        held.n = getattr(held, "n", 0) + 1
        with lock:
            result.most_held_by_a_thread = max(result.most_held_by_a_thread, held.n)

    def checkin(*_: Any) -> None:
        held.n = getattr(held, "n", 1) - 1

    engine = client.services.store.engine
    event.listen(engine, "connect", count)
    event.listen(engine.pool, "checkout", checkout)
    event.listen(engine.pool, "checkin", checkin)
    start = threading.Barrier(threads)

    def run(sid: str) -> None:
        start.wait()
        for i in range(rounds):
            try:
                posted = client.sessions.post(sid, f"hi {i}")
                reply = client.sessions.wait_for_reply(sid, after=posted.seq, timeout=120)
                ok = reply.type is EntryType.MESSAGE and reply.content == "ok"
                with lock:
                    if ok:
                        result.replies += 1
                    else:
                        result.errors.append(f"{sid}: {reply.type.value} {reply.content}")
            except Exception as exc:  # every failure is a finding, reported together
                with lock:
                    result.errors.append(f"{sid}: {type(exc).__name__}: {exc}")

    began = time.monotonic()
    workers = [threading.Thread(target=run, args=(sid,), daemon=True) for sid in sessions]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    result.seconds = time.monotonic() - began
    event.remove(engine, "connect", count)
    event.remove(engine.pool, "checkout", checkout)
    event.remove(engine.pool, "checkin", checkin)
    result.producer_connects = connects[0]
    return result


def database_of(url: str) -> str:
    """The database name of a SQLAlchemy URL."""
    return url.rsplit("/", 1)[1].split("?", 1)[0]


def sessions_opened(database: str) -> int:
    """Backends ever started for ``database`` (pg_stat_database.sessions, PostgreSQL 14+)."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
        return int(row[0]) if row else 0


def backends(database: str) -> list[int]:
    """The pids of the backends connected to ``database`` now."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
        return [int(r[0]) for r in rows]


class PeakBackends:
    """Samples the backends of a database on a thread; :attr:`peak` is the most seen."""

    def __init__(self, database: str, every: float = 0.05) -> None:
        self.database = database
        self.every = every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakBackends:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            while not self._stop.wait(self.every):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,)
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime, the 14th and 15th fields (11th and 12th after the name).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def backend_cpu(database: str) -> Iterator[list[float]]:
    """CPU seconds the backends of ``database`` used inside the block (``out[0]``).

    Backends are read from /proc (PostgreSQL on this machine); one that
    started inside the block counts whole, one that ended inside it is lost
    (pools that do not churn end none).
    """
    before = {pid: _cpu_seconds(pid) for pid in backends(database)}
    out = [0.0]
    yield out
    out[0] = sum(_cpu_seconds(pid) - before.get(pid, 0.0) for pid in backends(database))


def tcp_connections_to(pid: int, port: int) -> int:
    """Established TCP connections process ``pid`` holds to ``port`` (read from /proc)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            remote_port = int(cols[2].rsplit(":", 1)[1], 16)
            # State 01 is ESTABLISHED; column 9 the socket's inode.
            if remote_port == port and cols[3] == "01" and cols[9] in inodes:
                count += 1
    return count


def _claim_redis() -> tuple[str, redis.Redis, int]:
    """A Redis database number claimed as the test runs claim theirs."""
    admin = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    n = redis_claims.claim(admin, (n for n in range(1, 16) if n != 13))
    if n is None:
        raise SystemExit("no free Redis database")
    return f"redis://127.0.0.1:6379/{n}", admin, n


def main() -> None:
    """Print the figures of docs/performance.md#postgresql-connections."""
    from tests.support.pgbouncer import PgBouncer, find
    from tests.support.stack import Stack

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--only", type=str, default="", help="case numbers, e.g. 1,2 (from 0)")
    args = parser.parse_args()
    name = f"chaz_conn_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    url = f"{base}/{name}"
    redis_url, radmin, claim = _claim_redis()
    bouncer = PgBouncer(find() or "pgbouncer", url).start()
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("direct, pool 10 + overflow 20 (before)", url, {"db_max_overflow": 20}),
        ("direct, pool 10 + overflow 0 (default now)", url, {}),
        ("direct, default, no prepared statements", url, {"db_prepared_statements": False}),
        (
            "PgBouncer, pool 100, no prepared statements",
            bouncer.url,
            {"db_pool_size": 100, "db_prepared_statements": False},
        ),
    ]
    if args.only:
        cases = [cases[int(i)] for i in args.only.split(",")]
    try:
        for label, target, overrides in cases:
            home = Path(tempfile.mkdtemp()) / f"home-{uuid.uuid4().hex[:6]}"
            stack = Stack.server(home, target, redis_url, **overrides)
            try:
                stack.workers(args.workers, concurrency=args.concurrency, queues="chaz.turns")
                opened = sessions_opened(name)
                with PeakBackends(name) as peak, backend_cpu(name) as cpu:
                    load = producer_load(stack.client, args.threads, args.rounds)
                turns = load.replies
                print(
                    f"{label}: {turns} replies, {len(load.errors)} errors, "
                    f"{load.seconds:.1f} s; producer connects {load.producer_connects}; "
                    f"server sessions opened {sessions_opened(name) - opened}; "
                    f"peak backends {peak.peak}; "
                    f"backend CPU {1000 * cpu[0] / max(turns, 1):.2f} ms/turn"
                )
                for e in load.errors[:3]:
                    print("   ", e)
            finally:
                stack.close()
    finally:
        bouncer.stop()
        redis_claims.release(radmin, claim)
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
