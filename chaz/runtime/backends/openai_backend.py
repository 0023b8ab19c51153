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
:class:`chaz.errors.Cancelled` at once and the request is cut on the wire:
the backend's HTTP client opens its connections through a network backend
that remembers their sockets, and the cancel shuts them down. Closing the
client or the response from another thread would not do (a read blocked in
``recv`` does not notice a ``close``); ``shutdown`` wakes it, the server sees
the connection end, and the helper thread ends with it instead of holding a
socket until the server answers or the timeout passes. Connections opened
after the cut are refused, so the client's retries go nowhere.

With the agent option ``stream: true`` the request asks for a streamed
answer (``stream=True``): its text deltas go to the turn's
:class:`~chaz.coord.partials.PartialPublisher` as they arrive (coalesced
there), and the answer is assembled from the deltas. The step the loop sees
is the same either way (docs/runtime.md#streaming).

A step whose turn has a token budget asks for at most what it has left
(``TurnContext.max_tokens``): as ``max_completion_tokens`` against OpenAI's
own endpoint, whose reasoning models refuse ``max_tokens``, and as
``max_tokens`` against any other server, which all read it; an agent option
naming either field picks that field instead and stays the bound where it
is lower; without one, a cap above :data:`CAP_CEILING` is not sent (it
could pass the model's own output limit, which servers refuse). An answer
that stopped at the cap (``finish_reason`` ``length``) is ``truncated``
(docs/runtime.md#the-token-cap).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import httpcore2
import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from chaz.coord.partials import PartialPublisher
from chaz.domain.agents import AgentSpec
from chaz.errors import ConfigError, ModelError
from chaz.runtime.backends.base import (
    ChatMessage,
    ModelResponse,
    TokenCount,
    ToolCallRequest,
    ToolSpec,
    TurnContext,
)
from chaz.runtime.backends.wire_names import WireNames
from chaz.runtime.cancel import CancelToken
from chaz.settings import Settings

#: Model used for a bare ``model="openai"`` spec.
DEFAULT_MODEL = "gpt-4o-mini"

#: Placeholder key for servers that ignore authentication (a local vLLM, Ollama, ...).
#: The openai client refuses to start without some key.
UNUSED_API_KEY = "unused"

# Spec options that configure the client rather than the request body.
_CLIENT_OPTIONS = frozenset({"base_url", "api_key", "timeout", "max_retries", "stream"})

#: The largest token cap sent to an agent whose options name no cap of their
#: own: a larger one could pass the model's output limit, which OpenAI and
#: vLLM refuse with HTTP 400. The agent's ``max_tokens`` option (its model's
#: limit) lets larger caps through.
CAP_CEILING = 4096

# The request fields that cap a step's output: OpenAI's current one, then
# the one every compatible server reads.
_CAP_FIELDS = ("max_completion_tokens", "max_tokens")

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
        stream: bool = False,
        partials: PartialPublisher | None = None,
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
        #: Whether requests ask for a streamed answer.
        self.stream = stream
        #: Where a streamed answer's text goes as it arrives (None: nowhere).
        self.partials = partials
        http_client = openai.DefaultHttpxClient()
        #: Cuts the client's connections on a cancel (None: this httpx cannot).
        self._wire = _Wire.install(http_client)
        try:
            self._client = openai.OpenAI(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                max_retries=max_retries,
                http_client=http_client,
            )
        except openai.OpenAIError as exc:
            # Raised when no key is given and OPENAI_API_KEY is unset: a
            # configuration problem, visible before any turn runs.
            raise ConfigError(f"cannot configure OpenAI client: {exc}") from exc

    @classmethod
    def from_spec(
        cls,
        spec: AgentSpec,
        settings: Settings,
        cancel: CancelToken | None = None,
        partials: PartialPublisher | None = None,
    ) -> OpenAIBackend:
        """Build a backend for an ``"openai"`` or ``"openai:MODEL_NAME"`` agent.

        ``base_url`` and ``api_key`` come from ``spec.options`` first, then
        settings. Without a key, the official endpoint falls back to the
        client's own ``OPENAI_API_KEY`` lookup, while a custom ``base_url``
        also accepts no key at all (local servers usually need none).
        ``timeout`` and ``max_retries`` in options override the settings per agent;
        ``stream: true`` streams answers (their text published to ``partials``).
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
        stream = options.get("stream", False)
        if not isinstance(stream, bool):
            raise ConfigError(
                f"agent {spec.id!r}: option stream must be true or false, not {stream!r}",
                option="stream",
            )
        return cls(
            name.strip() or DEFAULT_MODEL,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            options={k: v for k, v in options.items() if k not in _CLIENT_OPTIONS},
            cancel=cancel,
            stream=stream,
            partials=partials,
        )

    def complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """Ask the model for its next step; raise :class:`ModelError` on any failure,
        :class:`Cancelled` as soon as the turn's cancel token is set.

        MCP tools' names (``SERVER.TOOL``) go out in the API's function-name
        form and come back as chaz's (:mod:`chaz.runtime.backends.wire_names`)."""
        names = WireNames(t.name for t in tools)
        if names.identity:
            return self._ask(messages, tools, turn)
        response = self._ask(
            names.outgoing(messages),
            [t.model_copy(update={"name": names.wire(t.name)}) for t in tools],
            turn,
        )
        calls = [c.model_copy(update={"name": names.local(c.name)}) for c in response.tool_calls]
        return response.model_copy(update={"tool_calls": calls})

    def _ask(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """:meth:`complete`, names as the API takes them."""
        if self.cancel is None:
            return self._complete(messages, tools, turn)
        cancel = self.cancel
        cancel.raise_if_set()
        answer: list[ModelResponse | BaseException] = []
        settled = threading.Event()

        def call() -> None:
            try:
                answer.append(self._complete(messages, tools, turn))
            except BaseException as exc:  # handed to the turn's thread
                answer.append(exc)
            finally:
                settled.set()

        # The cut first (callbacks run in order): the woken turn closes the
        # client, and a socket closed before its shutdown sends the server nothing.
        forget_cut = cancel.on_cancel(self._cut)
        forget = cancel.on_cancel(settled.set)
        threading.Thread(target=call, name="chaz-model-call", daemon=True).start()
        settled.wait()
        forget()
        forget_cut()
        if not answer or cancel.is_set():
            # Woken by the cancel (the connection is cut already): stop
            # waiting now; whatever the helper thread still gets is dropped.
            self.close()
            raise cancel.stopped("the job was cancelled during a model request")
        result = answer[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _complete(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        try:
            if self.stream:
                return self._streamed(messages, tools, turn)
            completion = self._client.chat.completions.create(
                model=self.model,
                # Messages already are Chat Completions dicts; the client's
                # TypedDicts describe the same shape.
                messages=cast(Iterable[ChatCompletionMessageParam], messages),
                tools=[_tool_param(t) for t in tools] if tools else openai.omit,
                extra_body=self.request_fields(turn),
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

    def _streamed(
        self, messages: list[ChatMessage], tools: list[ToolSpec], turn: TurnContext
    ) -> ModelResponse:
        """One streamed request: its text published as it arrives, the step assembled."""
        stream = self._client.chat.completions.create(
            model=self.model,
            messages=cast(Iterable[ChatCompletionMessageParam], messages),
            tools=[_tool_param(t) for t in tools] if tools else openai.omit,
            extra_body=self.request_fields(turn),
            stream=True,
            # The step's tokens come in a last chunk with no choices, sent
            # only when asked for: without it a streamed step counts nothing.
            stream_options={"include_usage": True},
        )
        text: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        counted: list[TokenCount] = []
        finished: list[str] = []
        try:
            for delta in _deltas(stream, counted, finished):
                if self.cancel is not None and self.cancel.is_set():
                    # The turn has gone on without us: publish nothing more.
                    break
                content = getattr(delta, "content", None)
                if isinstance(content, str) and content:
                    text.append(content)
                    if self.partials is not None:
                        self.partials.write(turn.step, content)
                said_no = getattr(delta, "refusal", None)
                if isinstance(said_no, str):
                    refusal.append(said_no)
                for piece in getattr(delta, "tool_calls", None) or []:
                    _add_call_piece(calls, piece)
        finally:
            stream.close()
            if self.partials is not None:
                if self.cancel is not None and self.cancel.is_set():
                    self.partials.discard()
                else:
                    self.partials.flush()
        tool_calls = [self._tool_call(_AssembledCall(c)) for _, c in sorted(calls.items())]
        answer = "".join(text) if text else None
        if answer is None and not tool_calls and refusal:
            answer = "".join(refusal)
        return ModelResponse(
            text=answer,
            tool_calls=tool_calls,
            usage=counted[-1] if counted else None,
            truncated=finished[-1:] == ["length"],
        )

    def request_fields(self, turn: TurnContext) -> dict[str, Any] | None:
        """The request's own fields: the agent's options, the output capped at
        what the turn's token budget has left (see the module docstring)."""
        body = dict(self.options)
        cap = turn.max_tokens
        if cap is None:
            return body or None
        named = [f for f in _CAP_FIELDS if f in body]
        if not named:
            if cap > CAP_CEILING:
                # More than a model may be asked for (OpenAI and vLLM refuse
                # a cap past the model's output limit): the step's tokens are
                # still checked when it ends.
                return body or None
            named = [_CAP_FIELDS[0] if _official(self.base_url) else _CAP_FIELDS[1]]
        for name in named:
            own = body.get(name)
            if not isinstance(own, int) or isinstance(own, bool) or own > cap:
                body[name] = cap
        return body

    def _cut(self) -> None:
        if self._wire is not None:
            self._wire.cut()

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
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=_usage(completion),
            truncated=getattr(choices[0], "finish_reason", None) == "length",
        )

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


def _usage(completion: Any) -> TokenCount | None:
    """The response's ``usage`` (prompt and completion tokens), if the server sent one."""
    usage = getattr(completion, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None)
    completed = getattr(usage, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completed, int):
        return None
    return TokenCount(input=max(prompt, 0), output=max(completed, 0))


def _deltas(stream: Iterable[Any], counted: list[TokenCount], finished: list[str]) -> Iterator[Any]:
    """The ``delta`` of each chunk's first choice; a chunk's ``usage`` (the
    last one's, asked for by ``include_usage``) is appended to ``counted``,
    its ``finish_reason`` to ``finished``."""
    for chunk in stream:
        used = _usage(chunk)
        if used is not None:
            counted.append(used)
        choices = getattr(chunk, "choices", None)
        if choices:
            reason = getattr(choices[0], "finish_reason", None)
            if isinstance(reason, str):
                finished.append(reason)
            delta = getattr(choices[0], "delta", None)
            if delta is not None:
                yield delta


def _add_call_piece(calls: dict[int, dict[str, str]], piece: Any) -> None:
    """Merge one streamed fragment of a tool call into the call at its ``index``."""
    index = getattr(piece, "index", None)
    slot = calls.setdefault(index if isinstance(index, int) else len(calls), {})
    if getattr(piece, "id", None):
        slot["id"] = str(piece.id)
    function = getattr(piece, "function", None)
    for part in ("name", "arguments"):
        value = getattr(function, part, None)
        if isinstance(value, str):
            slot[part] = slot.get(part, "") + value


class _AssembledCall:
    """A tool call put together from stream fragments, shaped like a full one."""

    def __init__(self, parts: dict[str, str]) -> None:
        self.id = parts.get("id")
        self.function = _AssembledFunction(parts.get("name"), parts.get("arguments"))


class _AssembledFunction:
    def __init__(self, name: str | None, arguments: str | None) -> None:
        self.name = name
        self.arguments = arguments


class _Wire(httpcore2.NetworkBackend):
    """A network backend that remembers the sockets it opened, so that a cancel
    can shut them down from another thread (see the module docstring)."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._streams: weakref.WeakSet[httpcore2.NetworkStream] = weakref.WeakSet()
        self._cut = False

    @classmethod
    def install(cls, http_client: Any) -> _Wire | None:
        """Put a wire under every connection pool of ``http_client`` (its default
        transport and any proxy mounts); None if their shape is not the known one."""
        # httpx exposes no hook for the sockets a pool opens; its pools keep
        # their network backend in ``_network_backend`` (httpcore's public
        # ``network_backend`` argument). Should that change, a cancel still
        # ends the turn at once, only without cutting the connection.
        transports = [getattr(http_client, "_transport", None)]
        transports += list(getattr(http_client, "_mounts", {}).values())
        pools = [getattr(t, "_pool", None) for t in transports if t is not None]
        inner = [getattr(p, "_network_backend", None) for p in pools]
        if not pools or not all(isinstance(b, httpcore2.NetworkBackend) for b in inner):
            return None
        wire = cls(cast(httpcore2.NetworkBackend, inner[0]))
        for pool in pools:
            pool._network_backend = wire  # type: ignore[union-attr]
        return wire

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect (refused once the wire is cut) and remember the socket."""
        self._refuse_if_cut()
        return self._keep(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect (refused once the wire is cut) and remember the socket."""
        self._refuse_if_cut()
        return self._keep(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        """As the wrapped backend sleeps."""
        self._inner.sleep(seconds)

    def cut(self) -> None:
        """Shut down every socket opened so far, and refuse new ones."""
        with self._lock:
            self._cut = True
            streams = list(self._streams)
        for stream in streams:
            sock = stream.get_extra_info("socket")
            if isinstance(sock, socket.socket):
                # An OSError: closed already, nothing in flight on it.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _refuse_if_cut(self) -> None:
        if self._cut:
            raise httpcore2.ConnectError("the model request was cancelled")

    def _keep(self, stream: httpcore2.NetworkStream) -> httpcore2.NetworkStream:
        with self._lock:
            if not self._cut:
                self._streams.add(stream)
                return stream
        stream.close()
        raise httpcore2.ConnectError("the model request was cancelled")


def _tool_param(tool: ToolSpec) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _official(base_url: str | None) -> bool:
    """Whether requests go to OpenAI's own endpoint (the client's default)."""
    if base_url is None:
        return True
    return urlsplit(base_url).hostname == "api.openai.com"


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
