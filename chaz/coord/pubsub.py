"""Publishing committed entries and events, and listening for them.

Write first, then publish: a notification only says that the database has
something new. A lost one delays a listener, which re-reads the database
when it has heard nothing for a while; it never loses a row.

Two ways to listen: a :class:`Listener` holds a pubsub connection of its
own; a :class:`Subscriber` is one connection and one reader thread that a
whole process's waiting calls share (:meth:`Subscriber.listen`), so that a
producer's ``wait_for_reply`` costs no connection of its own
(docs/coordination.md#one-subscription-per-process).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from chaz.coord import keys
from chaz.coord.redis import SHARDS_DOWN, clustered
from chaz.domain.entries import Entry
from chaz.domain.events import Event


def wire(client: redis.Redis, channel: str) -> str:
    """A session channel's name on ``client``'s Redis: itself, or on a cluster
    the sharded channel on the session's own slot (``chaz:entries:{SID}``)."""
    return keys.sharded(channel) if clustered(client) else channel


#: What a best-effort publish may fail with (a cluster shard that is down
#: raises RedisClusterException, which is no RedisError).
PUBLISH_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)


def publish_raw(client: redis.Redis, channel: str, data: str) -> None:
    """Publish ``data`` on a session channel: ``SPUBLISH`` on a cluster (only
    the shard of the channel's slot carries it), ``PUBLISH`` on a single Redis."""
    if not clustered(client):
        client.publish(channel, data)
        return
    name = keys.sharded(channel)
    # A notification is best effort: a turn must not wait on a shard that is
    # down once per entry (watchers re-read the database meanwhile).
    if SHARDS_DOWN.down(client, name):
        return
    try:
        client.spublish(name, data)
    except PUBLISH_ERRORS:
        SHARDS_DOWN.mark(client, name)
        raise


def publish(client: redis.Redis, entry: Entry) -> None:
    """Announce an entry that is already committed (write first, then publish).

    A lost publish only delays a watcher: ``watch`` re-reads the database when
    it sees a gap or hears nothing for a while.
    """
    # The entry is durable; a watcher's periodic re-read finds it if this fails.
    with contextlib.suppress(*PUBLISH_ERRORS):
        publish_raw(client, keys.entries_channel(entry.session_id), entry.model_dump_json())


def publish_event(client: redis.Redis, event: Event) -> None:
    """Announce an event that is already committed on ``chaz:events:{sid}``.

    A notification only: followers re-read the table, so a lost publish
    delays them by their poll interval at most.
    """
    with contextlib.suppress(*PUBLISH_ERRORS):
        publish_raw(client, keys.events_channel(event.session_id), event.model_dump_json())


class Listener:
    """A subscription to some channels, open from construction until :meth:`close`.

    Whatever is published after it is built is heard, so a reader builds it
    *before* reading its backlog: a row committed in between is then in the
    backlog or announced (or both).
    """

    def __init__(self, client: redis.Redis, *channels: str) -> None:
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call,unused-ignore]
        self._sharded = clustered(client)
        if self._sharded:
            self._pubsub.ssubscribe(*(keys.sharded(c) for c in channels))
        else:
            self._pubsub.subscribe(*channels)

    def next(self, timeout: float) -> Any | None:
        """The data of the next message, or None if none came within ``timeout`` seconds."""
        if self._sharded:
            message = sharded_message(self._pubsub, timeout)
        else:
            message = self._pubsub.get_message(timeout=timeout)
        if message is None or message.get("type") not in ("message", "smessage"):
            return None
        return message["data"]

    def close(self) -> None:
        """Unsubscribe and release the connection."""
        self._pubsub.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sharded_message(pubsub: Any, timeout: float) -> dict[str, Any] | None:
    """The next message of a cluster pubsub's sharded channels, waiting up to
    ``timeout`` seconds (redis-py polls each shard's connection in turn)."""
    deadline = time.monotonic() + timeout
    while True:
        message: dict[str, Any] | None = pubsub.get_sharded_message(
            ignore_subscribe_messages=True, timeout=min(0.05, max(0.0, timeout))
        )
        if message is not None or time.monotonic() >= deadline:
            return message


def wait_time(deadline: float | None, poll: float) -> float | None:
    """How long a listener's next wait may last: ``poll``, cut at ``deadline``
    (a ``time.monotonic()`` value; None: never), or None once it has passed."""
    if deadline is None:
        return poll
    remaining = deadline - time.monotonic()
    return min(poll, remaining) if remaining > 0 else None


