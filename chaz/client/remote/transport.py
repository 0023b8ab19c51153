"""One ``chaz serve``'s producer routes, over ``httpx``: calls and their
answers, server-sent event streams, and error answers as chaz errors."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from typing import Any

import httpx

from chaz import tracing
from chaz.client.remote.errors import error_of
from chaz.errors import BackendUnavailable
from chaz.settings import mask_url

#: The producer routes' prefix (``chaz.server.producer.PREFIX``).
PREFIX = "/chaz/v1"
#: The header that carries the key (``chaz.server.state.KEY_HEADER``).
KEY_HEADER = "x-api-key"
#: How long a call that does not wait may take to connect, send and answer.
CALL_SECONDS = 30.0
#: What a waiting call allows beyond its own timeout, for the answer to travel.
WAIT_MARGIN = 30.0


class Transport:
    """Calls to one server's producer routes with one key (thread-safe: httpx's
    client pools connections and may be shared by threads)."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url
        headers = {"user-agent": "chaz-client"}
        if api_key is not None:
            headers[KEY_HEADER] = api_key
        self._http = httpx.Client(
            base_url=url + PREFIX, headers=headers, timeout=CALL_SECONDS, follow_redirects=False
        )

    def call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | list[Any] | None = None,
        params: dict[str, Any] | None = None,
        wait: float | None = None,
    ) -> Any:
        """The decoded JSON answer of one call; ``wait``: the server may take
        that long on purpose (a wait's own timeout) before it answers."""
        timeout = (
            httpx.Timeout(CALL_SECONDS)
            if wait is None
            else httpx.Timeout(CALL_SECONDS, read=wait + WAIT_MARGIN)
        )
        try:
            answer = self._http.request(
                method,
                path,
                json=body,
                params=_query(params),
                timeout=timeout,
                # The caller's trace context (None when tracing is off).
                headers=tracing.carrier(),
            )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if answer.status_code >= 400:
            raise error_of(answer.status_code, answer.content)
        if not answer.content:
            return None
        return answer.json()

    def events(
        self, path: str, params: dict[str, Any] | None = None
    ) -> Generator[tuple[str, Any], None, None]:
        """The ``(event, data)`` of a server-sent event stream, data decoded;
        closing the iterator closes the connection. chaz's streams end with
        an ``end`` or an ``error`` event: one that stops before either (a
        proxy's idle timeout, a server that went away between two events)
        raises :class:`~chaz.errors.BackendUnavailable`, so that a watch
        is never taken for finished when it was cut."""
        timeout = httpx.Timeout(CALL_SECONDS, read=None)
        last = None
        try:
            with self._http.stream("GET", path, params=_query(params), timeout=timeout) as answer:
                if answer.status_code >= 400:
                    answer.read()
                    raise error_of(answer.status_code, answer.content)
                for last, data in _parsed(answer.iter_lines()):
                    yield last, data
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if last not in ("end", "error"):
            url = mask_url(self.url)
            raise BackendUnavailable(
                f"chaz serve at {url} ended the stream {path} before its end event", url=url
            )

    def _unreachable(self, exc: httpx.HTTPError) -> BackendUnavailable:
        # A URL may carry a password (a proxy's basic auth): never in an error.
        url = mask_url(self.url)
        return BackendUnavailable(
            f"chaz serve at {url} is unavailable: {type(exc).__name__}: {exc}", url=url
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()


def _query(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    # Booleans as FastAPI reads them; absent ones leave the server's default.
    return {
        k: ("true" if v else "false") if isinstance(v, bool) else v
        for k, v in params.items()
        if v is not None
    }


def _parsed(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """Server-sent events from their lines; a comment (the server's
    keep-alive) is a ``ping`` with no data."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            yield "ping", None  # a comment: the server's keep-alive
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:
        yield event, json.loads("\n".join(data))
