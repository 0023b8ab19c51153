"""The tool registry: typed tools, and the one place where tool calls are checked.

A tool's arguments are a pydantic model. Whatever the model sends (malformed
JSON, wrong types, an unknown or forbidden tool name) becomes an error result
that the model reads; a tool call never crashes a turn
(docs/contracts.md#invariant-7). What a tool returns is made storable here
too: a NUL or a lone surrogate becomes U+FFFD, and a result larger than
``CHAZ_MAX_CONTENT_BYTES`` is cut, with a note saying so, rather than
refused.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pydantic

from chaz.domain.agents import Limits
from chaz.domain.deliveries import Delivered, DeliveryKind, NewBranch, Reply, Sender
from chaz.domain.entries import NewEntry
from chaz.domain.jobs import Job
from chaz.domain.principals import DEFAULT_PRINCIPAL, LOCAL, Grant, Principal
from chaz.domain.sessions import Session
from chaz.domain.validation import (
    DEFAULT_MAX_CONTENT_BYTES,
    check_tool_name,
    sanitized,
    truncated,
    truncated_size,
)
from chaz.errors import ChazError, ConfigError, HandedBack
from chaz.runtime.backends.base import ToolCallRequest, ToolSpec
from chaz.runtime.cancel import CancelToken
from chaz.services import Services
from chaz.store.types import Appended, JobFields

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


@dataclass
class ToolContext:
    """What a tool may know about the turn that calls it."""

    session_id: str
    job_id: str
    agent_id: str
    tree_id: str
    call_depth: int
    allowed_tools: frozenset[str]
    services: Services | None = None
    #: The calling turn's effective limits (agent narrowed by session).
    limits: Limits = field(default_factory=Limits)
    #: Message depth of the calling job along its lineage (docs/contracts.md#topology).
    message_count: int = 0
    #: The id of the call being served (set per invocation): an idempotency handle.
    call_id: str = ""
    #: What collaboration tools ask of the layers above the runtime.
    delegation: Delegation | None = None
    #: Waits until the turn's ToolCall/ToolResult entries so far are written
    #: (they are written on a background thread): call it before writing into
    #: the session, so the write lands after the call that caused it.
    flush: Callable[[], None] = _nothing
    #: Who acts in this turn: ``agent:<id>`` in the job's project, with the
    #: agent's grants and its starter's intersected (docs/security.md).
    principal: Principal = LOCAL
    #: The turn runs under the unattended policy (docs/security.md#unattended-policy):
    #: whatever it hands on (a schedule it adds) runs unattended too.
    unattended: bool = False
    #: The principal who started the chain of turns (the job's ``owner``).
    owner: str = DEFAULT_PRINCIPAL
    #: Set as soon as the turn's cancel is seen: a long tool checks it
    #: (``raise_if_set``) or waits on it instead of sleeping
    #: (docs/runtime.md#preemptive-cancel).
    cancel: CancelToken = field(default_factory=CancelToken)

    def require(self, grant: Grant, action: str) -> None:
        """Refuse a call the turn's principal lacks ``grant`` for: ``auth.forbidden``,
        which the model reads as a tool error. Checked before any target is
        looked up, so the refusal says nothing about the target."""
        self.principal.require(grant, action)

    def need_services(self) -> Services:
        """The runtime's services; :class:`~chaz.errors.ConfigError` when a tool
        that needs them runs without them (a test calling it bare)."""
        if self.services is None:
            raise ConfigError("this tool needs the runtime's services")
        return self.services

    def need_delegation(self) -> Delegation:
        """The delegation port; :class:`~chaz.errors.ConfigError` when absent."""
        if self.delegation is None:
            raise ConfigError("this tool needs the runtime's delegation port")
        return self.delegation


class Delegation(Protocol):
    """The use cases that collaboration tools call, provided by :mod:`chaz.usecases.turns`.

    Tools sit below the use cases (admission, turns, control): they reach them
    through this port rather than importing them.
    """

    def admit(
        self, session_id: str, draft: NewEntry, *, job_fields: JobFields | None = None
    ) -> Appended:
        """Write an entry that admits a job (quotas checked), then wake a worker."""
        ...

    def run_inline(self, session_id: str, job_id: str) -> None:
        """Run the session's head turn in this thread, lending it the caller's live slot."""
        ...

    def wait(self, job_id: str, timeout: float) -> Job:
        """The job once terminal; :class:`chaz.errors.Timeout` with its state otherwise."""
        ...

    def output(
        self,
        job_id: str,
        viewer_session_id: str,
        *,
        block: bool,
        timeout: float,
        full: bool = False,
    ) -> dict[str, Any]:
        """The job's state and capped (``full``: whole) result, if the viewer may read it."""
        ...

    def spawn(self, sender: Sender, branch: NewBranch) -> Delivered:
        """Create a session and admit its first job, as one delivery."""
        ...

    def deliver(
        self, sender: Sender, target: Session, kind: DeliveryKind, body: str, reply: Reply
    ) -> Delivered:
        """Deliver to an existing session: a job now, or an inbox entry while it is busy."""
        ...


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's result as the model will see it."""

    output: str
    is_error: bool = False


