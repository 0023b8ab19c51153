"""The database handle every store module takes: :class:`Database` (the
engine and its read and write transactions), and engine creation: PostgreSQL
pools sized to the threads that use them, and the SQLite settings that make
several processes safe."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from chaz.errors import ConfigError
from chaz.plumbing.files import create_private, private_dir
from chaz.settings import Settings, get_settings

#: A process's pool when nobody sized it (docs/capacity.md#postgresql-connections).
DEFAULT_POOL_SIZE = 10
#: psycopg's own default: statements run this often on a connection are prepared.
PREPARE_THRESHOLD = 5


@dataclass(frozen=True)
class PoolOptions:
    """How many PostgreSQL connections one process keeps, and how it talks to them.

    ``size`` is a cap, not a reservation: the pool opens a connection only
    when every open one is in use, so a process opens at most as many as it
    has transactions in flight at once. Connections past ``size`` (up to
    ``max_overflow`` more) are closed as soon as they are returned; under a
    steady load above the cap they are opened and closed over and over,
    which is why the default allows none.
    """

    size: int = DEFAULT_POOL_SIZE
    max_overflow: int = 0
    #: psycopg prepares a statement on the server after it ran this often on
    #: one connection; None never does (what a transaction-mode PgBouncer
    #: needs: the prepared statement would live on a server connection the
    #: next transaction may not get).
    prepare_threshold: int | None = PREPARE_THRESHOLD
    #: Seconds a thread waits for a free connection when all are in use; then
    #: SQLAlchemy's pool TimeoutError, which callers see as backend.unavailable.
    timeout: float = 30.0

    @classmethod
    def of(cls, settings: Settings, threads: int | None = None) -> PoolOptions:
        """The pool ``settings`` ask for, in a process with ``threads`` threads
        using the database at once (CHAZ_DB_POOL_SIZE wins; neither: the default)."""
        return cls(
            size=settings.db_pool_size or threads or DEFAULT_POOL_SIZE,
            max_overflow=settings.db_max_overflow,
            prepare_threshold=PREPARE_THRESHOLD if settings.db_prepared_statements else None,
            timeout=settings.db_pool_timeout,
        )


def _parsed(url: str) -> URL:
    """``url`` as SQLAlchemy reads it, or ``config.invalid`` (the URL hidden: it
    may hold a password) when it is no database URL or names no installed driver."""
    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise ConfigError(
            "CHAZ_DATABASE_URL is not a database URL chaz can use "
            f"({type(exc).__name__}): expected e.g. postgresql+psycopg://USER@HOST/DB "
            "or sqlite:///PATH",
            setting="database_url",
        ) from None
    return parsed


def make_engine(url: str, pool: PoolOptions | None = None) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and IMMEDIATE writes.

    Without ``pool``, the process's settings (``CHAZ_DB_*``) size it: a
    one-off engine (``chaz migrate``, ``chaz doctor``) behind PgBouncer must
    not prepare statements either.
    """
    parsed = _parsed(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    if pool is None:
        try:
            pool = PoolOptions.of(get_settings())
        except ValidationError:
            # Settings that do not parse are reported by whoever reads them
            # (chaz doctor, chaz config); an engine still gets made.
            pool = PoolOptions()
    connect_args: dict[str, Any] = {}
    if parsed.get_driver_name() == "psycopg":
        connect_args["prepare_threshold"] = pool.prepare_threshold
    # No pool_pre_ping: a round trip per transaction (docs/performance.md).
    # A connection that died with its server raises once, SQLAlchemy then
    # drops the whole pool, and callers see backend.unavailable and retry.
    return create_engine(
        url,
        pool_size=pool.size,
        max_overflow=pool.max_overflow,
        pool_timeout=pool.timeout,
        pool_recycle=1800,
        connect_args=connect_args,
    )


def _sqlite_engine(url: str) -> Engine:
    database = make_url(url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        # SQLite would create the file 0644 (less the umask), and its -wal and
        # -shm files copy that mode: create it 0600 first.
        create_private(private_dir(Path(database).parent) / Path(database).name)
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


def is_sqlite(engine: Engine) -> bool:
    """True for the embedded SQLite store."""
    return engine.dialect.name == "sqlite"


class Database:
    """One engine and its transactions, shared by every store module.

    The store's concepts (agents, sessions, jobs, deliveries, ...) are small
    sets of named operations over one ``Database``; none opens a connection
    any other way.
    """

    def __init__(self, url: str, pool: PoolOptions | None = None) -> None:
        self.url = url
        self.engine = make_engine(url, pool)

    @property
    def sqlite(self) -> bool:
        """True for the embedded SQLite store."""
        return is_sqlite(self.engine)

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    @contextmanager
    def write(self, durable: bool = True) -> Iterator[Connection]:
        """A write transaction. ``durable=False`` lets PostgreSQL acknowledge the
        commit before its WAL reaches disk (``synchronous_commit=off``).

        Used only for writes whose loss in a *database* crash is repaired by
        the next durable commit or by a resumed turn (a turn's start, its Ack,
        its audit entries): the next durable commit flushes the WAL before it,
        so ordering is kept. Admissions, checkpoints and a turn's final entry
        stay durable.
        """
        with self.engine.connect().execution_options(chaz_write=True) as conn, conn.begin():
            if not durable and conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            yield conn

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A PostgreSQL connection with no transaction around its statements:
        each commits on its own, with no ``BEGIN`` or ``COMMIT`` round trip.

        For reads that need no snapshot in common (under READ COMMITTED each
        statement of a transaction takes its own anyway) and for a write
        that is one statement (docs/performance.md#postgresql-work-per-turn).
        """
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (SQLite: a deferred one, taking no write lock)."""
        with self.engine.connect() as conn, conn.begin():
            yield conn
