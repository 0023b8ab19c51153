"""A bridge's own state: one small SQLite file (docs/bridges.md#state).

The bridge holds only chaz's URL and keys, so it keeps what it must remember
across a restart itself: per room, the chaz session it is bound to and the
last seq it sent there (the cursor), and the platform's sync token. Each
change is one committed transaction (SQLite's journal makes it atomic), so a
bridge killed at any instant finds either the old value or the new one.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

__all__ = ["State"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (
    room TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    sent_seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


class State:
    """The bridge's state file; safe to share between the bridge's threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # Each commit reaches the disk before the bridge sends past it.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def session_of(self, room: str) -> tuple[str, int] | None:
        """The session ``room`` is bound to and the cursor there, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT session_id, sent_seq FROM rooms WHERE room = ?", (room,)
            ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def bind(self, room: str, session_id: str, sent_seq: int) -> tuple[str, int]:
        """Bind ``room`` to ``session_id`` with the cursor at ``sent_seq``, unless
        it is bound already; the binding that holds."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO rooms (room, session_id, sent_seq) VALUES (?, ?, ?)",
                (room, session_id, sent_seq),
            )
            row = self._db.execute(
                "SELECT session_id, sent_seq FROM rooms WHERE room = ?", (room,)
            ).fetchone()
        return str(row[0]), int(row[1])

    def rooms(self) -> dict[str, tuple[str, int]]:
        """Every bound room with its session and cursor."""
        with self._lock:
            rows = self._db.execute("SELECT room, session_id, sent_seq FROM rooms").fetchall()
        return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}

    def advance(self, room: str, seq: int) -> None:
        """Move ``room``'s cursor to ``seq`` (never back)."""
        with self._lock:
            self._db.execute(
                "UPDATE rooms SET sent_seq = MAX(sent_seq, ?) WHERE room = ?", (seq, room)
            )

    def token(self, name: str) -> str | None:
        """A saved token (the platform's sync position), or None."""
        with self._lock:
            row = self._db.execute("SELECT value FROM tokens WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def save_token(self, name: str, value: str) -> None:
        """Save the token ``name``."""
        with self._lock:
            self._db.execute(
                "INSERT INTO tokens (name, value) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()
