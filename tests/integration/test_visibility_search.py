"""``session_search``, ``session_list`` and ``list_agents`` see only what the caller may read
(docs/contracts.md#visibility): a session of another tree of the same project,
which ``read_conversation`` answers as missing, is never listed, counted or
quoted; its own tree and the sessions below it are.

No worker runs: each turn is a person's Message whose job is not run, and the
tools are invoked through the registry with the context that turn would give them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import chaz
from chaz.access import visibility
from chaz.domain.entries import EntryType, NewEntry
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.registry import ToolContext
from chaz.services import Services
from chaz.store.types import JobFields
from chaz.usecases import admission
from tests.support.stack import Stack
from tests.support.turns import interactive_turn

TOOLS = ["session_list", "session_search", "list_agents"]
FINDER = chaz.AgentSpec(id="finder", tools=TOOLS, script=[{"steps": [{"say": "ok"}]}])
WORD = "marmot-ledger"


def _turn(client: chaz.Client, session_id: str) -> ToolContext:
    """The context of the interactive turn a person's Message admits (not run)."""
    return interactive_turn(client, session_id, TOOLS, text="find things")


def _call(client: chaz.Client, ctx: ToolContext, name: str, **args: Any) -> dict[str, Any]:
    outcome = client.tools.invoke(
        ToolCallRequest(id=f"c-{name}-{json.dumps(args)}", name=name, arguments=json.dumps(args)),
        ctx,
    )
    assert not outcome.is_error, outcome.output
    out: dict[str, Any] = json.loads(outcome.output)
    return out


def _job_in(svc: Services, session_id: str, parent_job_id: str | None = None) -> str:
    done = admission.admit(
        svc,
        session_id,
        NewEntry(EntryType.DIRECTIVE, "agent:finder", "work"),
        job_fields=JobFields(parent_job_id=parent_job_id),
    )
    assert done.job is not None
    return done.job.id


def _said(client: chaz.Client, session_id: str, text: str) -> None:
    # The session's own agent's Message admits no turn.
    client.sessions.post(session_id, text, sender="agent:finder")


@pytest.fixture
def world(stack: Stack) -> dict[str, chaz.Session]:
    """A root with a child in its tree and a session below the child in a tree of
    its own, and a stranger: another tree of the same project. Each says ``WORD``
    and is named for it."""
    client = stack.client
    svc = client.services
    client.agents.put(FINDER)
    root = client.sessions.create("finder", name=f"{WORD} root")
    root_job = _job_in(svc, root.id)
    child = svc.store.create_session(
        "finder", name=f"{WORD} child", parent_job_id=root_job, tree_id=root.tree_id
    )
    child_job = _job_in(svc, child.id, root_job)
    below = svc.store.create_session("finder", name=f"{WORD} below", parent_job_id=child_job)
    stranger = client.sessions.create("finder", name=f"{WORD} stranger")
    made = {"root": root, "child": child, "below": below, "stranger": stranger}
    for label, session in made.items():
        _said(client, session.id, f"the {WORD} of {label}")
    return made


def _found(client: chaz.Client, ctx: ToolContext, query: str = WORD) -> set[str]:
    out = _call(client, ctx, "session_search", query=query, limit=50)
    return {r["sessionId"] for r in out["results"]}


def _listed(client: chaz.Client, ctx: ToolContext) -> set[str]:
    return {c["sessionId"] for c in _call(client, ctx, "session_list", limit=100)["sessions"]}


def _agents(client: chaz.Client, ctx: ToolContext, limit: int = 200) -> list[str]:
    """The session ids ``list_agents(scope="all")`` names, in its order."""
    args = json.dumps({"scope": "all", "limit": limit})
    outcome = client.tools.invoke(
        ToolCallRequest(id=f"c-list-{limit}", name="list_agents", arguments=args), ctx
    )
    assert not outcome.is_error, outcome.output
    return re.findall(r"^- (\w+) ", outcome.output, re.M)


@pytest.mark.parametrize(
    ("viewer", "sees"),
    [
        ("root", {"root", "child", "below"}),
        ("child", {"root", "child", "below"}),
        ("below", {"below"}),
        ("stranger", {"stranger"}),
    ],
)
def test_search_and_listing_show_exactly_the_readable_sessions(
    stack: Stack, world: dict[str, chaz.Session], viewer: str, sees: set[str]
) -> None:
    client = stack.client
    ctx = _turn(client, world[viewer].id)
    expected = {world[label].id for label in sees}
    # The rule the tools follow is read_conversation's, session by session.
    readable = {
        s.id for s in world.values() if visibility.can_read(client.services, ctx.session_id, s.id)
    }
    assert readable == expected
    assert _found(client, ctx) == expected  # by message text
    assert _found(client, ctx, "stranger") == (
        {world["stranger"].id} if viewer == "stranger" else set()
    )  # by name alone: no metadata hit of an unreadable session either
    assert _listed(client, ctx) == expected
    assert set(_agents(client, ctx)) == expected  # every tree it may read, no other
    # The producer's search and listing stay project-wide.
    assert {r.session.session_id for r in client.sessions.search(WORD, limit=50)} == {
        s.id for s in world.values()
    }


def test_a_page_fills_to_its_limit_past_unreadable_sessions(
    stack: Stack, world: dict[str, chaz.Session]
) -> None:
    client = stack.client
    ctx = _turn(client, world["below"].id)
    # Newer than everything the viewer may read: filtered after the fact, they
    # would take the page's only slot and leave it empty.
    for i in range(3):
        _said(client, client.sessions.create("finder", name=f"{WORD} newer {i}").id, WORD)
    page = _call(client, ctx, "session_list", limit=1)
    assert [c["sessionId"] for c in page["sessions"]] == [world["below"].id]
    found = _call(client, ctx, "session_search", query=WORD, limit=1)["results"]
    assert [r["sessionId"] for r in found] == [world["below"].id]
    assert _agents(client, ctx, limit=1) == [world["below"].id]
