"""The request bodies of LangGraph's routes, as ``/openapi.json`` documents
them (docs/http.md#routes).

The routes read their bodies as plain JSON and check them themselves
(:mod:`chaz.server.fields`: a field chaz does not implement is refused
naming it, one given its default value is accepted), so FastAPI alone would
document every body as "any JSON". This table says, per route, the fields
chaz implements, their types and which are required, built from the same
field lists the routes check against; :func:`document` lays it over the
app's routes once. Unlisted fields at their default values (``null``,
``false``, ``[]``, ``{}``) are accepted too, so no schema forbids
additional properties.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from chaz.server import assistants, crons, runs
from chaz.server.fields import STREAM_MODES

_TEXT_BLOCK = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
}
#: One user message: the run's write to the thread's session.
INPUT: dict[str, Any] = {
    "type": "object",
    "description": "exactly one user message, written to the thread as the run's input",
    "properties": {
        "messages": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "role": {"enum": ["user", "human"]},
                    "type": {"enum": ["user", "human"]},
                    "content": {
                        "oneOf": [
                            {"type": "string"},
                            {"type": "array", "minItems": 1, "items": _TEXT_BLOCK},
                        ]
                    },
                    "id": {"type": "string"},
                },
                "required": ["content"],
            },
        }
    },
    "required": ["messages"],
}
_ID = {"type": "string", "minLength": 1, "maxLength": 128}
_MODE = {"enum": list(STREAM_MODES)}
_METADATA = {
    "type": "object",
    "description": "only the thread's agent: graph_id and/or assistant_id",
    "properties": {"graph_id": _ID, "assistant_id": _ID},
}
_PAGE = {"limit": {"type": "integer", "minimum": 1}, "offset": {"type": "integer", "minimum": 0}}
_RUN_TYPES: dict[str, Any] = {
    "assistant_id": {**_ID, "description": "the agent (a thread's runs use the thread's)"},
    "input": INPUT,
    "multitask_strategy": {"enum": ["enqueue", "reject", "interrupt", "rollback"]},
    "stream_mode": {"oneOf": [_MODE, {"type": "array", "minItems": 1, "items": _MODE}]},
    "webhook": {"type": "string", "format": "uri", "maxLength": 2048},
    "on_completion": {"enum": ["keep"]},
}
_CRON_TYPES: dict[str, Any] = {
    "assistant_id": _ID,
    "schedule": {"type": "string", "description": "a five-field cron expression"},
    "input": INPUT,
    "end_time": {"type": "string", "format": "date-time"},
    "enabled": {"type": "boolean"},
    "timezone": {"type": "string", "description": "an IANA time zone name"},
    "multitask_strategy": {"enum": list(crons.STRATEGIES)},
    "on_run_completed": {"enum": list(crons.ON_RUN_COMPLETED)},
    "thread_id": _ID,
    "sort_by": {"enum": list(crons.SORT_BY)},
    "sort_order": {"enum": ["asc", "desc"]},
    "select": {"type": "array", "items": {"enum": list(crons.SELECT)}},
    **_PAGE,
}
_ASSISTANT_TYPES: dict[str, Any] = {
    "graph_id": _ID,
    "assistant_id": _ID,
    "name": {"type": "string"},
    "context": {"type": "object", "description": "the agent's spec, without its id"},
    "if_exists": {"enum": list(assistants.IF_EXISTS)},
}


def _object(
    types: dict[str, Any], names: tuple[str, ...], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: types[name] for name in names},
        "required": list(required),
    }


_RUN = _object(_RUN_TYPES, runs.RUN_FIELDS, ("assistant_id", "input"))
_THREADLESS = _object(_RUN_TYPES, (*runs.RUN_FIELDS, "on_completion"), ("assistant_id", "input"))
_CRON_CREATE = _object(_CRON_TYPES, crons.CREATE_FIELDS, ("assistant_id", "schedule"))
_STANDALONE = _object(_CRON_TYPES, crons.STANDALONE_FIELDS, ("assistant_id", "schedule"))

#: (method, path) -> the body's schema.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/threads/{thread_id}/runs"): _RUN,
    ("POST", "/threads/{thread_id}/runs/wait"): _RUN,
    ("POST", "/threads/{thread_id}/runs/stream"): _RUN,
    ("POST", "/runs"): _THREADLESS,
    ("POST", "/runs/wait"): _THREADLESS,
    ("POST", "/runs/stream"): _THREADLESS,
    ("POST", "/threads"): {"type": "object", "properties": {"metadata": _METADATA}},
    ("PATCH", "/threads/{thread_id}"): {"type": "object", "properties": {"metadata": _METADATA}},
    ("POST", "/threads/search"): {
        "type": "object",
        "properties": {"metadata": _METADATA, **_PAGE},
    },
    ("POST", "/threads/{thread_id}/history"): {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "before": {"oneOf": [{"type": "string"}, {"type": "object"}]},
        },
    },
    ("POST", "/assistants/search"): {
        "type": "object",
        "properties": {"graph_id": _ID, **_PAGE},
    },
    ("POST", "/assistants"): _object(_ASSISTANT_TYPES, assistants.CREATE_FIELDS, ("graph_id",)),
    ("PATCH", "/assistants/{assistant_id}"): _object(_ASSISTANT_TYPES, assistants.UPDATE_FIELDS),
    ("POST", "/threads/{thread_id}/runs/crons"): _CRON_CREATE,
    ("POST", "/runs/crons"): _STANDALONE,
    ("PATCH", "/runs/crons/{cron_id}"): _object(_CRON_TYPES, crons.UPDATE_FIELDS),
    ("POST", "/runs/crons/search"): _object(_CRON_TYPES, crons.SEARCH_FIELDS),
    ("POST", "/runs/crons/count"): _object(_CRON_TYPES, ("assistant_id", "thread_id")),
}
#: The routes that answer server-sent events.
STREAMS = (
    ("POST", "/threads/{thread_id}/runs/stream"),
    ("POST", "/runs/stream"),
    ("GET", "/threads/{thread_id}/runs/{run_id}/stream"),
)
_SSE = {
    "description": "server-sent events (docs/http.md#streams)",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def document(app: FastAPI) -> None:
    """Lay :data:`BODIES` and :data:`STREAMS` over the document ``app``
    builds (once: FastAPI keeps the document it built)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        spec = build()
        for (method, path), body in BODIES.items():
            spec["paths"][path][method.lower()]["requestBody"] = {
                "content": {"application/json": {"schema": body}},
                "required": False,
            }
        for method, path in STREAMS:
            spec["paths"][path][method.lower()]["responses"]["200"] = _SSE
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
