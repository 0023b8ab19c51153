"""Planning tools inside real turns: a checklist entry starts nothing
(docs/contracts.md#planning)."""

from __future__ import annotations

import json

import chaz
from chaz.domain.entries import EntryType
from tests.support.stack import Stack

PLANNER = chaz.AgentSpec(
    id="planner",
    tools=["todo_create", "todo_update", "todo_list"],
    script=[
        {
            "match": "^plan$",
            "steps": [
                {
                    "calls": [
                        {"call": "todo_create", "args": {"title": "write the tests"}},
                        {"call": "todo_create", "args": {"title": "ship", "note": "after review"}},
                    ]
                },
                {"call": "todo_list", "args": {}},
                {"say": "{last_result}"},
            ],
        },
        {
            # The input is a todo id: one good call, then bad ones.
            "match": "^[0-9a-f]{16}$",
            "steps": [
                {
                    "calls": [
                        {
                            "call": "todo_update",
                            "args": {"todo_id": "{input}", "status": "in_progress"},
                        },
                        {"call": "todo_update", "args": {"todo_id": "{input}", "status": "bogus"}},
                        {"call": "todo_update", "args": {"todo_id": "nope", "status": "done"}},
                        {"call": "todo_create", "args": {"title": "x" * 501}},
                        {"call": "todo_update", "args": {"todo_id": "{input}", "note": "n" * 4001}},
                        {"call": "todo_create", "args": {"title": "t", "priority": 1}},
                    ]
                },
                {"call": "todo_list", "args": {"status": "in_progress"}},
                {"say": "{last_result}"},
            ],
        },
    ],
)


def _results(client: chaz.Client, session_id: str, job_id: str | None) -> list[dict[str, object]]:
    """The turn's tool results: each its tool, and its error code (None when it succeeded)."""
    out = []
    for e in client.sessions.entries(session_id):
        if e.type is EntryType.TOOL_RESULT and e.job_id == job_id:
            code = json.loads(e.content)["error"]["code"] if e.metadata.get("is_error") else None
            out.append({"tool": e.metadata.get("tool"), "code": code})
    return out


def _turn(client: chaz.Client, session_id: str, content: str) -> tuple[chaz.Entry, chaz.Entry]:
    posted = client.sessions.post(session_id, content, sender="user:alice")
    reply = client.sessions.wait_for_reply(session_id, after=posted.seq, timeout=60)
    return posted, reply


def test_todos_in_real_turns_start_nothing_and_bad_calls_change_nothing(stack: Stack) -> None:
    stack.workers(1)
    client = stack.client
    todos = client.services.store.todos
    client.agents.put(PLANNER)
    mine = client.sessions.create("planner")
    theirs = client.sessions.create("planner")

    posted, reply = _turn(client, mine.id, "plan")
    assert reply.type is EntryType.MESSAGE, f"{reply.content}\n{stack.logs()}"
    rows = todos.list(mine.id)
    assert [(t.ordinal, t.title, t.status.value, t.note) for t in rows] == [
        (1, "write the tests", "pending", None),
        (2, "ship", "pending", "after review"),
    ]
    assert json.loads(reply.content) == [
        {"id": t.id, "ordinal": t.ordinal, "title": t.title, "status": "pending", "note": t.note}
        for t in rows
    ]
    first, second = rows

    # One good update, then an unknown id, a bad status, an over-long title
    # or note and an unknown argument: each an error result with its code.
    posted2, reply2 = _turn(client, mine.id, first.id)
    assert _results(client, mine.id, posted2.job_id) == [
        {"tool": "todo_update", "code": None},
        {"tool": "todo_update", "code": "tool.invalid_arguments"},
        {"tool": "todo_update", "code": "todo.not_found"},
        {"tool": "todo_create", "code": "tool.invalid_arguments"},
        {"tool": "todo_update", "code": "tool.invalid_arguments"},
        {"tool": "todo_create", "code": "tool.invalid_arguments"},
        {"tool": "todo_list", "code": None},
    ]
    assert [t["id"] for t in json.loads(reply2.content)] == [first.id]
    after = todos.list(mine.id)
    assert [t.id for t in after] == [first.id, second.id]
    assert after[0].status.value == "in_progress"
    assert after[0].model_dump(exclude={"status", "updated_at"}) == first.model_dump(
        exclude={"status", "updated_at"}
    )
    assert after[1] == second  # untouched, to its updated_at

    # Another session's todo is not found from here, and its list is its own.
    posted3, reply3 = _turn(client, theirs.id, first.id)
    assert _results(client, theirs.id, posted3.job_id)[0] == {
        "tool": "todo_update",
        "code": "todo.not_found",
    }
    assert json.loads(reply3.content) == []
    assert todos.list(theirs.id) == []
    assert todos.list(mine.id) == after

    # A checklist entry starts nothing: the three posts admitted the only jobs,
    # and no session appeared besides the two.
    jobs = client.jobs.list()
    assert sorted(j.id for j in jobs) == sorted(
        p.job_id for p in (posted, posted2, posted3) if p.job_id
    )
    assert len(jobs) == 3
    assert all(j.status is chaz.JobStatus.SUCCEEDED for j in jobs)
    assert sorted(s.id for s in client.sessions.list()) == sorted([mine.id, theirs.id])
