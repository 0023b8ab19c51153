"""The exit codes of ``chaz`` (see the package docstring and docs/cli.md).

A module of its own so that the parser and the error handler use them without
loading the renderer (rich) before a command needs it.
"""

from __future__ import annotations

#: Success.
EXIT_OK = 0
#: A failure: an Error entry, a timeout, an unreachable backend, a conflict.
EXIT_FAILURE = 1
#: A request that can never succeed as written: invalid input, an unknown id.
EXIT_USAGE = 2
#: Interrupted by Ctrl-C (or SIGTERM).
EXIT_INTERRUPTED = 130
#: The reader of stdout went away (``chaz tail S | head``).
EXIT_BROKEN_PIPE = 141
