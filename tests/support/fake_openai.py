"""A small, real OpenAI-compatible HTTP server for tests (standard library only).

It listens on 127.0.0.1 on a free port and answers ``POST /v1/chat/completions``
with canned responses, in order, from a queue the test fills::

    with FakeOpenAI() as srv:
        srv.push_tool_call("clock", {})
        srv.push_error(500, times=2)      # then two 500s ...
        srv.push_text("It is noon.")      # ... then the answer
        client = openai.OpenAI(base_url=srv.base_url, api_key="unused")
        ...
        assert srv.requests[0]["tools"][0]["function"]["name"] == "clock"

Every request body is recorded (``srv.requests``), also ones answered with an
error. A request with ``"stream": true`` is answered with server-sent events:
``push_stream(["Hel", "lo"], pause=...)`` queues the chunks, and any other
canned answer is streamed as one chunk. ``srv.hangups`` counts the requests
whose client closed the connection before the answer was complete (a
delayed answer or a stream's pause notices it at once). With the queue empty
the server answers HTTP 500 with ``x-should-retry: false`` so a missing
canned response fails fast and loudly.

As a pytest fixture::

    @pytest.fixture
    def fake_openai() -> Iterator[FakeOpenAI]:
        with FakeOpenAI() as srv:
            yield srv
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["CannedResponse", "FakeOpenAI", "RecordedRequest"]


@dataclass(frozen=True)
class CannedResponse:
    """One queued answer: HTTP status, JSON body, extra headers, delay before answering.

    A body of ``None`` means "a chat completion built from ``message``".
    """

    status: int = 200
    body: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: For a streamed answer: its content deltas, one event each (None: the
    #: message's content as one delta).
    chunks: tuple[str, ...] | None = None
    #: Seconds between a stream's chunks.
    pause: float = 0.0
    #: A stream's chunks are sent once this is set (its headers at once).
    hold: threading.Event | None = None
    #: Prompt and completion tokens the answer reports (a stream's only when
    #: the request asks ``stream_options.include_usage``, as OpenAI does).
    usage: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeOpenAI:
    """An OpenAI-compatible Chat Completions server on 127.0.0.1, run in a thread.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`). Queue
    answers with the ``push_*`` methods; each request to
    ``/v1/chat/completions`` consumes one. ``delay`` on any push makes the
    server wait that long before answering (for timeout tests); a pending
    delay is cut short when the server stops.
    """

    def __init__(self, *, model: str = "fake-model") -> None:
        self.model = model
        self._queue: deque[CannedResponse] = deque()
        self._received: list[RecordedRequest] = []
        self._hangups = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> FakeOpenAI:
        """Bind to a free port on 127.0.0.1 and serve in a daemon thread."""
        if self._server is not None:
            return self
        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port; delayed answers are abandoned."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses -----------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client as ``base_url`` (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- programming answers -------------------------------------------------

    def push(self, response: CannedResponse, *, times: int = 1) -> None:
        """Queue ``response`` ``times`` times."""
        with self._lock:
            self._queue.extend([response] * times)

    def push_text(
        self, text: str | None, *, finish_reason: str = "stop", delay: float = 0.0
    ) -> None:
        """Queue an assistant answer with ``content`` = ``text``."""
        self.push(
            CannedResponse(
                message={"role": "assistant", "content": text, "refusal": None},
                finish_reason=finish_reason,
                delay=delay,
            )
        )

    def push_stream(
        self,
        chunks: list[str],
        *,
        pause: float = 0.0,
        delay: float = 0.0,
        hold: threading.Event | None = None,
        usage: tuple[int, int] = (1, 1),
    ) -> None:
        """Queue a streamed answer: ``chunks`` as content deltas, ``pause`` seconds
        apart, sent once ``hold`` is set (the request must ask for ``stream``),
        then ``usage`` in a chunk of its own if the request asks for it."""
        self.push(
            CannedResponse(
                message={"role": "assistant", "content": "".join(chunks), "refusal": None},
                chunks=tuple(chunks),
                pause=pause,
                delay=delay,
                hold=hold,
                usage=usage,
            )
        )

    def push_tool_call(
        self,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        id: str | None = None,
        content: str | None = None,
        delay: float = 0.0,
    ) -> str:
        """Queue an answer calling one tool; return the tool call id.

        ``arguments`` may be a dict (sent JSON-encoded, as OpenAI does) or a
        raw string, sent verbatim (to test malformed arguments).
        """
        return self.push_tool_calls([(name, arguments, id)], content=content, delay=delay)[0]

    def push_tool_calls(
        self,
        calls: list[tuple[str, dict[str, Any] | str | None, str | None]],
        *,
        content: str | None = None,
        delay: float = 0.0,
    ) -> list[str]:
        """Queue one answer calling several tools: ``[(name, arguments, id or None)]``."""
        ids: list[str] = []
        wire: list[dict[str, Any]] = []
        for name, arguments, call_id in calls:
            call_id = call_id or f"call_{next(self._ids)}"
            ids.append(call_id)
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            wire.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
            )
        self.push(
            CannedResponse(
                message={
                    "role": "assistant",
                    "content": content,
                    "refusal": None,
                    "tool_calls": wire,
                },
                finish_reason="tool_calls",
                delay=delay,
            )
        )
        return ids

    def push_error(
        self,
        status: int,
        *,
        times: int = 1,
        message: str | None = None,
        retry_after_ms: float | None = 1,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue ``times`` error answers with HTTP ``status`` and an OpenAI error body.

        ``retry-after-ms`` (1 ms by default) is honoured by the openai client,
        so retry tests do not sit through its exponential backoff; pass
        ``None`` to leave the header out.
        """
        extra = dict(headers or {})
        if retry_after_ms is not None:
            extra.setdefault("retry-after-ms", f"{retry_after_ms:g}")
        body = {
            "error": {
                "message": message or f"fake error {status}",
                "type": "rate_limit_exceeded" if status == 429 else "fake_error",
                "param": None,
                "code": str(status),
            }
        }
        self.push(CannedResponse(status=status, body=body, headers=extra, delay=delay), times=times)

    def push_json(
        self,
        body: dict[str, Any],
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue an arbitrary JSON body (e.g. a completion with no choices)."""
        self.push(
            CannedResponse(status=status, body=body, headers=dict(headers or {}), delay=delay)
        )

    def clear(self) -> None:
        """Drop queued answers and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._received.clear()

    # -- inspection ------------------------------------------------------------

    @property
    def pending(self) -> int:
        """How many queued answers have not been served yet."""
        with self._lock:
            return len(self._queue)

    @property
    def hangups(self) -> int:
        """Requests whose client hung up before their answer was complete."""
        with self._lock:
            return self._hangups

    @property
    def received(self) -> list[RecordedRequest]:
        """Every request received so far, with method, path and headers."""
        with self._lock:
            return list(self._received)

    @property
    def requests(self) -> list[Any]:
        """The JSON bodies of chat completion requests received so far, in order."""
        return [r.body for r in self.received if r.path.endswith("/chat/completions")]

    # -- serving (called from handler threads) -------------------------------

    def _record(self, request: RecordedRequest, *, consume: bool) -> CannedResponse | None:
        with self._lock:
            self._received.append(request)
            return self._queue.popleft() if consume and self._queue else None

    def _hung_up(self) -> None:
        with self._lock:
            self._hangups += 1

    def _chunk(self, request_body: Any, delta: dict[str, Any], finish: str | None) -> bytes:
        model = request_body.get("model") if isinstance(request_body, dict) else None
        chunk = {
            "id": "chatcmpl-fake-stream",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model or self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    def _usage_chunk(self, request_body: Any, usage: tuple[int, int]) -> bytes:
        """The last chunk ``include_usage`` asks for: no choices, the step's tokens."""
        chunk = json.loads(self._chunk(request_body, {}, None)[len(b"data: ") :])
        prompt, completion = usage
        chunk["choices"] = []
        chunk["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    def _stream_events(self, canned: CannedResponse, request_body: Any) -> list[bytes]:
        """The events of a streamed answer, after the first (the role)."""
        message = canned.message or {}
        chunks = canned.chunks
        if chunks is None:
            chunks = (message["content"],) if message.get("content") else ()
        events = [self._chunk(request_body, {"content": c}, None) for c in chunks]
        for i, call in enumerate(message.get("tool_calls") or []):
            delta = {"tool_calls": [dict(call, index=i)]}
            events.append(self._chunk(request_body, delta, None))
        events.append(self._chunk(request_body, {}, canned.finish_reason))
        options = request_body.get("stream_options") if isinstance(request_body, dict) else None
        if isinstance(options, dict) and options.get("include_usage"):
            events.append(self._usage_chunk(request_body, canned.usage))
        events.append(b"data: [DONE]\n\n")
        return events

    def _completion(self, canned: CannedResponse, request_body: Any) -> dict[str, Any]:
        model = request_body.get("model") if isinstance(request_body, dict) else None
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": canned.message,
                    "finish_reason": canned.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": canned.usage[0],
                "completion_tokens": canned.usage[1],
                "total_tokens": sum(canned.usage),
            },
            "system_fingerprint": None,
        }


def _make_handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0 closes each connection after its answer, so no handler
        # thread lingers on an idle keep-alive socket after the test.
        protocol_version = "HTTP/1.0"
        server_version = "FakeOpenAI/1.0"

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [_model_entry(fake.model)]})
            else:
                self._send(404, _error_body(f"no route GET {self.path}", "not_found"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
                self._send(404, _error_body(f"no route POST {self.path}", "not_found"))
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            streaming = isinstance(body, dict) and bool(body.get("stream"))
            canned = fake._record(RecordedRequest("POST", self.path, headers, body), consume=True)
            if canned is None:
                self._send(
                    500,
                    _error_body("FakeOpenAI: no canned response queued", "fake_queue_empty"),
                    {"x-should-retry": "false"},
                )
                return
            if canned.delay and not self._idle(canned.delay):
                return  # server stopping or client gone: abandon the answer
            if streaming and canned.status == 200 and canned.body is None:
                self._stream(canned, body)
                return
            payload = canned.body if canned.body is not None else fake._completion(canned, body)
            self._send(canned.status, payload, canned.headers)

        def _idle(self, seconds: float, until: threading.Event | None = None) -> bool:
            """Wait ``seconds`` (or until ``until`` is set); False early if the
            server stops or the client hangs up."""
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                if fake._stopping.is_set():
                    return False
                if until is not None and until.is_set():
                    return True
                readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                try:
                    gone = bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    gone = True
                if gone:
                    fake._hung_up()
                    return False
            return not fake._stopping.is_set()

        def _stream(self, canned: CannedResponse, body: Any) -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(fake._chunk(body, {"role": "assistant", "content": ""}, None))
                self.wfile.flush()
                if canned.hold is not None and not self._idle(3600, until=canned.hold):
                    return
                for i, event in enumerate(fake._stream_events(canned, body)):
                    if i and canned.pause and not self._idle(canned.pause):
                        return
                    self.wfile.write(event)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                fake._hung_up()

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


def _error_body(message: str, type_: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": None}}


def _model_entry(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "fake-openai"}
