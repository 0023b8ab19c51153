"""Issue 9: the rules around collaboration, through public entries
(docs/contracts.md#archive, docs/contracts.md#follow-ups,
docs/contracts.md#result-cap, docs/contracts.md#visibility; cases C3, C4, C8 and
C9 of docs/contracts.md#acceptance, and "bad input").

Scripted agents call ``agent``, ``send_message``, ``archive_agent``,
``list_agents`` and ``read_conversation`` inside real turns on real worker
processes; the tests read what happened through the producer API. The
module shares one stack per kind (embedded, server) and its workers: each
test uses agents and sessions of its own. Scripts that address a session
by id are saved again once the session exists (a spec is read at each turn).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import chaz
from chaz.domain.deliveries import DeliveryKind, DeliveryState
from chaz.domain.entries import Entry, EntryType
from chaz.domain.results import RESULT_CAP
from chaz.domain.sessions import ArchivedBy
from tests.support.stack import Stack

WAIT = 60
#: A stage-2 rename asks the session's own model; this rule answers it harmlessly.
NAMING = {"match": "^Name this conversation", "steps": [{"say": "Some Title"}]}
NOTED = {"match": "finished|failed", "steps": [{"say": "noted"}]}


@pytest.fixture(scope="module")
def st(module_stack: Stack) -> Iterator[Stack]:
    module_stack.workers(2, concurrency=4)
    yield module_stack


def agent(
    stack: Stack,
    agent_id: str,
    rules: list[dict[str, Any]],
    tools: tuple[str, ...] = (),
    **limits: int,
) -> None:
    stack.client.agents.put(
        chaz.AgentSpec(id=agent_id, tools=list(tools), script=rules, limits=chaz.Limits(**limits))
    )


def on(key: str, *steps: dict[str, Any]) -> dict[str, Any]:
    """A rule for the input ``key`` exactly."""
    return {"match": f"^{key}$", "steps": list(steps)}


def ask(stack: Stack, session_id: str, text: str) -> Entry:
    """Post ``text`` as a person and return the reply of the turn it admits."""
    posted = stack.client.sessions.post(session_id, text, sender="user:tester")
    return stack.client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=WAIT)


def results_of(stack: Stack, session_id: str, after: int = 0) -> list[Any]:
    """The ToolResults of the one turn after ``after``, in call order (by the call
    id, ``call_STEP_INDEX``), each parsed when it is JSON, else ``{"text": ...}``."""
    found = []
    for e in stack.client.sessions.entries(session_id, after=after):
        if e.type is EntryType.TOOL_RESULT:
            try:
                value = json.loads(e.content)
            except json.JSONDecodeError:
                value = {"text": e.content}
            order = tuple(int(n) for n in e.metadata["call_id"].split("_")[1:])
            found.append((order, value))
    return [value for _, value in sorted(found, key=lambda f: f[0])]


def followups(stack: Stack, session_id: str) -> list[Entry]:
    return [
        e
        for e in stack.client.sessions.entries(session_id)
        if e.type is EntryType.DIRECTIVE and "followup" in e.metadata
    ]


def counts(stack: Stack) -> tuple[int, int, int]:
    """Sessions, jobs and deliveries in the whole store."""
    with stack.client.services.store.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            int(conn.scalar(text(f"SELECT count(*) FROM {t}")) or 0)
            for t in ("sessions", "jobs", "deliveries")
        )


def running(stack: Stack, job_id: str, what: str) -> None:
    stack.wait_for(
        lambda: stack.client.jobs.get(job_id).status is chaz.JobStatus.RUNNING, WAIT, what
    )


def spawned(stack: Stack, session_id: str) -> list[str]:
    """The sessions ``session_id`` created, oldest first (its spawn and fork deliveries)."""
    out = stack.client.deliveries.list(session_id, direction="out", limit=500)
    made = [d for d in out if d.kind in (DeliveryKind.SPAWN, DeliveryKind.FORK)]
    return [d.target_session_id for d in sorted(made, key=lambda d: d.created_at)]


def test_bad_input_from_the_model_is_a_tool_error_and_writes_nothing(st: Stack) -> None:
    agent(st, "bad-leaf", [{"steps": [{"say": "leaf"}]}])
    one = st.client.sessions.create("bad-leaf", name="bad-twin-one")
    st.client.sessions.create("bad-leaf", name="bad-twin-two")
    calls: dict[str, dict[str, Any]] = {
        "unknown_to": {"call": "agent", "args": {"prompt": "p", "to": "no-such"}},
        "ambiguous": {"call": "agent", "args": {"prompt": "p", "to": "bad-twin"}},
        "to_inherit": {
            "call": "agent",
            "args": {"prompt": "p", "to": one.id, "start_from": "inherit"},
        },
        "no_colon": {"call": "agent", "args": {"prompt": "p", "start_from": "abc"}},
        "not_a_seq": {"call": "agent", "args": {"prompt": "p", "start_from": "x:y:z"}},
        "beyond_head": {
            "call": "agent",
            "args": {"prompt": "p", "start_from": "{session_id}:999"},
        },
        "self": {"call": "send_message", "args": {"to": "{session_id}", "message": "me"}},
        "to_archive": {
            "call": "agent",
            "args": {"prompt": "p", "to": one.id, "archive_when_done": True},
        },
        "raw": {"call": "agent", "raw_args": "{not json"},
        "unknown_arg": {"call": "agent", "args": {"prompt": "p", "colour": "blue"}},
    }
    expected = {
        "unknown_to": "session.not_found",
        "ambiguous": "session.ambiguous",
        "to_inherit": "request.invalid",
        "no_colon": "request.invalid",
        "not_a_seq": "request.invalid",
        "beyond_head": "request.invalid",
        "self": "topology.self",
        "to_archive": "request.invalid",
        "raw": "tool.malformed",
        "unknown_arg": "tool.invalid_arguments",
    }
    agent(
        st,
        "bad-caller",
        [on("go", {"calls": list(calls.values())}, {"say": "survived"})],
        tools=("agent", "send_message"),
    )
    caller = st.client.sessions.create("bad-caller")
    before = counts(st)
    assert ask(st, caller.id, "go").content == "survived"
    by_name = dict(zip(calls, results_of(st, caller.id), strict=True))
    assert {k: r.get("error", {}).get("code") for k, r in by_name.items()} == expected
    tool_results = [
        e for e in st.client.sessions.entries(caller.id) if e.type is EntryType.TOOL_RESULT
    ]
    assert len(tool_results) == len(calls) and all(e.metadata["is_error"] for e in tool_results)
    ambiguous = by_name["ambiguous"]["error"]
    assert sorted(c["name"] for c in ambiguous["details"]["candidates"]) == [
        "bad-twin-one",
        "bad-twin-two",
    ]
    assert by_name["to_inherit"]["error"]["details"]["field"] == "start_from"
    assert by_name["to_archive"]["error"]["details"]["field"] == "archive_when_done"
    assert "no entry 999" in by_name["beyond_head"]["error"]["message"]
    # Nothing was written: no session, no delivery, no job but the calling turn's;
    # the caller's session holds only its own turn (no attach pointer).
    sessions, jobs, deliveries = counts(st)
    assert (sessions, jobs, deliveries) == (before[0], before[1] + 1, before[2])
    assert not any(
        e.type in (EntryType.ATTACH, EntryType.NOTICE)
        for e in st.client.sessions.entries(caller.id)
    )
    assert st.client.jobs.list(session_id=one.id) == []


def test_a_foreground_call_into_a_waiting_ancestor_is_refused(st: Stack) -> None:
    # top's turn waits in the foreground on child's; child's foreground call
    # back into top's session could only run once top's turn ends, which
    # waits on child: it is refused at once (it used to hang until its
    # timeout). The same call in the background is admitted and runs after.
    top_name = "cycle-top"
    agent(
        st,
        "cycle-child",
        [
            on(
                "go",
                {"call": "agent", "args": {"prompt": "ping", "to": top_name}},
                {
                    "call": "agent",
                    "args": {"prompt": "later", "to": top_name, "run_in_background": True},
                },
                {"say": "child survived"},
            ),
            NOTED,
            NAMING,
        ],
        tools=("agent",),
    )
    agent(
        st,
        "cycle-top",
        [
            on(
                "start",
                {"call": "agent", "args": {"prompt": "go", "agent_id": "cycle-child"}},
                {"say": "top: {last_result}"},
            ),
            on("later", {"say": "later done"}),
            NAMING,
        ],
        tools=("agent",),
    )
    top = st.client.sessions.create("cycle-top", name=top_name)
    assert ask(st, top.id, "start").content == "top: child survived"
    child = next(
        s for s in st.client.sessions.list() if s.parent_job_id and s.agent_id == "cycle-child"
    )
    refused, admitted = results_of(st, child.id)
    assert refused["error"]["code"] == "topology.cycle"
    assert refused["error"]["details"]["session_id"] == top.id
    # The background call's job runs in top's session once top's turn has ended.
    job = st.client.jobs.wait(admitted["execution_id"], timeout=WAIT)
    assert job.status is chaz.JobStatus.SUCCEEDED and job.result == "later done"


def test_c3_archived_target_refuses_new_deliveries(st: Stack) -> None:
    agent(
        st,
        "c3-bee",
        [
            NAMING,
            on("hold", {"wait": "c3-{session_id}", "timeout": 120}, {"say": "held done"}),
            {"steps": [{"say": "bee heard: {input}"}]},
        ],
    )
    # A (the root of B's tree) made B; C is a session of another tree.
    boss_rules = [
        on(
            "make",
            {"call": "agent", "args": {"prompt": "hello bee", "agent_id": "c3-bee"}},
            {"say": "{last_result}"},
        )
    ]
    agent(
        st,
        "c3-boss",
        boss_rules,
        tools=("agent", "archive_agent", "list_agents", "read_conversation"),
    )
    a = st.client.sessions.create("c3-boss")
    assert ask(st, a.id, "make").content == "bee heard: hello bee"
    (b,) = spawned(st, a.id)
    agent(
        st,
        "c3-boss",
        [
            *boss_rules,
            on(
                "archive",
                {"call": "archive_agent", "args": {"to": b, "reason": "done here"}},
                {"say": "{last_result}"},
            ),
            on(
                "list",
                {
                    "calls": [
                        {"call": "list_agents", "args": {"scope": "session"}},
                        {"call": "list_agents", "args": {"scope": "archived"}},
                    ]
                },
                {"say": "listed"},
            ),
            on("read", {"call": "read_conversation", "args": {"to": b}}, {"say": "{last_result}"}),
        ],
        tools=("agent", "archive_agent", "list_agents", "read_conversation"),
    )
    busy = st.client.sessions.create("c3-bee", name="c3-busy")

    def to_both(target: str, body: str) -> dict[str, Any]:
        return {
            "calls": [
                {"call": "send_message", "args": {"to": target, "message": body}},
                {
                    "call": "agent",
                    "args": {"prompt": body, "to": target, "run_in_background": True},
                },
            ]
        }

    agent(
        st,
        "c3-sender",
        [
            on(
                "to-b",
                to_both(b, "anyone there?"),
                {"call": "read_conversation", "args": {"to": b}},
                {"say": "tried"},
            ),
            on("to-busy", to_both(busy.id, "later please"), {"say": "queued"}),
            NOTED,
        ],
        tools=("agent", "send_message", "read_conversation"),
    )
    c = st.client.sessions.create("c3-sender")

    archived = json.loads(ask(st, a.id, "archive").content)
    assert archived["changed"] is True and archived["archived_by"] == "manual"
    assert st.client.sessions.get(b).archive_reason == "done here"
    # New deliveries to B fail, and create nothing; another tree cannot read it.
    before = counts(st)
    seq = st.client.sessions.get(c.id).last_seq
    assert ask(st, c.id, "to-b").content == "tried"
    *refused, unread = results_of(st, c.id, after=seq)
    assert [r["error"]["code"] for r in refused] == ["session.archived"] * 2
    assert unread["error"]["code"] == "session.not_found"
    assert counts(st) == (before[0], before[1] + 1, before[2])
    # Normal listings omit B; the archive view keeps it.
    seq = st.client.sessions.get(a.id).last_seq
    ask(st, a.id, "list")
    normal, archive_view = (r["text"] for r in results_of(st, a.id, after=seq))
    assert f"- {b} " not in normal and f"- {a.id} " in normal
    assert f"- {b} " in archive_view and "archived: done here" in archive_view
    assert b not in {s.id for s in st.client.sessions.list(limit=500)}
    assert b in {s.id for s in st.client.sessions.list(limit=500, archived=True)}
    # Its history stays readable by its tree.
    history = ask(st, a.id, "read").content
    assert "hello bee" in history and "bee heard: hello bee" in history

    # Work accepted before the archive: a tracked job queued behind a running
    # turn, and a message waiting in the inbox.
    held = st.client.sessions.post(busy.id, "hold", sender="user:tester")
    running(st, held.job_id or "", "the busy session's held turn")
    seq = st.client.sessions.get(c.id).last_seq
    assert ask(st, c.id, "to-busy").content == "queued"
    message, queued = results_of(st, c.id, after=seq)
    assert message["status"] == "queued" and queued["status"] == "queued"
    job_id = queued["execution_id"]
    assert st.client.jobs.get(job_id).status is chaz.JobStatus.QUEUED
    assert st.client.deliveries.get(message["delivery_id"]).state is DeliveryState.ACCEPTED
    st.client.sessions.archive(busy.id, reason="closing")
    st.open_gate(f"c3-{busy.id}")
    # The running turn was not cancelled by the archive.
    assert st.client.jobs.wait(held.job_id or "", timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    # The queued job never started: it ended cancelled, saying why.
    job = st.client.jobs.wait(job_id, timeout=WAIT)
    assert job.status is chaz.JobStatus.CANCELLED and job.started_at is None
    assert (job.error or {})["code"] == "session.archived"
    assert not any(
        e.type is EntryType.ACK and e.job_id == job_id for e in st.client.sessions.entries(busy.id)
    )
    # The inbox message was refused when the turn ended, and its sender told.
    delivery = st.wait_for(
        lambda: (
            (d := st.client.deliveries.get(message["delivery_id"])).state
            is not DeliveryState.ACCEPTED
            and d
        ),
        WAIT,
        "the inbox to be rechecked",
    )
    assert delivery
    assert delivery.state is DeliveryState.REFUSED and delivery.code == "session.archived"
    assert delivery.job_id is None
    st.wait_for(
        lambda: any(e.type is EntryType.NOTICE for e in st.client.sessions.entries(c.id)),
        WAIT,
        "the sender's notice",
    )
    notices = [e for e in st.client.sessions.entries(c.id) if e.type is EntryType.NOTICE]
    assert [n.metadata["code"] for n in notices] == ["session.archived"]
    assert "archived" in notices[0].content
    # The sender hears once about its tracked job, as an error naming the archive.
    st.wait_for(lambda: followups(st, c.id), WAIT, "the follow-up")
    (fu,) = followups(st, c.id)
    assert fu.metadata["followup"]["is_error"] is True
    assert fu.metadata["followup"]["execution_id"] == job_id
    assert "archived" in fu.content
    assert st.client.jobs.wait(fu.job_id or "", timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    assert len(followups(st, c.id)) == 1
    # Nothing else ran in the archived session.
    assert [j.id for j in st.client.jobs.list(session_id=busy.id)] == [held.job_id, job_id]


def test_c4_completion_archive(st: Stack) -> None:
    agent(
        st,
        "c4-kid",
        [
            NAMING,
            on("hold", {"wait": "c4-{session_id}", "timeout": 120}, {"say": "held done"}),
            {"steps": [{"say": "kid did: {input}"}]},
        ],
    )

    def kid(prompt: str, background: bool) -> dict[str, Any]:
        return {
            "call": "agent",
            "args": {
                "prompt": prompt,
                "agent_id": "c4-kid",
                "run_in_background": background,
                "archive_when_done": True,
            },
        }

    agent(
        st,
        "c4-boss",
        [
            on("bg", kid("bg work", True), {"say": "{last_result}"}),
            on("fg", kid("fg work", False), {"say": "{last_result}"}),
            on("held", kid("hold", True), {"say": "{last_result}"}),
            NOTED,
        ],
        tools=("agent",),
    )
    boss = st.client.sessions.create("c4-boss")

    # (a) Background: the asynchronous completion path archives the child.
    started = json.loads(ask(st, boss.id, "bg").content)
    bg = started["session_id"]
    assert (
        st.client.jobs.wait(started["execution_id"], timeout=WAIT).status
        is chaz.JobStatus.SUCCEEDED
    )
    auto = st.wait_for(
        lambda: (s := st.client.sessions.get(bg)).archived and s, WAIT, "the automatic archive"
    )
    assert auto
    assert auto.archived_by is ArchivedBy.AUTO and auto.archive_reason == "archive_when_done"
    st.wait_for(lambda: followups(st, boss.id), WAIT, "the background child's follow-up")

    # (b) Foreground: the same policy.
    assert ask(st, boss.id, "fg").content == "kid did: fg work"
    fg = spawned(st, boss.id)[-1]
    fg_session = st.client.sessions.get(fg)
    assert fg_session.archived and fg_session.archived_by is ArchivedBy.AUTO

    # (c) Manual before terminal: the running job goes on and succeeds, and the
    # person's archive (time and reason) stands against the completion's.
    started = json.loads(ask(st, boss.id, "held").content)
    held, held_job = started["session_id"], started["execution_id"]
    running(st, held_job, "the held child")
    manual = st.client.sessions.archive(held, reason="manual stop")
    assert manual.archived_by is ArchivedBy.MANUAL
    st.open_gate(f"c4-{held}")
    assert st.client.jobs.wait(held_job, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    after = st.client.sessions.get(held)
    assert (after.archived_at, after.archive_reason, after.archived_by) == (
        manual.archived_at,
        "manual stop",
        ArchivedBy.MANUAL,
    )
    pointers = [e for e in st.client.sessions.entries(boss.id) if e.type is EntryType.ATTACH]
    held_pointer = next(p for p in pointers if p.metadata["attach"]["session_id"] == held)
    assert held_pointer.metadata["attach"]["status"] == "succeeded"
    # Both background children replied (an archive does not silence a reply);
    # their turns end before the next test counts rows.
    st.wait_for(lambda: len(followups(st, boss.id)) == 2, WAIT, "the held child's follow-up")
    for fu in followups(st, boss.id):
        assert st.client.jobs.wait(fu.job_id or "", timeout=WAIT).status.terminal

    # (d) Terminal before manual: the first time stays, the person's reason wins,
    # and asking again changes nothing.
    later = st.client.sessions.archive(bg, reason="person says")
    assert later.archived_at == auto.archived_at
    assert (later.archive_reason, later.archived_by) == ("person says", ArchivedBy.MANUAL)
    again = st.client.sessions.archive(bg, reason="another reason")
    assert again == later
    with st.client.services.store.engine.connect() as conn:
        kinds = conn.execute(
            text("SELECT kind FROM events WHERE session_id = :s ORDER BY id"), {"s": bg}
        ).scalars()
        assert list(kinds).count("session.archived") == 2  # the automatic one, the manual one


def test_c8_denied_history_looks_missing(st: Stack) -> None:
    agent(st, "c8-echo", [{"steps": [{"echo": True}]}])
    x = st.client.sessions.create("c8-echo")
    secret = "c8 secret text 4417"
    assert ask(st, x.id, secret).content == secret
    agent(st, "c8-reader", [NAMING, {"steps": [{"say": "context: {context}"}]}])
    fake = "nosuchsession"
    probes = [
        {"call": "agent", "args": {"prompt": "p", "start_from": f"{x.id}:1"}},
        {"call": "agent", "args": {"prompt": "p", "start_from": f"{fake}:1"}},
        {"call": "read_conversation", "args": {"to": x.id}},
        {"call": "read_conversation", "args": {"to": fake}},
    ]
    rules = [
        on("alpha", {"say": "caller saw alpha"}),
        on("probe", {"calls": probes}, {"say": "probed"}),
        on(
            "fork",
            {
                "call": "agent",
                "args": {"prompt": "and?", "agent_id": "c8-reader", "start_from": "{session_id}:1"},
            },
            {"say": "{last_result}"},
        ),
    ]
    tools = ("agent", "read_conversation")
    agent(st, "c8-caller", rules, tools=tools)
    caller = st.client.sessions.create("c8-caller")
    ask(st, caller.id, "alpha")

    before = counts(st)
    seq = st.client.sessions.get(caller.id).last_seq
    assert ask(st, caller.id, "probe").content == "probed"
    fork_x, fork_fake, read_x, read_fake = (
        r["error"] for r in results_of(st, caller.id, after=seq)
    )
    assert fork_x["code"] == read_x["code"] == "session.not_found"
    assert json.dumps(fork_x).replace(x.id, "REF") == json.dumps(fork_fake).replace(fake, "REF")
    assert json.dumps(read_x).replace(x.id, "REF") == json.dumps(read_fake).replace(fake, "REF")
    assert counts(st) == (before[0], before[1] + 1, before[2])
    assert not any(secret in e.content for e in st.client.sessions.entries(caller.id))

    # The permitted equivalents work: a fork in the caller's own tree ...
    assert ask(st, caller.id, "fork").content == "context: user: alpha | user: and?"
    (child,) = spawned(st, caller.id)
    assert st.client.sessions.get(child).forked_from == f"{caller.id}:1"
    # ... and reading the caller's own child.
    agent(
        st,
        "c8-caller",
        [
            *rules,
            on(
                "read",
                {"call": "read_conversation", "args": {"to": child}},
                {"say": "{last_result}"},
            ),
        ],
        tools=tools,
    )
    history = ask(st, caller.id, "read").content
    assert "context: user: alpha | user: and?" in history and "and?" in history


def test_c9_followup_and_inline_results_are_capped(st: Stack) -> None:
    big = "HEAD" + "x" * 199_992 + "TAIL"
    assert len(big) == 200_000
    agent(st, "c9-writer", [NAMING, {"steps": [{"say": big}]}])
    write = {"prompt": "write", "agent_id": "c9-writer"}
    agent(
        st,
        "c9-boss",
        [
            on(
                "bg",
                {"call": "agent", "args": {**write, "run_in_background": True}},
                {"say": "{last_result}"},
            ),
            on("fg", {"call": "agent", "args": write}, {"say": "fg done"}),
            NOTED,
        ],
        tools=("agent",),
    )
    boss = st.client.sessions.create("c9-boss")

    def capped(text: str, limit: int) -> None:
        assert len(text) <= limit
        assert "HEAD" in text and text.endswith("TAIL") and "characters omitted" in text

    # Background: the follow-up holds the excerpt, under a short label.
    started = json.loads(ask(st, boss.id, "bg").content)
    job_id = started["execution_id"]
    assert st.client.jobs.wait(job_id, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    st.wait_for(lambda: followups(st, boss.id), WAIT, "the follow-up")
    (fu,) = followups(st, boss.id)
    label, _, body = fu.content.partition(" finished:\n")
    assert started["session_id"] in label and len(label) < 200
    capped(body, RESULT_CAP)
    assert body.startswith("HEAD")
    # The full text is one authorized call away; the excerpt is the default.
    assert st.client.jobs.output(job_id, full=True)["result"] == big
    out = st.client.jobs.output(job_id)
    assert out["truncated"] is True and out["artifact"] is not None
    capped(out["result"], RESULT_CAP)
    pointer = next(e for e in st.client.sessions.entries(boss.id) if e.type is EntryType.ATTACH)
    assert pointer.metadata["attach"]["session_id"] == started["session_id"]
    assert pointer.metadata["attach"]["status"] == "succeeded"
    st.client.jobs.wait(fu.job_id or "", timeout=WAIT)

    # Foreground: the inline ToolResult is the same excerpt.
    seq = st.client.sessions.get(boss.id).last_seq
    assert ask(st, boss.id, "fg").content == "fg done"
    (inline,) = results_of(st, boss.id, after=seq)
    capped(inline["text"], RESULT_CAP)
    assert inline["text"].startswith("HEAD")
    fg = spawned(st, boss.id)[-1]
    (fg_job,) = st.client.jobs.list(session_id=fg)
    assert st.client.jobs.output(fg_job.id, full=True)["result"] == big
    fg_pointer = next(
        e for e in st.client.sessions.entries(boss.id, after=seq) if e.type is EntryType.ATTACH
    )
    assert fg_pointer.metadata["attach"]["status"] == "succeeded"
    assert len(followups(st, boss.id)) == 1  # a foreground child replies inline only
