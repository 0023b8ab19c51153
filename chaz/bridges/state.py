"""A bridge's own state: one small SQLite file (docs/bridges.md#state).

The bridge holds only chaz's URL and keys, so it keeps what it must remember
across a restart itself: per room, the chaz session it is bound to and the
last seq it sent there (the cursor), the platform's sync token, and the
message each answer being streamed grows in (until its reply is sent). Each
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
CREATE TABLE IF NOT EXISTS streams (
    room TEXT NOT NULL,
    job_id TEXT NOT NULL,
    event_id TEXT,
    PRIMARY KEY (room, job_id)
);
CREATE TABLE IF NOT EXISTS requests (
    room TEXT NOT NULL,
    event_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    PRIMARY KEY (room, event_id)
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

    def advance(self, room: str, seq: int, *, ended: str | None = None) -> None:
        """Move ``room``'s cursor to ``seq`` (never back) and, in the same
        transaction, forget the stream of job ``ended`` there: a bridge killed
        before this commit sends the reply again as the same edit."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "UPDATE rooms SET sent_seq = MAX(sent_seq, ?) WHERE room = ?", (seq, room)
                )
                if ended is not None:
                    self._db.execute(
                        "DELETE FROM streams WHERE room = ? AND job_id = ?", (room, ended)
                    )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def stream(self, room: str, job_id: str) -> tuple[bool, str | None]:
        """Whether job ``job_id``'s answer streams into ``room``, and the id of
        its message (None while its first send is not known to have landed)."""
        with self._lock:
            row = self._db.execute(
                "SELECT event_id FROM streams WHERE room = ? AND job_id = ?", (room, job_id)
            ).fetchone()
        return (False, None) if row is None else (True, None if row[0] is None else str(row[0]))

    def begin_stream(self, room: str, job_id: str) -> None:
        """Record, before its first send, that job ``job_id`` streams into ``room``:
        a bridge killed before it learns the message's id sends its reply as
        an edit of the same message (the first send repeated finds it)."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO streams (room, job_id) VALUES (?, ?)", (room, job_id)
            )

    def stream_sent(self, room: str, job_id: str, event_id: str) -> None:
        """The message job ``job_id``'s answer grows in, in ``room``."""
        with self._lock:
            self._db.execute(
                "UPDATE streams SET event_id = ? WHERE room = ? AND job_id = ?",
                (event_id, room, job_id),
            )

    def asked(self, room: str, event_id: str, request_id: str) -> None:
        """The message ``event_id`` in ``room`` asks approval request ``request_id``
        (a reaction to it decides that request)."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO requests (room, event_id, request_id) VALUES (?, ?, ?)",
                (room, event_id, request_id),
            )

    def request_of(self, room: str, event_id: str) -> str | None:
        """The approval request the message ``event_id`` in ``room`` asks, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT request_id FROM requests WHERE room = ? AND event_id = ?",
                (room, event_id),
            ).fetchone()
        return None if row is None else str(row[0])

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
