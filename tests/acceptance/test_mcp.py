"""Tools from real MCP servers under chaz's policies (issue 24, docs/tools.md).

Two servers nobody here wrote: ``mcp-server-time`` over stdio (from the
package index) and the reference "everything" server over streamable HTTP
on 127.0.0.1 (from the npm registry, tests/support/mcp_servers.py). One
worker at a time serves the module's tests, in file order: the approval
test SIGKILLs it and starts the next, the warm-stop test stops it and
starts the next, the last test crashes its stdio server and SIGKILLs it.
Waits are bounds on outcomes the test caused; the slow call and the
stalled server are ours to end.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import sys
import termios
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.settings import McpServer, Settings
from tests.support.mcp_servers import everything_server
from tests.support.stack import Stack

pytestmark = pytest.mark.mcp

#: How long a worker may take to start a turn (and a server) on a loaded machine.
WAIT = 90
#: How long a cancelled job may take to end: far less than the slow call's length.
PROMPT = 10
#: The slow call: what it would take without the cancel.
SLOW_SECONDS = 120
#: In the environment of every stdio server the module's worker starts.
MARK = f"chaz-test-{uuid.uuid4().hex[:10]}"

CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with everything_server(tmp_path_factory.mktemp("everything") / "server.log") as url:
        yield url


def _settings(stack: Stack, everything: str) -> Settings:
    """The stack's settings with four MCP servers configured."""
    servers = {
        "time": McpServer(
            command=sys.executable,
            args=["-m", "mcp_server_time"],
            env={"CHAZ_TEST_MCP": MARK},
            init_timeout_seconds=WAIT,
        ),
        "everything": McpServer(url=everything, init_timeout_seconds=WAIT),
        # The same server with a small result limit.
        "tiny": McpServer(url=everything, max_result_bytes=64),
        # A process that never answers initialize.
        "mute": McpServer(command="sleep", args=["600"], init_timeout_seconds=2),
    }
    return stack.settings.model_copy(update={"mcp_servers": servers})


@pytest.fixture(scope="module")
def fleet(module_stack: Stack, everything: str) -> Stack:
    """One worker of two turn threads with the MCP servers configured."""
    module_stack.workers(1, concurrency=2, settings=_settings(module_stack, everything))
    return module_stack


def _results(client: chaz.Client, session_id: str) -> list[chaz.Entry]:
    return [e for e in client.sessions.entries(session_id) if e.type is EntryType.TOOL_RESULT]


def _code(entry: chaz.Entry) -> str:
    assert entry.metadata["is_error"] is True, entry.content
    code: str = json.loads(entry.content)["error"]["code"]
    return code


def _reply(stack: Stack, session_id: str, after: int) -> str:
    try:
        return stack.client.sessions.wait_for_reply(session_id, after=after, timeout=WAIT).content
    except chaz.ChazError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc


def test_convert_time_over_stdio_and_echo_over_http_are_results_and_in_the_reply(
    fleet: Stack,
) -> None:
    client = fleet.client
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-user",
            tools=["time.convert_time", "everything.echo"],
            script=[
                {
                    "steps": [
                        {"call": "time.convert_time", "args": CONVERT},
                        {"call": "everything.echo", "args": {"message": "{last_result}"}},
                        {"say": "{last_result}"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("mcp-user")
    posted = client.sessions.post(s.id, "what time is it in Tokyo?", sender="user:alice")
    reply = _reply(fleet, s.id, posted.seq)
    converted, echoed = _results(client, s.id)
    assert converted.metadata["tool"] == "time.convert_time"
    assert converted.metadata["is_error"] is False
    assert json.loads(converted.content)["target"]["timezone"] == "Asia/Tokyo"
    assert echoed.metadata["tool"] == "everything.echo"
    assert echoed.content.startswith("Echo: ") and "Asia/Tokyo" in echoed.content
    assert reply == echoed.content and "+09:00" in reply


def test_bad_input_gets_stable_codes_and_the_turn_goes_on(fleet: Stack) -> None:
    client = fleet.client
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-bad",
            tools=["time.convert_time", "tiny.echo", "mute.anything", "time.no_such_tool"],
            script=[
                {
                    "steps": [
                        # The server's schema refuses it: the call does not run.
                        {"call": "time.convert_time", "args": {"time": 12}},
                        # The server refuses it: an error result.
                        {"call": "time.convert_time", "args": {**CONVERT, "time": "nope"}},
                        {"call": "tiny.echo", "args": {"message": "x" * 200}},
                        {"call": "mute.anything", "args": {}},
                        {"call": "time.no_such_tool", "args": {}},
                        {"say": "still here"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("mcp-bad")
    posted = client.sessions.post(s.id, "go", sender="user:alice")
    assert _reply(fleet, s.id, posted.seq) == "still here"
    codes = [_code(e) for e in _results(client, s.id)]
    assert codes == [
        "tool.invalid_arguments",
        "mcp.tool_error",
        "mcp.result_too_large",
        "mcp.init_timeout",
        "tool.unknown",
    ]


def test_an_approval_policy_waits_and_runs_once_and_a_child_gains_no_mcp_tool(
    fleet: Stack, everything: str
) -> None:
    client = fleet.client
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-careful",
            tools=["everything.echo"],
            tool_policies={
                "everything.echo": {"approval": "always", "timeout": 600, "show": ["message"]}
            },
            script=[
                {
                    "steps": [
                        {"call": "everything.echo", "args": {"message": "{input}"}},
                        {"say": "{last_result}"},
                    ]
                },
            ],
        )
    )
    # The child's spec names the tool; its caller (below) lacks it.
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-kid",
            tools=["everything.echo"],
            script=[
                {
                    "steps": [
                        {"call": "everything.echo", "args": {"message": "from the kid"}},
                        {"say": "{last_result}"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("mcp-careful")
    posted = client.sessions.post(s.id, "approve me", sender="user:alice")
    job_id = posted.job_id or ""

    def waiting() -> chaz.Approval | None:
        if client.jobs.get(job_id).status is not chaz.JobStatus.WAITING_APPROVAL:
            return None
        return next((a for a in client.approvals.pending() if a.job_id == job_id), None)

    request = fleet.wait_for(waiting, WAIT, "the echo call to wait for approval")
    assert request is not None
    assert request.tool == "everything.echo" and request.arguments == {"message": "approve me"}
    assert not _results(client, s.id)
    # Waiting holds nothing: the worker dies, another resumes the turn.
    worker = fleet._workers[-1]
    worker.kill(signal.SIGKILL)
    assert worker.proc is not None
    worker.proc.wait(timeout=30)
    assert client.jobs.get(job_id).status is chaz.JobStatus.WAITING_APPROVAL
    fleet.workers(1, concurrency=2, settings=_settings(fleet, everything))
    client.approvals.decide(request.request_id, "approve", by="user:bob")
    assert _reply(fleet, s.id, posted.seq) == "Echo: approve me"
    [result] = _results(client, s.id)
    assert result.content == "Echo: approve me"

    # A caller without the tool: its child's call to it is unknown there.
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-parent",
            tools=["agent"],
            script=[
                {
                    "steps": [
                        {"call": "agent", "args": {"prompt": "echo it", "agent_id": "mcp-kid"}},
                        {"say": "kid said {last_result}"},
                    ]
                }
            ],
        )
    )
    narrow = client.sessions.create("mcp-parent")
    spawned = client.sessions.post(narrow.id, "spawn", sender="user:alice")
    reply = _reply(fleet, narrow.id, spawned.seq)
    assert "tool.unknown" in reply, reply
    assert not [
        a for a in client.approvals.pending() if a.session_id != s.id and a.tool.startswith("every")
    ]


def test_a_cancel_during_a_slow_mcp_call_ends_the_job_cancelled(fleet: Stack) -> None:
    client = fleet.client
    slow = "everything.trigger-long-running-operation"
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-slow",
            tools=[slow],
            script=[
                {
                    "steps": [
                        {"call": slow, "args": {"duration": SLOW_SECONDS, "steps": 4}},
                        {"say": "too late"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("mcp-slow")
    posted = client.sessions.post(s.id, "slow", sender="user:alice")
    job_id = posted.job_id or ""
    fleet.wait_for(
        lambda: any(e.type is EntryType.TOOL_CALL for e in client.sessions.entries(s.id)),
        WAIT,
        "the slow call to start",
    )
    assert client.jobs.cancel(job_id, reason="stop now")["status"] == "stopping"
    done = client.jobs.wait(job_id, timeout=PROMPT)
    assert done.status is chaz.JobStatus.CANCELLED, fleet.logs()
    entries = client.sessions.entries(s.id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender == "agent:mcp-slow"]


def _servers() -> list[int]:
    """Pids of the live processes that carry this module's mark: its stdio servers."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"CHAZ_TEST_MCP={MARK}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def _unread(pid: int) -> int:
    """Bytes written to the process's input pipes that it has not read (the
    server may have moved its stdin to another descriptor: servers of the
    SDK keep fd 0 and 1 away from stray prints)."""
    pending = 0
    for fd_path in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if not os.readlink(fd_path).startswith("pipe:"):
                continue
            flags = (Path(f"/proc/{pid}/fdinfo") / fd_path.name).read_text().split("flags:")[1]
            if int(flags.split()[0], 8) & 0o3:  # not opened for reading only
                continue
            fd = os.open(fd_path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
            pending += struct.unpack("i", raw)[0]
        finally:
            os.close(fd)
    return pending


def test_a_warm_stop_of_the_worker_stops_its_stdio_server(fleet: Stack, everything: str) -> None:
    client = fleet.client
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-time",
            tools=["time.convert_time"],
            script=[{"steps": [{"call": "time.convert_time", "args": CONVERT}, {"say": "ok"}]}],
        )
    )
    s = client.sessions.create("mcp-time")
    posted = client.sessions.post(s.id, "start it", sender="user:alice")
    assert _reply(fleet, s.id, posted.seq) == "ok"
    assert len(_servers()) == 1
    worker = fleet._workers[-1]
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=60) == 0
    assert not _servers()
    # Stopped by the worker's shutdown (stdin closed), not left to the
    # launcher's parent-death signal.
    assert re.search(r"MCP: stopped [1-9]\d* server", fleet.logs())
    fleet.workers(1, concurrency=2, settings=_settings(fleet, everything))


def test_a_crashed_stdio_server_is_a_tool_error_then_restarts_and_dies_with_its_worker(
    fleet: Stack,
) -> None:
    # Last in the module: it SIGKILLs the module's worker.
    client = fleet.client
    client.agents.put(
        chaz.AgentSpec(
            id="mcp-crash",
            tools=["time.convert_time"],
            script=[
                {
                    "steps": [
                        {"call": "time.convert_time", "args": CONVERT},
                        {"say": "{last_result}"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("mcp-crash")
    first = client.sessions.post(s.id, "warm up", sender="user:alice")
    assert "Asia/Tokyo" in _reply(fleet, s.id, first.seq)
    [server] = _servers()

    # Stalled, the server reads nothing: the next call's request stays in its
    # pipe, and once it is there the call is in flight.
    os.kill(server, signal.SIGSTOP)
    second = client.sessions.post(s.id, "again", sender="user:alice")
    fleet.wait_for(lambda: _unread(server) > 0, WAIT, "the call to reach the stalled server")
    os.kill(server, signal.SIGKILL)
    _reply(fleet, s.id, second.seq)
    crashed = _results(client, s.id)[-1]
    assert _code(crashed) == "mcp.server_crashed"

    # The next call starts the server again.
    third = client.sessions.post(s.id, "once more", sender="user:alice")
    assert "Asia/Tokyo" in _reply(fleet, s.id, third.seq)
    [restarted] = fleet.wait_for(_servers, WAIT, "the restarted server")
    assert restarted != server

    # The worker dies without running anything: its server goes with it.
    worker = fleet._workers[-1]
    worker.kill(signal.SIGKILL)
    assert worker.proc is not None
    worker.proc.wait(timeout=30)
    fleet.wait_for(lambda: not _servers(), 30, "no MCP server process left")
