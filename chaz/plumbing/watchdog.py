"""``python -m chaz.plumbing.watchdog``: stop what a process started if it dies without doing so.

The parent (``chaz up``, ``chaz.embedded()``) writes to this process's stdin
one line per thing it starts: ``group PGID`` for a worker's process group (the
worker and its beat child), ``pid PID`` for a daemonized server (the embedded
Redis), and ``forget PGID`` for a group it stopped itself while it goes on
(so that a later group that reuses the number is not touched). A clean stop
ends with ``done``: the parent stopped them itself. End
of file without ``done`` means the parent died (even by SIGKILL, which no
handler sees: the kernel closes its end of the pipe); then the watchdog stops
everything it was told about, workers first, and exits.

Only the standard library is imported: the watchdog starts fast and does not
depend on the stack it cleans up after.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Callable

#: How long a warm stop may take before SIGKILL.
GRACE_SECONDS = 10.0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return False


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # Zombies still count as members until reaped; PID 1 reaps them.
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return False
    return True


def _stop(send: Callable[[int], None], gone: Callable[[], bool]) -> None:
    """SIGTERM, a grace period, then SIGKILL."""
    try:
        send(signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        send(signal.SIGKILL)


def stop_all(groups: list[int], pids: list[int]) -> None:
    """Stop the process groups, then the single processes (a server outlives its clients)."""
    for pgid in groups:
        _stop(functools.partial(os.killpg, pgid), functools.partial(_group_gone, pgid))
    for pid in pids:
        _stop(functools.partial(os.kill, pid), functools.partial(_gone, pid))


def main() -> int:
    """Read the parent's lines until ``done`` or end of file."""
    # The parent's Ctrl-C is the parent's business: it stops things itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: list[int] = []
    pids: list[int] = []
    for line in sys.stdin:
        kind, _, value = line.strip().partition(" ")
        if kind == "done":
            return 0
        if kind == "group" and value.isdigit():
            groups.append(int(value))
        elif kind == "forget" and value.isdigit() and int(value) in groups:
            groups.remove(int(value))
        elif kind == "pid" and value.isdigit():
            pids.append(int(value))
    stop_all(groups, pids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