ToolFn = Callable[[Any, ToolContext], str]
#: A tool's own checks of its parsed arguments that need no person: raise a
#: ChazError to refuse. Pure or read-only, since it runs before the gate.
PrecheckFn = Callable[[Any, ToolContext], None]


@dataclass(frozen=True)
class Tool:
    """A named tool with typed arguments.

    ``precheck``, when given, refuses a call that is bound to fail (say, a
    request to the caller's own session) before the approval gate, so that
    nobody is asked to approve it.
    """

    name: str
    description: str
    args: type[pydantic.BaseModel]
    run: ToolFn
    precheck: PrecheckFn | None = None
    #: The JSON schema offered to the model, when it is not ``args``'s (an MCP
    #: server's; its ``precheck`` then holds the arguments to it).
    schema: dict[str, Any] | None = None

    def spec(self) -> ToolSpec:
        """The tool as offered to a model."""
        if self.schema is not None:
            return ToolSpec(name=self.name, description=self.description, parameters=self.schema)
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(name=self.name, description=self.description, parameters=schema)


class ToolSource(Protocol):
    """Tools the registry does not hold but finds by name when a turn offers or
    calls them: an MCP server's (docs/tools.md). A source's tool runs through
    the same checks, policies and caps as a built-in."""

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one of this source's (it may still be unavailable)."""
        ...

    def tool(self, name: str, cancel: CancelToken | None = None) -> Tool | None:
        """The tool ``name`` (None: there is no such tool); a
        :class:`~chaz.errors.ChazError` with a stable code when it cannot be had
        now (its server is down, its schema is malformed, ...)."""
        ...


