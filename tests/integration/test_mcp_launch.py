"""The stdio MCP server launcher (chaz/tools/mcp/launch.py): a server started
through it dies with the process that started it, however that one dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: Starts `sleep 600` under the launcher, prints its pid, then waits to be killed.
PARENT = """
import os, subprocess, sys, time
from chaz.tools.mcp.launch import guarded
command, args = guarded("sleep", ["600"], os.getpid())
child = subprocess.Popen([command, *args], start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_server_under_the_launcher_dies_with_its_sigkilled_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    # The launcher has exec'd into the server once its command line is sleep's.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{child}/cmdline", "rb") as f:
            if f.read().split(b"\0")[0] == b"sleep":
                break
        time.sleep(0.02)
    assert _alive(child)
    # In a session of its own, as the SDK starts it: no group signal reaches it.
    assert os.getpgid(child) != os.getpgid(parent.pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(child)
