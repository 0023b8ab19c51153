"""Assistants written: create, update and delete onto saved agents
(docs/http.md#assistants).

Agents are install-wide in chaz, not a project's: every key sees every
agent, and a change to one changes every project's turns of it. So, as the
producer API's ``agents.put`` does, writing them needs an operator (the
embedded default's keyless loopback caller, or an in-process client); an API
key is ``auth.forbidden``, whatever its grants.

An assistant's ``context`` is its agent's spec (every field but ``id``:
``model``, ``system_prompt``, ``tools``, ``script``, ``limits``, ...); a
create names a ``graph_id`` to start from a copy of that agent's spec.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from chaz.domain.agents import AgentSpec
from chaz.domain.validation import check_agent_id, check_ref
from chaz.errors import AgentNotFound, Conflict, Unsupported, ValidationError
from chaz.ids import new_id
from chaz.server import fields, mapping
from chaz.server.state import Call, Caller, Payload

router = APIRouter()

CREATE_FIELDS = ("graph_id", "assistant_id", "name", "context", "if_exists")
UPDATE_FIELDS = ("graph_id", "name", "context")
IF_EXISTS = ("raise", "do_nothing")


def _context(given: dict[str, Any]) -> dict[str, Any]:
    context = given.get("context") or {}
    if not isinstance(context, dict):
        raise ValidationError("context must be an object: the agent's spec", field="context")
    if "id" in context:
        raise ValidationError(
            "context holds the agent's spec without its id (assistant_id names it)",
            field="context.id",
        )
    return context


def _save(c: Call, spec: dict[str, Any]) -> AgentSpec:
    """Check a spec as ``agents.put`` does (its tools must exist), and save it."""
    parsed = AgentSpec.parse(spec, "context")
    # Loaded on first use, as the in-process client does.
    from chaz.tools import default_registry

    registry = default_registry()
    unknown = registry.unknown(parsed.tools)
    if unknown:
        raise ValidationError(
            f"unknown tools {unknown}; known: {registry.names()}", field="context.tools"
        )
    return c.services.store.put_agent(parsed)


def _exists(c: Call, agent_id: str) -> AgentSpec | None:
    try:
        return c.services.store.get_agent(agent_id)
    except AgentNotFound:
        return None


@router.post("/assistants")
def create_assistant(c: Caller, payload: Payload = None) -> dict[str, Any]:
    """A new agent: ``assistant_id`` (else ``name``, else a new id) is its id;
    its spec is ``graph_id``'s, if named, with ``context``'s fields over it."""
    given = fields.body(payload)
    c.principal.require_operator("create assistants (agents are install-wide)")
    fields.refuse_unknown(given, CREATE_FIELDS)
    if_exists = fields.choice(given, "if_exists", IF_EXISTS, "raise")
    named = [given.get(k) for k in ("assistant_id", "name") if given.get(k) is not None]
    if len(set(named)) > 1:
        raise ValidationError(
            "a chaz assistant's name is its id: give assistant_id or name, or both the same",
            field="name",
        )
    agent_id = check_agent_id(named[0], "assistant_id") if named else new_id()
    context = _context(given)
    base: dict[str, Any] = {}
    if given.get("graph_id") is not None:
        template = c.services.store.get_agent(check_ref("graph_id", given["graph_id"]))
        base = template.model_dump(mode="json")
    found = _exists(c, agent_id)
    if found is not None:
        if if_exists == "do_nothing":
            return mapping.assistant(found)
        raise Conflict(f"assistant {agent_id!r} exists (if_exists raise)", field="assistant_id")
    return mapping.assistant(_save(c, {**base, **context, "id": agent_id}))


@router.patch("/assistants/{assistant_id}")
def update_assistant(assistant_id: str, c: Caller, payload: Payload = None) -> dict[str, Any]:
    """Change an agent's spec: ``context``'s fields over the stored ones."""
    given = fields.body(payload)
    c.principal.require_operator("update assistants (agents are install-wide)")
    fields.refuse_unknown(given, UPDATE_FIELDS)
    old = c.services.store.get_agent(check_ref("assistant_id", assistant_id))
    for key in ("graph_id", "name"):
        if given.get(key) not in (None, old.id):
            raise Unsupported(
                f"{key} is the agent's id in chaz: an agent cannot be renamed or re-based",
                field=key,
            )
    context = _context(given)
    if not context:
        return mapping.assistant(old)
    return mapping.assistant(_save(c, {**old.model_dump(mode="json"), **context, "id": old.id}))


@router.delete("/assistants/{assistant_id}", status_code=204)
def delete_assistant(assistant_id: str, c: Caller, request: Request) -> Response:
    """Delete an agent nothing uses (no session, room, job, schedule or key of
    it, in any project): chaz keeps what an agent did, so one in use is 409."""
    c.principal.require_operator("delete assistants (agents are install-wide)")
    fields.refuse_unknown(request.query_params, ())
    c.services.store.delete_agent(check_ref("assistant_id", assistant_id))
    return Response(status_code=204)
