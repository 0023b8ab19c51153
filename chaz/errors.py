"""The one exception root of chaz, with stable error codes.

Every error chaz raises on purpose is a :class:`ChazError`. Its ``code`` is a
stable, dotted identifier that callers (and models reading tool results) can
match on; the message is for people and may change. ``retryable`` says whether
the same request may succeed later without being changed.
"""

from __future__ import annotations

import json
import sys
from typing import Any, ClassVar


class ChazError(Exception):
    """Root of every chaz error. ``code`` is stable; the message is not."""

    code: ClassVar[str] = "chaz.error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form, used by the CLI's ``--json`` and by tool results."""
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            **({"details": self.details} if self.details else {}),
        }

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class ConfigError(ChazError):
    """Settings are missing or inconsistent."""

    code = "config.invalid"


class ValidationError(ChazError):
    """Input was malformed; nothing was changed. ``details["field"]`` names the input."""

    code = "request.invalid"

    @property
    def field(self) -> str | None:
        """The input that was refused (``"content"``, ``"limits.max_turn_steps"``, ...)."""
        value = self.details.get("field")
        return value if isinstance(value, str) else None

    @classmethod
    def from_pydantic(cls, exc: Any, *, model: str, prefix: str = "") -> ValidationError:
        """The chaz form of a pydantic ``ValidationError`` raised building ``model``.

        ``details`` holds ``field`` (the first refused field, dotted) and
        ``errors`` (every field with its message), each under ``prefix`` (the
        argument the model was given as); the input values are left out, so a
        refused secret or a huge value is not echoed back.
        """
        problems = []
        for e in exc.errors(include_url=False, include_input=False, include_context=False):
            path = [prefix] if prefix else []
            path += [str(p) for p in e["loc"]]
            problems.append({"field": _printable(".".join(path)), "message": e["msg"]})
        summary = "; ".join(f"{p['field'] or '(root)'}: {p['message']}" for p in problems)
        first = problems[0]["field"] if problems else ""
        return cls(f"invalid {model}: {summary}", field=first, errors=problems)


class Unsupported(ValidationError):
    """A request field chaz does not implement (yet), given a value; nothing was
    changed. ``details["field"]`` names it: refused, never silently ignored."""

    code = "request.unsupported"


class WebhookForbidden(ValidationError):
    """A run's webhook names (or resolves to) an address chaz does not connect
    to: loopback, private, link-local, metadata (docs/security.md#webhooks);
    nothing was changed. ``details``: ``field``, ``host``, ``reason``, and
    ``address`` for a host that is an address (never what a name resolved to)."""

    code = "webhook.forbidden"


class RequestTooLarge(ValidationError):
    """Content (or metadata) is larger than ``CHAZ_MAX_CONTENT_BYTES``; nothing was changed."""

    code = "request.too_large"


def _printable(text: str) -> str:
    # Field names come from the input (unknown keys): keep lone surrogates
    # out of a message that will be printed or stored.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class NotFound(ChazError):
    """The addressed object does not exist (or is not visible to the caller)."""

    code = "not_found"


class WebhookNotFound(NotFound):
    """No webhook delivery has that id in the caller's project."""

    code = "webhook.not_found"


class DeliveryNotFound(NotFound):
    """No delivery has that id (or the caller may not see it)."""

    code = "delivery.not_found"


class ArtifactNotFound(NotFound):
    """No full-result artifact exists for that job (none was needed, or it expired)."""

    code = "artifact.not_found"


class TodoNotFound(NotFound):
    """No checklist item of this session has that id."""

    code = "todo.not_found"


class ScheduleNotFound(NotFound):
    """No such schedule, or not one of the asking agent's (docs/schedules.md)."""

    code = "schedule.not_found"


class AgentNotFound(NotFound):
    """No saved AgentSpec has that id."""

    code = "agent.not_found"


class SessionNotFound(NotFound):
    """No session has that id or name."""

    code = "session.not_found"


class ApprovalNotFound(NotFound):
    """No approval request has that id (or the caller may not see it)."""

    code = "approval.not_found"


class JobNotFound(NotFound):
    """No job (execution) has that id."""

    code = "job.not_found"


class ApiKeyNotFound(NotFound):
    """No API key has that id (``chaz keys revoke``)."""

    code = "key.not_found"


class Conflict(ChazError):
    """The request conflicts with the current state (a stale version, a taken name)."""

    code = "conflict"


class VersionConflict(Conflict):
    """``expected_version`` did not match the job's current version."""

    code = "conflict.version"


class NameTaken(Conflict):
    """Another session already uses that name."""

    code = "conflict.name_taken"


class IdempotencyMismatch(Conflict):
    """An idempotency key was reused with a different request (content, sender, type, metadata)."""

    code = "conflict.idempotency_mismatch"


class SessionArchived(Conflict):
    """The target session is archived: it takes no new deliveries (its history stays)."""

    code = "session.archived"