log = logging.getLogger(__name__)

#: Queued to a subscription instead of a message: "you may have missed
#: something, re-read the database" (the connection was re-established).
_RESYNC = object()

#: How long :meth:`Subscriber.listen` waits for Redis to confirm a new
#: subscription before the caller reads its backlog anyway (the caller's
#: periodic re-read then covers the gap, and a confirmation that comes later
#: tells it to re-read at once).
CONFIRM_SECONDS = 2.0

#: Pause between attempts to reach Redis again after the connection broke.
RECONNECT_SECONDS = 0.5

#: How long a channel stays subscribed after its last waiter left: a
#: producer that waits on the same session again (post, wait, post, wait)
#: then needs no SUBSCRIBE round trip.
LINGER_SECONDS = 5.0

#: At most this many channels linger; beyond it, the oldest are dropped.
MAX_LINGERING = 1_000

#: The last messages of each subscribed channel, kept for the next waiter:
#: a reply published between a producer's post and its wait is not lost
#: (see Subscription.since).
RECENT = 8


class Subscription:
    """One waiting call's share of a :class:`Subscriber`: what :class:`Listener`
    offers (:meth:`next`, :meth:`close`), with no connection of its own."""

    def __init__(
        self,
        owner: Subscriber,
        channels: tuple[str, ...],
        wake: Callable[[], None] | None = None,
    ) -> None:
        self._owner = owner
        self.channels = channels
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: Called by the reader thread after each message or re-read notice it
        #: queues: an event loop's waiter is woken without a thread of its own.
        self._wake = wake
        #: Channels Redis has not yet confirmed for this subscription.
        self._unconfirmed = set(channels)
        self._confirmed = threading.Event()
        #: Set once the caller stopped waiting for the confirmation: any
        #: confirmation from then on tells it to re-read.
        self._settled = False
        #: How many times it was told to re-read (a reconnection, a late
        #: confirmation): for tests and logs.
        self.resyncs = 0
        #: A ``time.monotonic()`` since which every message of its channels
        #: is in its queue (None: not known). A row committed after it was
        #: published after it, so a reader that knows its entry committed
        #: later (a post of this process) needs no backlog read.
        self.since: float | None = None

    def next(self, timeout: float) -> Any | None:
        """The data of the next message, or None if none came within ``timeout``
        seconds, or the connection was re-established (re-read the database)."""
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None
        return None if item is _RESYNC else item

    def take(self) -> tuple[bool, Any | None]:
        """Without waiting: ``(True, data)`` for the next message, ``(True, None)``
        when the connection was re-established (re-read the database), or
        ``(False, None)`` when nothing is queued."""
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return False, None
        return True, None if item is _RESYNC else item

    def _put(self, item: Any) -> None:
        self._queue.put(item)
        if self._wake is not None:
            # A waiter whose event loop has closed is gone: nothing to wake.
            with contextlib.suppress(RuntimeError):
                self._wake()

    def close(self) -> None:
        """Stop listening (the shared connection stays)."""
        self._owner._drop(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Subscriber:
    """One pubsub connection and one reader thread for every waiting call of a process.

    :meth:`listen` registers a :class:`Subscription` and returns once Redis
    has confirmed its channels, so that a reader may then read its backlog
    (subscribe first, read second: nothing committed in between is missed).
    The reader thread alone touches the redis-py ``PubSub`` object, which is
    not safe to share between threads: callers only change a table under a
    lock and wake the reader through a pipe; the reader subscribes and
    unsubscribes to match the table, and routes each message to the
    subscriptions of its channel. A channel stays subscribed for ``linger``
    seconds after its last waiter left, so that the next wait on it costs
    no round trip. When the connection breaks, the reader
    connects again, subscribes to every channel still wanted, and tells
    their subscriptions to re-read the database (a message published while
    it was away is lost; the row is not).

    Not inherited across ``fork``: a child process's first :meth:`listen`
    builds its own connection and thread (see ``Services.subscriber``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        linger: float = LINGER_SECONDS,
        name: str = "chaz-subscriber",
    ) -> None:
        self._client = client
        self._sharded = clustered(client)
        self._name = name
        self._linger = linger
        #: channel -> when its last waiter left (guarded by _lock; insertion
        #: order is age order).
        self._idle: dict[str, float] = {}
        self.pid = os.getpid()
        self._lock = threading.Lock()
        #: channel -> the subscriptions waiting on it (guarded by _lock).
        self._wanted: dict[str, set[Subscription]] = {}
        self._woken = False
        self._closed = False
        #: Channels subscribed on the wire and confirmed by Redis (guarded by _lock).
        self._live: set[str] = set()
        #: channel -> since when every message of it is in _recent (guarded by _lock).
        self._since: dict[str, float] = {}
        #: channel -> its last RECENT messages (guarded by _lock).
        self._recent: dict[str, collections.deque[tuple[float, Any]]] = {}
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        # Reader-thread state only.
        self._pubsub: Any = None
        self._active: set[str] = set()
        #: SUBSCRIBE commands sent per channel and not yet confirmed.
        self._pending: dict[str, int] = {}

    # -- callers' side ----------------------------------------------------------

    def listen(
        self,
        *channels: str,
        confirm: float = CONFIRM_SECONDS,
        wake: Callable[[], None] | None = None,
    ) -> Subscription:
        """A subscription to ``channels``, in force (confirmed by Redis) when this
        returns, or after ``confirm`` seconds at most (Redis unreachable).
        ``wake``: called from the reader thread after each item it queues
        (:meth:`Subscription.take` then has it)."""
        sub = Subscription(self, channels, wake)
        with self._lock:
            if self._closed:
                raise RuntimeError("the subscriber is closed")
            for channel in channels:
                self._wanted.setdefault(channel, set()).add(sub)
                self._idle.pop(channel, None)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            # A channel already subscribed and confirmed needs no round trip;
            # its recent messages come first.
            sub._unconfirmed.difference_update(self._live)
            if not sub._unconfirmed:
                since = [self._since.get(c) for c in channels]
                sub.since = None if None in since else max(s for s in since if s is not None)
                for channel in channels:
                    for _, data in self._recent.get(channel, ()):
                        sub._queue.put(data)
            if not sub._unconfirmed:
                sub._confirmed.set()
            else:
                self._wake_locked()
        if not sub._confirmed.wait(confirm):
            with self._lock:
                sub._settled = True
        else:
            sub._settled = True
        return sub

    def _drop(self, sub: Subscription) -> None:
        with self._lock:
            for channel in sub.channels:
                subs = self._wanted.get(channel)
                if subs is None:
                    continue
                subs.discard(sub)
                if subs:
                    continue
                if self._linger > 0 and channel in self._live:
                    # Kept subscribed a while (the reader drops it later).
                    self._idle[channel] = time.monotonic()
                    if len(self._idle) > MAX_LINGERING:
                        oldest = next(iter(self._idle))
                        del self._idle[oldest]
                        self._wanted.pop(oldest, None)
                        self._wake_locked()
                    continue
                del self._wanted[channel]
                self._wake_locked()

    def _wake_locked(self) -> None:
        if not self._woken:
            self._woken = True
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")

    def close(self) -> None:
        """Stop the reader thread and release the connection. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            self._wake_locked()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
            if thread.is_alive():
                return  # stuck in a reconnection: its fds stay open until it ends
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def alive(self) -> bool:
        """Whether the reader thread runs."""
        return self._thread is not None and self._thread.is_alive()

    # -- the reader thread ------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                try:
                    while not self._stopping():
                        self._sync()
                        self._read(1.0)
                    return
                except Exception:
                    # A broken connection (or a socket closed under poll()):
                    # start over. Lost messages are covered by the re-read
                    # each subscription is told to do once it is confirmed again.
                    log.warning("pubsub connection lost; reconnecting", exc_info=True)
                    self._reset()
                    self._pause(RECONNECT_SECONDS)
        finally:
            self._reset()

    def _stopping(self) -> bool:
        with self._lock:
            return self._closed

    def _sync(self) -> None:
        """Subscribe and unsubscribe to match the table."""
        with self._lock:
            self._woken = False
            if self._idle:
                expired = time.monotonic() - self._linger
                while self._idle:
                    # Oldest first (insertion order): stop at the first still young.
                    channel, since = next(iter(self._idle.items()))
                    if since > expired:
                        break
                    del self._idle[channel]
                    if not self._wanted.get(channel):
                        self._wanted.pop(channel, None)
            wanted = set(self._wanted)
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self._wake_r, 4096)
        add = wanted - self._active
        remove = self._active - wanted
        if not add and not remove:
            return
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
        if remove:
            with self._lock:
                self._live -= remove
                for channel in remove:
                    self._since.pop(channel, None)
                    self._recent.pop(channel, None)
            self._active -= remove
            if self._sharded:
                self._pubsub.sunsubscribe(*(keys.sharded(c) for c in remove))
            else:
                self._pubsub.unsubscribe(*remove)
        if add:
            if self._sharded:
                self._pubsub.ssubscribe(*(keys.sharded(c) for c in add))
            else:
                self._pubsub.subscribe(*add)
            self._active |= add
            for channel in add:
                self._pending[channel] = self._pending.get(channel, 0) + 1

    def _read(self, timeout: float) -> None:
        """Wait for a message or a wake-up, and route what came."""
        if self._sharded:
            self._read_sharded(timeout)
            return
        conn = None if self._pubsub is None else self._pubsub.connection
        sock = None if conn is None else getattr(conn, "_sock", None)
        if conn is not None and sock is None:
            conn.connect()  # dropped by redis-py after an error: on_connect resubscribes
            sock = getattr(conn, "_sock", None)
        if conn is None or sock is None or not conn.can_read(timeout=0):
            # poll, not select: a busy process may hold file descriptors past 1024.
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            if sock is not None:
                poller.register(sock, select.POLLIN)
            ready = {fd for fd, _ in poller.poll(timeout * 1000)}
            if sock is None or sock.fileno() not in ready:
                return
        assert conn is not None
        while conn.can_read(timeout=0):
            response = self._pubsub.parse_response(block=False, timeout=0)
            message = self._pubsub.handle_message(response) if response else None
            if message is not None:
                self._route(message)

    def _read_sharded(self, timeout: float) -> None:
        """The cluster's :meth:`_read`: one connection per shard, so no single
        socket to poll beside the wake-up pipe; short polls of the shards in
        turn, looking at the pipe between them."""
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._active:
                poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
                return
            message = self._pubsub.get_sharded_message(timeout=0.02)
            if message is not None:
                self._route(message)
            if poller.poll(0):
                return

    def _route(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        channel = message.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if self._sharded and isinstance(channel, str):
            # The wire name's session id is in braces: back to the caller's name.
            channel = channel.replace("{", "").replace("}", "")
            kind = {"smessage": "message", "ssubscribe": "subscribe"}.get(str(kind), kind)
        if kind == "message" and isinstance(channel, str):
            data = message["data"]
            with self._lock:
                if channel in self._since:
                    recent = self._recent.setdefault(channel, collections.deque(maxlen=RECENT))
                    if len(recent) == RECENT:
                        # The oldest falls out: complete only after it arrived.
                        self._since[channel] = recent[0][0]
                    recent.append((time.monotonic(), data))
                for sub in self._wanted.get(channel, ()):
                    sub._put(data)
        elif kind == "subscribe" and isinstance(channel, str):
            left = self._pending.get(channel, 0) - 1
            if left > 0:
                self._pending[channel] = left
                return  # a later SUBSCRIBE of the same channel is still on its way
            self._pending.pop(channel, None)
            if channel not in self._active:
                return  # unsubscribed since
            with self._lock:
                self._live.add(channel)
                # Complete from now on (what came before this confirmation
                # may have been lost with a connection).
                self._since[channel] = time.monotonic()
                self._recent.pop(channel, None)
                subs = list(self._wanted.get(channel, ()))
                for sub in subs:
                    if sub._settled or sub._confirmed.is_set():
                        # Confirmed again (a reconnection), or after its caller
                        # stopped waiting: something may have been missed.
                        sub.resyncs += 1
                        sub._put(_RESYNC)
                        continue
                    sub._unconfirmed.discard(channel)
                    if not sub._unconfirmed:
                        sub.since = max(self._since.get(c, 0.0) for c in sub.channels)
                        sub._confirmed.set()

    def _reset(self) -> None:
        """Forget the connection; the next _sync subscribes to everything again."""
        pubsub, self._pubsub = self._pubsub, None
        self._active = set()
        self._pending = {}
        with self._lock:
            self._live = set()
            self._since.clear()
            self._recent.clear()
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.reset()

    def _pause(self, seconds: float) -> None:
        """Sleep, unless close() wakes the thread first."""
        with contextlib.suppress(OSError, ValueError):
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            poller.poll(seconds * 1000)
