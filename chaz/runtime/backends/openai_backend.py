"""A model backend for OpenAI and any OpenAI-compatible Chat Completions server.

Transport concerns (connection pooling, timeouts, retrying connection errors,
408/409/429 and 5xx with backoff that honours ``retry-after`` headers) are left
to the official ``openai`` client, configured with ``timeout`` and
``max_retries``. This module only translates between chaz's backend port and
the Chat Completions wire format, and turns every failure into
:class:`chaz.errors.ModelError`.

A turn's cancel token (docs/runtime.md#preemptive-cancel) interrupts a
request in flight: the request runs on a helper thread while the turn waits
for either its answer or the cancel. On a cancel the turn raises
:class:`chaz.errors.Cancelled` at once and closes the client; the helper
thread is abandoned (httpx cannot interrupt a blocked read from another
thread) and ends when the server answers or the timeout passes, its answer
discarded.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, cast

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from chaz.domain.agents import AgentSpec
from chaz.errors import Cancelled, ConfigError, ModelError
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelResponse,
    ToolCallRequest,
    ToolSpec,
    TurnContext,
)
from chaz.runtime.cancel import CancelToken
from chaz.settings import Settings

#: Model used for a bare ``model="openai"`` spec.
DEFAULT_MODEL = "gpt-4o-mini"

#: Placeholder key for servers that ignore authentication (a local vLLM, Ollama, ...).
#: The openai client refuses to start without some key.
UNUSED_API_KEY = "unused"

# Spec options that configure the client rather than the request body.
_CLIENT_OPTIONS = frozenset({"base_url", "api_key", "timeout", "max_retries"})

# Request fields this backend owns; letting options override them would break
# the port's contract (e.g. ``stream`` changes the response shape entirely).
_RESERVED_OPTIONS = frozenset({"model", "messages", "tools", "stream", "n"})


class OpenAIBackend:
    """A :class:`~chaz.runtime.backends.base.ModelBackend` over Chat Completions.

    ``options`` are extra request-body fields sent with every call
    (``temperature``, ``max_tokens``, ``top_p``, ``seed``, or a server's own
    extensions); they must not name fields the backend sets itself.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        options: Mapping[str, Any] | None = None,
        cancel: CancelToken | None = None,
    ) -> None:
        reserved = sorted(_RESERVED_OPTIONS.intersection(options or {}))
        if reserved:
            raise ConfigError(
                f"OpenAI backend options may not set {', '.join(reserved)}", options=reserved
            )
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.options: dict[str, Any] = dict(options or {})
        #: The turn's cancel token (None outside a turn: the call is made inline).
        self.cancel = cancel
        try:
            self._client = openai.OpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
            )
        except openai.OpenAIError as exc:
            # Raised when no key is given and OPENAI_API_KEY is unset: a
            # configuration problem, visible before any turn runs.
            raise ConfigError(f"cannot configure OpenAI client: {exc}") from exc

    @classmethod
    def from_spec(
        cls, spec: AgentSpec, settings: Settings, cancel: CancelToken | None = None
    ) -> OpenAIBackend:
        """Build a backend for an ``"openai"`` or ``"openai:MODEL_NAME"`` agent.

        ``base_url`` and ``api_key`` come from ``spec.options`` first, then
        settings. Without a key, the official endpoint falls back to the
        client's own ``OPENAI_API_KEY`` lookup, while a custom ``base_url``
        also accepts no key at all (local servers usually need none).
        ``timeout`` and ``max_retries`` in options override the settings per agent.
        """
        kind, _, name = spec.model.partition(":")
        if kind != "openai":
            raise ConfigError(f"agent {spec.id!r} does not use an OpenAI model: {spec.model!r}")
        options = dict(spec.options)
        base_url = _opt_str(options.get("base_url")) or settings.openai_base_url
        api_key = _opt_str(options.get("api_key")) or settings.openai_api_key
        if api_key is None and base_url is not None:
            api_key = os.environ.get("OPENAI_API_KEY") or UNUSED_API_KEY
        timeout = float(options.get("timeout", settings.openai_timeout))
        max_retries = int(options.get("max_retries", settings.openai_max_retries))
        return cls(
            name.strip() or DEFAULT_MODEL,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            options={k: v for k, v in options.items() if k not in _CLIENT_OPTIONS},
            cancel=cancel,
        )

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """Ask the model for its next step; raise :class:`ModelError` on any failure,
        :class:`Cancelled` as soon as the turn's cancel token is set."""
        if self.cancel is None:
            return self._complete(messages, tools)
        cancel = self.cancel
        cancel.raise_if_set()
        answer: list[ModelResponse | BaseException] = []
        settled = threading.Event()

        def call() -> None:
            try:
                answer.append(self._complete(messages, tools))
            except BaseException as exc:  # handed to the turn's thread
                answer.append(exc)
            finally:
                settled.set()

        forget = cancel.on_cancel(settled.set)
        threading.Thread(target=call, name="chaz-model-call", daemon=True).start()
        settled.wait()
        forget()
        if not answer:
            # Woken by the cancel: stop waiting now, and drop the client's
            # connections so the abandoned request's answer goes nowhere.
            self.close()
            raise Cancelled("the job was cancelled during a model request")
        result = answer[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _complete(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> ModelResponse:
        try:
            completion = self._client.chat.completions.create(
                model=self.model,
                # Messages already are Chat Completions dicts; the client's
                # TypedDicts describe the same shape.
                messages=cast(Iterable[ChatCompletionMessageParam], messages),
                tools=[_tool_param(t) for t in tools] if tools else openai.omit,
                extra_body=self.options or None,
            )
        except openai.APITimeoutError as exc:
            raise self._error(
                f"model request timed out ({self.timeout:g}s per attempt, "
                f"{self.max_retries} retries)",
                exc,
            ) from exc
        except openai.APIConnectionError as exc:
            raise self._error(
                f"could not reach model server {self._server()}: {_cause(exc)}", exc
            ) from exc
        except openai.APIStatusError as exc:
            raise self._error(
                f"model server answered HTTP {exc.status_code}: {_server_message(exc)}",
                exc,
                status_code=exc.status_code,
            ) from exc
        except openai.OpenAIError as exc:
            raise self._error(f"model request failed: {exc}", exc) from exc
        return self._response(completion)

    def close(self) -> None:
        """Release the client's pooled HTTP connections."""
        self._client.close()

    def _response(self, completion: ChatCompletion) -> ModelResponse:
        # The client does not validate bodies (compatible servers deviate in
        # small ways), so the shape is checked here rather than trusted.
        choices = getattr(completion, "choices", None)
        if not choices:
            raise ModelError(
                "model server returned no choices", model=self.model, server=self._server()
            )
        message = getattr(choices[0], "message", None)
        if message is None:
            raise ModelError(
                "model server returned a choice without a message",
                model=self.model,
                server=self._server(),
            )
        calls = [self._tool_call(c) for c in getattr(message, "tool_calls", None) or []]
        text = getattr(message, "content", None)
        if text is None and not calls:
            # A refusal is the model's answer to the turn; surface it as text
            # rather than as an empty step the loop cannot act on.
            text = getattr(message, "refusal", None)
        return ModelResponse(text=text, tool_calls=calls)

    def _tool_call(self, call: Any) -> ToolCallRequest:
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name:
            raise ModelError(
                "model returned a tool call that is not a function call",
                model=self.model,
                call=_dump(call),
            )
        arguments = getattr(function, "arguments", None)
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            # Some compatible servers send an object instead of JSON text.
            arguments = json.dumps(arguments)
        call_id = getattr(call, "id", None)
        return ToolCallRequest(id=str(call_id or ""), name=name, arguments=arguments)

    def _server(self) -> str:
        return str(self._client.base_url)

    def _error(self, message: str, exc: Exception, **details: Any) -> ModelError:
        return ModelError(
            message,
            model=self.model,
            server=self._server(),
            error_type=type(exc).__name__,
            **details,
        )


def _tool_param(tool: ToolSpec) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _cause(exc: BaseException) -> str:
    # APIConnectionError says only "Connection error."; the transport's own
    # exception (refused, DNS failure, ...) is what an operator needs.
    cause = exc.__cause__ or exc.__context__
    return f"{exc} ({cause})" if cause is not None and str(cause) else str(exc)


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return str(error["message"])
    return exc.message


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else repr(value)
