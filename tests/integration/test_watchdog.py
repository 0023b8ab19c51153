"""The watchdog (chaz.plumbing.watchdog): what a process started is stopped when
that process is SIGKILLed, except a group it said it stopped itself.

Real processes: a parent that starts two process groups (``sleep``), tells a
watchdog about both, forgets one, and is then SIGKILLed; nothing in it runs
after that, so only the watchdog can stop the guarded group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

PARENT = """
import subprocess, sys
from chaz.stack import Watchdog
dog = Watchdog()
guarded = subprocess.Popen(["sleep", "300"], start_new_session=True)
forgotten = subprocess.Popen(["sleep", "300"], start_new_session=True)
dog.guard_group(guarded.pid)
dog.guard_group(forgotten.pid)
dog.forget_group(forgotten.pid)
print(guarded.pid, forgotten.pid, flush=True)
sys.stdin.read()  # until the test kills us
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"


def test_a_killed_parents_guarded_group_is_stopped_and_a_forgotten_one_is_not() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert parent.stdout is not None
    guarded, forgotten = (int(p) for p in parent.stdout.readline().split())
    try:
        assert _alive(guarded) and _alive(forgotten)
        parent.kill()
        parent.wait(10)
        # A bound for a broken watchdog, not a pace: it acts on end of file.
        deadline = time.monotonic() + 30
        while _alive(guarded) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(guarded), "the guarded group outlived its parent"
        assert _alive(forgotten), "the watchdog stopped a group it was told to forget"
    finally:
        for pid in (guarded, forgotten):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