class ToolRegistry:
    """Tools by name."""

    def __init__(self, tools: Iterable[Tool] = (), sources: Iterable[ToolSource] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        #: Tools registered by name whose module is not loaded yet: the loader of each.
        self._lazy: dict[str, Callable[[], Iterable[Tool]]] = {}
        self._loading = threading.Lock()
        self._sources = list(sources)
        for tool in tools:
            self.register(tool)

    def add_source(self, source: ToolSource) -> None:
        """Find the tools ``source`` owns through it (a built-in's name wins)."""
        self._sources.append(source)

    def register(self, tool: Tool) -> None:
        """Add a tool; names are unique and must be valid tool names."""
        check_tool_name(tool.name)
        if tool.name in self._tools or tool.name in self._lazy:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    def register_lazily(self, names: Iterable[str], load: Callable[[], Iterable[Tool]]) -> None:
        """Add the tools ``load`` returns, known by ``names`` until it runs: the
        first look-up of any of them (a turn that offers or calls one) runs it,
        so a tool's module is imported by the first turn that needs it, not
        at every worker's start (docs/performance.md#worker-start-up)."""
        for name in names:
            check_tool_name(name)
            if name in self._tools or name in self._lazy:
                raise ValueError(f"tool {name!r} is registered twice")
            self._lazy[name] = load

    def names(self) -> list[str]:
        """Every registered tool name."""
        return sorted([*self._tools, *self._lazy])

    def _registered(self, name: str) -> Tool | None:
        """The registered tool ``name``, its module loaded if it was not yet."""
        tool = self._tools.get(name)
        if tool is not None or name not in self._lazy:
            return tool
        with self._loading:  # turn threads share the registry
            load = self._lazy.get(name)
            if load is not None:
                tools = {t.name: t for t in load()}
                named = {n for n, other in self._lazy.items() if other is load}
                if set(tools) != named:
                    raise RuntimeError(f"tools {sorted(tools)} were registered as {sorted(named)}")
                for found in tools.values():
                    del self._lazy[found.name]
                    self._tools[found.name] = found
        return self._tools.get(name)

    def unknown(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` an agent may not be given: neither registered nor
        an MCP tool's ``SERVER.TOOL`` (which the workers resolve, by their own
        CHAZ_MCP_SERVERS, when a turn offers or calls it; docs/tools.md)."""
        known = self._tools.keys() | self._lazy.keys()
        return sorted(n for n in set(names) if n not in known and "." not in n)

    def specs(self, names: Iterable[str], cancel: CancelToken | None = None) -> list[ToolSpec]:
        """Specs of the named tools that exist, in the order given.

        A source's tool that cannot be had now is left out (and logged): the
        turn goes on with the others, and a call to it gets the reason."""
        out = []
        for name in names:
            found = self._find(name, cancel)
            if isinstance(found, Tool):
                out.append(found.spec())
            elif isinstance(found, ChazError):
                log.warning("tool %s is not offered: %s", name, found)
        return out

    def _find(self, name: str, cancel: CancelToken | None) -> Tool | ChazError | None:
        """The tool ``name``, the error of a source that owns it but cannot give it, or None."""
        tool = self._registered(name)
        if tool is not None:
            return tool
        for source in self._sources:
            if source.owns(name):
                try:
                    return source.tool(name, cancel)
                except ChazError as exc:
                    return exc
        return None

    def refusal(self, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome | None:
        """Why ``call`` would be refused without running, as its error outcome; None if not.

        The loop asks this before the approval gate: a call that cannot run
        (unknown, malformed, invalid, refused by the tool's precheck) asks
        nobody to approve it.
        """
        checked = self._checked(call, ctx)
        return checked if isinstance(checked, ToolOutcome) else None

    def invoke(self, call: ToolCallRequest, ctx: ToolContext) -> ToolOutcome:
        """Validate and run one call; every failure is an error outcome."""
        checked = self._checked(call, ctx)
        if isinstance(checked, ToolOutcome):
            return checked
        tool, args = checked
        try:
            output = tool.run(args, replace(ctx, call_id=call.id))
        except HandedBack:
            # Not the call's outcome: the turn stops here and the call stays
            # pending, for the worker that resumes the turn to settle.
            raise
        except ChazError as exc:
            return ToolOutcome(json.dumps({"error": exc.to_dict()}), is_error=True)
        except Exception as exc:
            log.exception("tool %s crashed", tool.name)
            return _error("tool.crashed", f"{tool.name} failed: {type(exc).__name__}: {exc}")
        if not isinstance(output, str):
            return _error("tool.crashed", f"{tool.name} returned {type(output).__name__}, not text")
        return ToolOutcome(truncated(sanitized(output), content_cap(ctx))[0])

    def _checked(
        self, call: ToolCallRequest, ctx: ToolContext
    ) -> tuple[Tool, pydantic.BaseModel] | ToolOutcome:
        """The tool and its parsed arguments, or the error outcome of the first check failed."""
        found = self._find(call.name, ctx.cancel) if call.name in ctx.allowed_tools else None
        if isinstance(found, HandedBack):
            raise found
        if found is None:
            offered = ", ".join(sorted(n for n in ctx.allowed_tools if self._knows(n))) or "none"
            return _error("tool.unknown", f"unknown tool {call.name!r}; available: {offered}")
        if isinstance(found, ChazError):
            return ToolOutcome(json.dumps({"error": found.to_dict()}), is_error=True)
        tool = found
        whole = truncated_size(call.arguments)
        if whole is not None:
            return _error(
                "tool.malformed",
                f"arguments are {whole} bytes, more than CHAZ_MAX_CONTENT_BYTES="
                f"{content_cap(ctx)}: the call did not run",
            )
        try:
            raw = json.loads(call.arguments or "{}")
        except ValueError as exc:
            # JSONDecodeError, and also an integer of more digits than
            # Python converts (sys.get_int_max_str_digits), which json raises
            # as a plain ValueError.
            return _error("tool.malformed", f"arguments are not valid JSON: {exc}")
        except RecursionError:
            # A model (or an attacker) can nest brackets deeper than the parser goes.
            return _error("tool.malformed", "arguments are nested too deeply")
        if not isinstance(raw, dict):
            return _error("tool.malformed", "arguments must be a JSON object")
        try:
            args = tool.args.model_validate(raw)
        except RecursionError:
            return _error("tool.malformed", "arguments are nested too deeply")
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()
            )
            return _error(
                "tool.invalid_arguments", f"invalid arguments for {tool.name}: {problems}"
            )
        if tool.precheck is not None:
            try:
                tool.precheck(args, replace(ctx, call_id=call.id))
            except ChazError as exc:
                return ToolOutcome(json.dumps({"error": exc.to_dict()}), is_error=True)
        return tool, args

    def _knows(self, name: str) -> bool:
        known = name in self._tools or name in self._lazy
        return known or any(s.owns(name) for s in self._sources)


def content_cap(ctx: ToolContext) -> int:
    """The most bytes a tool call's arguments or its result may hold (CHAZ_MAX_CONTENT_BYTES)."""
    return ctx.services.settings.max_content_bytes if ctx.services else DEFAULT_MAX_CONTENT_BYTES


def capped(call: ToolCallRequest, cap: int) -> ToolCallRequest:
    """``call``, its arguments cut to ``cap`` bytes with a note when longer.

    A model's call is capped before it is checkpointed, stored as a ToolCall
    entry or published, as a tool's result is; the registry then refuses a
    cut call (``tool.malformed``) instead of running it on part of its
    arguments.
    """
    text, cut = truncated(call.arguments, cap)
    return call.model_copy(update={"arguments": text}) if cut else call


def _error(code: str, message: str) -> ToolOutcome:
    return ToolOutcome(json.dumps({"error": {"code": code, "message": message}}), is_error=True)
