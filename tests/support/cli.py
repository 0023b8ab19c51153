"""Running ``chaz`` commands from tests: in this process, or as a child process.

A ``chaz`` child process pays the interpreter's start and the client's
imports (about half a second, several under load) before it does anything,
and the CLI walk-throughs run hundreds of commands. :func:`run_in_process`
runs the same code, :func:`chaz.cli.main.run`, in the test's own process,
with the command's environment, working directory, stdin and streams, so
a walk-through pays for what the command does, not for its start.

What only a child process shows stays with one: what a command imports
(tests/acceptance/test_cli_startup.py), the console script's exit and
signal handling (``main()``), commands that run until a signal (``chaz up``,
``chaz tail``), and a share of the hostile-input and walk-through commands
(:data:`CHILD` selects a child process for every call of a run).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

#: ``chaz`` as a child process.
CLI = [sys.executable, "-m", "chaz.cli"]

#: ``CHAZ_TEST_CLI=process`` runs every in-process command as a child process
#: instead (docs/testing.md#the-cli-in-process): the walk-throughs then check
#: the console script end to end, as they did before.
CHILD = os.environ.get("CHAZ_TEST_CLI") == "process"

#: One command at a time per process: the environment, the working directory
#: and the standard streams are the process's own.
_ONE_AT_A_TIME = threading.Lock()


def run_child(
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``chaz ARGS`` as a child process (in the home's parent: no stray .env is read)."""
    return subprocess.run(
        [*CLI, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(env.get("CHAZ_HOME", ".")).parent,
    )


def run_in_process(
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``chaz ARGS`` in this process, as the child of :func:`run_child` would.

    The command sees exactly ``env`` as its environment and the home's parent
    as its working directory; its stdin is ``stdin`` (empty if None), and
    what it writes to stdout and stderr is returned. Everything is restored
    afterwards, the umask the CLI narrows included. ``timeout`` is the child
    process's; here pytest-timeout bounds a command that hangs.
    """
    if CHILD:
        return run_child(*args, env=env, stdin=stdin, timeout=timeout)
    from chaz.cli.main import run

    out, err = _pipe(), _pipe()
    with _ONE_AT_A_TIME, _as_child(env, stdin or ""), _streams(out, err):
        try:
            code = run(list(args))
        except SystemExit as exc:  # a command that exits the way argparse does
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess([*CLI, *args], code, _read(out), _read(err))


def _pipe(data: bytes = b"") -> io.TextIOWrapper:
    """A text stream over bytes, as a pipe's is: a command may use its ``buffer``."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="strict", newline=None)


def _read(stream: io.TextIOWrapper) -> str:
    """What was written to ``stream``, decoded as :func:`subprocess.run` would."""
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", errors="replace").replace("\r\n", "\n")


@contextlib.contextmanager
def _as_child(env: dict[str, str], stdin: str) -> Iterator[None]:
    """This process's environment, directory, stdin, umask and SIGINT as a child's."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_stdin = sys.stdin
    saved_umask = os.umask(0o022)
    os.umask(saved_umask)
    saved_sigint = signal.getsignal(signal.SIGINT)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(Path(env.get("CHAZ_HOME", ".")).parent)
    sys.stdin = _pipe(stdin.encode("utf-8", errors="surrogateescape"))
    try:
        yield
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        os.umask(saved_umask)
        signal.signal(signal.SIGINT, saved_sigint)


@contextlib.contextmanager
def _streams(out: io.TextIOWrapper, err: io.TextIOWrapper) -> Iterator[None]:
    """stdout and stderr into ``out`` and ``err``."""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield
