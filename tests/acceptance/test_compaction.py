"""Compaction (issue 12 item 8, a Summary as a context start boundary, docs/contracts.md#context).

A Summary written by the session's own model (the scripted one's digest
here) is where every later turn's context starts; compaction runs under the
session's lane, so a turn queued meanwhile runs after it, and the automatic
trigger fires past ``Limits.max_context_chars`` only. docs/sessions.md#compaction.
"""

from __future__ import annotations

import signal
import threading

import pytest

import chaz
from chaz.domain.entries import EntryType, KeyScope, NewEntry
from chaz.errors import ModelError, SessionArchived, SessionNotFound, ValidationError
from tests.acceptance.test_cli import chaz_cli, cli_env, ok
from tests.support.stack import Stack

#: Replies "saw: CONTEXT" to a message starting with "show", "ok" to anything else.
SHOW = {"match": "^show", "steps": [{"say": "saw: {context}"}]}
OK = {"steps": [{"say": "ok"}]}


def reader(agent_id: str, *rules: dict[str, object], **limits: int) -> chaz.AgentSpec:
    return chaz.AgentSpec(id=agent_id, script=[*rules, SHOW, OK], limits=chaz.Limits(**limits))


def held(name: str) -> dict[str, object]:
    """A rule that holds the session's compaction at gate ``name`` (docs/sessions.md)."""
    return {"match": "^Summarize", "steps": [{"wait": name}, {"say": "{input}"}]}


def history(n: int) -> list[NewEntry]:
    """``n`` entries: a person's Message, the agent's ToolCall, the agent's Message, ..."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(NewEntry(EntryType.MESSAGE, "user:alice", f"question {i}"))
        elif i % 3 == 1:
            out.append(NewEntry(EntryType.TOOL_CALL, "agent:reader", '{"name": "clock"}'))
        else:
            out.append(NewEntry(EntryType.MESSAGE, "agent:reader", f"answer {i}"))
    return out


def summaries(client: chaz.Client, session_id: str) -> list[chaz.Entry]:
    return [e for e in client.sessions.entries(session_id) if e.type is EntryType.SUMMARY]


def reply_to(client: chaz.Client, session_id: str, text: str) -> tuple[chaz.Entry, chaz.Entry]:
    posted = client.sessions.post(session_id, text, sender="user:alice")
    return posted, client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=60)


def test_a_compacted_session_of_20000_entries_starts_its_next_turn_at_the_summary(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put(reader("reader"))
    s = client.sessions.create("reader")
    # One transaction through the store, not 20,000 admissions.
    assert client.services.store.import_entries(s.id, history(20_000)) == 20_000

    summary = client.sessions.compact(s.id)
    assert summary is not None and summary.type is EntryType.SUMMARY
    assert summary.seq == 20_001 and summary.sender == "agent:reader"
    # 13,333 context entries (the ToolCalls are not context), the newest at seq 19,999.
    assert summary.content.startswith(
        "13333 entries compacted (13333 messages, 0 directives), seq 1 to 19999."
    )
    assert summary.metadata == {"covers": 19_999, "entries": 13_333, "auto": False}
    # Its key (the runtime's, not shown on the entry) names the range it stands for.
    keyed = client.services.store.find_idempotent(s.id, f"summary:{s.id}:19999", KeyScope.RUNTIME)
    assert keyed is not None and keyed.entry.id == summary.id

    stack.workers(1, concurrency=2)
    _, reply = reply_to(client, s.id, "show me")
    # The context: the Summary first, then the trigger; nothing before it.
    assert reply.content == f"saw: summary: {summary.content} | user: show me"

    # A fork reads through its source, and obeys the source's Summary too.
    fork = client.sessions.fork(s.id, reply.seq)
    _, seen = reply_to(client, fork.id, "show the fork")
    assert seen.content == (
        f"saw: summary: {summary.content} | user: show me | assistant: {reply.content}"
        " | user: show the fork"
    )


def test_compacting_twice_writes_one_summary_for_the_same_range(stack: Stack) -> None:
    client = stack.client
    client.agents.put(reader("reader"))
    s = client.sessions.create("reader")
    # Nothing to compact: a no-op that says so (None), in an empty session too.
    assert client.sessions.compact(s.id) is None
    client.services.store.import_entries(s.id, history(30))

    # Four at once: the lane takes them one by one, and the range is summarized once.
    results: list[chaz.Entry | None] = []
    errors: list[BaseException] = []

    def compact() -> None:
        try:
            results.append(client.sessions.compact(s.id))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=compact) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    written = [r for r in results if r is not None]
    assert len(written) == 1 and results.count(None) == 3
    assert [e.id for e in summaries(client, s.id)] == [written[0].id]

    # Again, by id or name: nothing since the Summary.
    client.sessions.rename(s.id, "compacted-once")
    assert client.sessions.compact("compacted-once") is None
    env = cli_env(settings=stack.settings)
    out = ok(chaz_cli("sessions", "compact", s.id, env=env))
    assert "nothing to compact since the latest Summary" in out
    assert len(summaries(client, s.id)) == 1

    # New context after it: the next compaction carries the first Summary forward.
    client.services.store.import_entries(s.id, history(3))
    out = ok(chaz_cli("sessions", "compact", s.id, env=env))
    [_, second] = summaries(client, s.id)
    assert f"Summary at seq {second.seq} (2 entries)" in out
    assert second.content.startswith("2 entries compacted (2 messages, 0 directives)")
    assert "Before them: 20 entries compacted" in second.content


def test_compaction_of_a_missing_or_archived_session_is_refused(stack: Stack) -> None:
    client = stack.client
    client.agents.put(reader("reader"))
    with pytest.raises(SessionNotFound) as missing:
        client.sessions.compact("0123456789abcdef")
    assert missing.value.code == "session.not_found"

    s = client.sessions.create("reader")
    client.services.store.import_entries(s.id, history(5))
    client.sessions.archive(s.id, reason="done")
    with pytest.raises(SessionArchived) as archived:
        client.sessions.compact(s.id)
    assert archived.value.code == "session.archived"
    assert summaries(client, s.id) == []

    with pytest.raises(ValidationError) as bad:
        client.sessions.compact(s.id, timeout=-1)
    assert bad.value.code == "request.invalid" and bad.value.details["field"] == "timeout"

    env = cli_env(settings=stack.settings)
    r = chaz_cli("sessions", "compact", s.id, env=env)
    assert r.returncode == 1 and "error [session.archived]" in r.stderr, r.stderr
    r = chaz_cli("sessions", "compact", "no-such-session", env=env)
    assert r.returncode == 2 and "error [session.not_found]" in r.stderr, r.stderr


def test_auto_compaction_fires_past_the_budget_and_not_below_it(stack: Stack) -> None:
    client = stack.client
    client.agents.put(reader("reader", max_context_chars=400))
    stack.workers(1, concurrency=2)
    s = client.sessions.create("reader")
    words = "x" * 150

    # Turn 1 reads 154 characters of context, turn 2 reads 310: below the budget.
    reply_to(client, s.id, f"one {words}")
    reply_to(client, s.id, f"two {words}")
    # Turn 3 reads 468 > 400: compacted after it, under its lane.
    _, third = reply_to(client, s.id, f"three {words}")
    stack.wait_for(lambda: summaries(client, s.id), 60, "the automatic Summary")
    asked, shown = reply_to(client, s.id, "show")
    # One Summary: none after turns 1 and 2 (it would come before it), and it
    # stands for everything up to turn 3's reply.
    [summary] = summaries(client, s.id)
    assert third.seq < summary.seq < asked.seq
    assert summary.metadata == {"covers": third.seq, "entries": 6, "auto": True}
    assert summary.content.startswith("6 entries compacted (6 messages, 0 directives)")
    # Turn 4 started from the Summary.
    assert shown.content == f"saw: summary: {summary.content} | user: show"
    # Turn 4 read the Summary and "show", about 270 characters: no compaction
    # after it (it would have come before turn 5's Ack and reply).
    _, fifth = reply_to(client, s.id, "fine")
    assert [e.id for e in summaries(client, s.id) if e.seq < fifth.seq] == [summary.id]


def test_a_turn_queued_during_compaction_runs_after_it_in_order(stack: Stack) -> None:
    client = stack.client
    client.agents.put(reader("reader", held("compact-1")))
    stack.workers(1, concurrency=2)
    s = client.sessions.create("reader")
    client.services.store.import_entries(s.id, history(9))

    done: list[chaz.Entry | None] = []
    thread = threading.Thread(target=lambda: done.append(client.sessions.compact(s.id)))
    thread.start()
    stack.wait_for(
        lambda: client.services.lanes.held({s.id: s.project}), 30, "the compaction's lane"
    )
    posted = client.sessions.post(s.id, "show", sender="user:alice")
    # The compaction holds the lane: the turn waits behind it, whatever the worker does.
    assert client.jobs.get(posted.job_id or "").status is chaz.JobStatus.QUEUED
    stack.open_gate("compact-1")
    thread.join(60)
    [summary] = done
    assert summary is not None
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=60)
    job = client.jobs.wait(posted.job_id or "", timeout=30)
    assert job.status is chaz.JobStatus.SUCCEEDED
    # The message that came in meanwhile was summarized too (never left
    # between the boundary and what it stands for); its turn ran after.
    assert summary.metadata["covers"] == posted.seq < summary.seq
    ack = next(e for e in client.sessions.entries(s.id) if e.type is EntryType.ACK)
    assert posted.seq < summary.seq < ack.seq < reply.seq
    # Its trigger is before the new boundary, so it read from the old one.
    assert reply.content.startswith("saw: user: question 0 | assistant: answer 2")


@pytest.mark.slow
def test_a_crash_in_mid_compaction_leaves_the_session_usable(stack: Stack) -> None:
    client = stack.client
    client.agents.put(reader("reader", held("compact-2"), max_context_chars=10))
    [worker] = stack.workers(1, concurrency=1)
    stack.housekeeper()  # wakes a session whose lane lease expired
    s = client.sessions.create("reader")
    first, _ = reply_to(client, s.id, "hello there, a long enough message")
    # Its turn is over; its worker is compacting, held at the gate, in the lane.
    stack.wait_for(
        lambda: client.services.lanes.held({s.id: s.project}), 30, "the compaction's lane"
    )
    worker.kill(signal.SIGKILL)
    assert worker.proc is not None
    worker.proc.wait(timeout=30)
    assert summaries(client, s.id) == []

    stack.open_gate("compact-2")
    stack.workers(1, concurrency=1)
    _, shown = reply_to(client, s.id, "show")
    # Nothing was lost: the next turn read the whole conversation.
    assert shown.content.startswith("saw: user: hello there")
    # And compacted after it, once, everything so far.
    stack.wait_for(lambda: summaries(client, s.id), 60, "the Summary")
    [summary] = summaries(client, s.id)
    assert summary.metadata["covers"] == shown.seq > first.seq
    assert summary.content.startswith("4 entries compacted (4 messages, 0 directives)")


def test_an_openai_agent_summarizes_with_its_own_model(stack: Stack) -> None:
    from tests.support.fake_openai import FakeOpenAI

    client = stack.client
    with FakeOpenAI(model="fake-model") as srv:
        client.agents.put(
            chaz.AgentSpec(
                id="gpt",
                model="openai:fake-model",
                options={"base_url": srv.base_url, "api_key": "unused", "max_retries": 0},
            )
        )
        s = client.sessions.create("gpt")
        client.services.store.import_entries(s.id, history(6))
        srv.push_text("Alice asked two questions; both were answered.")
        summary = client.sessions.compact(s.id)
        assert summary is not None
        assert summary.content == "Alice asked two questions; both were answered."
        [asked] = srv.requests
        system, user = asked["messages"]
        assert system["role"] == "system" and "summary" in system["content"]
        assert user["content"].splitlines() == [
            "Summarize this conversation so far.",
            "<<<CONVERSATION",
            "user:alice: question 0",
            "agent:reader: answer 2",
            "user:alice: question 3",
            "agent:reader: answer 5",
            "CONVERSATION>>>",
        ]
        assert asked["model"] == "fake-model" and "tools" not in asked

        # The model's failure is the caller's error; nothing is written.
        client.services.store.import_entries(s.id, history(3))
        srv.push_error(500)
        with pytest.raises(ModelError):
            client.sessions.compact(s.id)
        assert [e.id for e in summaries(client, s.id)] == [summary.id]
        # A blank answer: the deterministic digest stands in, so the Summary says something.
        srv.push_text("   ")
        second = client.sessions.compact(s.id)
        assert second is not None
        assert second.content.startswith("2 entries compacted (2 messages, 0 directives)")
        # The previous Summary was sent first, as what the new one carries forward.
        assert srv.requests[-1]["messages"][1]["content"].splitlines()[2] == (
            "previous summary: Alice asked two questions; both were answered."
        )
