"""C8: a denied read leaks nothing (issue 11 item 3, docs/security.md#visibility).

A turn sees only its own session's project. Another project's session is
never found, named, listed or previewed; reading it, forking it, inheriting
through it, expanding an attach pointer to it or reading its job's result
fails exactly like a missing target: same code, same message shape, same
detail keys, no content. The other project's objects here are tied to the
viewer as closely as rows can be (the viewer's tree, the viewer as the
job's caller, a fork of it), so the project rule alone hides them; the
permitted equivalents in the viewer's own project work.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.errors import ChazError
from tests.support.principals import post_as, session_in
from tests.support.stack import Stack

SECRET = "the-other-projects-secret"
#: Unused refs of the same shapes as the denied ones.
MISSING_ID = "0123456789abcdef"
MISSING_NAME = "no-such-room"
MISSING_JOB = "fedcba9876543210"


def one_call(agent_id: str, tool: str, args: dict[str, Any]) -> chaz.AgentSpec:
    """An agent that calls ``tool`` once (``{input}`` in ``args`` is the ref) and
    answers with the result verbatim."""
    return chaz.AgentSpec(
        id=agent_id,
        tools=[tool],
        script=[{"steps": [{"call": tool, "args": args}, {"say": "{last_result}"}]}],
    )


AGENTS = [
    one_call("reader", "read_conversation", {"to": "{input}"}),
    one_call("forker", "agent", {"prompt": "go", "agent_id": "teller", "start_from": "{input}"}),
    one_call("inheritor", "agent", {"prompt": "go", "agent_id": "teller", "start_from": "inherit"}),
    one_call("outputter", "job_output", {"job_id": "{input}", "full": True, "block": False}),
    one_call("sender", "send_message", {"to": "{input}", "message": "hi"}),
    one_call("continuer", "agent", {"prompt": "hi", "to": "{input}"}),
    one_call("archiver", "archive_agent", {"to": "{input}"}),
    one_call("lister", "list_agents", {"scope": "all"}),
    one_call("spawner", "agent", {"prompt": "{input}", "agent_id": "echo"}),
    # What a fork or an inherit reads: the child's whole context.
    chaz.AgentSpec(id="teller", script=[{"steps": [{"say": "context: {context}"}]}]),
    chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]),
]


def ask(client: chaz.Client, session_id: str, text: str) -> str:
    """Post ``text`` and return the reply's content (the tool's result)."""
    posted = client.sessions.post(session_id, text, sender="user:alice")
    reply = client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=60)
    assert reply.type is EntryType.MESSAGE, reply
    return reply.content


def same_as_missing(denied: str, missing: str, denied_ref: str, missing_ref: str) -> None:
    """The denied answer equals the missing one once the ref itself is set aside."""
    d, m = json.loads(denied), json.loads(missing)
    assert "error" in d, denied
    assert json.dumps(d).replace(denied_ref, "REF") == json.dumps(m).replace(missing_ref, "REF")
    assert SECRET not in denied


@pytest.fixture
def world(stack: Stack) -> dict[str, Any]:
    client = stack.client
    client.agents.put_many(AGENTS)
    stack.workers(1, concurrency=2)
    # The viewer's own tree: a session whose history it may read.
    mine = client.sessions.create("echo", name="mine")
    kept = ask(client, mine.id, "my own words")
    assert kept == "my own words"
    # Another project's session, in the viewer's tree, named, with a turn
    # whose long result has an artifact and whose caller is the viewer tree.
    theirs = session_in(client, "echo", "other", name="secret-room", tree_id=mine.tree_id)
    long = SECRET + " " + "x" * 40_000
    posted = post_as(client, theirs.id, long, sender="user:other")
    reply = their_reply(stack, theirs.id, posted.entry.seq)
    assert reply.content == long
    return {"mine": mine, "theirs": theirs, "their_job": posted.entry.job_id}


def their_reply(stack: Stack, session_id: str, after: int) -> chaz.Entry:
    """The reply in a session of project ``other``, read as that project's client."""
    with chaz.Client(stack.settings, migrate=False, project="other") as owner:
        return owner.sessions.wait_for_reply(session_id, after=after, timeout=60)


def viewer(client: chaz.Client, agent_id: str, world: dict[str, Any]) -> chaz.Session:
    """A session of ``agent_id`` in the viewer's tree (so the tree rule would allow)."""
    return client.services.store.create_session(agent_id, tree_id=world["mine"].tree_id)


