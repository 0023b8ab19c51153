"""What the remote namespaces share: a transport, the refs they put in paths,
and a clear refusal for what the producer routes do not carry yet."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NoReturn
from urllib.parse import quote

from chaz.client.remote.transport import Transport
from chaz.errors import ChazError, Unsupported, ValidationError


class RemoteNamespace:
    """A namespace over :class:`Transport`; ``_later`` names the in-process
    methods it does not have yet (each is ``request.unsupported``)."""

    _namespace = ""
    _later: tuple[str, ...] = ()

    def __init__(self, transport: Transport) -> None:
        self._http = transport

    def __getattr__(self, name: str) -> Any:
        if name in self._later:
            refuse(f"{self._namespace}.{name}")
        raise AttributeError(name)


class Unavailable:
    """A whole namespace the producer routes do not carry yet."""

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        refuse(f"{self._namespace}.{name}")


def refuse(method: str) -> NoReturn:
    """``request.unsupported`` for a method not carried over HTTP yet."""
    raise Unsupported(
        f"client.{method} is not available over HTTP yet: use an in-process client "
        "(docs/http.md#producer)",
        field=method,
    )


def segment(field: str, ref: object) -> str:
    """``ref`` as one path segment. An id or name is checked as the in-process
    client checks it, by the server; here only what cannot travel in a path
    (not a string, empty, ``.``, ``..``, or holding a ``/``) is refused, naming ``field``."""
    if not isinstance(ref, str):
        raise ValidationError(f"{field} must be a string", field=field)
    if not ref or "/" in ref or ref in (".", ".."):
        raise ValidationError(
            f"{field} must be a non-empty id or a name without '/' over HTTP", field=field
        )
    return quote(ref, safe="")


def given(**kwargs: Any) -> dict[str, Any]:
    """The arguments a caller gave, leaving the server's defaults to the rest."""
    return {k: v for k, v in kwargs.items() if v is not None}


def waited(timeout: object) -> float | None:
    """How long a call that waits ``timeout`` seconds may take to answer (None,
    the ordinary allowance, for a value the server will refuse anyway)."""
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout >= 0:
        return float(min(timeout, 10**9))
    return None


def opened(
    transport: Transport, path: str, params: dict[str, Any]
) -> Generator[tuple[str, Any], None, None]:
    """The events of a server-sent stream (a watch, a follow) once its ``open``
    event came: the request was accepted, so a bad argument or a missing
    session has raised already, as in-process."""
    events = transport.events(path, params)
    first = next(events, None)
    if first is None or first[0] != "open":
        events.close()
        raise ChazError("chaz serve's stream did not open as expected")
    return events
