"""Streaming answers (issue 13 item 3, docs/runtime.md#streaming), on real workers.

A scripted ``stream`` step publishes its reply as partials before the reply
is stored; ``watch(partial=True)`` yields them between the entries, the
default watch never does, a watcher that joins late gets every stored entry,
and a cancel mid-stream stops it with no reply written. Each stream is held
at gates the test opens (``wait`` before it, ``hold`` inside it), so what a
watcher hears does not depend on how fast anything runs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Generator, Iterator

import pytest

import chaz
from chaz.domain.entries import EntryType
from tests.acceptance.test_cli import INTERRUPTIBLE_CLI, LineReader, cli_env
from tests.support.fake_openai import FakeOpenAI
from tests.support.stack import Stack

pytest_plugins = ["tests.support.producers"]

#: How long a worker may take to do its part on a loaded machine.
WAIT = 60
#: What a held model answer would wait for without the cancel.
LONG = 30
ANSWER = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def fleet(module_stack: Stack) -> Stack:
    module_stack.workers(1, concurrency=4)
    return module_stack


#: Over HTTP in the default run too: the watch's partials are what a key
#: holder most needs to see arrive (docs/http.md#producer).
BOTH_CLIENTS = pytest.mark.parametrize("producer", ["in-process", "http"], indirect=True)


def _until_posted(watch: Iterator[chaz.Entry | chaz.Partial], seq: int) -> None:
    """Read the watch up to entry ``seq``: its subscription is open from then on."""
    for item in watch:
        if isinstance(item, chaz.Entry) and item.seq >= seq:
            return
    raise AssertionError(f"the watch ended before entry #{seq}")


@BOTH_CLIENTS
def test_a_watch_with_partials_sees_the_answer_grow_before_it_is_stored(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="streamer",
            script=[{"steps": [{"wait": "go-{session_id}"}, {"stream": ANSWER, "chunk": 5}]}],
        )
    )
    s = client.sessions.create("streamer")
    posted = client.sessions.post(s.id, "tell me", sender="user:alice")
    with_partials = client.sessions.watch(s.id, after=posted.seq - 1, timeout=WAIT, partial=True)
    plain = client.sessions.watch(s.id, after=posted.seq - 1, timeout=WAIT)
    _until_posted(with_partials, posted.seq)
    _until_posted(plain, posted.seq)
    fleet.open_gate(f"go-{s.id}")

    partials: list[chaz.Partial] = []
    reply = None
    for item in with_partials:
        if isinstance(item, chaz.Partial):
            assert reply is None, "a partial after the stored reply"
            partials.append(item)
        elif item.type is EntryType.MESSAGE and item.sender == "agent:streamer":
            reply = item
            break
    assert isinstance(with_partials, Generator)  # closing it unsubscribes
    with_partials.close()
    assert reply is not None and reply.content == ANSWER
    assert len(partials) >= 3
    assert "".join(p.text for p in partials) == reply.content
    assert {(p.session_id, p.job_id) for p in partials} == {(s.id, posted.job_id)}
    assert [p.seq for p in partials] == list(range(1, len(partials) + 1))

    # The default watch saw the same entries and no partial; none is stored.
    seen = []
    for entry in plain:
        assert isinstance(entry, chaz.Entry)
        seen.append(entry)
        if entry.seq == reply.seq:
            break
    assert isinstance(plain, Generator)  # closing it unsubscribes
    plain.close()
    # (The plain watch was read up to the posted entry already.)
    stored = client.sessions.entries(s.id, after=posted.seq)
    assert seen == stored
    assert [
        e.content for e in stored if e.sender == "agent:streamer" and e.type is EntryType.MESSAGE
    ] == [ANSWER]

    # A watcher that joins late gets every stored entry (and no partial).
    late = client.sessions.watch(s.id, after=0, timeout=WAIT, partial=True)
    everything = client.sessions.entries(s.id)
    got = [next(late) for _ in everything]
    assert isinstance(late, Generator)  # closing it unsubscribes
    late.close()
    assert got == everything


@BOTH_CLIENTS
def test_a_cancel_during_a_stream_stops_it_and_writes_no_reply(
    fleet: Stack, producer: chaz.Client
) -> None:
    client = producer
    fleet.client.agents.put(
        chaz.AgentSpec(
            id="halted",
            script=[
                {
                    "steps": [
                        {"wait": "go-{session_id}"},
                        # After its first chunk the stream waits for a gate
                        # nobody opens before the cancel.
                        {"stream": ANSWER, "chunk": 4, "hold": "more-{session_id}"},
                    ]
                }
            ],
        )
    )
    s = client.sessions.create("halted")
    posted = client.sessions.post(s.id, "tell me", sender="user:alice")
    job_id = posted.job_id or ""
    watch = client.sessions.watch(s.id, after=posted.seq - 1, timeout=WAIT, partial=True)
    _until_posted(watch, posted.seq)
    fleet.open_gate(f"go-{s.id}")
    first = next(item for item in watch if isinstance(item, chaz.Partial))
    assert first.text == ANSWER[:4] and first.job_id == job_id

    assert client.jobs.cancel(job_id, reason="stop")["status"] == "stopping"
    done = client.jobs.wait(job_id, timeout=WAIT)
    assert done.status is chaz.JobStatus.CANCELLED, fleet.logs()
    # The watch goes on to the Error entry with no other partial on the way.
    rest = []
    for item in watch:
        rest.append(item)
        if isinstance(item, chaz.Entry) and item.type is EntryType.ERROR:
            break
    assert isinstance(watch, Generator)  # closing it unsubscribes
    watch.close()
    assert not [i for i in rest if isinstance(i, chaz.Partial)]
    assert rest[-1].metadata["code"] == "job.cancelled"  # type: ignore[union-attr]
    entries = client.sessions.entries(s.id)
    assert not [e for e in entries if e.type is EntryType.MESSAGE and e.sender == "agent:halted"]
    # Opening the gate now changes nothing: the turn is over.
    fleet.open_gate(f"more-{s.id}")
    assert client.jobs.get(job_id).status is chaz.JobStatus.CANCELLED


def _gpt(client: chaz.Client, srv: FakeOpenAI, agent: str) -> None:
    client.agents.put(
        chaz.AgentSpec(
            id=agent,
            model="openai:fake-model",
            options={
                "base_url": srv.base_url,
                "api_key": "unused",
                "max_retries": 0,
                "timeout": LONG * 2,
                "stream": True,
            },
        )
    )


def test_an_openai_stream_reaches_the_watcher_and_a_cancel_cuts_it(fleet: Stack) -> None:
    client = fleet.client
    with FakeOpenAI(model="fake-model") as srv:
        _gpt(client, srv, "gpt-streamer")
        # The first answer streams whole; the second stops after its first
        # chunk for LONG seconds, and is cancelled there.
        go = threading.Event()
        srv.push_stream(["Hello", ", ", "streaming ", "world"], hold=go)
        srv.push_stream(["Half ", "never sent"], pause=LONG)
        s = client.sessions.create("gpt-streamer")
        posted = client.sessions.post(s.id, "hello", sender="user:alice")
        watch = client.sessions.watch(s.id, timeout=WAIT, partial=True)
        _until_posted(watch, posted.seq)
        go.set()
        text = ""
        for item in watch:
            if isinstance(item, chaz.Partial):
                text += item.text
            elif item.type is EntryType.MESSAGE and item.sender == "agent:gpt-streamer":
                assert item.content == text == "Hello, streaming world"
                break
        assert srv.requests[0]["stream"] is True

        again = client.sessions.post(s.id, "more", sender="user:alice")
        first = next(i for i in watch if isinstance(i, chaz.Partial))
        assert first.text == "Half " and first.job_id == again.job_id
        assert client.jobs.cancel(again.job_id or "", reason="stop")["status"] == "stopping"
        done = client.jobs.wait(again.job_id or "", timeout=WAIT)
        assert done.status is chaz.JobStatus.CANCELLED, fleet.logs()
        assert isinstance(watch, Generator)  # closing it unsubscribes
        watch.close()
        # The worker hung up in the server's pause: the rest was never sent.
        fleet.wait_for(lambda: srv.hangups == 1, WAIT, "the server to see the hang-up")
        replies = [
            e
            for e in client.sessions.entries(s.id, after=posted.seq)
            if e.type is EntryType.MESSAGE and e.sender == "agent:gpt-streamer"
        ]
        assert [e.content for e in replies] == ["Hello, streaming world"]


def _tail(fleet: Stack, sid: str, *flags: str) -> tuple[subprocess.Popen[str], LineReader]:
    env = cli_env(settings=fleet.settings)
    tail = subprocess.Popen(
        [*INTERRUPTIBLE_CLI, "tail", sid, "--after", "0", "--partial", *flags],
        env=env,
        cwd=fleet.settings.home.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return tail, LineReader(tail.stdout)  # type: ignore[arg-type]


def _stop(*tails: subprocess.Popen[str]) -> None:
    """Ctrl-C (SIGINT) each tail; afterwards none runs, whatever failed."""
    try:
        for tail in tails:
            tail.send_signal(signal.SIGINT)
        for tail in tails:
            assert tail.wait(WAIT) == 130
            stderr = tail.stderr.read()  # type: ignore[union-attr]
            assert "Traceback" not in stderr, stderr
    finally:
        for tail in tails:
            if tail.poll() is None:
                tail.kill()
                tail.wait()


def _is_reply(event: dict[str, object]) -> bool:
    return event.get("type") == "message" and event.get("sender") == "agent:tail-streamer"


def test_tail_shows_the_answer_growing(fleet: Stack) -> None:
    """``chaz tail --partial``: JSON lines of partials with ``--json``, one growing
    line in a pipe; the stored reply follows as usual."""
    client = fleet.client
    client.agents.put(
        chaz.AgentSpec(
            id="tail-streamer",
            script=[{"steps": [{"wait": "go-{session_id}"}, {"stream": ANSWER, "chunk": 6}]}],
        )
    )
    s = client.sessions.create("tail-streamer")
    posted = client.sessions.post(s.id, "tell me", sender="user:alice")
    as_json, json_lines = _tail(fleet, s.id, "--json")
    plain, plain_lines = _tail(fleet, s.id)
    try:
        # Each tail printed the posted entry: its subscription is open.
        json_lines.until(lambda line: json.loads(line).get("seq") == posted.seq, WAIT, "#1")
        plain_lines.until(lambda line: f"#{posted.seq} " in line, WAIT, "#1")
        fleet.open_gate(f"go-{s.id}")
        json_lines.until(lambda line: _is_reply(json.loads(line)), WAIT, "the reply")
        plain_lines.until(
            lambda line: " Message " in line and " agent:tail-streamer " in line, WAIT, "the reply"
        )
    finally:
        _stop(as_json, plain)
    events = [json.loads(line) for line in json_lines.lines]
    partials = [e for e in events if e.get("type") == "partial"]
    assert len(partials) >= 3, json_lines.lines
    assert "".join(p["text"] for p in partials) == ANSWER
    assert {p["job_id"] for p in partials} == {posted.job_id}
    assert events[-1]["type"] == "message" and events[-1]["content"] == ANSWER
    # In a pipe the answer grew on one line, ended before the reply's line.
    [grown] = [line for line in plain_lines.lines if " Partial " in line]
    assert grown.rstrip("\n").endswith(f"{posted.job_id} {ANSWER}")
    assert " Message " in plain_lines.lines[-1] and ANSWER in plain_lines.lines[-1]
