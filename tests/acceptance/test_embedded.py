"""The embedded default: chaz.embedded() brings up and tears down a whole stack."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import chaz
from chaz.coord.redis import process_running


def mode(path: Path) -> int:
    """The permission bits of ``path``."""
    return stat.S_IMODE(path.stat().st_mode)


def test_embedded_runs_a_turn_and_leaves_nothing_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with chaz.embedded(workers=2, home=home) as client:
        client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
        s = client.sessions.create(agent_id="echo", name="embedded-demo")
        e = client.sessions.post(s.id, "hello", sender="user:alice")
        assert client.sessions.wait_for_reply(s.id, after=e.seq, timeout=30).content == "hello"
        assert client.sessions.get("embedded-demo").id == s.id
        redis_pid = int((home / "redis.pid").read_text())
        assert process_running(redis_pid)
        # The home and what the stack keeps in it are the owner's only,
        # whatever this process's umask (the test runner's is usually 022).
        assert mode(home) == 0o700
        for name in (
            "chaz.db",
            "chaz.db-wal",
            "chaz.db-shm",
            "redis.sock",
            "redis.pid",
            "redis.log",
            "appendonly.aof",
            "worker.log",
        ):
            assert mode(home / name) == 0o600, name
    # A bounded poll for the outcome: stopping may be slow on a loaded machine.
    deadline = time.monotonic() + 60
    while process_running(redis_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_running(redis_pid), "the embedded Redis outlived the stack"
    assert (home / "chaz.db").exists()
    # The data stays: a new embedded stack on the same home sees the session.
    with chaz.embedded(workers=1, home=home, beat=False) as client:
        entries = client.sessions.entries("embedded-demo")
        assert [x.content for x in entries if x.type is chaz.EntryType.MESSAGE] == [
            "hello",
            "hello",
        ]
