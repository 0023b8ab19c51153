"""``/openapi.json`` documents the body of every LangGraph route that takes
one, with the fields the route checks against (chaz/server/schemas.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaz.server import app as server_app
from chaz.server import schemas
from chaz.server.producer import PREFIX
from chaz.services import Services
from chaz.settings import Settings


def _app(tmp_path: Path) -> Any:
    return server_app.create_app(Services(Settings(home=tmp_path)))


def test_every_langgraph_route_with_a_body_has_its_schema(tmp_path: Path) -> None:
    app = _app(tmp_path)
    spec = app.openapi()
    with_body = {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        if not path.startswith(PREFIX)
        for method, operation in operations.items()
        if "requestBody" in operation
    }
    assert with_body == set(schemas.BODIES)
    for method, path in schemas.BODIES:
        operation = spec["paths"][path][method.lower()]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["type"] == "object" and body["properties"], (method, path)
    for method, path in schemas.STREAMS:
        answers = spec["paths"][path][method.lower()]["responses"]["200"]["content"]
        assert "text/event-stream" in answers


def test_a_run_body_names_exactly_the_fields_the_route_takes(tmp_path: Path) -> None:
    from chaz.server import runs

    spec = _app(tmp_path).openapi()
    run = spec["paths"]["/threads/{thread_id}/runs"]["post"]["requestBody"]
    body = run["content"]["application/json"]["schema"]
    assert set(body["properties"]) == set(runs.RUN_FIELDS)
    assert body["required"] == ["assistant_id", "input"]
    modes = body["properties"]["stream_mode"]["oneOf"][0]["enum"]
    assert "messages-tuple" in modes and "updates" in modes
