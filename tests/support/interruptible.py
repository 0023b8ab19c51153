"""Run a command with SIGINT at its default action: ``python interruptible.py CMD ...``.

A process started with SIGINT ignored (a CI runner's background job, ``nohup``)
passes that on to every child, and a Python child then installs no
KeyboardInterrupt handler: a test that stops ``chaz up`` or ``chaz tail`` with
SIGINT, as a person's Ctrl-C does, would wait for nothing. Tests start such
children through this file, which restores the default and execs the command
(same pid, so the test's signal reaches it).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

#: The prefix that runs a command this way (this file by path: the children's
#: working directory is often not the checkout).
PREFIX = [sys.executable, str(Path(__file__).resolve())]

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
