"""Pure rules of MCP tools (docs/tools.md): names, schemas, argument checks,
narrowing, results, and the registry's handling of a tool source."""

from __future__ import annotations

import json
import subprocess
import sys

import pydantic
import pytest
from mcp_types import CallToolResult, ImageContent, TextContent

from chaz.domain.agents import AgentSpec
from chaz.domain.mcp import (
    check_arguments,
    checked_input_schema,
    mcp_tool_name,
    split_tool_name,
    tools_by_name,
)
from chaz.errors import (
    McpBadSchema,
    McpNameClash,
    McpResultTooLarge,
    McpUnavailable,
    ToolArgumentsInvalid,
    ValidationError,
)
from chaz.runtime.backends.base import ToolCallRequest
from chaz.runtime.backends.wire_names import WireNames, wire_name
from chaz.runtime.cancel import CancelToken
from chaz.runtime.registry import Tool, ToolContext, ToolRegistry
from chaz.settings import McpServer, Settings
from chaz.tools import default_registry
from chaz.tools.mcp.results import result_text
from chaz.tools.mcp.source import McpArguments

SCHEMA = {
    "type": "object",
    "properties": {"time": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["time"],
}


def test_names_are_server_dot_tool_and_split_back() -> None:
    assert mcp_tool_name("time", "convert_time") == "time.convert_time"
    assert split_tool_name("time.convert_time") == ("time", "convert_time")
    # The server's own name may hold dots: only the first one splits.
    assert split_tool_name("srv.a.b") == ("srv", "a.b")
    assert split_tool_name("echo") is None
    assert split_tool_name(".x") is None and split_tool_name("x.") is None
    for bad in ("", "a b", "x" * 65, "naïve", "a/b"):
        with pytest.raises(McpBadSchema):
            mcp_tool_name("srv", bad)


def test_agent_specs_accept_mcp_names_and_refuse_malformed_ones() -> None:
    spec = AgentSpec(id="a", model="openai", tools=["echo", "time.convert_time", "s.a.b-c"])
    assert "time.convert_time" in spec.tools
    for bad in (".x", "x.", "a b.c", "s" * 33 + ".t", "s." + "t" * 65):
        with pytest.raises(ValidationError):
            AgentSpec(id="a", model="openai", tools=[bad])


def test_a_listing_with_a_name_twice_is_a_name_clash() -> None:
    assert tools_by_name("s", [("a", 1), ("b", 2)]) == {"a": 1, "b": 2}
    with pytest.raises(McpNameClash) as caught:
        tools_by_name("s", [("a", 1), ("a", 2)])
    assert caught.value.code == "mcp.name_clash" and caught.value.details["tool"] == "a"


@pytest.mark.parametrize(
    "schema",
    [
        None,
        [],
        "object",
        {"type": "string"},
        {"type": "object", "properties": {"x": {"type": 12}}},
        {"type": "object", "required": "x"},
        {"type": "object", "description": "x" * (70 * 1024)},
        {"type": "object", "default": float("nan")},
    ],
)
def test_a_malformed_input_schema_is_refused_with_a_stable_code(schema: object) -> None:
    with pytest.raises(McpBadSchema) as caught:
        checked_input_schema("s", "t", schema)
    assert caught.value.code == "mcp.bad_schema"


def test_a_good_schema_passes_and_checks_arguments() -> None:
    assert checked_input_schema("s", "t", SCHEMA) is SCHEMA
    assert checked_input_schema("s", "t", {"properties": {}}) == {"properties": {}}
    check_arguments("s.t", SCHEMA, {"time": "12:00", "n": 2})
    for args in ({}, {"time": 5}, {"time": "x", "n": 0}):
        with pytest.raises(ToolArgumentsInvalid) as caught:
            check_arguments("s.t", SCHEMA, args)
        assert caught.value.code == "tool.invalid_arguments"
        assert "s.t" in caught.value.message


def test_results_are_text_binary_parts_are_named_and_a_large_one_is_refused() -> None:
    result = CallToolResult(
        content=[
            TextContent(text="one"),
            ImageContent(data="QUJD", mime_type="image/png"),
        ]
    )
    text = result_text("s", "t", result, 1000)
    assert text.startswith("one\n[image image/png, 4 base64 characters omitted]")
    structured = CallToolResult(content=[], structured_content={"a": 1})
    assert json.loads(result_text("s", "t", structured, 1000)) == {"a": 1}
    with pytest.raises(McpResultTooLarge) as caught:
        result_text("s", "t", CallToolResult(content=[TextContent(text="x" * 100)]), 50)
    assert caught.value.code == "mcp.result_too_large"


def test_settings_take_a_json_table_of_servers_and_mask_their_secrets() -> None:
    s = Settings(
        _env_file=None,
        mcp_servers=json.dumps(
            {
                "time": {"command": "mcp-server-time", "env": {"TOKEN": "secret"}},
                "web": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "B x"}},
            }
        ),
    )
    assert s.mcp_servers["time"].transport == "stdio"
    assert s.mcp_servers["web"].transport == "http"
    shown = json.dumps(s.masked()["mcp_servers"]) + repr(s)
    assert "secret" not in shown and "B x" not in shown
    refused: list[dict[str, dict[str, object]]] = [
        {"a.b": {"command": "x"}},
        {"a": {}},
        {"a": {"command": "x", "url": "http://h/"}},
        {"a": {"url": "ftp://h/"}},
        {"a": {"command": "x", "shell": True}},
    ]
    for bad in refused:
        with pytest.raises(pydantic.ValidationError, match="mcp_servers"):
            Settings(_env_file=None, mcp_servers=json.dumps(bad))


