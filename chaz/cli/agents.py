"""``chaz agents``: save agents from JSON, list them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pydantic

from chaz.cli.context import Context, pydantic_message
from chaz.cli.output import EXIT_OK
from chaz.domain.agents import AgentSpec
from chaz.errors import ValidationError


def _read_agents(source: str) -> tuple[list[AgentSpec], bool]:
    """AgentSpecs from a JSON file (or ``-``, stdin); True when it held a list."""
    name = "stdin" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{name} is not UTF-8 text (byte {exc.start}: {exc.reason})", file=name
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{name} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        # The json module recurses once per nesting level: a deep file would
        # otherwise end the command with a RecursionError.
        raise ValidationError(f"{name} is nested too deeply to be an agent", file=name) from exc
    many = isinstance(data, list)
    items = data if many else [data]
    specs: list[AgentSpec] = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]" if many else name
        try:
            spec = AgentSpec.model_validate(item)
        except pydantic.ValidationError as exc:
            raise ValidationError(f"{where} is not a valid agent: {pydantic_message(exc)}") from exc
        if any(s.id == spec.id for s in specs):
            raise ValidationError(f"{where}: agent {spec.id!r} appears twice in {name}")
        specs.append(spec)
    return specs, many


def cmd_agents_put(ctx: Context) -> int:
    """Create or replace agents from JSON (one object or a list)."""
    specs, many = _read_agents(ctx.args.file)
    # Every spec is checked (fields here, tools in put_many) before one
    # transaction saves them all: a bad file changes nothing.
    saved = ctx.client.agents.put_many(specs)
    out = ctx.out
    if out.json_mode:
        dumped = [s.model_dump(mode="json") for s in saved]
        out.json(dumped if many else dumped[0])
        return EXIT_OK
    for spec in saved:
        tools = ", ".join(spec.tools) or "no tools"
        out.line(f"saved agent {spec.id} ({spec.model}; {tools})")
    return EXIT_OK


def cmd_agents_ls(ctx: Context) -> int:
    """List saved agents."""
    agents = ctx.client.agents.list()
    if ctx.out.json_mode:
        ctx.out.json([a.model_dump(mode="json") for a in agents])
        return EXIT_OK
    ctx.out.table(
        "agents",
        ["ID", "MODEL", "TOOLS", "SYSTEM PROMPT"],
        [[a.id, a.model, a.tools, _shorten(a.system_prompt, 50)] for a in agents],
    )
    return EXIT_OK


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
