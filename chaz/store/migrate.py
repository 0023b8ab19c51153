"""Running the Alembic migrations, safely when several processes start at once.

PostgreSQL serializes concurrent runs with a transaction's advisory lock; SQLite with an
exclusive file lock beside the database. Inside the lock, Alembic's own
version table makes a second run a no-op.

Alembic takes long to import, and nearly every run finds the database at the
newest revision already; so :func:`upgrade` first compares the version table
with the newest bundled revision, read from the revision files' text, and
loads Alembic only when they differ. SQLAlchemy too is imported by the
functions that use an engine: ``chaz worker`` checks the database with
:func:`is_current_file` (the embedded default, on the standard library's
``sqlite3``) or :func:`is_current_postgres` (on psycopg alone) before it
execs Celery, and every import before the exec delays the worker's first
turn. :func:`connect_args` says which PostgreSQL URLs psycopg is given
directly, as SQLAlchemy would give them.
"""

from __future__ import annotations

import fcntl
import re
from contextlib import closing
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from chaz.plumbing.files import create_private

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Engine

_MIGRATIONS = Path(__file__).parent / "migrations"
#: An arbitrary, fixed key for pg_advisory_xact_lock: "chaz" in ASCII.
_PG_LOCK_KEY = 0x6368617A


_REVISION = re.compile(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\s*=\s*(.+)$", re.MULTILINE)


@lru_cache(maxsize=1)
def bundled_head() -> str | None:
    """The newest bundled revision, or None when the files do not name exactly one."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (_MIGRATIONS / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        rev = _REVISION.search(source)
        down = _DOWN_REVISION.search(source)
        if rev is None or down is None:
            return None  # a layout this reader does not know: let Alembic decide
        revisions.add(rev[1])
        parents.update(re.findall(r"['\"]([^'\"]+)['\"]", down[1]))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def is_current(engine: Engine) -> bool:
    """Whether the database is at the newest bundled revision (no Alembic needed)."""
    import sqlalchemy.exc
    from sqlalchemy import text

    head = bundled_head()
    if head is None:
        return False
    try:
        with engine.connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars()
            return list(versions) == [head]
    except (sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError):
        # No version table yet (or no database): the full path finds out.
        return False


def is_current_file(url: str) -> bool:
    """Whether ``url`` names a SQLite file at the newest bundled revision, read
    with the standard library (False when it is not, or is not such a URL).

    ``chaz worker`` asks before it execs Celery: on the embedded default the
    answer takes a millisecond, SQLAlchemy's import a tenth of a second.
    """
    import sqlite3  # here: on PostgreSQL, `chaz worker` loads this module for connect_args

    prefix = "sqlite:///"
    head = bundled_head()
    if head is None or not url.startswith(prefix) or "?" in url:
        return False  # options, another driver, memory: the engine's path decides
    database = Path(url.removeprefix(prefix))
    if not database.is_file():
        return False
    try:
        uri = f"{database.resolve().as_uri()}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=60)) as conn:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return False  # no version table yet: the full path finds out
    return [row[0] for row in rows] == [head]


#: The PostgreSQL URLs read without SQLAlchemy: ``postgresql+psycopg://[USER[:PASSWORD]@]HOST[:PORT]/DB``,
#: no query, one host. SQLAlchemy reads anything else (options, sockets, IPv6).
_URL = re.compile(
    r"postgresql\+psycopg://(?:(?P<user>[^:@/?#]*)(?::(?P<password>[^@/?#]*))?@)?"
    r"(?P<host>[A-Za-z0-9._-]*)(?::(?P<port>[0-9]{1,5}))?/(?P<dbname>[A-Za-z0-9_.-]+)"
)


def connect_args(url: str) -> dict[str, str] | None:
    """psycopg's keyword arguments for ``url`` as SQLAlchemy would pass them, or
    None for a URL this module leaves to SQLAlchemy."""
    match = _URL.fullmatch(url)
    if match is None:
        return None
    parts = {
        "user": unquote(match["user"]) if match["user"] else "",
        "password": unquote(match["password"]) if match["password"] is not None else "",
        "host": match["host"],
        "port": match["port"] or "",
        "dbname": match["dbname"],
    }
    return {key: value for key, value in parts.items() if value}


def is_current_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database at the newest bundled revision,
    read with psycopg alone (False when it is not, when the URL is not a plain
    one, or when the connection fails: the engine's path then decides or reports).

    ``chaz worker`` asks before it execs Celery, as :func:`is_current_file` on
    the embedded default: SQLAlchemy's import would only delay the exec.
    """
    args = connect_args(url)
    head = bundled_head()
    if args is None or head is None:
        return False
    import psycopg

    options: dict[str, Any] = dict(args)
    try:
        with psycopg.connect(autocommit=True, **options) as conn:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    except psycopg.Error:
        return False
    return [row[0] for row in rows] == [head]


def ensure_current(url: str) -> None:
    """Bring ``url``'s schema to the newest bundled revision; a database already
    there is recognised without SQLAlchemy where it can be (:func:`is_current_file`,
    :func:`is_current_postgres`), as at every worker's start."""
    if is_current_file(url) or is_current_postgres(url):
        return
    # An engine, not a Store: the store's models would load for nothing.
    from chaz.store.db import make_engine

    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def alembic_config() -> Config:
    """Alembic configuration pointing at chaz's bundled revisions."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; idempotent and concurrency-safe."""
    from sqlalchemy import text

    from chaz.store.db import is_sqlite

    if revision == "head" and is_current(engine):
        return
    cfg = alembic_config()
    if is_sqlite(engine):
        database = engine.url.database or ""
        lock_path = Path(database + ".migrate.lock") if database else None
        if lock_path is None or database == ":memory:":
            _run(engine, cfg, revision)
            return
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with create_private(lock_path).open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                _run(engine, cfg, revision)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    with engine.connect() as conn:
        # A transaction's lock, and Alembic runs inside that one transaction
        # (PostgreSQL's DDL is transactional): behind a transaction-mode
        # PgBouncer, a session lock would stay held on whichever server
        # connection took it, and its unlock would run on another.
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        cfg.attributes["connection"] = conn
        _alembic_upgrade(cfg, revision)
        conn.commit()


def _run(engine: Engine, cfg: Config, revision: str) -> None:
    """Migrate SQLite in one write transaction with foreign keys off, as SQLite's
    own procedure for rebuilding a table asks: a batch ALTER drops the old
    table, and SQLite counts every child row of it as a violation even once
    the copy holds its parent again. ``foreign_key_check`` then runs before
    the commit, so a real violation still fails the migration."""
    with engine.connect().execution_options(chaz_write=True) as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        # Outside any transaction (the pragma is a no-op inside one): nothing
        # has run on this connection yet, and the driver is in autocommit.
        raw.execute("PRAGMA foreign_keys=OFF")
        try:
            cfg.attributes["connection"] = conn
            _alembic_upgrade(cfg, revision)
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
            conn.commit()
        finally:
            conn.rollback()
            raw.execute("PRAGMA foreign_keys=ON")


def _alembic_upgrade(cfg: Config, revision: str) -> None:
    from alembic import command

    command.upgrade(cfg, revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None before the first migration."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        rev: str | None = MigrationContext.configure(conn).get_current_revision()
        return rev


def head_revision() -> str | None:
    """The newest bundled revision (Alembic decides when the files' text does not say)."""
    head = bundled_head()
    if head is not None:
        return head
    from alembic.script import ScriptDirectory

    found: str | None = ScriptDirectory.from_config(alembic_config()).get_current_head()
    return found