class _Source:
    """A tool source with one tool, one unavailable tool, and nothing else."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def owns(self, name: str) -> bool:
        return name.startswith("fake.")

    def tool(self, name: str, cancel: CancelToken | None = None) -> Tool | None:
        self.asked.append(name)
        if name == "fake.down":
            raise McpUnavailable("down")
        if name != "fake.up":
            return None

        def precheck(args: McpArguments, _ctx: ToolContext) -> None:
            check_arguments(name, SCHEMA, args.values())

        def run(args: McpArguments, _ctx: ToolContext) -> str:
            return "ran " + json.dumps(args.values())

        return Tool(name, "up", McpArguments, run, precheck=precheck, schema=SCHEMA)


def _ctx(*tools: str) -> ToolContext:
    return ToolContext("s", "j", "a", "t", 0, frozenset(tools))


def _call(name: str, args: object) -> ToolCallRequest:
    return ToolCallRequest(id="c1", name=name, arguments=json.dumps(args))


def test_the_registry_offers_and_runs_a_source_tool_as_any_other() -> None:
    registry = default_registry()
    registry.add_source(_Source())
    specs = registry.specs(["echo", "fake.up", "fake.down", "fake.none"])
    assert [s.name for s in specs] == ["echo", "fake.up"]
    assert specs[1].parameters == SCHEMA
    ctx = _ctx("fake.up", "fake.down")
    assert registry.invoke(_call("fake.up", {"time": "x"}), ctx).output == 'ran {"time": "x"}'
    refused = registry.refusal(_call("fake.up", {"n": 0}), ctx)
    assert refused is not None and refused.is_error
    assert json.loads(refused.output)["error"]["code"] == "tool.invalid_arguments"
    down = registry.invoke(_call("fake.down", {}), ctx)
    assert json.loads(down.output)["error"]["code"] == "mcp.unavailable"


def test_a_tool_outside_the_turns_list_is_unknown_and_never_asked_for() -> None:
    # Narrowing (docs/contracts.md#authority): a child's allowed tools are its agent's
    # and its caller's intersected; a source is not even asked for the others.
    source = _Source()
    registry = ToolRegistry(sources=[source])
    outcome = registry.invoke(_call("fake.up", {"time": "x"}), _ctx("echo"))
    assert json.loads(outcome.output)["error"]["code"] == "tool.unknown"
    assert source.asked == []


def test_agents_may_name_mcp_tools_but_not_unknown_built_ins() -> None:
    registry = default_registry()
    assert registry.unknown(["echo", "time.convert_time", "nope"]) == ["nope"]


def test_a_server_config_needs_exactly_one_transport() -> None:
    McpServer(command="x")
    McpServer(url="http://127.0.0.1:9/mcp")
    with pytest.raises(ValueError):
        McpServer()


def test_wire_names_fit_the_api_and_map_back_one_to_one() -> None:
    assert wire_name("echo") == "echo"
    assert wire_name("time.convert_time") == "time__convert_time"
    assert wire_name("s.a.b") == "s__a__b"
    long_a, long_b = "s" * 32 + "." + "a" * 64, "s" * 32 + "." + "a" * 63 + "b"
    assert len(wire_name(long_a)) == 64 and wire_name(long_a) != wire_name(long_b)
    names = WireNames(["echo", "time.convert_time", long_a])
    assert not names.identity and WireNames(["echo", "clock"]).identity
    for name in ("echo", "time.convert_time", long_a):
        assert names.local(names.wire(name)) == name
    assert names.local("made_up") == "made_up"
    # Two names, one wire name: the first keeps it, the second is not mapped.
    clash = WireNames(["a.b", "a__b"])
    assert clash.local("a__b") == "a.b" and clash.wire("a__b") == "a__b"


def test_a_worker_imports_neither_the_mcp_sdk_nor_jsonschema_until_a_turn_names_a_tool() -> None:
    # Every worker imports the MCP source; few name a server. The SDK and
    # jsonschema were a quarter of a worker's start when imported with it.
    code = (
        "import sys\n"
        "import workers.tasks\n"
        "heavy = ('mcp', 'mcp_types', 'jsonschema', 'httpx2')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
