"""Broker messages no worker can decode: set aside on a dead-letter list, never fatal.

kombu's Redis transport pops a queue's next message with BRPOP and decodes
it (bytes to text, text to a JSON envelope, the envelope's base64 body)
inside the consumer's event loop, before Celery sees it. A payload that is
not text, not JSON, or not an envelope (no ``properties``, a broken body
encoding) raises there, and Celery takes whatever escapes that loop as an
unrecoverable error: the worker exits, and so does the next one to pop the
next bad payload. Anyone who can write to the broker's Redis can push such a
payload, by mistake or not.

:func:`install_poison_guard` patches kombu's Redis channel so that a popped
payload that fails to decode is pushed, with what was wrong, onto
``chaz:deadletter`` (:func:`chaz.coord.keys.deadletter`, newest first, at
most :data:`~chaz.coord.keys.DEADLETTER_MAX` entries), logged once, counted
in ``chaz_broker_messages_set_aside_total``, and the consumer goes on. Only
decoding is guarded: an error Celery raises while handling a well-formed
message is not swallowed here (Celery already rejects well-formed messages
that are not chaz tasks, and chaz's tasks write nothing for forged ones).

Nothing is held when a payload is set aside: kombu records a message as
unacknowledged only after it decoded, so the dead-letter list is the only
copy (a Redis error while writing it loses the payload, which is then only
in the worker's log).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from typing import Any

from chaz import metrics
from chaz.coord import keys

log = logging.getLogger(__name__)

#: How much of a payload, and of its error, a dead-letter record keeps.
RAW_LIMIT = 64 * 1024
ERROR_LIMIT = 500

_installed = False
_lock = threading.Lock()


class PoisonMessage(ValueError):
    """A popped broker payload that does not decode into a kombu message.

    A ``ValueError``, as the decoding errors it stands for: kombu's other
    callers of the decoder (restoring unacked messages, fanout) keep handling
    it as they did.
    """


def install_poison_guard() -> None:
    """Patch kombu's Redis channel once per process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from kombu.transport import redis as kombu_redis

        # kombu is untyped here: its module and channel are patched as Any.
        kredis: Any = kombu_redis
        channel_cls: Any = kredis.Channel
        real_loads = kredis.loads
        real_message: Any = channel_cls.Message
        real_read = channel_cls._brpop_read

        def loads(text: Any) -> Any:
            try:
                return real_loads(text)
            except (TypeError, ValueError) as exc:
                raise PoisonMessage(f"not JSON: {exc}") from exc

        class GuardedMessage(real_message):  # type: ignore[misc]
            """kombu's message, whose decoding errors are :class:`PoisonMessage`."""

            def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
                try:
                    super().__init__(payload, channel=channel, **kwargs)
                except (AttributeError, KeyError, LookupError, TypeError, ValueError) as exc:
                    raise PoisonMessage(f"not a message envelope: {exc!r}") from exc

        def _brpop_read(self: Any, **options: Any) -> Any:
            _capture_pops(self)
            self._chaz_popped = None
            try:
                return real_read(self, **options)
            except (PoisonMessage, UnicodeDecodeError) as exc:
                popped = self._chaz_popped
                if popped is None:
                    raise
                _set_aside(self, popped, exc)
                return True

        kredis.loads = loads
        channel_cls.Message = GuardedMessage
        channel_cls._brpop_read = _brpop_read
        _installed = True


def _capture_pops(channel: Any) -> None:
    """Keep each BRPOP reply on the channel, so a payload that fails is still at hand."""
    client = channel.client
    if getattr(client, "_chaz_captures", False):
        return
    parse = client.parse_response

    def parse_response(connection: Any, command: str, **options: Any) -> Any:
        reply = parse(connection, command, **options)
        if command == "BRPOP":
            channel._chaz_popped = reply
        return reply

    client.parse_response = parse_response
    client._chaz_captures = True


def _set_aside(channel: Any, popped: Any, exc: Exception) -> None:
    name, raw = popped
    queue = _text(name).rsplit(channel.sep, 1)[0]
    error = f"{type(exc).__name__}: {exc}"[:ERROR_LIMIT]
    record = json.dumps(
        {
            "queue": queue,
            "raw": _text(raw)[:RAW_LIMIT],
            "error": error,
            "at": datetime.now(UTC).isoformat(),
        }
    )
    metrics.BROKER_MESSAGES_SET_ASIDE.labels(queue=queue).inc()
    try:
        with channel.conn_or_acquire() as client:
            pipe = client.pipeline()
            pipe.lpush(keys.deadletter(), record)
            pipe.ltrim(keys.deadletter(), 0, keys.DEADLETTER_MAX - 1)
            pipe.execute()
    except Exception:
        log.exception("could not set aside a malformed broker message: %s", record)
        return
    log.warning(
        "set aside a malformed broker message from %s on %s (%s)",
        queue,
        keys.deadletter(),
        error,
    )


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
