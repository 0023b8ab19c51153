"""Issue 9, items 6-8 and 10: list_agents, archive_agent, read_conversation and names,
called by scripted agents inside real turns on real workers
(docs/contracts.md#acceptance, C3, C4, C8)."""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import text

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.sessions import NameSource, Session
from chaz.usecases import naming
from tests.support.stack import Stack

ECHO = chaz.AgentSpec(
    id="echoer",
    script=[
        {"match": "^hold$", "steps": [{"wait": "hold-b", "timeout": 60}, {"say": "held done"}]},
        {"steps": [{"echo": True}]},
    ],
)
COLLAB_TOOLS = ["list_agents", "archive_agent", "read_conversation"]


def collab(rules: dict[str, tuple[str, dict[str, Any]]]) -> chaz.AgentSpec:
    """An agent that answers ``^KEY$`` by calling TOOL(ARGS) and saying its result."""
    script: list[dict[str, Any]] = [
        {
            "match": f"^{key}$",
            "steps": [{"call": tool, "args": args}, {"say": "{last_result}"}],
        }
        for key, (tool, args) in rules.items()
    ]
    script.append({"steps": [{"say": "ok"}]})
    return chaz.AgentSpec(id="collab", tools=COLLAB_TOOLS, script=script)


def ask(stack: Stack, session: Session, content: str) -> str:
    """Post ``content`` as a user and return the agent's reply (a tool result, here)."""
    client = stack.client
    posted = client.sessions.post(session.id, content, sender="user:tester")
    reply = client.sessions.wait_for_reply(session.id, after=posted.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE, f"{reply.content}\n{stack.logs()}"
    return reply.content


def child_of(stack: Stack, parent: Session, agent_id: str, name: str | None = None) -> Session:
    """A session in ``parent``'s tree, made by ``parent``'s latest job (as a spawn is)."""
    svc = stack.client.services
    parent_job = svc.store.list_jobs(session_id=parent.id, newest_first=True, limit=1)[0]
    return svc.store.create_session(
        agent_id, name=name, parent_job_id=parent_job.id, tree_id=parent.tree_id
    )


def listed(listing: str) -> set[str]:
    return set(re.findall(r"^- (\w+) ", listing, re.M))


def line_of(listing: str, session_id: str) -> str:
    return next(line for line in listing.splitlines() if line.startswith(f"- {session_id} "))


def test_c3_archive_is_global_idempotent_and_keeps_history_and_running_work(
    stack: Stack,
) -> None:
    stack.workers(1, concurrency=3)
    client = stack.client
    client.agents.put(ECHO)
    client.agents.put(collab({}))
    root = client.sessions.create("collab", name="c3-root")
    ask(stack, root, "start")
    a = child_of(stack, root, "collab", "c3-archiver")
    b = child_of(stack, root, "echoer", "bee")
    c = child_of(stack, root, "collab", "c3-lister")
    other = client.sessions.create("echoer", name="c3-elsewhere")
    client.agents.put(
        collab(
            {
                "archive-b": ("archive_agent", {"to": b.id, "reason": "finished"}),
                "archive-b-again": ("archive_agent", {"to": f"{b.id}:HEAD", "reason": "x"}),
                "list-session": ("list_agents", {"scope": "session"}),
                "list-archived": ("list_agents", {"scope": "archived"}),
                "list-all": ("list_agents", {"scope": "all"}),
                "read-b": ("read_conversation", {"to": "bee"}),
                "read-a-plain": ("read_conversation", {"to": a.id, "include_tool_calls": False}),
                "read-a-tools": ("read_conversation", {"to": a.id}),
            }
        )
    )
    assert ask(stack, b, "hello one") == "hello one"
    long_text = "x" * 2600
    ask(stack, b, long_text)
    ask(stack, other, "elsewhere")
    # B is mid-turn when A archives it: archiving must not cancel that work.
    held = client.sessions.post(b.id, "hold", sender="user:tester")
    stack.wait_for(
        lambda: client.jobs.get(held.job_id or "").status is chaz.JobStatus.RUNNING,
        30,
        "B's held turn to start",
    )
    first = json.loads(ask(stack, a, "archive-b"))
    assert first["changed"] is True and first["session_id"] == b.id
    assert first["archived_by"] == "manual" and first["reason"] == "finished"
    again = json.loads(ask(stack, a, "archive-b-again"))
    assert again["changed"] is False
    assert (again["archived_at"], again["reason"]) == (first["archived_at"], "finished")
    stack.open_gate("hold-b")
    assert client.jobs.wait(held.job_id or "", timeout=30).status is chaz.JobStatus.SUCCEEDED

    # C's normal views omit B; the archive view shows it, in the listing format.
    session_view = ask(stack, c, "list-session")
    # Exactly the tree's sessions but B (another tree's session is not listed).
    assert listed(session_view) == {root.id, a.id, c.id}
    me = line_of(session_view, c.id)
    assert "(this session)" in me and " busy " in me  # its own turn is running
    a_line = line_of(session_view, a.id)
    assert f'to="{a.id}:HEAD"' in a_line and "agent=collab idle" in a_line
    assert "2 turns, <1k chars" in a_line
    archived_view = ask(stack, c, "list-archived")
    b_line = line_of(archived_view, b.id)
    assert f'"bee" agent=echoer idle to="{b.id}:HEAD" 3 turns, ~5k chars' in b_line
    assert "archived: finished" in b_line
    tip = json.loads(b_line.split(" tip: ", 1)[1])
    assert tip == "held done"
    all_view = ask(stack, c, "list-all")
    # Every tree C may read: its own; `other`'s tree it may not read, so not named.
    assert listed(all_view) == {root.id, a.id, c.id}
    assert " tip: " not in all_view  # "all" shows no previews
    # Most recently active first: C (listing now) before the older root.
    ids = re.findall(r"^- (\w+) ", all_view, re.M)
    assert ids.index(c.id) < ids.index(root.id)
    assert listed(archived_view) == {b.id}

    # History is retained and readable by a permitted reader.
    history = ask(stack, c, "read-b")
    assert "hello one" in history and long_text in history and "held done" in history
    assert "turns 1-3 of 3" in history
    plain, tools = ask(stack, c, "read-a-plain"), ask(stack, c, "read-a-tools")
    assert "tool call" not in plain and "archive-b" in plain
    assert "tool call" in tools and "tool result" in tools

    # One event per change.
    with client.services.store.engine.connect() as conn:
        kinds = conn.execute(
            text("SELECT kind FROM events WHERE session_id = :s"), {"s": b.id}
        ).scalars()
        assert list(kinds).count("session.archived") == 1


def test_c8_a_denied_read_looks_missing_and_a_long_read_is_cut_with_a_resume_note(
    stack: Stack,
) -> None:
    stack.workers(1, concurrency=2)
    client = stack.client
    client.agents.put(ECHO)
    client.agents.put(collab({}))
    root = client.sessions.create("collab", name="c8-root")
    ask(stack, root, "start")
    bee = child_of(stack, root, "echoer", "secret-bee")
    stranger = client.sessions.create("collab", name="c8-stranger")
    fake = "f" * len(bee.id)
    reads: dict[str, dict[str, Any]] = {
        "read-id": {"to": bee.id},
        "read-missing-id": {"to": fake},
        "read-name": {"to": "secret-bee"},
        "read-missing-name": {"to": "secret-wasp"},
        "read-prefix": {"to": "secret"},
        "read-missing-prefix": {"to": "nothing"},
        "read-cut-1": {"to": bee.id, "max_chars": 1000},
        "read-cut-2": {"to": f"{bee.id}:HEAD", "start_turn": 2, "max_chars": 1000},
        "read-huge": {"to": bee.id, "max_chars": 10**9},
    }
    client.agents.put(collab({k: ("read_conversation", v) for k, v in reads.items()}))
    for n in range(1, 5):
        ask(stack, bee, f"m{n}:" + "a" * 150)

    def error_of(session: Session, key: str, ref: str) -> str:
        err = json.loads(ask(stack, session, key))["error"]
        assert err["code"] == "session.not_found"
        return json.dumps(err).replace(ref, "REF")

    # An unrelated tree learns nothing: an id, a name or a prefix of a session it may
    # not read is answered exactly as one that does not exist.
    assert error_of(stranger, "read-id", bee.id) == error_of(stranger, "read-missing-id", fake)
    assert error_of(stranger, "read-name", "secret-bee") == error_of(
        stranger, "read-missing-name", "secret-wasp"
    )
    assert error_of(stranger, "read-prefix", "secret") == error_of(
        stranger, "read-missing-prefix", "nothing"
    )
    for result in client.sessions.entries(stranger.id):
        if result.type is EntryType.TOOL_RESULT:
            assert "m1:" not in result.content and "echoer" not in result.content
    # The same tree reads it, by id, name or prefix.
    whole = ask(stack, root, "read-id")
    assert all(f"m{n}:" in whole for n in range(1, 5)) and "turns 1-4 of 4" in whole
    assert ask(stack, root, "read-name") == whole == ask(stack, root, "read-prefix")
    assert ask(stack, root, "read-huge") == whole  # max_chars is held at 60,000

    # A cut read says where to go on, and going on from there continues.
    first = ask(stack, root, "read-cut-1")
    assert len(first) <= 1000 and "m1:" in first and "m2:" not in first
    assert f'read_conversation(to="{bee.id}:HEAD", start_turn=2)' in first
    second = ask(stack, root, "read-cut-2")
    assert len(second) <= 1000 and "m2:" in second and "m1:" not in second
    assert "start_turn=3" in second


RENAMER = chaz.AgentSpec(
    id="renamer",
    script=[
        {"match": "^Name this conversation", "steps": [{"say": "**Parser Review Notes**"}]},
        {"steps": [{"echo": True}]},
    ],
)


def _as_agent_made(stack: Stack, session: Session, stage1: str) -> None:
    """What the agent tool's stage 1 leaves: origin agent, an automatic name."""
    with stack.client.services.store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE sessions SET origin = 'agent', name = :n, name_source = 'auto' "
                "WHERE id = :s"
            ),
            {"n": stage1, "s": session.id},
        )


