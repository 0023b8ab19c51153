"""The beat files ``chaz probe worker --live`` reads: which count, and when one is live."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from chaz.plumbing.heartbeat import LIVE_MAX_AGE_SECONDS, Beat, beats_dir, live_problem, local_beats


def _write(home: Path, name: str, node: str, pid: int, state: str = "ready") -> Path:
    directory = beats_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps({"node": node, "pid": pid, "state": state}))
    return path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_files_of_running_processes_count(tmp_path: Path) -> None:
    assert local_beats(tmp_path) == []  # no directory at all
    _write(tmp_path, "a.json", "chaz-1@host", os.getpid())
    _write(tmp_path, "dead.json", "chaz-2@host", _dead_pid())
    (beats_dir(tmp_path) / "junk.json").write_text("{not json")
    (beats_dir(tmp_path) / "partial.json").write_text(json.dumps({"node": "x"}))
    _write(tmp_path, "other.txt", "chaz-3@host", os.getpid())  # not a beat file's name
    [beat] = local_beats(tmp_path)
    assert (beat.node, beat.pid, beat.state) == ("chaz-1@host", os.getpid(), "ready")
    assert [b.node for b in local_beats(tmp_path, "chaz-1@host")] == ["chaz-1@host"]
    assert local_beats(tmp_path, "chaz-9@host") == []


def test_an_old_beat_is_not_live_unless_the_worker_is_stopping(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.json", "chaz-1@host", os.getpid())
    [fresh] = local_beats(tmp_path)
    assert live_problem(fresh) is None
    old = time.time() - LIVE_MAX_AGE_SECONDS - 60
    os.utime(path, (old, old))
    [stale] = local_beats(tmp_path)
    problem = live_problem(stale)
    assert problem is not None and "last beat" in problem
    assert live_problem(stale, max_age=3600) is None
    stopping = Beat(stale.node, stale.pid, "stopping", stale.age)
    assert live_problem(stopping) is None  # warm shutdown: the grace period bounds it
