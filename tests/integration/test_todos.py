"""The todos table under concurrency and at its limit."""

from __future__ import annotations

import threading

import pytest

import chaz
from chaz.domain.todos import MAX_TODOS
from chaz.errors import TodoLimitReached, TodoNotFound, ValidationError
from tests.support.stack import Stack


def test_ordinals_stay_unique_under_concurrency_and_the_201st_is_refused(stack: Stack) -> None:
    client = stack.client
    todos = client.services.store.todos
    client.agents.put(chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}]))
    s = client.sessions.create("bot")
    other = client.sessions.create("bot")

    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def create(i: int) -> None:
        barrier.wait()
        try:
            for k in range(25):
                todos.create(s.id, f"t{i}-{k}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    listed = todos.list(s.id)
    assert [t.ordinal for t in listed] == list(range(1, MAX_TODOS + 1))

    with pytest.raises(TodoLimitReached) as full:
        todos.create(s.id, "one too many")
    assert full.value.code == "todo.limit"
    assert len(todos.list(s.id)) == MAX_TODOS
    # The limit is per session.
    assert todos.create(other.id, "elsewhere").ordinal == 1

    # A repeated id (a resumed turn's call) returns the first todo, adds nothing.
    again = todos.create(other.id, "first", todo_id="0123456789abcdef")
    assert todos.create(other.id, "second", todo_id="0123456789abcdef") == again
    assert [t.title for t in todos.list(other.id)] == ["elsewhere", "first"]

    # Another session's todo is not found; refused input changes nothing.
    with pytest.raises(TodoNotFound):
        todos.update(s.id, again.id, status="done")
    with pytest.raises(ValidationError):
        todos.update(other.id, again.id)
    with pytest.raises(ValidationError):
        todos.update(other.id, again.id, status="finished")
    with pytest.raises(ValidationError):
        todos.create(other.id, "   ")
    assert todos.get(other.id, again.id) == again
    done = todos.update(other.id, again.id, status="done", note="")
    assert (done.status.value, done.note, done.ordinal) == ("done", None, again.ordinal)
    assert [t.id for t in todos.list(other.id, status="done")] == [again.id]