def test_stage2_rename_runs_the_sessions_own_model_on_a_worker(stack: Stack) -> None:
    stack.workers(1, concurrency=2)
    client = stack.client
    svc = client.services
    client.agents.put(RENAMER)
    first = client.sessions.create("renamer")
    _as_agent_made(stack, first, "review the par")
    # Its first turn's end sends the rename (naming.after_turn).
    ask(stack, first, "please review the parser")
    stack.wait_for(
        lambda: client.sessions.get(first.id).name == "Parser Review Notes", 30, "the rename"
    )
    assert client.sessions.get(first.id).name_source is NameSource.AUTO
    # A taken title gets the next free suffix.
    second = client.sessions.create("renamer")
    _as_agent_made(stack, second, "parser again")
    ask(stack, second, "the parser, again")
    stack.wait_for(
        lambda: client.sessions.get(second.id).name == "Parser Review Notes-2", 30, "suffix"
    )
    # A person's name and an archived session are never renamed.
    client.sessions.rename(second.id, "my parser")
    assert naming.rename(svc, second.id) is None
    assert client.sessions.get(second.id).name == "my parser"
    third = client.sessions.create("renamer")
    ask(stack, third, "something")
    client.sessions.archive(third.id)
    _as_agent_made(stack, third, "third one")
    assert naming.rename(svc, third.id) is None
    assert client.sessions.get(third.id).name == "third one"


def test_stage2_never_renames_a_persons_name(stack: Stack) -> None:
    stack.workers(1, concurrency=2)
    client = stack.client
    client.agents.put(RENAMER)
    made = client.sessions.create("renamer")
    _as_agent_made(stack, made, "review the par")
    named = client.sessions.create("renamer")
    _as_agent_made(stack, named, "kept")
    client.sessions.rename(named.id, "a person's name")
    ask(stack, named, "please review the parser")
    ask(stack, made, "please review the parser")
    stack.wait_for(
        lambda: client.sessions.get(made.id).name == "Parser Review Notes", 30, "the rename"
    )
    assert client.sessions.get(named.id).name == "a person's name"
