"""``chaz serve`` remembers an API key it found valid for
``CHAZ_HTTP_KEY_CACHE_SECONDS`` and no longer (docs/http.md#auth): a revoked
key stops working within that bound; an unknown key is never remembered;
a new key works at once.

The bound itself on a clock the test moves (the cache over the real store),
and over HTTP against a real ``chaz serve``: the revoked key still answers
while a long TTL runs (the documented delay, and proof the key is not read
per request), and is refused on the first request past a short one.
"""

from __future__ import annotations

import time

import httpx
import pytest

from chaz.domain.principals import ALL_GRANTS, Principal
from chaz.errors import Unauthenticated
from chaz.server.keycache import KeyCache
from tests.support.serve import serving
from tests.support.stack import Stack


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _key(stack: Stack) -> tuple[str, str]:
    key, plaintext = stack.client.keys.create("user:cached", "acme", list(ALL_GRANTS))
    return key.id, plaintext


def test_a_revoked_key_is_refused_once_its_ttl_has_run(stack: Stack) -> None:
    store = stack.client.services.store
    reads: list[str] = []

    def authenticate(text: str) -> Principal:
        reads.append(text)
        return store.keys.authenticate(text)

    clock = Clock()
    cache = KeyCache(authenticate, 10.0, clock=clock)
    key_id, plaintext = _key(stack)
    principal = cache.authenticate(plaintext)
    assert principal.name == "user:cached" and principal.project == "acme"
    assert cache.authenticate(plaintext) == principal and len(reads) == 1
    stack.client.keys.revoke(key_id)
    clock.now += 9.9
    # Within the TTL of the read that found it valid: still remembered.
    assert cache.cached(plaintext) == principal and len(reads) == 1
    clock.now += 0.1
    # The TTL has run: the database is asked, and the revocation bites.
    assert cache.cached(plaintext) is None
    with pytest.raises(Unauthenticated):
        cache.authenticate(plaintext)
    # A refusal is not remembered: every later request asks again.
    with pytest.raises(Unauthenticated):
        cache.authenticate(plaintext)
    assert len(reads) == 3
    # A key made after the cache was is valid at once.
    _, fresh = _key(stack)
    assert cache.authenticate(fresh).name == "user:cached"


def test_no_ttl_reads_every_time_and_the_cache_is_bounded(stack: Stack) -> None:
    store = stack.client.services.store
    key_id, plaintext = _key(stack)
    uncached = KeyCache(store.keys.authenticate, 0.0)
    uncached.authenticate(plaintext)
    assert uncached.cached(plaintext) is None
    stack.client.keys.revoke(key_id)
    with pytest.raises(Unauthenticated):
        uncached.authenticate(plaintext)
    small = KeyCache(store.keys.authenticate, 60.0, size=2)
    texts = [_key(stack)[1] for _ in range(3)]
    for text in texts:
        small.authenticate(text)
    # The oldest went first.
    assert [small.cached(t) is not None for t in texts] == [False, True, True]


def _status(url: str, key: str) -> int:
    return httpx.post(f"{url}/threads/search", json={}, headers={"x-api-key": key}).status_code


def test_over_http_a_revoked_key_works_for_the_ttl_and_not_after(stack: Stack) -> None:
    stack.settings.home.mkdir(parents=True, exist_ok=True)  # the server's log goes there
    key_id, plaintext = _key(stack)
    with serving(stack, CHAZ_HTTP_KEY_CACHE_SECONDS="3600") as url:
        assert _status(url, plaintext) == 200
        stack.client.keys.revoke(key_id)
        # The documented delay: this replica read the key less than an hour ago.
        assert _status(url, plaintext) == 200
        _, fresh = _key(stack)
        assert _status(url, fresh) == 200
        assert _status(url, "chz_" + "0" * 16 + "_" + "A" * 43) == 401
    key_id, plaintext = _key(stack)
    ttl = 1.0
    with serving(stack, CHAZ_HTTP_KEY_CACHE_SECONDS=str(ttl)) as url:
        assert _status(url, plaintext) == 200
        revoked = time.monotonic()
        stack.client.keys.revoke(key_id)
        # Not a race: the entry was made before the revocation, so it has
        # expired by ``revoked + ttl`` however slow the machine is.
        time.sleep(max(0.0, revoked + ttl - time.monotonic()))
        assert _status(url, plaintext) == 401
        assert _status(url, plaintext) == 401
