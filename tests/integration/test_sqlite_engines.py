"""Two engines on one SQLite file in one process (the embedded default does
this: a stack's client and every further ``chaz.Client`` of the same home).

Making the second engine must not disturb the first one's connections: a
descriptor of the database file opened and closed in the process drops
every POSIX lock the process holds on it, after which the first engine's
pooled connection went on reading a stale snapshot and never saw another
process's commit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from chaz.store.db import make_engine


def _commit_elsewhere(path: Path, value: int) -> None:
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        f"c.execute('UPDATE t SET v = {value}'); c.commit(); c.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)


def test_a_second_engine_leaves_the_first_ones_connections_current(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chaz.db'}"
    first = make_engine(url)
    try:
        with first.begin() as conn:
            conn.execute(text("CREATE TABLE t (v INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
        with first.connect() as conn:  # a pooled connection that has read the file
            assert conn.execute(text("SELECT v FROM t")).scalar() == 1
        second = make_engine(url)
        second.dispose()
        # Other processes commit, as CLI commands or workers would; each is the
        # last connection when it closes, so it checkpoints the WAL away.
        for value in (2, 3):
            _commit_elsewhere(tmp_path / "chaz.db", value)
            with first.connect() as conn:
                assert conn.execute(text("SELECT v FROM t")).scalar() == value
    finally:
        first.dispose()
