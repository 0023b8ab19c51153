"""A worker's MCP hub against real servers (chaz/tools/mcp/hub.py, docs/tools.md#lifecycle):
a hand-back frees a turn waiting on a call, a call past its server's timeout
is ``mcp.timeout``, closing the hub stops its stdio servers, and an HTTP
server that restarted gets a new session after one ``mcp.unavailable``."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaz.errors import HandedBack, McpCallTimeout, McpUnavailable
from chaz.runtime.cancel import CancelToken
from chaz.settings import McpServer
from chaz.tools.mcp import McpHub
from tests.support.mcp_servers import everything_server

pytestmark = pytest.mark.mcp

SLOW = "trigger-long-running-operation"


@pytest.fixture
def everything(tmp_path: Path) -> Iterator[str]:
    with everything_server(tmp_path / "server.log") as url:
        yield url


def _marked(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"CHAZ_TEST_MCP={mark}".encode() in environ:
            found.append(int(entry.name))
    return found


def test_a_hand_back_frees_the_turn_waiting_on_a_slow_call(everything: str) -> None:
    hub = McpHub({"e": McpServer(url=everything)})
    try:
        hub.tools("e")  # connected: what follows waits on the call alone
        token = CancelToken()
        started = threading.Event()
        outcome: list[BaseException] = []

        def call() -> None:
            started.set()
            try:
                hub.call("e", SLOW, {"duration": 300, "steps": 3}, token)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        started.wait()
        token.hand_back()
        thread.join(30)
        assert not thread.is_alive()
        assert isinstance(outcome[0], HandedBack)
        # The connection still serves the next call.
        assert hub.call("e", "echo", {"message": "still"}) == ("Echo: still", False)
    finally:
        hub.close()


def test_a_call_longer_than_its_servers_timeout_is_mcp_timeout(everything: str) -> None:
    hub = McpHub({"e": McpServer(url=everything, timeout_seconds=1)})
    try:
        with pytest.raises(McpCallTimeout) as caught:
            hub.call("e", SLOW, {"duration": 300, "steps": 3})
        assert caught.value.code == "mcp.timeout"
    finally:
        hub.close()


def test_closing_the_hub_stops_its_stdio_servers() -> None:
    mark = uuid.uuid4().hex
    hub = McpHub(
        {
            "time": McpServer(
                command=sys.executable,
                args=["-m", "mcp_server_time"],
                env={"CHAZ_TEST_MCP": mark},
                init_timeout_seconds=60,
            )
        }
    )
    assert "convert_time" in hub.tools("time")
    assert len(_marked(mark)) == 1
    hub.close()
    assert _marked(mark) == []


def test_a_restarted_http_server_gets_a_new_session(tmp_path: Path) -> None:
    with everything_server(tmp_path / "one.log") as url:
        hub = McpHub({"e": McpServer(url=url)})
        assert hub.call("e", "echo", {"message": "one"}) == ("Echo: one", False)
    try:
        with everything_server(tmp_path / "two.log", port=int(url.split(":")[2].split("/")[0])):
            # The old session is unknown to the new process: refused once
            # (unless the SDK saw its stream end first and reconnected) ...
            try:
                hub.call("e", "echo", {"message": "two"})
            except McpUnavailable as exc:
                assert "new session" in exc.message
            # ... and then served on a new one, for good.
            for word in ("three", "four"):
                assert hub.call("e", "echo", {"message": word}) == (f"Echo: {word}", False)
    finally:
        hub.close()
