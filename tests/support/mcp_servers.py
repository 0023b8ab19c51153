"""Real MCP servers nobody here wrote, for tests/acceptance/test_mcp.py (docs/tools.md).

- ``mcp-server-time`` (the package index, a dev extra of chaz): a stdio server,
  run as ``python -m mcp_server_time``.
- The reference "everything" server (``@modelcontextprotocol/server-everything``
  from the npm registry), run in streamable HTTP mode on 127.0.0.1 and a free
  port (``node dist/index.js streamableHttp``, its port from ``PORT``). It is
  installed once under ``$CHAZ_TEST_CACHE/mcp-everything`` (default
  ``~/.cache/chaz-test``) and kept; ``.ci/run`` installs it before the tests
  (``python -m tests.support.mcp_servers``), so CI never skips.
"""

from __future__ import annotations

import fcntl
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import IN_CI, free_port
from tests.support.synapse import cache_dir

#: The npm package, pinned to the release the tests were written against (it
#: is calendar-versioned: a newer one may rename the tools used, echo and
#: trigger-long-running-operation). The cache's marker names it, so a new pin
#: installs afresh.
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
#: How long the server may take to listen on a loaded machine.
START_WAIT = 60.0


def everything_entry() -> Path:
    """The everything server's ``dist/index.js``, installed (once, under a lock) if missing.

    Raises ``RuntimeError`` if it cannot be installed (no npm, no registry)."""
    root = cache_dir() / "mcp-everything"
    entry = root / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist"
    entry = entry / "index.js"
    done = root / "installed"
    if done.exists() and done.read_text().strip() == EVERYTHING:
        return entry
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and done.read_text().strip() == EVERYTHING:
            return entry
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            raise RuntimeError("node and npm are needed to install the everything MCP server")
        run = subprocess.run(
            [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", EVERYTHING],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if run.returncode != 0 or not entry.exists():
            raise RuntimeError(f"npm install {EVERYTHING} failed: {run.stderr[-2000:]}")
        done.write_text(EVERYTHING + "\n")
    return entry


def everything_or_skip() -> Path:
    """:func:`everything_entry`, or skip where it cannot be installed (never in CI)."""
    import pytest

    try:
        return everything_entry()
    except RuntimeError as exc:
        if IN_CI:
            raise
        pytest.skip(f"the everything MCP server cannot be installed here: {exc}")


@contextmanager
def everything_server(log: Path, port: int | None = None) -> Iterator[str]:
    """The everything server over streamable HTTP (on ``port``, else a free one);
    yields its endpoint URL."""
    entry = everything_or_skip()
    port = port or free_port()
    node = shutil.which("node")
    assert node is not None
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [node, str(entry), "streamableHttp"],
            env={"PATH": "/usr/bin:/bin", "PORT": str(port), "HOME": str(log.parent)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_WAIT
        while True:
            assert proc.poll() is None, f"the everything server exited:\n{log.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                late = time.monotonic() > deadline
                assert not late, f"the everything server did not listen:\n{log.read_text()}"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


if __name__ == "__main__":
    # `.ci/run` installs it before the tests, so they never skip in CI.
    started = time.monotonic()
    print(f"everything MCP server: {everything_entry()} ({time.monotonic() - started:.1f} s)")
