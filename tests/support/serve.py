"""``chaz serve`` as a child process in front of a test's stack, for the
tests that drive a producer through ``chaz.Client(url=...)``."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.acceptance.test_cli import INTERRUPTIBLE_CLI, cli_env
from tests.conftest import free_port
from tests.support.stack import Stack

#: How long the server may take to start or stop on a loaded machine.
WAIT = 60


@contextmanager
def serving(stack: Stack, **env: str) -> Iterator[str]:
    """The URL of a ``chaz serve`` over ``stack``'s settings (and ``env``'s
    variables besides), stopped on exit."""
    port = free_port()
    # A server stack's home exists only once something wrote there.
    stack.settings.home.mkdir(parents=True, exist_ok=True)
    log = (stack.settings.home / f"serve-{port}.log").open("w")
    child = subprocess.Popen(
        [*INTERRUPTIBLE_CLI, "serve", "--port", str(port), "--loglevel", "warning"],
        env={**cli_env(settings=stack.settings), **env},
        cwd=stack.settings.home.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        stack.wait_for(lambda: _answers(url, child), WAIT, "chaz serve to answer /ok")
        yield url
    finally:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


def _answers(url: str, child: subprocess.Popen[bytes]) -> bool:
    assert child.poll() is None, "the server's process exited"
    try:
        return bool(httpx.get(f"{url}/ok", timeout=5).json() == {"ok": True})
    except httpx.HTTPError:
        return False
