"""Partial text of a streamed answer, published on ``chaz:partials:{sid}``.

A backend that streams hands its text here as it arrives; watchers that asked
for partials (``client.sessions.watch(sid, partial=True)``) see the answer
grow. Partials are a preview, and publishing is best effort. A lost partial,
or one published to nobody, costs nothing but the preview; the reply entry
the turn commits afterwards is the truth.

Each partial is also appended to a bounded buffer, a Redis Stream per job
(``chaz:pbuf:{job}``, at most about :data:`BUFFER_MAX` partials, expiring
:data:`BUFFER_SECONDS` after the last), so that an HTTP stream can send the
partials its client missed (:func:`buffered`, docs/http.md#streams). The
buffer lives only in Redis: a Redis restart empties it, and the streams fall
back to the stored entries.

Cost: models send deltas of a token or two. :class:`PartialPublisher`
coalesces them into one ``PUBLISH`` per :data:`DEFAULT_INTERVAL` seconds (or
per :data:`DEFAULT_MAX_CHARS` characters), so a stream costs Redis a few
dozen commands a second at most, whatever the model's pace.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Literal, cast

import redis
from pydantic import BaseModel, ConfigDict, Field

from chaz.coord import keys
from chaz.coord.pubsub import PUBLISH_ERRORS, publish_raw, sharded_message, wire
from chaz.coord.redis import clustered

#: Longest a delta waits in the buffer for company, in seconds.
DEFAULT_INTERVAL = 0.05
#: A buffer this long is published at once.
DEFAULT_MAX_CHARS = 2048
#: About how many partials a job's replay buffer keeps (the oldest are trimmed).
BUFFER_MAX = 4096
#: How long a job's replay buffer outlives its last partial, in seconds.
BUFFER_SECONDS = 3600
#: The position before a job's first partial (a buffer position is a Redis Stream id).
START = "0"


class Partial(BaseModel):
    """A piece of an answer being streamed: ``text`` follows what earlier
    partials of the same ``job_id`` and ``step`` said.

    ``seq`` counts the partials one attempt of a job published (from 1); a
    gap means a partial was lost, which is allowed. ``step`` is the model step
    of the turn the text belongs to (text streamed before a tool call is one
    step, the answer after it another).
    """

    model_config = ConfigDict(frozen=True)

    type: Literal["partial"] = "partial"
    session_id: str
    job_id: str
    step: int = Field(ge=0)
    seq: int = Field(ge=1)
    text: str


class PartialPublisher:
    """Publishes one job's streamed text, coalescing small deltas.

    :meth:`write` buffers; the buffer goes out when :data:`interval` seconds
    passed since the last publish or it holds ``max_chars`` characters, and
    at :meth:`flush`. Not thread-safe: one turn's thread writes.
    """

    def __init__(
        self,
        client: redis.Redis,
        session_id: str,
        job_id: str,
        *,
        interval: float = DEFAULT_INTERVAL,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> None:
        self._client = client
        self._sharded = clustered(client)
        self._channel = keys.partials_channel(session_id)
        self._buffer_key = keys.partials_buffer(job_id)
        self.session_id = session_id
        self.job_id = job_id
        self.interval = interval
        self.max_chars = max_chars
        #: Partials published (or attempted) so far: the last ``seq``.
        self.seq = 0
        self._step = 0
        self._buffer: list[str] = []
        self._buffered = 0
        # The first delta goes out at once: a watcher sees the answer start.
        self._last = float("-inf")

    def write(self, step: int, text: str) -> None:
        """Add ``text`` to model step ``step``'s stream (published soon, or at flush)."""
        if not text:
            return
        if step != self._step:
            self.flush()
            self._step = step
        self._buffer.append(text)
        self._buffered += len(text)
        if self._buffered >= self.max_chars or time.monotonic() - self._last >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Publish what the buffer holds now."""
        if not self._buffer:
            return
        text = "".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        self.seq += 1
        self._last = time.monotonic()
        partial = Partial(
            session_id=self.session_id,
            job_id=self.job_id,
            step=self._step,
            seq=self.seq,
            text=text,
        )
        data = partial.model_dump_json()
        # Best effort: the reply entry is the record, the partial a preview.
        # Into the buffer first: a stream woken by the publish finds it there.
        with contextlib.suppress(*PUBLISH_ERRORS):
            pipe = self._client.pipeline(transaction=False)
            pipe.xadd(self._buffer_key, {"p": data}, maxlen=BUFFER_MAX, approximate=True)
            pipe.expire(self._buffer_key, BUFFER_SECONDS)
            if self._sharded:
                # The buffer (the job's slot) and the channel (the session's)
                # are on different shards: the publish goes on its own.
                pipe.execute()
                publish_raw(self._client, self._channel, data)
            else:
                pipe.publish(self._channel, data)
                pipe.execute()

    def discard(self) -> None:
        """Drop the buffered text unpublished (the stream was cancelled)."""
        self._buffer.clear()
        self._buffered = 0


def buffered(
    client: redis.Redis, job_id: str, after: str = START, *, only: bool = False
) -> list[tuple[str, Partial]]:
    """The partials of ``job_id``'s buffer after position ``after`` (from the
    first with :data:`START`), oldest first, each with its position; with
    ``only``, the one at position ``after`` if the buffer still holds it.

    Empty when the buffer is gone (expired, or Redis restarted) or Redis
    cannot be reached: the caller's stored entries are the record.
    """
    key = keys.partials_buffer(job_id)
    try:
        if only:
            rows = client.xrange(key, after, after) if after != START else []
        else:
            rows = client.xrange(key, "-" if after == START else f"({after}", "+")
    except redis.RedisError:
        return []
    out = []
    for position, fields in cast(list[tuple[Any, dict[Any, Any]]], rows):
        raw = fields.get("p") or fields.get(b"p")
        if raw is None:
            continue  # not a partial of ours
        text = position.decode() if isinstance(position, bytes) else str(position)
        out.append((text, Partial.model_validate_json(raw)))
    return out


class StreamListener:
    """A subscription to a session's entries and partials channels, open from
    construction until :meth:`close`.

    :class:`chaz.coord.pubsub.Listener` yields only a message's data; a
    watcher of both channels must know which one a message came on.
    """

    def __init__(self, client: redis.Redis, session_id: str) -> None:
        self._sharded = clustered(client)
        self._entries = wire(client, keys.entries_channel(session_id))
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call,unused-ignore]
        channels = (self._entries, wire(client, keys.partials_channel(session_id)))
        if self._sharded:
            self._pubsub.ssubscribe(*channels)
        else:
            self._pubsub.subscribe(*channels)

    def next(self, timeout: float) -> tuple[Literal["entry", "partial"], Any] | None:
        """The next message as ``(channel kind, data)``, or None after ``timeout``
        seconds without one.

        Subscription confirmations and health-check replies are read past, not
        reported as a quiet spell: a watcher re-reads the database when it is
        told nothing came, and a re-read that ran while partials still sat
        unread in the socket would yield the reply before them.
        """
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, deadline - time.monotonic())
            if self._sharded:
                message = sharded_message(self._pubsub, wait)
            else:
                message = self._pubsub.get_message(timeout=wait)
            if message is not None and message.get("type") in ("message", "smessage"):
                break
            if time.monotonic() >= deadline:
                return None
        channel = message["channel"]
        if isinstance(channel, bytes):
            channel = channel.decode()
        return ("entry" if channel == self._entries else "partial", message["data"])

    def close(self) -> None:
        """Unsubscribe and release the connection."""
        self._pubsub.close()

    def __enter__(self) -> StreamListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
