"""``session_list`` and ``session_search`` in real turns on real workers (issue 12
items 1, 2 and 7): an interactive turn gets results, any other turn gets
``session.tool_forbidden`` (docs/sessions.md#who-may-call)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import chaz
from chaz.domain.entries import EntryType
from tests.acceptance.test_cli import chaz_cli, cli_env, ok
from tests.support.stack import Stack

WAIT = 60

FINDER_RULES: list[dict[str, Any]] = [
    {"match": "^list", "steps": [{"call": "session_list", "args": {}}, {"say": "{last_result}"}]},
    {
        "match": "^badcursor",
        "steps": [
            {"call": "session_list", "args": {"cursor": "not-a-cursor"}},
            {"say": "{last_result}"},
        ],
    },
    {
        "match": "^badlimit",
        "steps": [
            {"call": "session_search", "args": {"query": "x", "limit": 0}},
            {"say": "{last_result}"},
        ],
    },
    {
        "steps": [
            {"call": "session_search", "args": {"query": "{input}"}},
            {"say": "{last_result}"},
        ]
    },
]


@pytest.fixture(scope="module")
def st(module_stack: Stack) -> Iterator[Stack]:
    client = module_stack.client
    client.agents.put(
        chaz.AgentSpec(id="finder", tools=["session_list", "session_search"], script=FINDER_RULES)
    )
    client.agents.put(
        chaz.AgentSpec(
            id="boss",
            # A child's tools are narrowed from its parent's: the boss holds them too.
            tools=["agent", "session_list", "session_search"],
            script=[
                {
                    "steps": [
                        {"call": "agent", "args": {"prompt": "{input}", "agent_id": "finder"}},
                        {"say": "{last_result}"},
                    ]
                }
            ],
        )
    )
    module_stack.workers(1, concurrency=4)
    yield module_stack


def ask(stack: Stack, session_id: str, content: str, **kw: Any) -> chaz.Entry:
    """Post as a person and return the reply of the turn it admits."""
    posted = stack.client.sessions.post(session_id, content, sender="user:tester", **kw)
    return stack.client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=WAIT)


def _seed(
    stack: Stack, said: str, project: str = "default", tree_of: chaz.Session | None = None
) -> chaz.Session:
    """A session that said ``said``: in a tree of its own, or in ``tree_of``'s."""
    if tree_of is None:
        s = stack.client.sessions.create("finder")
    else:
        s = stack.client.services.store.create_session("finder", tree_id=tree_of.tree_id)
    stack.client.sessions.post(s.id, said, sender="agent:finder")
    if project != "default":
        with stack.client.services.store.engine.begin() as conn:
            conn.execute(
                text("UPDATE sessions SET project = :p WHERE id = :s"), {"p": project, "s": s.id}
            )
    return s


def _tool_errors(stack: Stack, session_id: str) -> list[str]:
    out = []
    for e in stack.client.sessions.entries(session_id):
        if e.type is EntryType.TOOL_RESULT and e.metadata.get("is_error"):
            out.append(json.loads(e.content)["error"]["code"])
    return out


def test_an_interactive_turn_searches_and_lists_what_it_may_read(st: Stack) -> None:
    me = st.client.sessions.create("finder")
    seeded = _seed(st, "the wombat-quokka migration plan", tree_of=me)
    # Same project, another tree: read_conversation answers it as missing, and
    # so search and listing never show it (docs/contracts.md#visibility).
    stranger = _seed(st, "wombat-quokka notes of another tree")
    hidden = _seed(st, "wombat-quokka secrets of another project", project="elsewhere")
    found = json.loads(ask(st, me.id, "wombat-quokka").content)["results"]
    # The caller's own question is a Message of its session: it is found too, as own.
    assert {r["sessionId"] for r in found} == {seeded.id, me.id}
    by_id = {r["sessionId"]: r for r in found}
    assert by_id[me.id]["own"] is True
    hit = by_id[seeded.id]
    assert hit["agent"] == "finder" and hit["metadataMatches"] == [] and not hit["own"]
    assert "«wombat-quokka»" in hit["matches"][0]["snippet"]
    assert set(hit) >= {"sessionId", "name", "description", "turnCount", "lastActivity"}

    page = json.loads(ask(st, me.id, "list").content)
    listed = {c["sessionId"]: c for c in page["sessions"]}
    assert listed[me.id]["own"] is True and listed[me.id]["turnCount"] >= 2
    assert seeded.id in listed and hidden.id not in listed and stranger.id not in listed
    assert [c["sessionId"] for c in page["sessions"] if c["own"]] == [me.id]


