"""Admission refusals, counted fleet-wide by error code in one Redis hash.

Admissions are refused in producers (a quota, an archived session), and
nobody scrapes a producer: each refusal adds one to its code's field of
``chaz:refusals`` instead, and ``chaz exporter`` reports the hash as a
counter. Counting is best effort: a refusal whose count fails is still the
caller's error, unchanged, and the count costs a round trip only when an
admission is refused.
"""

from __future__ import annotations

import logging

import redis

from chaz.coord import keys

log = logging.getLogger(__name__)


def count(client: redis.Redis, code: str) -> None:
    """Add one refusal with ``code``; a Redis failure is logged, never raised."""
    try:
        client.hincrby(keys.refusals(), code, 1)
    except (redis.RedisError, OSError):
        log.debug("could not count a refusal (%s)", code, exc_info=True)


def counts(client: redis.Redis) -> dict[str, int]:
    """Every code's refusals so far."""
    raw = client.hgetall(keys.refusals())
    return {_text(code): int(n) for code, n in raw.items()}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
