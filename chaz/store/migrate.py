"""Running the Alembic migrations, safely when several processes start at once.

PostgreSQL serializes concurrent runs with an advisory lock; SQLite with an
exclusive file lock beside the database. Inside the lock, Alembic's own
version table makes a second run a no-op.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, text

from chaz.store.db import is_sqlite

_MIGRATIONS = Path(__file__).parent / "migrations"
#: An arbitrary, fixed key for pg_advisory_lock: "chaz" in ASCII.
_PG_LOCK_KEY = 0x6368617A


def alembic_config() -> Config:
    """Alembic configuration pointing at chaz's bundled revisions."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; idempotent and concurrency-safe."""
    cfg = alembic_config()
    if is_sqlite(engine):
        database = engine.url.database or ""
        lock_path = Path(database + ".migrate.lock") if database else None
        if lock_path is None or database == ":memory:":
            _run(engine, cfg, revision)
            return
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                _run(engine, cfg, revision)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
        conn.commit()
        try:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            conn.commit()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
            conn.commit()


def _run(engine: Engine, cfg: Config, revision: str) -> None:
    with engine.connect().execution_options(chaz_write=True) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.commit()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None before the first migration."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        rev: str | None = MigrationContext.configure(conn).get_current_revision()
        return rev