def test_bad_arguments_are_tool_errors(st: Stack) -> None:
    me = st.client.sessions.create("finder")
    bad = json.loads(ask(st, me.id, "badcursor").content)["error"]
    assert bad["code"] == "request.invalid" and bad["details"]["field"] == "cursor"
    assert json.loads(ask(st, me.id, "badlimit").content)["error"]["code"] == (
        "tool.invalid_arguments"
    )


def test_a_delivery_started_turn_is_forbidden_session_tools(st: Stack) -> None:
    boss = st.client.sessions.create("boss")
    reply = ask(st, boss.id, "list")
    assert "session.tool_forbidden" in reply.content, reply.content
    [spawn] = [d for d in st.client.deliveries.list(boss.id, direction="out")]
    child = st.client.jobs.get(spawn.job_id or "")
    assert child.delivery_id == spawn.id
    assert _tool_errors(st, child.session_id) == ["session.tool_forbidden"]


def test_a_directive_started_turn_is_forbidden_session_tools(st: Stack) -> None:
    me = st.client.sessions.create("finder")
    posted = st.client.sessions.post(me.id, "list", sender="user:tester", type="directive")
    reply = st.client.sessions.wait_for_reply(me.id, after=posted.seq, timeout=WAIT)
    assert json.loads(reply.content)["error"]["code"] == "session.tool_forbidden"
    # The same words as a person's Message are interactive.
    assert "sessions" in json.loads(ask(st, me.id, "list").content)


def test_chaz_search_on_the_command_line(st: Stack) -> None:
    seeded = _seed(st, "the narwhal-okapi incident review")
    env = cli_env(settings=st.settings)
    found = json.loads(ok(chaz_cli("search", "narwhal-okapi", "--json", env=env)))
    assert [r["sessionId"] for r in found] == [seeded.id]
    assert "«narwhal-okapi»" in found[0]["matches"][0]["snippet"]
    table = ok(chaz_cli("search", "narwhal-okapi", "--agent", "finder", "--limit", "5", env=env))
    assert seeded.id in table and "EVIDENCE" in table
    assert ok(
        chaz_cli("search", "narwhal-okapi", "--agent", "boss", "--json", env=env)
    ).strip() == ("[]")
    bad = chaz_cli("search", "narwhal", "--limit", "0", "--json", env=env)
    assert bad.returncode == 2 and "request.invalid" in bad.stdout + bad.stderr


def test_a_schedule_fired_turn_is_forbidden_session_tools(st: Stack) -> None:
    me = st.client.sessions.create("finder")
    st.housekeeper()  # beat sends the fire
    made = st.client.schedules.add(
        "finder",
        kind="interval",
        interval_seconds=1,
        prompt="list",
        target="pinned",
        session_id=me.id,
        max_fires=1,
    )
    fire = st.wait_for(
        lambda: [f for f in st.client.schedules.fires(made.id) if f.job_id], WAIT, "the fire"
    )[0]
    job = st.client.jobs.wait(fire.job_id or "", timeout=WAIT)
    assert job.fire_id is not None and job.status is chaz.JobStatus.SUCCEEDED
    assert _tool_errors(st, me.id) == ["session.tool_forbidden"]
