"""Issue 22 item 2: the producer API over HTTP. A process given only
``CHAZ_URL`` and a key for project A posts, waits, watches partials, cancels
and stops through ``chaz.Client(url=..., api_key=...)``, with the results of
an in-process client on the same script, and meets another project's ids
exactly as missing ones (docs/http.md#producer).

The module's fleet and ``chaz serve`` are test_http's fixture (one server).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import chaz
from chaz.errors import Forbidden, SessionNotFound, Unauthenticated, ValidationError
from chaz.ids import new_id
from tests.acceptance.test_cli import cli_env
from tests.acceptance.test_http import WAIT, Served, project
from tests.acceptance.test_http import served as served
from tests.support import producer_script
from tests.support.cli import CLI
from tests.support.serve import serving

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that records whether anything connected to it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def connected(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def other_project(served: Served) -> dict[str, str]:
    """A session and a job of project B, and ids of nothing."""
    with chaz.Client(served.stack.settings, migrate=False, api_key=served.key(project())) as b:
        session = b.sessions.create(producer_script.SAYER)
        entry = b.sessions.post(session.id, "mine")
        b.sessions.wait_for_reply(session.id, after=entry.seq, timeout=WAIT)
    return {
        "session": session.id,
        "job": entry.job_id or "",
        "missing_session": new_id(),
        "missing_job": new_id(),
    }


def test_a_key_holder_with_only_the_url_gets_what_an_in_process_client_gets(
    served: Served, listener: socket.socket, tmp_path: Path
) -> None:
    other = other_project(served)
    key_a = served.key(project())
    with chaz.Client(served.stack.settings, migrate=False, api_key=key_a) as local:
        expected = producer_script.run(local, served.stack.open_gate, other)

    # Only the URL and a key; the database and Redis settings point at a port
    # that records a connection, and CHAZ_HOME at an empty directory.
    port = listener.getsockname()[1]
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    env.update(
        CHAZ_URL=served.url,
        CHAZ_API_KEY=served.key(project()),
        CHAZ_DATABASE_URL=f"postgresql+psycopg://nobody:nothing@127.0.0.1:{port}/none",
        CHAZ_REDIS_URL=f"redis://127.0.0.1:{port}/0",
        CHAZ_HOME=str(home),
        PYTHONPATH=str(ROOT),
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.producer_script", json.dumps(other)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    result = None
    try:
        for line in child.stdout:
            if line.startswith("GATE "):
                served.stack.open_gate(line.split(" ", 1)[1].strip())
                child.stdin.write("opened\n")
                child.stdin.flush()
            elif line.startswith("RESULT "):
                result = json.loads(line[len("RESULT ") :])
        assert child.wait(timeout=WAIT) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert result is not None
    assert result.pop("sqlalchemy_loaded") is False
    assert not connected(listener), "the remote client connected to the database or Redis"
    assert list(home.iterdir()) == []

    assert result == expected
    # And what the script saw is what chaz does (not two equal mistakes).
    assert result["reply"][1:] == ["message", "agent:http-sayer", "hello from chaz"]
    assert result["streamed"][1:] == [True, True]
    assert result["cancelled"][1] == "cancelled"
    assert result["stopped"][2:] == ["cancelled", "cancelled"]
    assert result["denied"]["other"] == result["denied"]["missing"]
    assert ["SessionNotFound", "session.not_found"] in result["denied"]["missing"]
    assert ["JobNotFound", "job.not_found"] in result["denied"]["missing"]
    assert result["bad"][-1] == ["Forbidden", "auth.forbidden"]
    assert result["delivery"][:2] == [True, "succeeded"]  # admitted at once (or already done)
    assert result["schedule"][:2] == ["interval", "tock"]
    assert "job.succeeded" in result["events"]


def test_the_remote_client_refuses_what_it_cannot_be(served: Served) -> None:
    with pytest.raises(Unauthenticated):
        chaz.Client(url=served.url, api_key="chz_not-a-key")
    key = served.key(project())
    with pytest.raises(ValidationError) as caught:
        chaz.Client(url=served.url, api_key=key, project="elsewhere")
    assert caught.value.field == "project"
    with pytest.raises(ValidationError) as caught:
        chaz.Client(url="ftp://example.invalid", api_key=key)
    assert caught.value.field == "url"
    with chaz.Client(url=served.url, api_key=key) as client:
        assert client.principal.project != "default" and not client.principal.operator
        with pytest.raises(chaz.errors.Unsupported) as refused:
            client.keys.list()
        assert refused.value.field == "keys.list"
        with pytest.raises(SessionNotFound):
            client.sessions.get("no-such-name")
        with pytest.raises(Forbidden):
            client.agents.put_many([{"id": "x"}])
    # Raw requests: an unknown field is refused naming it, not dropped; a body
    # that is not an object, a query of the wrong type, and no key at all are
    # refused with their stable codes; nothing is written.
    api = f"{served.url}/chaz/v1"
    headers = {"x-api-key": key}
    refusals = [
        httpx.post(
            f"{api}/sessions", json={"agent_id": "http-sayer", "color": "red"}, headers=headers
        ),
        httpx.post(f"{api}/sessions", json=["http-sayer"], headers=headers),
        httpx.get(f"{api}/sessions", params={"limit": "many"}, headers=headers),
        httpx.get(f"{api}/sessions", params={"colour": "red"}, headers=headers),
    ]
    # No key: refused, but on the embedded default's loopback listener, where
    # it acts as the operator (docs/http.md#auth).
    anonymous = served.stack.kind == "embedded"
    if not anonymous:
        refusals.append(httpx.post(f"{api}/sessions", json={"agent_id": "http-sayer"}))
    assert [
        (r.status_code, r.json()["code"], r.json().get("details", {}).get("field"))
        for r in refusals
    ] == [
        (422, "request.unsupported", "color"),
        (422, "request.invalid", "body"),
        (422, "request.invalid", "limit"),
        (422, "request.unsupported", "colour"),
        *([] if anonymous else [(401, "auth.unauthenticated", None)]),
    ]
    with chaz.Client(url=served.url, api_key=key) as client:
        assert client.sessions.list() == []
        big = "x" * (served.stack.settings.max_content_bytes + 1)
        s = client.sessions.create("http-sayer")
        with pytest.raises(chaz.errors.RequestTooLarge):
            client.sessions.post(s.id, big)
        assert client.sessions.entries(s.id) == []
    # A server that is not there is backend.unavailable, retryable.
    with pytest.raises(chaz.errors.BackendUnavailable):
        chaz.Client(url="http://127.0.0.1:9", api_key=key)
    assert os.environ.get("CHAZ_URL") is None


def test_the_cli_with_only_chaz_url_and_a_key(served: Served, tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    env.update(CHAZ_URL=served.url, CHAZ_API_KEY=served.key(project()), PYTHONPATH=str(ROOT))
    home = tmp_path / "home"
    env["CHAZ_HOME"] = str(home)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [*CLI, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=WAIT
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    sid = cli("sessions", "new", producer_script.SAYER).strip()
    assert "hello from chaz" in cli("send", sid, "hi", "--wait")
    assert sid in cli("sessions", "ls")
    assert not home.exists()  # nothing embedded was started or written


CAREFUL = chaz.AgentSpec(
    id="http-careful",
    tools=["echo"],
    script=[{"steps": [{"call": "echo", "args": {"text": "{input}"}}, {"say": "after it"}]}],
    tool_policies={"echo": {"approval": "always", "show": ["text"]}},
)


def test_rooms_search_pages_events_compaction_and_approvals_over_http(served: Served) -> None:
    """The rest of the producer API, over HTTP and in process with one key:
    the same answers, and another project's session missing to both."""
    served.stack.client.agents.put(CAREFUL)
    other = other_project(served)
    key = served.key(project())
    word = f"zebrafinch{new_id()[:8]}"
    settings = served.stack.settings
    with (
        chaz.Client(url=served.url, api_key=key) as remote,
        chaz.Client(settings, migrate=False, api_key=key) as local,
    ):
        s = remote.sessions.create("http-sayer")
        posted = remote.sessions.post(s.id, f"a {word} sang")
        remote.sessions.wait_for_reply(s.id, after=posted.seq, timeout=WAIT)

        found = remote.sessions.search(word)
        assert [r.session.session_id for r in found] == [s.id]
        assert found == local.sessions.search(word)
        page = remote.sessions.page(agent_id="http-sayer", limit=5)
        assert [c.session_id for c in page.sessions] == [s.id] and page.next_cursor is None
        assert page == local.sessions.page(agent_id="http-sayer", limit=5)

        room = remote.sessions.add_member(s.id, "http-holder")
        assert "http-holder" in (room.members or [])
        assert remote.sessions.rooms() == local.sessions.rooms() == [room]
        left = remote.sessions.remove_member(s.id, "http-holder")
        assert "http-holder" not in (left.members or [])

        followed = list(remote.events.follow(s.id, after=0, timeout=1))
        assert followed == local.events.list(s.id)
        assert {"room.member_added", "room.member_removed"} <= {e.kind for e in followed}

        with pytest.raises(ValidationError) as caught:
            remote.sessions.attachment(s.id, posted.seq)
        assert caught.value.field == "seq"

        summary = remote.sessions.compact(s.id, timeout=WAIT)
        assert summary is not None and summary.type is chaz.EntryType.SUMMARY
        assert remote.sessions.compact(s.id, timeout=WAIT) is None

        careful = remote.sessions.create("http-careful")
        launched = remote.sessions.post(careful.id, "launch")
        [asked] = served.stack.wait_for(
            lambda: remote.approvals.pending(careful.id), WAIT, "the approval request"
        )
        assert asked.arguments == {"text": "launch"}
        first = remote.approvals.decide(asked.request_id, "approve")
        late = remote.approvals.decide(asked.request_id, "deny")
        assert (first.effective, late.effective) == (True, False)
        assert first.approval.decided_by == late.approval.decided_by == "user:http"
        reply = remote.sessions.wait_for_reply(careful.id, after=launched.seq, timeout=WAIT)
        assert reply.content == "after it"

        theirs = other["session"]
        for call in (
            lambda: remote.sessions.add_member(theirs, "http-holder"),
            lambda: remote.sessions.remove_member(theirs, "http-holder"),
            lambda: remote.sessions.compact(theirs),
            lambda: remote.sessions.attachment(theirs, 1),
            lambda: remote.events.follow(theirs, timeout=1),
        ):
            with pytest.raises(SessionNotFound):
                call()
        assert remote.sessions.search("mine") == []
        with pytest.raises(chaz.errors.ApprovalNotFound):
            remote.approvals.decide(new_id(), "approve")


