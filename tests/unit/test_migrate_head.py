"""The migration fast path reads the newest revision from the files' text; Alembic agrees."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from alembic.script import ScriptDirectory

from chaz.store.migrate import alembic_config, bundled_head, is_current_file


def test_bundled_head_is_alembics_head() -> None:
    assert bundled_head() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_is_current_file_reads_an_embedded_databases_version(tmp_path: Path) -> None:
    """``chaz worker``'s check before it execs Celery, without SQLAlchemy."""
    database = tmp_path / "chaz.db"
    url = f"sqlite:///{database.as_posix()}"
    assert not is_current_file(url)  # no file yet
    with closing(sqlite3.connect(database)) as conn:
        conn.execute("CREATE TABLE other (x)")
        conn.commit()
    assert not is_current_file(url)  # no version table yet
    with closing(sqlite3.connect(database)) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES ('0001')")
        conn.commit()
    assert not is_current_file(url)  # behind
    with closing(sqlite3.connect(database)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (bundled_head(),))
        conn.commit()
    assert is_current_file(url)
    # Anything else is left to the engine's path.
    assert not is_current_file(f"{url}?timeout=5")
    assert not is_current_file("sqlite://")
    assert not is_current_file("postgresql+psycopg://u@h/db")
