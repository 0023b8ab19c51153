"""chaz's objects in the shapes LangGraph's clients read (docs/http.md#mapping).

An assistant is an agent, a thread a session, a run the job a message admits;
a thread's values are its conversation: the session's Messages and
Directives as chat messages. Pure functions: nothing here reads or writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from chaz.domain.agents import AgentSpec
from chaz.domain.entries import Entry, EntryType, Said, is_agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.runs import RUN_STATUS as RUN_STATUS  # re-exported: moved below the server
from chaz.domain.sessions import Session
from chaz.domain.validation import check_ref

#: A run status a client filters by -> the job states it stands for.
JOB_STATES: dict[str, tuple[JobStatus, ...]] = {}
for _state, _status in RUN_STATUS.items():
    JOB_STATES.setdefault(_status, ())
    JOB_STATES[_status] += (_state,)

#: The fields of a thread's metadata that name its assistant.
ASSISTANT_KEYS = ("graph_id", "assistant_id")


def named_agents(metadata: dict[str, Any]) -> set[str]:
    """The agent ids a thread's metadata names (``graph_id``, ``assistant_id``),
    each checked as an id (``request.invalid`` naming it)."""
    return {
        check_ref(f"metadata.{key}", metadata[key])
        for key in ASSISTANT_KEYS
        if metadata.get(key) is not None
    }


def iso(moment: datetime | None) -> str | None:
    """A timestamp as ISO 8601 (None stays None)."""
    return None if moment is None else moment.isoformat()


def message(entry: Entry | Said) -> dict[str, Any] | None:
    """A Message or Directive as a chat message (an agent's is ``ai``, anyone
    else's ``human``); None for an entry that is not conversation."""
    if entry.type not in (EntryType.MESSAGE, EntryType.DIRECTIVE):
        return None
    ai = entry.type is EntryType.MESSAGE and is_agent_sender(entry.sender)
    out: dict[str, Any] = {
        "type": "ai" if ai else "human",
        "content": entry.content,
        "id": entry.id,
        "name": entry.sender,
        "additional_kwargs": {},
        "response_metadata": {"seq": entry.seq, "entry_type": entry.type.value},
    }
    if ai:
        out.update(tool_calls=[], invalid_tool_calls=[], usage_metadata=None)
    return out


def values(entries: Iterable[Entry | Said]) -> dict[str, Any]:
    """A thread's values: ``{"messages": [...]}``, the conversation in seq order."""
    return {"messages": [m for m in map(message, entries) if m is not None]}


def chunk(job_id: str, step: int, text: str) -> dict[str, Any]:
    """A piece of an answer being streamed, as a message chunk: the chunks of
    one step share an id, so a client that joins them gets the reply's text."""
    return {
        "type": "AIMessageChunk",
        "content": text,
        "id": f"run-{job_id}-{step}",
        "name": None,
        "additional_kwargs": {},
        "response_metadata": {},
        "tool_calls": [],
        "invalid_tool_calls": [],
        "tool_call_chunks": [],
    }


def thread(session: Session, *, busy: bool, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session as a thread; ``state``: its values, when they were read."""
    return {
        "thread_id": session.id,
        "created_at": iso(session.created_at),
        "updated_at": iso(session.active_at or session.created_at),
        "metadata": {"graph_id": session.agent_id, "assistant_id": session.agent_id},
        "status": "busy" if busy else "idle",
        "values": state if state is not None else {},
        "interrupts": {},
    }


def run(job: Job, agent_id: str, strategy: str = "enqueue") -> dict[str, Any]:
    """A job as a run on its session's thread."""
    return {
        "run_id": job.id,
        "thread_id": job.session_id,
        "assistant_id": job.member_agent_id or agent_id,
        "created_at": iso(job.created_at),
        "updated_at": iso(job.finished_at or job.started_at or job.created_at),
        "status": RUN_STATUS[job.status],
        "metadata": {},
        "multitask_strategy": strategy,
        "kwargs": {},
    }


def assistant(spec: AgentSpec) -> dict[str, Any]:
    """An agent as an assistant: its id is both ``assistant_id`` and ``graph_id``,
    and its ``context`` is the spec without the id (what an update changes).
    chaz keeps no versions or timestamps of agents: ``version`` is 1."""
    context = spec.model_dump(mode="json")
    del context["id"]
    return {
        "assistant_id": spec.id,
        "graph_id": spec.id,
        "name": spec.id,
        "description": None,
        "config": {},
        "context": context,
        "metadata": {"model": spec.model},
        "version": 1,
        "created_at": None,
        "updated_at": None,
    }