def test_a_client_that_leaves_a_wait_frees_its_server_thread(served: Served) -> None:
    """Four server threads, four waits abandoned by their clients (a reply, a
    job's end, a run's join and a run's stream, all of a turn held at a
    gate): the server still answers, because each wait ends once its client
    has gone; without that, each would hold its thread for up to an hour."""
    key = served.key(project())
    with (
        serving(served.stack, CHAZ_HTTP_THREADS="4") as url,
        chaz.Client(url=url, api_key=key) as client,
    ):
        s = client.sessions.create("http-holder")
        posted = client.sessions.post(s.id, "hold on")
        api, headers = f"{url}/chaz/v1", {"x-api-key": key}
        run = f"{url}/threads/{s.id}/runs/{posted.job_id}"
        waits = [
            ("POST", f"{api}/sessions/{s.id}/reply", {"after": posted.seq, "timeout": 3600}),
            ("POST", f"{api}/jobs/{posted.job_id}/wait", {"timeout": 3600}),
            ("GET", f"{run}/join", None),
            ("GET", f"{run}/stream", None),
        ]

        def abandon(method: str, route: str, body: dict[str, object] | None) -> None:
            # The client gives up reading after a moment and closes its connection.
            with pytest.raises(httpx.ReadTimeout):
                httpx.request(
                    method, route, json=body, headers=headers, timeout=httpx.Timeout(30, read=2)
                )

        with ThreadPoolExecutor(len(waits)) as pool:
            list(pool.map(lambda w: abandon(*w), waits))
        # Needs a thread (its key is checked in one); answers once the waits have ended.
        answer = httpx.get(f"{api}/whoami", headers=headers, timeout=WAIT)
        assert answer.status_code == 200 and answer.json()["project"] == client.principal.project
        served.stack.open_gate(f"hold-{s.id}")
        reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=WAIT)
        assert reply.content == "done: hold on"
