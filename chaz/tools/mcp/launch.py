"""The launcher a stdio MCP server runs under: no orphan after its worker dies.

The SDK starts a server in a session of its own (so a signal to the
worker's process group does not reach it) and stops it when the connection
closes. A worker that is SIGKILLed closes nothing, so the server is started
through this launcher instead: a ``python -I -S -c`` that sets
``PR_SET_PDEATHSIG`` (the kernel sends SIGKILL when the thread that started
it, the worker's MCP loop thread, is gone), checks the worker did not die
before that, and then ``exec``s the server, which keeps the setting.
"""

from __future__ import annotations

import sys

#: Run by ``python -I -S -c``: argv is [-c, WORKER_PID, COMMAND, ARGS...].
LAUNCHER = """\
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
    sys.exit("chaz mcp launcher: prctl(PR_SET_PDEATHSIG) failed")
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.exit(f"chaz mcp launcher: cannot run {sys.argv[2]!r}: {exc}")
"""


def guarded(command: str, args: list[str], worker_pid: int) -> tuple[str, list[str]]:
    """The command and arguments that run ``command args`` under the launcher,
    bound to the life of ``worker_pid`` (this process)."""
    if not sys.platform.startswith("linux"):
        # prctl is Linux's; elsewhere the SDK's own stop (stdin closed, then
        # the process group killed) is what remains.
        return command, list(args)
    return sys.executable, ["-I", "-S", "-c", LAUNCHER, str(worker_pid), command, *args]
