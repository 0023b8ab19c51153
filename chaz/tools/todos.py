"""Planning tools: ``todo_create``, ``todo_update`` and ``todo_list`` (docs/contracts.md#planning).

A session's checklist records intended work and starts nothing: these tools
write no entry and admit no job; only the calling session's ``todos`` rows
change. A todo of another session is ``todo.not_found``, like a missing one.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

from chaz.domain.todos import MAX_NOTE_CHARS, MAX_TITLE_CHARS, Todo, TodoStatus
from chaz.domain.validation import SafeText
from chaz.runtime.registry import Tool, ToolContext


class TodoCreateArgs(BaseModel):
    """Arguments of ``todo_create``."""

    model_config = ConfigDict(extra="forbid")

    title: SafeText = Field(
        min_length=1, max_length=MAX_TITLE_CHARS, description="What is to be done."
    )
    note: SafeText | None = Field(None, max_length=MAX_NOTE_CHARS, description="Details, if any.")


class TodoUpdateArgs(BaseModel):
    """Arguments of ``todo_update``."""

    model_config = ConfigDict(extra="forbid")

    todo_id: SafeText = Field(description="The id todo_create returned.")
    status: TodoStatus | None = Field(None, description="The new status.")
    title: SafeText | None = Field(
        None, min_length=1, max_length=MAX_TITLE_CHARS, description="A new title."
    )
    note: SafeText | None = Field(
        None, max_length=MAX_NOTE_CHARS, description="A new note; an empty one clears it."
    )


class TodoListArgs(BaseModel):
    """Arguments of ``todo_list``."""

    model_config = ConfigDict(extra="forbid")

    status: TodoStatus | None = Field(None, description="Only the todos in this status.")


def _shown(todo: Todo) -> dict[str, object]:
    return {
        "id": todo.id,
        "ordinal": todo.ordinal,
        "title": todo.title,
        "status": todo.status.value,
        "note": todo.note,
    }


def todo_create(args: TodoCreateArgs, ctx: ToolContext) -> str:
    """Add a pending todo to this session's checklist."""
    # The id comes from the call: a resumed turn that repeats this call gets
    # the todo its first attempt created instead of a second one.
    key = f"{ctx.session_id}:{ctx.job_id}:{ctx.call_id}".encode()
    todo_id = hashlib.sha256(key).hexdigest()[:16]
    todos = ctx.need_services().store.todos
    todo = todos.create(ctx.session_id, args.title, args.note, todo_id=todo_id)
    return json.dumps(_shown(todo))


def todo_update(args: TodoUpdateArgs, ctx: ToolContext) -> str:
    """Change a todo's status, title or note."""
    todo = ctx.need_services().store.todos.update(
        ctx.session_id, args.todo_id, status=args.status, title=args.title, note=args.note
    )
    return json.dumps(_shown(todo))


def todo_list(args: TodoListArgs, ctx: ToolContext) -> str:
    """This session's todos, in the order they were created."""
    todos = ctx.need_services().store.todos.list(ctx.session_id, status=args.status)
    return json.dumps([_shown(t) for t in todos])


TOOLS = [
    Tool(
        "todo_create",
        "Add an item to this session's checklist (status pending). Planning only: "
        "it starts no work. Returns the item with its id.",
        TodoCreateArgs,
        todo_create,
    ),
    Tool(
        "todo_update",
        "Change a checklist item's status (pending, in_progress, done, cancelled), title or note.",
        TodoUpdateArgs,
        todo_update,
    ),
    Tool(
        "todo_list",
        "List this session's checklist in creation order, optionally by status.",
        TodoListArgs,
        todo_list,
    ),
]