class SessionToolForbidden(ChazError):
    """A session tool (docs/contracts.md#session-tools) was called outside an
    interactive turn: only a turn started by a person's Message may list,
    search, create, send to, rename or inspect sessions and deliveries
    (docs/sessions.md#who-may-call-session-tools)."""

    code = "session.tool_forbidden"


class AttachMismatch(ValidationError):
    """An attach pointer read from a session that is not the one it records as its source."""

    code = "attach.mismatch"


class AmbiguousName(ValidationError):
    """A name matched several sessions; ``details["candidates"]`` lists their addresses."""

    code = "session.ambiguous"


class DuplicateDelivery(Conflict):
    """The same text from the same sender is still queued for the target (60 s window)."""

    code = "delivery.duplicate"


class IllegalTransition(Conflict):
    """A job state transition that the state machine forbids."""

    code = "job.illegal_transition"


class Unauthorized(ChazError):
    """The caller may not read or control the addressed object."""

    code = "auth.denied"


class Unauthenticated(ChazError):
    """An API key that is unknown, malformed or revoked; nothing was done."""

    code = "auth.unauthenticated"


class Forbidden(ChazError):
    """The caller lacks a grant the action needs, or the target is in another
    project (docs/security.md); nothing was changed."""

    code = "auth.forbidden"


class QuotaError(ChazError):
    """An admission was refused by a resource limit; nothing was written."""

    code = "quota.exceeded"


class QueueFull(QuotaError):
    """Too many admitted jobs are waiting in the session; try again later."""

    code = "quota.queue_full"
    retryable = True


class JobsExhausted(QuotaError):
    """The session's cumulative job allowance is spent; it never refills."""

    code = "quota.jobs_exhausted"


class ProjectLiveExceeded(QuotaError):
    """The project already has as many unfinished turns as it may; try later."""

    code = "quota.project_live"
    retryable = True


class ProjectJobsExhausted(QuotaError):
    """The project has used all the turns it may ever admit."""

    code = "quota.project_jobs"


class ProjectRateExceeded(QuotaError):
    """The project has admitted as many turns as its rate allows for now;
    ``details["retry_after"]`` is how many seconds until one more may pass."""

    code = "quota.project_rate"
    retryable = True


class TodoLimitReached(QuotaError):
    """The session already holds as many todos as it may (200); nothing was added."""

    code = "todo.limit"


class TopologyError(ChazError):
    """A collaboration topology limit refused the request."""

    code = "topology.exceeded"


class DepthExceeded(TopologyError):
    """Spawning would nest deeper than ``max_call_depth``."""

    code = "topology.depth"


class MessagesExceeded(TopologyError):
    """The message chain is already as long as ``max_messages`` allows."""

    code = "topology.messages"


class FanoutExceeded(TopologyError):
    """The caller turn has already created ``max_spawn_fanout`` branches."""

    code = "topology.fanout"


class SelfDelivery(TopologyError):
    """A session may not deliver to itself."""

    code = "topology.self"


class WaitCycle(TopologyError):
    """A foreground call would wait on a turn that waits on the caller."""

    code = "topology.cycle"


class Timeout(ChazError):
    """A wait ran out before the awaited thing happened."""

    code = "timeout"
    retryable = True


class ModelError(ChazError):
    """The model backend failed to produce a response."""

    code = "model.error"


class ToolError(ChazError):
    """A tool refused or failed a call; the model sees this as an error result."""

    code = "tool.error"


class TurnNotMatched(ChazError):
    """A scripted model had no rule matching the turn's input."""

    code = "model.no_rule"


class Cancelled(ChazError):
    """The turn was cancelled at a step boundary."""

    code = "job.cancelled"


class BudgetExceeded(ChazError):
    """A turn crossed one of its per-turn budgets and was stopped
    (docs/runtime.md#per-turn-budgets); the subclasses name which."""

    code = "budget.exceeded"


class TokenBudgetExceeded(BudgetExceeded):
    """The turn's model steps spent more tokens than ``max_tokens_per_turn``, or
    than what its session, its tree or its caller had left."""

    code = "budget.tokens"


class CostBudgetExceeded(BudgetExceeded):
    """The turn's tokens, priced by ``CHAZ_MODEL_PRICES``, passed a cumulative
    cost budget (its session's, its tree's or its caller's)."""

    code = "budget.cost"


class RuntimeBudgetExceeded(BudgetExceeded):
    """The turn ran longer than ``max_runtime_seconds``."""

    code = "budget.runtime"


class IdleBudgetExceeded(BudgetExceeded):
    """The turn had no model output or tool result for ``max_idle_seconds``."""

    code = "budget.idle"


class HandedBack(ChazError):
    """The turn stopped at a safe point because its worker is shutting down: it is
    put back for another worker, not ended (docs/operations.md#termination)."""

    code = "turn.handed_back"
    retryable = True