def test_denied_read_conversation_and_historical_fork_equal_missing(
    stack: Stack, world: dict[str, Any]
) -> None:
    client = stack.client
    theirs, mine = world["theirs"], world["mine"]
    reader = viewer(client, "reader", world)
    cases = [
        (theirs.id, MISSING_ID, theirs.id, MISSING_ID),
        (f"{theirs.id}:HEAD", f"{MISSING_ID}:HEAD", theirs.id, MISSING_ID),
        ("secret-room", MISSING_NAME, "secret-room", MISSING_NAME),
        ("secret", "nosuch", "secret", "nosuch"),  # a unique name prefix
    ]
    for ref, missing_ref, token, missing_token in cases:
        same_as_missing(
            ask(client, reader.id, ref), ask(client, reader.id, missing_ref), token, missing_token
        )
    # Permitted: the viewer's own tree.
    assert "my own words" in ask(client, reader.id, mine.id)

    forker = viewer(client, "forker", world)
    before = {s.id for s in client.sessions.list()}
    same_as_missing(
        ask(client, forker.id, f"{theirs.id}:2"),
        ask(client, forker.id, f"{MISSING_ID}:2"),
        theirs.id,
        MISSING_ID,
    )
    assert {s.id for s in client.sessions.list()} == before  # no fork was made
    # Permitted: fork the viewer's own session at its first entry.
    assert ask(client, forker.id, f"{mine.id}:1") == "context: user: my own words | user: go"


def test_inherit_never_reads_through_another_projects_source(
    stack: Stack, world: dict[str, Any]
) -> None:
    client = stack.client
    theirs, mine = world["theirs"], world["mine"]
    # A session of this project forked from the other project's (a forged
    # pointer): its own context, and an inherit of it, stop at the border.
    forged = session_in(client, "inheritor", "default", fork=(theirs.id, 1))
    inherited = ask(client, forged.id, "inherit please")
    assert SECRET not in inherited
    assert inherited == "context: user: inherit please | user: go", inherited
    # Permitted: the same through a source of this project.
    honest = session_in(client, "inheritor", "default", fork=(mine.id, 1))
    assert ask(client, honest.id, "inherit please") == (
        "context: user: my own words | user: inherit please | user: go"
    )


def test_denied_job_output_and_its_artifact_equal_missing(
    stack: Stack, world: dict[str, Any]
) -> None:
    client = stack.client
    theirs, mine = world["theirs"], world["mine"]
    outputter = viewer(client, "outputter", world)
    # Even a job that names the viewer as its caller.
    called = post_as(client, theirs.id, "called by you", caller_session_id=outputter.id)
    their_reply(stack, theirs.id, called.entry.seq)
    missing = ask(client, outputter.id, MISSING_JOB)
    for job_id in (world["their_job"], called.entry.job_id or ""):
        same_as_missing(ask(client, outputter.id, job_id), missing, job_id, MISSING_JOB)
    # Permitted: a job of this project that it called, its long result read
    # whole from its artifact.
    text = "mine " + "y" * 40_000
    permitted = post_as(client, mine.id, text, caller_session_id=outputter.id)
    client.sessions.wait_for_reply(mine.id, after=permitted.entry.seq, timeout=60)
    own = json.loads(ask(client, outputter.id, permitted.entry.job_id or ""))
    assert own["status"] == "succeeded" and own["result"] == text


def test_another_project_is_never_named_listed_messaged_or_archived(
    stack: Stack, world: dict[str, Any]
) -> None:
    client = stack.client
    theirs, mine = world["theirs"], world["mine"]
    lister = viewer(client, "lister", world)
    listing = ask(client, lister.id, "list")
    assert theirs.id not in listing and "secret-room" not in listing and SECRET not in listing
    assert mine.id in listing  # permitted: this project's sessions

    for agent_id in ("sender", "continuer", "archiver"):
        v = viewer(client, agent_id, world)
        for ref, missing_ref in ((theirs.id, MISSING_ID), ("secret-room", MISSING_NAME)):
            same_as_missing(
                ask(client, v.id, ref), ask(client, v.id, missing_ref), ref, missing_ref
            )
    with chaz.Client(stack.settings, migrate=False, project="other") as owner:
        assert owner.deliveries.list(theirs.id) == []
        assert owner.sessions.get(theirs.id).archived_at is None


def test_attach_expansion_of_another_project_equals_missing(
    stack: Stack, world: dict[str, Any]
) -> None:
    client = stack.client
    spawner = viewer(client, "spawner", world)
    assert ask(client, spawner.id, "child words") == "child words"
    [pointer] = [e for e in client.sessions.entries(spawner.id) if e.type is EntryType.ATTACH]
    # Permitted: the pointer of the viewer's own spawn expands.
    attached = client.sessions.attachment(spawner.id, pointer.seq)
    assert [e.content for e in attached.entries][:1] == ["child words"]
    other = chaz.Client(stack.settings, project="other")
    errors = []
    for sid in (spawner.id, MISSING_ID):
        with pytest.raises(ChazError) as refused:
            other.sessions.attachment(sid, pointer.seq)
        errors.append((refused.value.code, refused.value.message.replace(sid, "REF")))
    assert errors[0] == errors[1]
