"""Engine creation, with the SQLite settings that make several processes safe."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and IMMEDIATE writes."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    # No pool_pre_ping: it cost a round trip per transaction (12% of a turn).
    # A connection that died with its server raises once, SQLAlchemy then
    # drops the whole pool, and callers see backend.unavailable and retry.
    return create_engine(url, pool_size=10, max_overflow=20, pool_recycle=1800)


def _sqlite_engine(url: str) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None hands transaction control to the events below, so
    # that writes can start with BEGIN IMMEDIATE: a deferred transaction that
    # upgrades to a write lock can fail with "database is locked" at once,
    # without waiting for the busy timeout.
    engine = create_engine(
        url,
        connect_args={"isolation_level": None, "check_same_thread": False, "timeout": 60},
        pool_size=20,
        max_overflow=20,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = "IMMEDIATE" if conn.get_execution_options().get("chaz_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


class WriterQueue:
    """Queues the writers of one SQLite database: threads on a lock, processes
    on an ``flock`` of a file beside the database.

    SQLite's busy handler polls for its write lock with sleeps of 1, 2, 5 ...
    100 ms, so under contention a writer sleeps on long after the lock is
    free: a fifth of a worker's time in the benchmark. A thread blocked on
    this queue is woken by the kernel as soon as the holder lets go. Every
    chaz process that writes the database queues here; anything else still
    meets SQLite's own lock and busy timeout.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        # Reentrant: a thread that already writes does not deadlock on
        # itself (a nested write still meets SQLite's own lock).
        self._lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._pid = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            if self._depth == 0:
                fcntl.flock(self._file(), fcntl.LOCK_EX)
            self._depth += 1
        except BaseException:
            self._lock.release()
            raise

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        try:
            self._depth -= 1
            if self._depth == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()

    def _file(self) -> int:
        # A forked child must not share its parent's open file: flocks on one
        # open file do not exclude each other.
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        return self._fd

    def close(self) -> None:
        """Close the lock file (the queue reopens it if used again)."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None


def writer_queue(engine: Engine) -> contextlib.AbstractContextManager[None]:
    """The queue a write transaction on ``engine`` waits in (none but SQLite's own
    lock for an in-memory database; PostgreSQL locks rows, not the database)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return contextlib.nullcontext()
    return WriterQueue(Path(database + ".writers"))


def is_sqlite(engine: Engine) -> bool:
    """True for the embedded SQLite store."""
    return engine.dialect.name == "sqlite"
