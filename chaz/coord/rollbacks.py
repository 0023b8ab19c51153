"""A count per session of rollbacks begun and ended, for readers that keep a
copy of its conversation (docs/coordination.md#rollback-counts).

A rollback hides entries that were visible (chaz/domain/multitask.py): a
copy of a thread's values kept by an HTTP replica (chaz/server/convo.py) is
stale from the moment a rollback's mark commits. Every mark is made under
:func:`under_way`: the count goes up by one before the mark and by one
after it has committed (or failed), so it is odd while a rollback is under
way and differs, once it has begun, from any value read before. A reader
reads the count (:func:`count`) before it reads the database and again
when it would answer from its copy: the same even count means no rollback
began in between, and every one that had begun before had committed.

If Redis fails after a mark, the count stays odd: readers then read the
database every time for that session (never a stale answer). The key
expires a week after its last change (:data:`TTL_SECONDS`); a copy older
than a day is not used (``chaz.server.convo.MAX_AGE_SECONDS``), so a count
that expired and climbed back to an old value meets no copy that saw it.

A count does not start at 0: the first reader of a session with no count
sets a random even one (:func:`count`). A Redis that lost its data (a
restart without persistence, a flush) after a rollback then yields a new
random count, or one that starts again from 1 at the next rollback, never
the value a copy made before the rollback saw.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Iterator

import redis

from chaz.coord import keys

log = logging.getLogger(__name__)

#: How long a session's count outlives its last rollback.
TTL_SECONDS = 7 * 24 * 3600


def count(client: redis.Redis, session_id: str) -> int:
    """The session's count of rollbacks begun and ended, from a random even
    base that the first reader sets (see the module)."""
    key = keys.rollbacks(session_id)
    pipe = client.pipeline(transaction=False)
    pipe.set(key, secrets.randbits(62) * 2, nx=True, ex=TTL_SECONDS)
    pipe.get(key)
    _, value = pipe.execute()
    return int(value)


def _bump(client: redis.Redis, session_id: str) -> None:
    key = keys.rollbacks(session_id)
    pipe = client.pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, TTL_SECONDS)
    pipe.execute()


@contextlib.contextmanager
def under_way(client: redis.Redis, session_id: str) -> Iterator[None]:
    """Mark the session's jobs rolled back inside this block: the count is
    bumped before it (an error then stops the rollback) and after it."""
    _bump(client, session_id)
    try:
        yield
    finally:
        try:
            _bump(client, session_id)
        except redis.RedisError:
            # Left odd: copies of this session's conversation go unused (safe).
            log.warning("session %s: the rollback count stays odd", session_id, exc_info=True)
