"""Who an API key stands for, remembered by one server process for a few
seconds (docs/http.md#auth).

Every request carries its key, and a busy client sends the same one many
times a second: looking its hash up in the database each time was one
read per request (and a hop to a worker thread to make it). A replica
remembers a key it authenticated for ``CHAZ_HTTP_KEY_CACHE_SECONDS``; a
key revoked meanwhile keeps working on that replica until its entry
expires, and not a moment longer: the expiry is counted from the database
read that found the key valid, and a hit never extends it. Only keys found
valid are remembered (a key just created works at once; an unknown one is
looked up every time, as before). What is remembered is the key's hash,
never its plaintext.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from chaz.domain import keys
from chaz.domain.principals import Principal

#: How many keys one process remembers; past it the oldest entry goes first.
MAX_KEYS = 1024


class KeyCache:
    """Principals of recently authenticated keys, each for ``seconds`` after
    the read that authenticated it (0: nothing is remembered)."""

    def __init__(
        self,
        authenticate: Callable[[str], Principal],
        seconds: float,
        *,
        size: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authenticate = authenticate
        self._seconds = seconds
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        #: key hash -> (principal, the clock's reading past which it is stale)
        self._known: dict[str, tuple[Principal, float]] = {}

    def cached(self, key: str) -> Principal | None:
        """The principal of ``key`` if it was authenticated less than the TTL
        ago; None otherwise. Reads nothing: safe on the event loop."""
        if self._seconds <= 0:
            return None
        digest = keys.key_hash(key)
        with self._lock:
            found = self._known.get(digest)
            if found is None:
                return None
            if self._clock() < found[1]:
                return found[0]
            del self._known[digest]
        return None

    def authenticate(self, key: str) -> Principal:
        """The principal of ``key``: remembered, or read from the database (and
        then remembered). A refused key raises ``auth.unauthenticated``."""
        known = self.cached(key)
        if known is not None:
            return known
        # The expiry is counted from before the read: a revocation committed
        # while it ran is honoured within the TTL all the same.
        expires = self._clock() + self._seconds
        principal = self._authenticate(key)
        if self._seconds > 0:
            with self._lock:
                while len(self._known) >= self._size:
                    del self._known[next(iter(self._known))]
                self._known[keys.key_hash(key)] = (principal, expires)
        return principal

    def forget(self) -> None:
        """Forget every key (the next request of each reads the database)."""
        with self._lock:
            self._known.clear()
