"""How an event stream of chaz serve ends (docs/http.md#chaz-s-own-routes):
the server ends every watch with ``end`` or ``error``, a bug's and a
backend's failure included, and the remote client raises
``backend.unavailable`` for a stream that stopped before either, as a
proxy's idle timeout cuts one, instead of taking it for a finished watch.

The cut stream comes from a small HTTP server of the test's own: what it
stands in for (a proxy that ends a response cleanly between two events) is
not something that runs here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from chaz.client.remote.namespaces import opened
from chaz.client.remote.transport import Transport
from chaz.errors import BackendUnavailable, NotFound
from chaz.server.producer import watched


class _Item:
    """An entry as ``watched`` reads it: a type and its JSON."""

    type = "message"

    def model_dump_json(self) -> str:
        return json.dumps({"seq": 1})


def _failing(exc: Exception) -> Iterator[Any]:
    yield _Item()
    raise exc


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (RuntimeError("a bug"), "chaz.error"),
        (redis.ConnectionError("gone"), "backend.unavailable"),
        (NotFound("no such session"), NotFound.code),
    ],
)
def test_a_failed_watch_ends_in_an_error_event(exc: Exception, code: str) -> None:
    events = list(watched(_failing(exc)))
    assert [e["event"] for e in events] == ["open", "entry", "error"]
    assert json.loads(events[-1]["data"])["code"] == code


def test_a_finished_watch_ends_in_an_end_event() -> None:
    events = list(watched(iter([_Item()])))
    assert [e["event"] for e in events] == ["open", "entry", "end"]


class _Cutting(BaseHTTPRequestHandler):
    """Answers every GET with the stream's head and one entry, then ends
    the response cleanly, without an ``end`` event; ``?ends=1`` sends the
    ``end`` event too."""

    def do_GET(self) -> None:
        body = 'event: open\ndata: {}\n\nevent: entry\ndata: {"seq": 1}\n\n'
        if "ends=1" in self.path:
            body += "event: end\ndata: {}\n\n"
        raw = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def cutting() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Cutting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_stream_cut_before_its_end_raises_backend_unavailable(cutting: str) -> None:
    transport = Transport(cutting, api_key="k")
    try:
        events = opened(transport, "/sessions/s/watch", {})
        assert next(events) == ("entry", {"seq": 1})
        with pytest.raises(BackendUnavailable) as raised:
            next(events)
        assert raised.value.code == "backend.unavailable"
        assert "before its end event" in raised.value.message
    finally:
        transport.close()


def test_a_stream_that_ends_does_not_raise(cutting: str) -> None:
    transport = Transport(cutting, api_key="k")
    try:
        events = opened(transport, "/sessions/s/watch", {"ends": 1})
        assert list(events) == [("entry", {"seq": 1}), ("end", {})]
    finally:
        transport.close()