class LeaseLost(ChazError):
    """The worker no longer holds the session lane; it must stop writing."""

    code = "lane.lease_lost"
    retryable = True


class BackendUnavailable(ChazError):
    """The database or Redis could not be reached."""

    code = "backend.unavailable"
    retryable = True


class AlreadyRunning(Conflict):
    """Another ``chaz up`` already serves this ``CHAZ_HOME``."""

    code = "conflict.already_running"


class SessionBusy(Conflict):
    """The session could not be compacted now: its lane stayed held by turns, or
    new messages kept arriving while its Summary was being written
    (docs/sessions.md#compaction). Retry later."""

    code = "session.busy"
    retryable = True


class ToolArgumentsInvalid(ChazError):
    """A tool call's arguments do not fit the tool's schema (a built-in's pydantic
    model, an MCP server's JSON schema); the call did not run."""

    code = "tool.invalid_arguments"


class McpError(ChazError):
    """An MCP server's tool could not be had or did not answer (docs/tools.md)."""

    code = "mcp.error"


class McpToolError(McpError):
    """The MCP server ran the tool and answered with an error result (``isError``)."""

    code = "mcp.tool_error"


class McpUnavailable(McpError):
    """The MCP server could not be started or reached; retried at the next call."""

    code = "mcp.unavailable"
    retryable = True


class McpInitTimeout(McpUnavailable):
    """The MCP server did not answer ``initialize`` (and list its tools) within its
    ``init_timeout_seconds``."""

    code = "mcp.init_timeout"


class McpServerCrashed(McpError):
    """The MCP server's connection ended during the call (its process died); the
    call's effect is unknown, and the next call starts the server again."""

    code = "mcp.server_crashed"


class McpCallTimeout(McpError):
    """The MCP tool call took longer than its server's ``timeout_seconds``."""

    code = "mcp.timeout"


class McpBadSchema(McpError):
    """The MCP server describes the tool with an input schema that is not a JSON
    schema of an object: the tool is not offered."""

    code = "mcp.bad_schema"


class McpNameClash(McpError):
    """An MCP tool whose name cannot be told apart from another's (a built-in
    tool, or a second tool of the same name on its server): not offered."""

    code = "mcp.name_clash"


class McpResultTooLarge(McpError):
    """The MCP tool's result is larger than its server's ``max_result_bytes``."""

    code = "mcp.result_too_large"


def validation_message(exc: Any) -> str:
    """A pydantic ``ValidationError``'s failures in one line: ``field: message; ...``."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def write_failure(
    code: str, message: str, payload: dict[str, Any], *, json_mode: bool, console: Any = None
) -> None:
    """Report a failure on stderr as the CLI does: ``{"error": payload}`` in JSON
    mode, ``error [code]: message`` styled on ``console`` (rich's, on a
    terminal), else plain. Here, below every layer, so that the worker
    ``chaz worker`` execs reports a refused setting in the command's words."""
    if json_mode:
        print(json.dumps({"error": payload}, default=str), file=sys.stderr, flush=True)
    elif console is not None:
        from rich.text import Text

        console.print(Text.assemble(("error ", "bold red"), (f"[{code}]", "red"), f": {message}"))
    else:
        print(f"error [{code}]: {message}", file=sys.stderr, flush=True)


def refuses_as_written(exc: ChazError) -> bool:
    """Whether ``exc`` says the request can never succeed as written (a bad
    argument, a missing thing, a refused setting): the CLI's exit status 2."""
    return isinstance(exc, ValidationError | NotFound | ConfigError)


def from_exception(exc: Exception) -> ChazError:
    """The chaz error to report for an exception that escaped a command (or the
    checks a worker's start makes for ``chaz worker``).

    Libraries are looked up in ``sys.modules``, never imported here: one that
    is not loaded cannot have raised.
    """
    if isinstance(exc, ChazError):
        return exc
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        # Input that reached a model unchecked (a malformed id, a bad limit).
        return ValidationError(validation_message(exc))
    redis = sys.modules.get("redis")
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if (redis is not None and isinstance(exc, redis.RedisError)) or (
        sa_exc is not None and isinstance(exc, sa_exc.OperationalError)
    ):
        # An unreachable server is the environment's fault, not a bug: no traceback.
        return BackendUnavailable(f"{type(exc).__name__}: {exc}".splitlines()[0])
    if sa_exc is not None and isinstance(exc, sa_exc.ArgumentError):
        # SQLAlchemy's word for a database URL it cannot parse or load.
        return ConfigError(f"invalid database URL: {exc}".splitlines()[0])
    if isinstance(exc, OSError):
        # A file or directory chaz needs (CHAZ_HOME, an agent file) is unusable.
        return ChazError(str(exc))
    # A bug: still one line with a code, never a traceback on a user's screen.
    return ChazError(f"unexpected {type(exc).__name__}: {exc}".splitlines()[0])
